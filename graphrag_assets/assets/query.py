"""Query assets: each method is materialized on demand from the launchpad with a typed config.

The answer appears in the materialization's metadata as markdown with its sources, and is
appended to the query_answers table with the context it read, so that any answer can be traced
to the documents behind it (the answer_sources view).
"""

import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import dagster as dg
import pandas as pd
from pydantic import Field

from ..failures import step_failure
from ..method import defaults
from ..method.embeddings.text import LocalEmbedder
from ..method.graph.aliases import canonical_of, resolve
from ..method.search.context import Index, SearchResult
from ..method.search.drift_search import drift_search as run_drift
from ..method.search.global_search import global_search as run_global
from ..method.search.global_search import text_summary_search as run_text_summary
from ..method.search.lazy_search import lazy_search as run_lazy
from ..method.search.local_search import basic_search as run_basic
from ..method.search.local_search import local_search as run_local
from ..method.search.questions import generate_questions
from ..resources import ChatModelResource, DuckDBStoreResource, EmbeddingModelResource, run_with_models
from ..store import vector_index
from ..store.schema import ANSWER_SOURCES_VIEW
from ..store.tables import append_rows, latest_versions, read_table, read_tables, row_count
from .common import MODEL_POOL, code_version, corpus_partitions, usage_metadata

INDEX_TABLES = (
    "entities",
    "relationships",
    "covariates",
    "communities",
    "community_reports",
    "text_units",
    "documents",
    "text_embeddings",
)


class Turn(dg.Config):
    role: str = Field(description="'user' or 'assistant'.")
    content: str = Field(description="What was said.")


class QueryConfig(dg.Config):
    question: str = Field(description="What to ask of the corpus.")
    response_type: str = Field("multiple paragraphs", description="Length and format of the answer.")
    conversation: list[Turn] = Field(
        [],
        description="Earlier turns, oldest first: the answer reads the question in their light, and the user's "
        "last two turns help choose the context. `graphrag-assets ask --follow-up <answer id>` fills it in.",
    )


class LeveledQueryConfig(QueryConfig):
    community_level: int = Field(
        0, ge=0, description="Community level: 0 is the root (C0), deeper levels are finer (C1, C2, ...)."
    )


class MapReduceOptions(dg.Config):
    map_window_tokens: int = Field(
        8000, ge=500, description="Tokens of records one map call reads; more windows mean more calls."
    )
    reduce_window_tokens: int = Field(
        8000, ge=500, description="Tokens of the best-scored points the answer is written from."
    )
    seed: int = Field(42, description="Seed of the shuffle that packs records into map windows.")


class LocalContextOptions(dg.Config):
    top_k_entities: int = Field(10, ge=1, description="Entities nearest the question that seed the context.")
    max_context_tokens: int = Field(8000, ge=500, description="Tokens of context the answer is written from.")
    community_prop: float = Field(
        0.25, ge=0, le=1, description="Share of the context budget for community reports (with text_unit_prop <= 1)."
    )
    text_unit_prop: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the context budget for source text units; the rest is entities, "
        "relationships and claims.",
    )


class GlobalSearchConfig(LeveledQueryConfig, MapReduceOptions):
    dynamic_community_selection: bool = Field(
        False, description="Rate reports from the root down to community_level and read only relevant branches."
    )
    dynamic_threshold: int = Field(
        1, ge=0, le=5, description="Minimum 0-5 relevance rating to keep a report and descend into its children."
    )


class LocalSearchConfig(LeveledQueryConfig, LocalContextOptions):
    pass


class DriftSearchConfig(LeveledQueryConfig, LocalContextOptions):
    primer_reports: int = Field(5, ge=1, description="Reports nearest the question that the primer reads.")
    follow_ups: int = Field(3, ge=0, description="Follow-up questions asked at each step.")
    depth: int = Field(1, ge=0, description="Rounds of follow-ups (0: the primer alone).")


class BasicSearchConfig(QueryConfig):
    top_k: int = Field(10, ge=1, description="Text units nearest the question, packed into the context.")
    max_context_tokens: int = Field(8000, ge=500, description="Tokens of source text the answer is written from.")


class TextSummaryConfig(QueryConfig, MapReduceOptions):
    pass


