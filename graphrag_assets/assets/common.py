"""What every index asset shares: the corpus partitions, code versions, and publishing a table."""

from __future__ import annotations

import base64

import dagster as dg
import duckdb
import pandas as pd

from ..failures import step_failure
from ..method.prompts import prompts_version
from ..models import Usage
from ..resources import EmbeddingModelResource, ModelEndpointResource
from ..store.tables import Lineage, latest_versions, read_tables, write_table

corpus_partitions = dg.DynamicPartitionsDefinition(name="corpus")

# Assets that call the model share this pool: dagster.yaml limits how many run at once across all runs.
MODEL_POOL = "model"

# Bump when a change to the method changes what an asset produces from the same inputs.
METHOD_VERSION = "1"


def code_version(*prompt_names: str) -> str:
    return f"{METHOD_VERSION}-{prompts_version(*prompt_names)}" if prompt_names else METHOD_VERSION


def markdown_table(df: pd.DataFrame, columns: list[str], rows: int = 10) -> dg.MetadataValue:
    preview = df[columns].head(rows).copy()
    for column in preview.columns:
        if preview[column].dtype == object:
            preview[column] = preview[column].map(lambda v: (str(v)[:120] + "…") if len(str(v)) > 120 else v)
    return dg.MetadataValue.md(preview.to_markdown(index=False) if len(preview) else "_(no rows)_")


def png(image: bytes, caption: str) -> dg.MetadataValue:
    """An image shown inline in the asset's metadata."""
    return dg.MetadataValue.md(f"![{caption}](data:image/png;base64,{base64.b64encode(image).decode()})")


def usage_metadata(model: ModelEndpointResource, usage: Usage | None) -> dict:
    """Calls and tokens for the UI. Embedding tokens are named apart: they cost an order of magnitude less."""
    if usage is None:
        return {}
    figures = usage.as_metadata(model.settings())
    tokens = (
        {"embedding_tokens": figures["prompt_tokens"]}
        if isinstance(model, EmbeddingModelResource)
        else {"prompt_tokens": figures["prompt_tokens"], "completion_tokens": figures["completion_tokens"]}
    )
    return {
        "model_calls": figures["calls"],
        "cache_hits": figures["cache_hits"],
        **tokens,
        "retries": figures["retries"],
        "invalid_replies": figures["invalid_replies"],
        "reasked": figures["reasked"],
        "failed_calls": figures["failures"],
        "estimated_cost_usd": dg.MetadataValue.float(figures["estimated_cost_usd"]),
    }


def upstream_of(context: dg.AssetExecutionContext, asset: str) -> list[str]:
    """The asset's declared deps: the tables it reads, and the upstream versions its lineage row records."""
    return sorted(key.to_user_string() for key in context.assets_def.asset_deps[dg.AssetKey(asset)])


def read_inputs(context: dg.AssetExecutionContext, conn: duckdb.DuckDBPyConnection, asset: str) -> dict:
    """Every table the asset depends on, for its corpus."""
    return read_tables(conn, upstream_of(context, asset), context.partition_key)


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
) -> Lineage:
    """The lineage row; `upstream` defaults to the asset's declared deps (pass it only for a table that is no asset)."""
    upstream = upstream_of(context, asset) if upstream is None else upstream
    model_usage = usage.as_metadata(model.settings()) if usage and model else None
    return Lineage(
        asset=asset,
        corpus=context.partition_key,
        run_id=context.run_id,
        code_version=context.assets_def.code_versions_by_key.get(dg.AssetKey(asset)) or "",
        engine=engine,
        upstream_versions=latest_versions(conn, context.partition_key, upstream),
        model_usage={**model_usage, **(quality or {})} if model_usage else None,
    )


def fail_if_too_many_failed(
    context: dg.AssetExecutionContext, what: str, failed: int, total: int, usage: Usage | None, max_fraction: float
) -> None:
    """A few failures are logged; more than `max_fraction` of `total` fail the step, so nobody ships a hollow index.

    Every reply that was valid is in the response cache, so re-running the step pays only for the failures.
    """
    if not failed:
        return
    message = f"{failed} of {total} {what} got no valid model reply after retries"
    if failed > max_fraction * total:
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
) -> dg.MaterializeResult:
    """Write the corpus's rows with a lineage row, and describe the result for the UI.

    `quality` (counts of invalid, repaired and failed model output) goes to both the metadata and the lineage row.
    """
    corpus = context.partition_key
    key = dg.AssetKey(table)
    lineage = lineage_for(context, conn, table, engine=engine, model=model, usage=usage, quality=quality)
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
