"""Publishing a step's table: its lineage row, reusing what the last run made from the same inputs, what a failed
step paid for, and the rows imported from a Microsoft GraphRAG output."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import dagster as dg
import duckdb
import pandas as pd

from ..failures import step_failure
from ..method.imports import GraphRAGOutputError
from ..models import Usage
from ..resources import (
    DuckDBStoreResource,
    EmbeddingModelResource,
    ModelEndpointResource,
    SpentOnFailure,
)
from ..store.tables import (
    Lineage,
    last_output,
    last_settings,
    latest_versions,
    read_table,
    read_tables,
    record_failed_step,
    record_lineage,
    row_count,
    write_table,
)
from .metadata import usage_metadata

T = TypeVar("T")


def upstream_of(context: dg.AssetExecutionContext, asset: str) -> list[str]:
    """The asset's declared deps: the tables it reads, and the upstream versions its lineage row records."""
    return sorted(key.to_user_string() for key in context.assets_def.asset_deps[dg.AssetKey(asset)])


def read_inputs(context: dg.AssetExecutionContext, conn: duckdb.DuckDBPyConnection, asset: str) -> dict:
    """Every table the asset depends on, for its corpus."""
    return read_tables(conn, upstream_of(context, asset), context.partition_key)


def usage_record(model: ModelEndpointResource, usage: Usage) -> dict:
    """A step's usage of one endpoint as the store keeps it (the model_usage view reads it)."""
    endpoint = "embeddings" if isinstance(model, EmbeddingModelResource) else "chat"
    return {**usage.as_metadata(model.settings()), "endpoint": endpoint}


def lineage_for(
    context: dg.AssetExecutionContext,
    conn: duckdb.DuckDBPyConnection,
    asset: str,
    *,
    engine: str,
    model: ModelEndpointResource | None = None,
    usage: Usage | None = None,
    quality: dict | None = None,
    upstream: list[str] | None = None,
    settings: dg.Config | None = None,
) -> Lineage:
    """The lineage row; `upstream` defaults to the asset's declared deps (pass it only for a table that is no asset)."""
    upstream = upstream_of(context, asset) if upstream is None else upstream
    model_usage = usage_record(model, usage) if usage and model else None
    code = context.assets_def.code_versions_by_key.get(dg.AssetKey(asset)) or ""
    upstream_versions = latest_versions(conn, context.partition_key, upstream)
    return Lineage(
        asset=asset,
        corpus=context.partition_key,
        run_id=context.run_id,
        code_version=code,
        engine=engine,
        upstream_versions=upstream_versions,
        model_usage={**model_usage, **(quality or {})} if model_usage else None,
        inputs=_fingerprint(code, engine, upstream_versions, settings),
        settings=settings.model_dump() if settings is not None else None,
    )


def _fingerprint(code: str, engine: str, upstream_versions: dict, settings: dg.Config | None) -> str:
    """Everything an output is a function of: same fingerprint, same output."""
    parts = [code, engine, upstream_versions, settings.model_dump() if settings is not None else None]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def reuse_previous(
    context: dg.AssetExecutionContext,
    conn: duckdb.DuckDBPyConnection,
    asset: str,
    *,
    engine: str,
    settings: dg.Config | None,
) -> dg.MaterializeResult | None:
    """The asset's stored output again, when its code, engine, inputs' versions and settings are those of now.

    For the steps that cost minutes and no model call (node2vec, UMAP, embeddings): a re-index with
    nothing changed records a new materialization of the same data version, with a lineage row, and
    skips the work. None when anything differs (or on a first run): then compute.
    """
    previous = last_output(conn, asset, context.partition_key)
    lineage = lineage_for(context, conn, asset, engine=engine, settings=settings)
    if previous is None or not previous[0] or previous[0] != lineage.inputs:
        return None
    _, version, rows = previous
    if row_count(conn, asset, context.partition_key) != rows:  # the rows were removed behind our back
        return None
    record_lineage(conn, lineage, context.partition_key, version, rows)
    context.log.info(f"{asset}: inputs, settings and code unchanged since the last run; its output is reused")
    return dg.MaterializeResult(
        asset_key=dg.AssetKey(asset),
        data_version=dg.DataVersion(version),
        metadata={
            "dagster/row_count": rows,
            "engine": engine,
            "corpus": context.partition_key,
            "reused": dg.MetadataValue.md(
                "inputs, settings and code unchanged since the last materialization: the stored output was kept"
            ),
        },
    )