class LazySearchConfig(dg.Config):
    question: str = Field(description="What to ask of the corpus.")
    response_type: str = Field("multiple paragraphs", description="Length and format of the answer.")
    relevance_budget: int = Field(
        defaults.LAZY_RELEVANCE_BUDGET,
        ge=1,
        description="Text units the model may test for relevance (one snippet each); LazyGraphRAG's published "
        "settings are 100, 500 and 1,500. The main cost of the search, and what buys its depth.",
    )
    max_sub_questions: int = Field(
        defaults.LAZY_MAX_SUB_QUESTIONS, ge=1, description="Sub-questions the question may be split into (1: never)."
    )
    units_per_visit: int = Field(
        defaults.LAZY_UNITS_PER_VISIT, ge=1, description="Untested text units tested at each community the walk visits."
    )
    patience: int = Field(
        defaults.LAZY_PATIENCE,
        ge=1,
        description="Communities in a row with nothing relevant before the walk goes one level deeper.",
    )
    snippet_tokens: int = Field(
        defaults.LAZY_SNIPPET_TOKENS,
        ge=20,
        description="Tokens of each unit a relevance test reads: its sentences nearest the question.",
    )
    claim_passage_tokens: int = Field(
        defaults.LAZY_CLAIM_PASSAGE_TOKENS,
        ge=20,
        description="Tokens of each relevant unit the claims are drawn from: its sentences nearest the question.",
    )
    max_context_tokens: int = Field(8000, ge=500, description="Tokens of claims the answer is written from.")


class QuestionGenerationConfig(LocalContextOptions):
    previous_questions: list[str] = Field(description="Questions asked so far.")
    question_count: int = Field(5, ge=1, description="Questions to suggest.")
    community_level: int = Field(0, ge=0, description="Level of the community reports in the context.")


def load_index(conn, corpus: str, vector_index_dir: str | None = None) -> Index:
    """The corpus's tables for the query methods; vectors that have an up-to-date HNSW index stay on disk."""
    # Claims are optional, and a lazy index has no reports (the methods that need them say so).
    missing = [
        t for t in INDEX_TABLES if t not in ("covariates", "community_reports") and not row_count(conn, t, corpus)
    ]
    if missing:
        raise step_failure(
            f"corpus {corpus!r} is not indexed: no rows in {', '.join(missing)}. Run the index_corpus "
            "job for it first.",
            retryable=False,
        )
    version = latest_versions(conn, corpus, ["text_embeddings"]).get("text_embeddings")
    approximate = vector_index.open_all(vector_index_dir, corpus, version) if vector_index_dir else {}
    tables = read_tables(conn, [t for t in INDEX_TABLES if t != "text_embeddings"], corpus)
    embeddings = read_table(
        conn, "text_embeddings", corpus, where="NOT list_contains(?, kind)", params=[list(approximate)]
    )
    models = read_table(conn, "embedding_models", corpus) if row_count(conn, "embedding_models", corpus) else None
    links = read_table(conn, "entity_aliases", corpus) if row_count(conn, "entity_aliases", corpus) else None
    entities, relationships = (
        resolve(tables["entities"], tables["relationships"], links)
        if links is not None
        else (tables["entities"], tables["relationships"])
    )
    return Index(
        entities=entities,
        relationships=relationships,
        covariates=tables["covariates"],
        communities=tables["communities"],
        reports=tables["community_reports"],
        text_units=tables["text_units"],
        documents=tables["documents"],
        embeddings=embeddings,
        local_embedder=_offline_embedder(models),
        aliases=canonical_of(links) if links is not None else {},
        approximate=approximate,
    )


def _offline_embedder(models) -> LocalEmbedder | None:
    if models is None:
        return None
    try:
        return LocalEmbedder.from_row(next(models.itertuples()))
    except ValueError as problem:
        raise step_failure(str(problem), retryable=False) from None


def validate(
    question: str | None,
    level: int | None,
    index: Index,
    embeddings: EmbeddingModelResource,
    conversation: list[Turn] | None = None,
) -> None:
    """Refuse bad config before any model call."""
    if question is not None and not question.strip():
        raise step_failure("the question is empty: write one in the launchpad config", retryable=False)
    roles = {turn.role for turn in conversation or []} - {"user", "assistant"}
    if roles:
        raise step_failure(f"conversation turns have roles {sorted(roles)}: use 'user' or 'assistant'", retryable=False)
    if level is not None and level not in index.levels:
        raise step_failure(
            f"community level {level} does not exist: this corpus has levels {index.levels[0]}..{index.levels[-1]}",
            retryable=False,
        )
    if embeddings.configured == (index.local_embedder is not None):
        indexed_with = "the offline embedding" if index.local_embedder is not None else "an embedding model"
        raise step_failure(
            f"the corpus was embedded with {indexed_with}, but the embeddings resource is "
            f"{'configured' if embeddings.configured else 'not configured'} now: re-run "
            "text_embeddings or change the resource",
            retryable=False,
        )


