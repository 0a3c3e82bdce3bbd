"""The index job's last step: what its run staged becomes the corpus's index, all at once.

Until this step runs, queries, `answer_sources` and the CLI read the last complete index; a run that fails or is
killed before it leaves that index exactly as it was. Its stage is dropped when it ends red with no retry to
follow (the CLI, or `failed_stages_sensor` in the daemon), or else by the next run that publishes.
Materializing single assets by hand, without this step, writes their tables directly.
"""

import hashlib
import json

import dagster as dg
import polars as pl

from ..failures import step_failure
from ..method.exports import discard_staged_exports, publish_exports
from ..resources import PUBLISHED_INDEX, DuckDBStoreResource
from ..store import keyword_index as keywords
from ..store.tables import (
    drop_stage,
    latest_versions,
    publish_stage,
    stage_name,
    stages_of,
    table_exists_in,
    usage_totals,
)
from . import communities, embeddings, exports, index
from .common import corpus_asset
from .metadata import markdown_table, png


def _index_keys() -> list[dg.AssetKey]:
    """Every asset of the index: each must have succeeded in the run before its tables are published."""
    # Keys only: a module-level list of the assets themselves would be loaded twice as this module's own.
    return [
        key
        for assets_def in dg.load_assets_from_modules([index, communities, embeddings, exports])
        for key in assets_def.keys
    ]


@corpus_asset("exports", name=PUBLISHED_INDEX, deps=_index_keys())
def published_index(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """Publish the run's staged tables as the corpus's index in one transaction, once every index step succeeded."""
    if duckdb.stage is None:
        raise step_failure("this run staged nothing to publish: run the index_corpus job", retryable=False)
    corpus = context.partition_key
    with duckdb.get_connection() as conn:
        # Stages of runs that ended without publishing go too; a run of the corpus still going keeps its own.
        leftovers = [
            stage
            for stage, run_id in stages_of(conn, corpus).items()
            if stage != duckdb.stage and run_family_ended(context.instance, run_id)
        ]
        # Where each stage's exports went (their steps' folder setting), read before the stages are dropped.
        folders = {stage: export_folders(conn, stage) for stage in (duckdb.stage, *leftovers)}
        spent = usage_totals(conn, None, duckdb.stage)  # this run's steps, and its retries'

        published = publish_stage(conn, duckdb.stage, corpus, leftovers)
        tables = {table: rows for table, rows in published.items() if table != "lineage"}
        # The index's version: its assets' data versions as published, so an unchanged re-index keeps it.
        versions = latest_versions(conn, corpus, [key.to_user_string() for key in _index_keys()])
        runs = cost_per_run(conn, corpus)
        named = keywords.published(conn, corpus)
    # The keyword index files the last index named (see keyword_index) are not needed once this one is published.
    if named:
        keywords.prune(duckdb.vector_index_dir, corpus, named)
    # After the store's transaction: a kill before it leaves the last index's exports, as the store is left.
    files = move_exports(folders, duckdb.stage, corpus)
    context.log.info(
        f"published {len(tables)} tables of corpus {corpus}" + (f" and {', '.join(files)}" if files else "")
    )
    summary = pl.DataFrame({"table": list(tables), "rows": list(tables.values())})
    return dg.MaterializeResult(
        data_version=dg.DataVersion(hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]),
        metadata={
            "corpus": corpus,
            "tables_published": len(tables),
            "rows_published": int(sum(tables.values())),
            "tables": markdown_table(summary, ["table", "rows"], rows=len(summary)),
            "exports_published": ", ".join(files) or "none",
            **_spending(spent),
            **({"cost_per_run": png(cost_chart(runs, corpus), f"cost per index run of {corpus}")} if len(runs) else {}),
        },
    )


def cost_per_run(conn, corpus: str) -> list[tuple]:
    """Each index run of the corpus: (when it started, its model requests, their cost or None when unpriced)."""
    if not table_exists_in(conn, "main", "model_usage"):
        return []
    return conn.execute(
        "SELECT min(materialized_at) AS started, sum(requests) AS requests, "
        "CASE WHEN bool_and(cost_usd IS NOT NULL) THEN sum(cost_usd) END AS cost_usd "
        "FROM model_usage WHERE corpus = ? GROUP BY run_id ORDER BY started",
        [corpus],
    ).fetchall()


