"""Query assets: each method is materialized on demand from the launchpad with a typed config.

The answer appears in the materialization's metadata as markdown with its sources, and is appended to the
query_answers table with the context it read, so that any answer can be traced to the documents behind it (the
answer_sources view). The work is the answering path every caller shares (answers/); the asset adds the run.
"""

import dagster as dg

from ..answers.asking import AnswerFailed, QuestionRefused, answer, check
from ..answers.options import METHODS
from ..answers.published import INDEX_TABLES, NotIndexed, load_index, versions
from ..answers.records import write_answers
from ..answers.sources import sources_markdown
from ..configs.queries import (
    BasicSearchConfig,
    DriftSearchConfig,
    GlobalSearchConfig,
    LazySearchConfig,
    LocalSearchConfig,
    QuestionGenerationConfig,
    TextSummaryConfig,
)
from ..failures import step_failure
from ..resources import ChatModelResource, DuckDBStoreResource, EmbeddingModelResource
from .common import corpus_asset
from .metadata import cost_value


def answer_query(
    context: dg.AssetExecutionContext,
    method: str,
    config: dg.Config,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    corpus = context.partition_key
    try:
        with duckdb.get_connection() as conn:
            index = load_index(conn, corpus, duckdb.vector_index_dir)
            version = versions(conn).get(corpus, "")
    except (NotIndexed, ValueError) as problem:
        raise step_failure(str(problem), retryable=False) from None
    try:
        check(method, config, index, embeddings.configured, chat.configured)
        chat_settings = chat.settings() if chat.configured else None
        embedding_settings = embeddings.settings() if embeddings.configured else None
        found = answer(corpus, index, method, config, chat_settings, embedding_settings, version)
    except QuestionRefused as problem:
        raise step_failure(str(problem), retryable=False) from None
    except AnswerFailed as problem:
        raise step_failure(str(problem), retryable=problem.retryable) from None
    finally:
        index.close()  # the HNSW indexes' files; the tables stay readable
    with duckdb.get_connection() as conn:
        write_answers(conn, [(corpus, found.row("dagster", context.run_id))])
    heading = f"**{found.question}**\n\n" if found.question else ""
    return dg.MaterializeResult(
        metadata={
            "answer": dg.MetadataValue.md(heading + found.text),
            "sources": dg.MetadataValue.md(sources_markdown(index, found.result)),
            "answer_id": found.id,
            "method": method,
            "community_level": found.level if found.level is not None else -1,
            "extractive": found.result.extractive,
            "context_tokens": found.result.context_tokens,
            "latency_seconds": round(found.seconds, 3),
            "details": dg.MetadataValue.json(found.result.details),
            "trace_sql": f"SELECT * FROM answer_sources WHERE answer_id = '{found.id}'",
            "hnsw_searched": ", ".join(sorted(index.approximate)) or "none (exact scan)",
            "engine": chat.engine,
            **found.usage,
            "estimated_cost_usd": cost_value(found.cost_usd, chat.model),
        }
    )


def query_asset(method: str):
    spec = METHODS[method]
    return corpus_asset(
        "query",
        name=spec.asset,
        deps=list(INDEX_TABLES),
        prompts=spec.prompts,
        description=spec.description,
        model=True,
    )


@query_asset("global")
def global_search(
    context: dg.AssetExecutionContext,
    config: GlobalSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "global", config, chat, embeddings, duckdb)


@query_asset("local")
def local_search(
    context: dg.AssetExecutionContext,
    config: LocalSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "local", config, chat, embeddings, duckdb)


@query_asset("drift")
def drift_search(
    context: dg.AssetExecutionContext,
    config: DriftSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "drift", config, chat, embeddings, duckdb)


@query_asset("basic")
def basic_search(
    context: dg.AssetExecutionContext,
    config: BasicSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "basic", config, chat, embeddings, duckdb)


@query_asset("text_summary")
def text_summary_search(
    context: dg.AssetExecutionContext,
    config: TextSummaryConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "text_summary", config, chat, embeddings, duckdb)


@query_asset("lazy")
def lazy_search(
    context: dg.AssetExecutionContext,
    config: LazySearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "lazy", config, chat, embeddings, duckdb)


@query_asset("question_generation")
def question_generation(
    context: dg.AssetExecutionContext,
    config: QuestionGenerationConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "question_generation", config, chat, embeddings, duckdb)