_READ_REPORTS = ("global", "drift")  # the methods that answer from community reports
_SOURCES_SHOWN = 10  # rows of each sources table besides the cited ones, which are always shown


def cited(answer: str, kind: str) -> list[int]:
    """The record numbers an answer cites as `[Data: <kind> (3, 7)]`, in order, once each."""
    numbers = (n for group in re.findall(rf"{kind} \(([\d, +more]+)\)", answer) for n in re.findall(r"\d+", group))
    return list(dict.fromkeys(int(n) for n in numbers))


def cited_first(ids: list[str], numbers: pd.Series, answer: str, kind: str) -> list[str]:
    """The context's records of a kind with every one the answer cites first, then the rest up to the limit."""
    wanted = set(cited(answer, kind))
    known = [i for i in ids if i in numbers.index]
    cited_ids = [i for i in known if numbers[i] in wanted]
    rest = [i for i in known if numbers[i] not in wanted][: max(0, _SOURCES_SHOWN - len(cited_ids))]
    return cited_ids + rest


def sources_markdown(index: Index, result: SearchResult) -> str:
    """What the answer was built from, each record with the number the answer cites it by."""
    parts = []
    if result.context.get("reports"):
        numbers = index.citation_numbers("reports")
        shown = cited_first(result.context["reports"], numbers, result.answer, "Reports")
        rows = index.reports.set_index("id").loc[shown].rename(columns={"cited_as": "report"})
        parts.append("**Community reports**\n\n" + rows[["report", "level", "title"]].to_markdown(index=False))
    if result.context.get("points"):
        points = pd.DataFrame(result.context["points"])[["score", "description"]]
        parts.append("**Scored points (map step)**\n\n" + points.head(15).to_markdown(index=False))
    if result.context.get("communities"):  # lazy search: where the walk found relevant text
        parts.append(
            "**Communities where relevant text was found**: " + ", ".join(map(str, result.context["communities"]))
        )
    if result.context.get("entities"):
        titles = index.entities.set_index("id").loc[result.context["entities"], "title"]
        parts.append("**Entities**: " + ", ".join(t.title() for t in titles.head(20)))
    if result.context.get("text_units"):
        numbers = index.citation_numbers("text_units")
        shown = cited_first(result.context["text_units"], numbers, result.answer, "Sources")
        units = index.text_units.set_index("id").loc[shown]
        titles = index.documents.set_index("id")["title"]
        table = pd.DataFrame(
            {
                "source": numbers[units.index].to_numpy(),
                "document": units["document_id"].map(titles).to_numpy(),
                "where": units["location"].to_numpy() if "location" in units else None,
                "chunk": units["chunk_index"].to_numpy(),
                "text": units["text"].str.replace(r"\s+", " ", regex=True).str[:200].to_numpy(),
            }
        )
        if table["where"].isna().all():  # plain text has no pages or headings to point at
            table = table.drop(columns="where")
        parts.append(
            "**Source text units** (an answer's `Sources (n)` is the row numbered n)\n\n"
            + table.to_markdown(index=False)
        )
    return "\n\n".join(parts) or "_no sources: nothing relevant was found_"