def move_exports(folders: dict[str, list[str]], stage: str, corpus: str) -> list[str]:
    """The run's staged export files put in place of the last index's; other (leftover) stages' files removed."""
    files = [name for folder in folders[stage] for name in publish_exports(folder, corpus, stage)]
    for leftover, leftover_folders in folders.items():
        if leftover != stage:
            for folder in leftover_folders:
                discard_staged_exports(folder, [leftover])
    return files


def export_folders(conn, stage: str) -> list[str]:
    """The folders a stage's export steps wrote to."""
    rows = (
        conn.execute(
            f"""SELECT DISTINCT settings->>'folder' FROM "{stage}".lineage
            WHERE asset IN ('graphml_export', 'parquet_export') AND settings IS NOT NULL"""
        ).fetchall()
        if table_exists_in(conn, stage, "lineage")
        else []
    )
    return [folder for (folder,) in rows if folder]


def run_family_ended(instance: dg.DagsterInstance, root_run_id: str) -> bool:
    """Whether the run (and every retry of it) is over, with no retry still to come; a run this instance never saw
    is over for it."""
    runs = instance.get_runs(filters=dg.RunsFilter(run_ids=[root_run_id])) + instance.get_runs(
        filters=dg.RunsFilter(tags={"dagster/root_run_id": root_run_id})
    )
    return all(run.is_finished and run.tags.get("dagster/will_retry") != "true" for run in runs)


def discard_failed_stage(conn, instance: dg.DagsterInstance, run: dg.DagsterRun) -> str | None:
    """Drop what a failed index run staged (tables and exports) once no retry of it will follow; returns the
    stage dropped, or None. Its paid model replies stay in the cache, so the next run does not pay for them again."""
    corpus, root = run.tags.get("dagster/partition"), run.root_run_id or run.run_id
    if not corpus or not run_family_ended(instance, root):
        return None
    stage = stage_name(corpus, root)
    if stage not in stages_of(conn, corpus):
        return None
    folders = export_folders(conn, stage)
    drop_stage(conn, stage)
    for folder in folders:
        discard_staged_exports(folder, [stage])
    return stage


def _spending(totals: dict | None) -> dict:
    """What the whole run spent on the model, for the run's page: SELECT * FROM model_usage has it by step."""
    if totals is None:
        return {"model_requests": 0, "cost_usd": 0.0}
    return {
        "model_requests": totals["requests"],
        "retried_requests": totals["retries"],
        "failed_calls": totals["failed_calls"],
        "replies_from_cache": totals["cache_hits"],
        "chat_prompt_tokens": totals["prompt_tokens"],
        "chat_completion_tokens": totals["completion_tokens"],
        "embedding_tokens": totals["embedding_tokens"],
        "batch_requests": totals["batch_requests"],
        "cost_usd": dg.MetadataValue.text("unknown") if totals["cost_usd"] is None else round(totals["cost_usd"], 6),
        "spending_sql": "SELECT * FROM model_usage WHERE corpus = '<corpus>' ORDER BY materialized_at DESC",
    }


def cost_chart(runs: list[tuple], corpus: str) -> bytes:
    """A PNG of what each index run of the corpus spent on the model, oldest first (runs whose model has no known
    price show their requests only)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 2.6), dpi=90)
    labels = [started.strftime("%m-%d %H:%M") for started, _, _ in runs]
    costs = [cost or 0.0 for _, _, cost in runs]
    axes.bar(labels, costs, color=["#3b7dd8" if cost is not None else "#bbbbbb" for _, _, cost in runs])
    for x, (_, requests, cost) in enumerate(runs):
        axes.annotate(
            f"{requests:,} req" if cost is None else f"${cost:,.2f}", (x, cost or 0.0),
            ha="center", va="bottom", fontsize=7,
        )  # fmt: skip
    axes.set_ylabel("US dollars")
    axes.set_title(f"model cost per index run of {corpus} (grey: no known price)", fontsize=9)
    axes.tick_params(axis="x", labelrotation=45, labelsize=7)
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
