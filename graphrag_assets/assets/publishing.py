"""A step of the index, for its asset: reading its inputs, paying a model (and keeping what a failed step paid),
and publishing each table with its lineage row, reusing what the last run made from the same inputs, or the rows
imported from a Microsoft GraphRAG output."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import dagster as dg
import duckdb
import polars as pl

from ..failures import step_failure
from ..method.graphrag_import import GraphRAGOutputError
from ..method.plan import IndexPlan
from ..method.prompts import PromptSet
from ..method.schema import typed_frame
from ..models import Usage
from ..naming import InstanceNames, bare
from ..resources import (
    ChatModelResource,
    CorporaResource,
    DuckDBStoreResource,
    EmbeddingModelResource,
    ModelEndpointResource,
)
from ..store.schema import TABLES
from ..store.tables import (
    Lineage,
    last_output,
    last_settings,
    latest_versions,
    read_table,
    record_failed_step,
    record_lineage,
    row_count,
    write_table,
    write_table_from_query,
)
from .metadata import usage_metadata
from .run_plan import batch_ledger, index_plan, index_prompt_set

T = TypeVar("T")


def upstream_of(context: dg.AssetExecutionContext, asset: str) -> list[str]:
    """The asset's declared deps in its own instance: the tables it reads, and the upstream versions its lineage
    row records (an asset of the user's project upstream of it is no table of the store)."""
    names = InstanceNames.of(context.op_handle.name)
    return sorted(key.path[-1] for key in context.assets_def.asset_deps[names.key(asset)] if names.owns(key))


def usage_record(model: ModelEndpointResource, usage: Usage) -> dict:
    """A step's usage of one endpoint as the store keeps it (the model_usage view reads it)."""
    endpoint = "embeddings" if isinstance(model, EmbeddingModelResource) else "chat"
    return {**usage.as_metadata(model.settings()), "endpoint": endpoint}


def lineage_for(
    context: dg.AssetExecutionContext,
    conn: duckdb.DuckDBPyConnection,
    asset: str,
    engine: str,
    *,
    paid: tuple[ModelEndpointResource | None, Usage | None] | None = None,
    quality: dict | None = None,
    upstream: list[str] | None = None,
    settings: dg.Config | None = None,
) -> Lineage:
    """The lineage row; `upstream` defaults to the asset's declared deps (pass it only for a table that is no asset)."""
    upstream = upstream_of(context, asset) if upstream is None else upstream
    model, usage = paid or (None, None)
    model_usage = usage_record(model, usage) if usage and model else None
    code = context.assets_def.code_versions_by_key.get(InstanceNames.of(context.op_handle.name).key(asset)) or ""
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


@dataclass
class Step:
    """One asset's work on one corpus: what it reads from the store, how it pays a model (keeping what a failure
    paid), and how it publishes each table with its lineage row and the metadata a person reads. An asset makes one
    and is left with its own few lines: read, call the method, publish."""

    context: dg.AssetExecutionContext
    duckdb: DuckDBStoreResource

    @property
    def corpus(self) -> str:
        return self.context.partition_key

    # -- reading -----------------------------------------------------------------------------------------------
    def read(self, table: str, where: str = "TRUE", without: tuple[str, ...] = ()) -> pl.DataFrame:
        with self.duckdb.get_connection() as conn:
            return read_table(conn, table, self.corpus, where, without=without)

    def inputs(self, asset: str, without: dict[str, tuple[str, ...]] | None = None) -> dict[str, pl.DataFrame]:
        """Every table the asset depends on, for its corpus, less the columns `without` names by table."""
        without = without or {}
        with self.duckdb.get_connection() as conn:
            return {
                table: read_table(conn, table, self.corpus, without=without.get(table, ()))
                for table in upstream_of(self.context, asset)
            }

    def plan(self, corpora: CorporaResource, chat: ChatModelResource) -> IndexPlan:
        with self.duckdb.get_connection() as conn:
            return index_plan(self.context, corpora, chat, conn)

    def prompts(self) -> PromptSet:
        with self.duckdb.get_connection() as conn:
            return index_prompt_set(conn, self.corpus)

    def previous_output(self, asset: str, settings: dg.Config, ignoring: set[str] = frozenset()) -> pl.DataFrame | None:
        """The asset's stored rows for the corpus, if the same settings (but those `ignoring`) made them.

        For a step that refines its last result rather than starting over; other settings would make other rows.
        """
        with self.duckdb.get_connection() as conn:
            made_with = last_settings(conn, asset, self.corpus)
            now = settings.model_dump(exclude=ignoring)
            if made_with is None or {name: made_with.get(name) for name in now} != now:
                return None
            return read_table(conn, asset, self.corpus)

    # -- paying a model ----------------------------------------------------------------------------------------
    def run_model(self, model: ModelEndpointResource, work: Callable, batches: bool = True) -> tuple[T, Usage | None]:
        """`work(client)` with the model's client (None offline), through the Batch API when the run says so; what
        the client paid is kept in the store if the work fails."""
        ledger = batch_ledger(self.context, self.duckdb, model) if batches else None
        return model.run(work, ledger, self.keep_spent)

    def keep_spent(self, model: ModelEndpointResource, usage: Usage | None) -> None:
        """What a failing step's client paid, in the store's failed_step_usage (it publishes no lineage row then):
        the run's totals and the model_usage view count it."""
        if usage is None or not (usage.calls or usage.batch_calls):
            return
        corpus = self.corpus if self.context.has_partition_key else ""
        with self.duckdb.get_connection() as conn:
            record_failed_step(
                conn, bare(self.context.op_handle.name), corpus, self.context.run_id, usage_record(model, usage)
            )

    def fail_if_too_many_failed(
        self, what: str, failed: int, total: int, paid: tuple[ModelEndpointResource, Usage | None], max_fraction: float
    ) -> None:
        """A few failures are logged; more than `max_fraction` of `total` fail the step, so nobody ships a hollow
        index. Every valid reply is in the response cache, so re-running the step pays only for the failures."""
        if not failed:
            return
        model, usage = paid
        message = f"{failed} of {total} {what} got no valid model reply after retries"
        if failed <= max_fraction * total:
            self.context.log.warning(message)
            return
        self.keep_spent(model, usage)
        raise step_failure(
            f"{message} (more than {max_fraction:.0%}); valid replies are cached, so a re-run pays only for the "
            "failed ones",
            retryable=False,
            metadata={
                f"failed_{what.replace(' ', '_')}": failed,
                "errors": dg.MetadataValue.json((usage.errors if usage else [])[:5]),
            },
        )

    # -- publishing --------------------------------------------------------------------------------------------
    def publish(
        self,
        table: str,
        df: pl.DataFrame,
        *,
        engine: str,
        paid: tuple[ModelEndpointResource, Usage | None] | None = None,
        quality: dict | None = None,
        metadata: dict | None = None,
        settings: dg.Config | None = None,
    ) -> dg.MaterializeResult:
        """Write the corpus's rows with a lineage row, and describe the result for the UI. `paid` is the model and
        what it used; `quality` (counts of invalid, repaired and failed model output) goes to both the metadata and
        the lineage row."""
        model, usage = paid or (None, None)
        with self.duckdb.get_connection() as conn:
            lineage = lineage_for(self.context, conn, table, engine, paid=paid, quality=quality, settings=settings)
            version = write_table(conn, table, self.corpus, df, lineage)
        extra = {**(usage_metadata(model, usage) if model else {}), **(quality or {}), **(metadata or {})}
        return self._materialized(table, version, len(df), engine, extra)

    def publish_query(
        self,
        table: str,
        query: str,
        *,
        engine: str,
        measures: dict[str, str] | None = None,
        metadata: dict | None = None,
        sized_by: str = "",
    ) -> dg.MaterializeResult:
        """Write the rows of a query the store runs over the corpus's tables (`$corpus`), never held in the process:
        for a step that only joins what is stored. `measures` are SQL aggregates over the written rows, by the
        metadata name that shows them; `sized_by`, for a query run in parts, as write_table_from_query says."""
        measures = measures or {}
        with self.duckdb.get_connection() as conn:
            lineage = lineage_for(self.context, conn, table, engine)
            version, rows = write_table_from_query(conn, table, self.corpus, query, lineage, sized_by)
            aggregates = ", ".join(measures.values()) or "1"
            measured = conn.execute(f'SELECT {aggregates} FROM "{table}" WHERE corpus = ?', [self.corpus]).fetchone()
        return self._materialized(table, version, rows, engine, {**dict(zip(measures, measured)), **(metadata or {})})

    def _materialized(self, table: str, version: str, rows: int, engine: str, metadata: dict) -> dg.MaterializeResult:
        return dg.MaterializeResult(
            asset_key=dg.AssetKey(table),
            data_version=dg.DataVersion(version),
            metadata={"dagster/row_count": rows, "engine": engine, "corpus": self.corpus, **metadata},
        )

    def record_files(self, asset: str, engine: str, settings: dg.Config, rows: int) -> None:
        """A lineage row for an output that is files rather than a table (an export): no data version."""
        with self.duckdb.get_connection() as conn:
            lineage = lineage_for(self.context, conn, asset, engine, settings=settings)
            record_lineage(conn, lineage, self.corpus, version="", rows=rows)

    def publish_imported(self, table: str, df: pl.DataFrame, output: Path) -> dg.MaterializeResult:
        """Rows imported from a Microsoft GraphRAG output, with lineage (engine "imported"); no model was called."""
        return self.publish(
            table,
            df,
            engine="imported",
            metadata={
                "source": "Microsoft GraphRAG output (imported)",
                "imported_from": dg.MetadataValue.path(str(output.resolve())),
            },
        )

    def publish_skipped(self, table: str, columns: list[str], engine: str, why: str) -> dg.MaterializeResult:
        """No rows, by the plan's decision, with the reason in the log and the metadata."""
        self.context.log.info(f"{table} left empty: {why}")
        empty = typed_frame({name: TABLES[table][name] for name in columns})
        return self.publish(table, empty, engine=engine, metadata={"skipped_because": why})

    def reuse_previous(self, asset: str, engine: str, settings: dg.Config | None) -> dg.MaterializeResult | None:
        """The asset's stored output again, when its code, engine, inputs' versions and settings are those of now.

        For the steps that cost minutes and no model call (node2vec, UMAP, embeddings): a re-index with
        nothing changed records a new materialization of the same data version, with a lineage row, and
        skips the work. None when anything differs (or on a first run): then compute.
        """
        with self.duckdb.get_connection() as conn:
            previous = last_output(conn, asset, self.corpus)
            lineage = lineage_for(self.context, conn, asset, engine, settings=settings)
            if previous is None or not previous[0] or previous[0] != lineage.inputs:
                return None
            _, version, rows = previous
            if row_count(conn, asset, self.corpus) != rows:  # the rows were removed behind our back
                return None
            record_lineage(conn, lineage, self.corpus, version, rows)
        self.context.log.info(f"{asset}: inputs, settings and code unchanged since the last run; its output is reused")
        kept = "inputs, settings and code unchanged since the last materialization: the stored output was kept"
        return self._materialized(asset, version, rows, engine, {"reused": dg.MetadataValue.md(kept)})


def from_graphrag(output: Path, read_tables: Callable[..., T], *args) -> T:
    """Tables read from a Microsoft GraphRAG output; a broken output stops the step with one clear message."""
    try:
        return read_tables(output, *args)
    except GraphRAGOutputError as problem:
        raise step_failure(f"cannot import the GraphRAG output: {problem}", retryable=False) from None