def answer_query(
    context: dg.AssetExecutionContext,
    method: str,
    config: dg.Config,
    search: Callable,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """Answer with `search`, a method function whose keyword options are exactly the config's fields."""
    corpus = context.partition_key
    level, question = getattr(config, "community_level", None), getattr(config, "question", None)
    with duckdb.get_connection() as conn:
        index = load_index(conn, corpus, duckdb.vector_index_dir)
    conversation = getattr(config, "conversation", [])
    validate(question, level, index, embeddings, conversation)
    if method in _READ_REPORTS and index.reports.empty:
        raise step_failure(
            f"{method} search reads community reports, and this corpus has none (a lazy index writes none): ask "
            "with basic or local search, or re-index with --set entity_graph.method=fast (or standard)",
            retryable=False,
        )
    started = time.perf_counter()
    result, (chat_usage, embed_usage) = run_with_models(
        [chat, embeddings],
        lambda chat_client, embed_client: search(chat_client, embed_client, index, **config.model_dump()),
    )
    latency = time.perf_counter() - started
    index.close()
    usage = {k: (getattr(chat_usage, k, 0) or 0) + (getattr(embed_usage, k, 0) or 0) for k in ("calls", "cache_hits")}
    usage["prompt_tokens"] = chat_usage.prompt_tokens if chat_usage else 0  # chat and embedding tokens apart:
    usage["completion_tokens"] = chat_usage.completion_tokens if chat_usage else 0  # their prices differ
    usage["embedding_tokens"] = embed_usage.prompt_tokens if embed_usage else 0
    answer_id = str(uuid.uuid4())
    row = pd.DataFrame(
        [
            {
                "id": answer_id,
                "question": question or "",
                "method": method,
                "community_level": level,
                "config": config.model_dump_json(),
                "conversation": json.dumps([turn.model_dump() for turn in conversation]),
                "answer": result.answer,
                "extractive": result.extractive,
                "context": result.context_json(),
                "context_tokens": result.context_tokens,
                "details": json.dumps(result.details, default=str),
                "model_calls": usage["calls"],
                "cache_hits": usage["cache_hits"],
                "prompt_tokens": usage["prompt_tokens"],
                "completion_tokens": usage["completion_tokens"],
                "embedding_tokens": usage["embedding_tokens"],
                "latency_seconds": latency,
                "run_id": context.run_id,
                "created_at": datetime.now(UTC).replace(tzinfo=None),
            }
        ]
    )
    with duckdb.get_connection() as conn:
        append_rows(conn, "query_answers", corpus, row, view=ANSWER_SOURCES_VIEW)
    heading = f"**{question}**\n\n" if question else ""
    return dg.MaterializeResult(
        metadata={
            "answer": dg.MetadataValue.md(heading + result.answer),
            "sources": dg.MetadataValue.md(sources_markdown(index, result)),
            "answer_id": answer_id,
            "method": method,
            "community_level": level if level is not None else -1,
            "extractive": result.extractive,
            "context_tokens": result.context_tokens,
            "latency_seconds": round(latency, 3),
            "details": dg.MetadataValue.json(result.details),
            "trace_sql": f"SELECT * FROM answer_sources WHERE answer_id = '{answer_id}'",
            "hnsw_searched": ", ".join(sorted(index.approximate)) or "none (exact scan)",
            **usage_metadata(chat, chat_usage),
            "model_calls": usage["calls"],
            "cache_hits": usage["cache_hits"],
            "embedding_tokens": usage["embedding_tokens"],
        }
    )


def query_asset(name: str, prompts: tuple[str, ...], description: str):
    return dg.asset(
        name=name,
        deps=list(INDEX_TABLES),
        partitions_def=corpus_partitions,
        group_name="query",
        code_version=code_version(*prompts),
        kinds={"duckdb"},
        description=description,
        pool=MODEL_POOL,
    )


@query_asset(
    "global_search",
    ("global_search_map", "global_search_reduce", "rate_community"),
    "Map-reduce over the community reports of one level; or dynamic community selection.",
)
def global_search(
    context: dg.AssetExecutionContext,
    config: GlobalSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "global", config, run_global, chat, embeddings, duckdb)


@query_asset("local_search", ("local_search",), "Nearest entities and one context of reports, tables and sources.")
def local_search(
    context: dg.AssetExecutionContext,
    config: LocalSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "local", config, run_local, chat, embeddings, duckdb)


@query_asset(
    "drift_search",
    ("drift_primer", "drift_local", "drift_reduce", "local_search"),
    "A primer from the nearest reports, follow-ups answered by local search, a reduce.",
)
def drift_search(
    context: dg.AssetExecutionContext,
    config: DriftSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "drift", config, run_drift, chat, embeddings, duckdb)


@query_asset("basic_search", ("basic_search",), "The paper's SS baseline: vector search over text units.")
def basic_search(
    context: dg.AssetExecutionContext,
    config: BasicSearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "basic", config, run_basic, chat, embeddings, duckdb)


@query_asset(
    "text_summary_search",
    ("global_search_map", "global_search_reduce"),
    "The paper's TS baseline: global map-reduce over shuffled source text units.",
)
def text_summary_search(
    context: dg.AssetExecutionContext,
    config: TextSummaryConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "text_summary", config, run_text_summary, chat, embeddings, duckdb)


@query_asset(
    "lazy_search",
    ("lazy_refine", "lazy_relevance", "lazy_claims", "lazy_answer", "lazy_reduce"),
    "LazyGraphRAG: a best-first walk down the communities under a budget of relevance tests; works on any index.",
)
def lazy_search(
    context: dg.AssetExecutionContext,
    config: LazySearchConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    return answer_query(context, "lazy", config, run_lazy, chat, embeddings, duckdb)


@query_asset("question_generation", ("question_generation",), "Candidate next questions from the local context.")
def question_generation(
    context: dg.AssetExecutionContext,
    config: QuestionGenerationConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    if not [q for q in config.previous_questions if q.strip()]:
        raise step_failure("previous_questions is empty: give at least one question", retryable=False)
    return answer_query(context, "question_generation", config, generate_questions, chat, embeddings, duckdb)