def previous_output(
    conn: duckdb.DuckDBPyConnection, asset: str, corpus: str, settings: dg.Config, *, ignoring: set[str] = frozenset()
) -> pd.DataFrame | None:
    """The asset's stored rows for the corpus, if the same settings (but those `ignoring`) made them.

    For a step that refines its last result rather than starting over; other settings would make other rows.
    """
    made_with = last_settings(conn, asset, corpus)
    if made_with is None:
        return None
    now = settings.model_dump(exclude=ignoring)
    if {name: made_with.get(name) for name in now} != now:
        return None
    return read_table(conn, asset, corpus)


def spent_on_failure(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> SpentOnFailure:
    """What the step's clients paid, kept in the store's failed_step_usage when it fails (it publishes no lineage
    row then): the run's totals and the model_usage view count it."""

    def keep(model: ModelEndpointResource, usage: Usage | None) -> None:
        if usage is None or not (usage.calls or usage.batch_calls):
            return
        corpus = context.partition_key if context.has_partition_key else ""
        with duckdb.get_connection() as conn:
            record_failed_step(conn, context.op_handle.name, corpus, context.run_id, usage_record(model, usage))

    return keep


def fail_if_too_many_failed(
    context: dg.AssetExecutionContext,
    what: str,
    failed: int,
    total: int,
    usage: Usage | None,
    max_fraction: float,
    keep: Callable[[], None] | None = None,
) -> None:
    """A few failures are logged; more than `max_fraction` of `total` fail the step, so nobody ships a hollow index.

    Every reply that was valid is in the response cache, so re-running the step pays only for the failures. `keep`
    records what the step paid before it fails.
    """
    if not failed:
        return
    message = f"{failed} of {total} {what} got no valid model reply after retries"
    if failed > max_fraction * total:
        if keep is not None:
            keep()
        raise step_failure(
            f"{message} (more than {max_fraction:.0%}); valid replies are cached, so a re-run pays only for the "
            "failed ones",
            retryable=False,
            metadata={
                f"failed_{what.replace(' ', '_')}": failed,
                "errors": dg.MetadataValue.json((usage.errors if usage else [])[:5]),
            },
        )
    context.log.warning(message)


def publish(
    context: dg.AssetExecutionContext,
    conn: duckdb.DuckDBPyConnection,
    table: str,
    df: pd.DataFrame,
    *,
    engine: str,
    model: ModelEndpointResource | None = None,
    usage: Usage | None = None,
    quality: dict | None = None,
    metadata: dict | None = None,
    settings: dg.Config | None = None,
) -> dg.MaterializeResult:
    """Write the corpus's rows with a lineage row, and describe the result for the UI.

    `quality` (counts of invalid, repaired and failed model output) goes to both the metadata and the lineage row.
    """
    corpus = context.partition_key
    key = dg.AssetKey(table)
    lineage = lineage_for(
        context, conn, table, engine=engine, model=model, usage=usage, quality=quality, settings=settings
    )
    version = write_table(conn, table, corpus, df, lineage)
    return dg.MaterializeResult(
        asset_key=key,
        data_version=dg.DataVersion(version),
        metadata={
            "dagster/row_count": len(df),
            "engine": engine,
            "corpus": corpus,
            **(usage_metadata(model, usage) if model else {}),
            **(quality or {}),
            **(metadata or {}),
        },
    )


def from_graphrag(output: Path, read_tables: Callable[..., T], *args) -> T:
    """Tables read from a Microsoft GraphRAG output; a broken output stops the step with one clear message."""
    try:
        return read_tables(output, *args)
    except GraphRAGOutputError as problem:
        raise step_failure(f"cannot import the GraphRAG output: {problem}", retryable=False) from None


def publish_imported(
    context: dg.AssetExecutionContext, conn: duckdb.DuckDBPyConnection, table: str, df: pd.DataFrame, output: Path
) -> dg.MaterializeResult:
    """Rows imported from a Microsoft GraphRAG output, with lineage (engine "imported"); no model was called."""
    return publish(
        context,
        conn,
        table,
        df,
        engine="imported",
        metadata={
            "source": "Microsoft GraphRAG output (imported)",
            "imported_from": dg.MetadataValue.path(str(output.resolve())),
        },
    )
