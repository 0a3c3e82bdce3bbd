"""What every index asset shares: the corpus partitions, code versions, and publishing a table."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import dagster as dg
import duckdb
import pandas as pd

from ..failures import step_failure
from ..method.imports import GraphRAGOutputError
from ..method.plan import IndexPlan
from ..method.progress import PROGRESS_TO_TERMINAL, Progress
from ..method.prompts import DEFAULT_PROMPTS, PromptSet, prompts_version
from ..models import Usage
from ..resources import (
    BATCH_API_TAG,
    ChatModelResource,
    CorporaResource,
    DuckDBStoreResource,
    EmbeddingModelResource,
    ModelEndpointResource,
    SpentOnFailure,
)
from ..store.batch_ledger import DuckDBBatchLedger
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
    table_exists,
    write_table,
)
from .index_configs import AliasConfig, ClaimsConfig, GraphConfig, step_config

T = TypeVar("T")

corpus_partitions = dg.DynamicPartitionsDefinition(name="corpus")

# Assets that call the model share this pool: dagster.yaml limits how many run at once across all runs.
MODEL_POOL = "model"

# Bump when a change to the method changes what an asset produces from the same inputs.
METHOD_VERSION = "3"  # 2: chunks start at paragraph and sentence boundaries; 3: particular noun phrases


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
        else {
            "prompt_tokens": figures["prompt_tokens"],
            # Served from the endpoint's prompt cache (OpenAI, Azure, vLLM): gleaning re-sends the first
            # request as the prefix of its own, so only the new part is paid at the full rate.
            "cached_prompt_tokens": figures["cached_prompt_tokens"],
            "completion_tokens": figures["completion_tokens"],
        }
    )
    batch = (
        {
            "batches": figures["batches"],
            "batches_waited_for_again": figures["batches_reattached"],
            "batch_calls": figures["batch_calls"],
            "synchronous_calls": figures["calls"] - figures["batch_calls"],
            "batch_tokens": figures["batch_prompt_tokens"] + figures["batch_completion_tokens"],
            "batch_lines_asked_again": figures["batch_lines_failed"],
            "batch_wait_seconds": round(figures["batch_wait_seconds"], 1),
        }
        if figures["batches"] or figures["batches_reattached"] or figures["batch_calls"] or figures["batch_sent_alone"]
        else {}
    )
    return {
        "model_calls": figures["calls"],
        "cache_hits": figures["cache_hits"],
        **batch,
        **tokens,
        "retries": figures["retries"],
        "rate_limited": figures["rate_limited"],
        "peak_concurrency": figures["peak_concurrency"],
        "invalid_replies": figures["invalid_replies"],
        "reasked": figures["reasked"],
        "failed_calls": figures["failures"],
        "estimated_cost_usd": cost_value(figures["estimated_cost_usd"], model.model),
    }


def cost_value(cost: float | None, model: str) -> dg.MetadataValue:
    """A cost for the UI: a number, or why there is none."""
    if cost is None:
        return dg.MetadataValue.text(f"unknown: no price for model {model!r} (set GRAPHRAG_PRICES, see the README)")
    return dg.MetadataValue.float(float(cost))


def batch_ledger(
    context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource, model: ModelEndpointResource
) -> DuckDBBatchLedger | None:
    """Where this step records the batches it submits, when it runs in batch mode; None when it does not.

    The run's `graphrag/batch_api` tag (true or false) decides, else the model resource's `batch_api`: one choice
    for every model-calling step of the run, set in the launchpad's tags or by `graphrag-assets index --batch`.
    """
    tag = context.run.tags.get(BATCH_API_TAG)
    wanted = tag.strip().lower() in ("1", "true", "yes", "on") if tag is not None else model.batch_api
    if not (wanted and model.configured):
        return None
    labels = {"step": context.op_handle.name, "corpus": context.partition_key, "run_id": context.run_id}
    return DuckDBBatchLedger(duckdb.get_connection, labels, lambda line: tell(context, line))


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


def index_plan(
    context: dg.AssetExecutionContext,
    corpora: CorporaResource,
    chat: ChatModelResource,
    conn: duckdb.DuckDBPyConnection,
) -> IndexPlan:
    """The run's plan for the corpus, from its folder, the run's settings and the chat resource: the same in every
    step of the run, so each step reads it rather than deciding anew."""
    corpus, run = context.partition_key, context.run
    aliases = step_config(run.run_config, AliasConfig, "entity_aliases")
    return IndexPlan(
        corpus,
        imported=corpora.graphrag_output(corpus),
        method=_index_method(context, conn),
        chat=chat.model if chat.configured else None,
        claims_enabled=step_config(run.run_config, ClaimsConfig, "covariates").enabled,
        aliases_enabled=aliases.enabled,
        aliases_on_imported=aliases.on_imported_graphs,
    )


def _index_method(context: dg.AssetExecutionContext, conn: duckdb.DuckDBPyConnection) -> str:
    """entity_graph's method setting when this run builds the graph, else the one recorded in the lineage of the
    graph the step reads (a re-execution, or a step run alone)."""
    run = context.run
    steps = context.instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id).steps
    if any(step.key == "entity_graph" for step in steps):
        return step_config(run.run_config, GraphConfig, "entity_graph").method
    return (last_settings(conn, "entities", context.partition_key) or {}).get("method", "standard")


def index_prompt_set(conn: duckdb.DuckDBPyConnection, corpus: str) -> PromptSet:
    """The prompts the index_prompts step chose for the corpus (tuned, or its own files, over prompts/); the files in
    prompts/ in a store from before that step."""
    if not table_exists(conn, "index_prompts"):
        return DEFAULT_PROMPTS
    rows = read_table(conn, "index_prompts", corpus, "source != 'default'")
    return PromptSet.of(dict(zip(rows["id"], rows["template"])))


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


def tell(context: dg.AssetExecutionContext, line: str, warning: bool = False) -> None:
    """A line for the run's event log and, under the CLI, for the terminal too."""
    (context.log.warning if warning else context.log.info)(line)
    if os.environ.get(PROGRESS_TO_TERMINAL):
        print(f"  [{context.partition_key}] {'warning: ' if warning else ''}{line}", file=sys.stderr, flush=True)


def step_progress(context: dg.AssetExecutionContext, what: str, total: int, client=None) -> Progress:
    """How far the step is, in the run's event log (the run page shows it) at most every 10 s and at the end."""
    progress = Progress(
        what, total, lambda line: tell(context, line), usage=client.usage if client is not None else None
    )
    if client is not None:
        client.progress = progress  # so a budget that stops the step can say how far it got
    return progress
