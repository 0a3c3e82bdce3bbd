"""What a run of the index decided for a corpus, read by every step: its plan (method/plan.py), the prompts it is
built with, and whether its model requests go through the Batch API."""

from __future__ import annotations

import dagster as dg
import duckdb

from ..configs.index import AliasConfig, ClaimsConfig, GraphConfig, step_config
from ..failures import step_failure
from ..method.plan import IndexPlan
from ..method.prompts import DEFAULT_PROMPTS, PromptSet
from ..naming import InstanceNames, bare
from ..resources import (
    BATCH_API_TAG,
    ChatModelResource,
    CorporaResource,
    DuckDBStoreResource,
    ModelEndpointResource,
)
from ..settings import flag
from ..store.batch_ledger import DuckDBBatchLedger
from ..store.tables import (
    last_settings,
    read_table,
    table_exists,
)
from .metadata import tell


def batch_ledger(
    context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource, model: ModelEndpointResource
) -> DuckDBBatchLedger | None:
    """Where this step records the batches it submits, when it runs in batch mode; None when it does not.

    The run's `graphrag/batch_api` tag (true or false) decides, else the model resource's `batch_api`: one choice
    for every model-calling step of the run, set in the launchpad's tags or by `graphrag-assets index --batch`.
    """
    tag = context.run.tags.get(BATCH_API_TAG)
    try:
        wanted = flag(tag) if tag is not None else model.batch_api
    except ValueError:
        raise step_failure(f"the run's tag {BATCH_API_TAG}={tag!r} is not true or false", retryable=False) from None
    if not (wanted and model.configured):
        return None
    labels = {"step": bare(context.op_handle.name), "corpus": context.partition_key, "run_id": context.run_id}
    return DuckDBBatchLedger(duckdb.get_connection, labels, lambda line: tell(context, line))


def index_plan(
    context: dg.AssetExecutionContext,
    corpora: CorporaResource,
    chat: ChatModelResource,
    conn: duckdb.DuckDBPyConnection,
) -> IndexPlan:
    """The run's plan for the corpus, from its folder, the run's settings and the chat resource: the same in every
    step of the run, so each step reads it rather than deciding anew."""
    corpus, run, names = context.partition_key, context.run, InstanceNames.of(context.op_handle.name)
    aliases = step_config(run.run_config, AliasConfig, names.name("entity_aliases"))
    return IndexPlan(
        corpus,
        imported=corpora.graphrag_output(corpus),
        method=_index_method(context, conn),
        chat=chat.model if chat.configured else None,
        claims_enabled=step_config(run.run_config, ClaimsConfig, names.name("covariates")).enabled,
        aliases_enabled=aliases.enabled,
        aliases_on_imported=aliases.on_imported_graphs,
    )


def _index_method(context: dg.AssetExecutionContext, conn: duckdb.DuckDBPyConnection) -> str:
    """entity_graph's method setting when this run builds the graph, else the one recorded in the lineage of the
    graph the step reads (a re-execution, or a step run alone)."""
    run, graph_step = context.run, InstanceNames.of(context.op_handle.name).name("entity_graph")
    steps = context.instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id).steps
    if any(step.key == graph_step for step in steps):
        return step_config(run.run_config, GraphConfig, graph_step).method
    return (last_settings(conn, "entities", context.partition_key) or {}).get("method", "standard")


def index_prompt_set(conn: duckdb.DuckDBPyConnection, corpus: str) -> PromptSet:
    """The prompts the index_prompts step chose for the corpus (tuned, or its own files, over prompts/); the files in
    prompts/ in a store from before that step."""
    if not table_exists(conn, "index_prompts"):
        return DEFAULT_PROMPTS
    rows = read_table(conn, "index_prompts", corpus, "source != 'default'")
    return PromptSet.of(dict(zip(rows["id"], rows["template"])))
