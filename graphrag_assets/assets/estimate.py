"""What indexing a corpus will cost, before paying: the `index_estimate` asset, `graphrag-assets index --estimate`,
and the check the new-corpus sensor makes against a run's budget. No model request is made."""

import asyncio
import math

import dagster as dg
import diskcache
import pandas as pd

from ..method.communities.leiden import build_communities
from ..method.entity_graph import build_entity_graph
from ..method.estimate import (
    ConceptGraph,
    IndexSettings,
    MethodEstimate,
    estimate_concept_index,
    estimate_standard_index,
)
from ..method.graph import aliases
from ..method.ingest.text_units import chunk_documents
from ..method.prompts import CORPUS_PROMPTS_FOLDER, PromptSet
from ..method.tuning import index_prompt_rows
from ..models.client import chat_request, embedding_key
from ..models.prices import total_cost
from ..resources import ChatModelResource, CorporaResource, EmbeddingModelResource
from .common import corpus_partitions
from .communities import report_settings
from .index import graph_settings, read_documents
from .index_configs import (
    AliasConfig,
    ClaimsConfig,
    CommunityConfig,
    GraphConfig,
    IngestConfig,
    ReportConfig,
    step_config,
)
from .metadata import markdown_table

ASSUMPTIONS = (
    "Counted: the text units, each unit's extraction and claims prompt, the gleaning rounds (each assumed to go "
    "on to the last), claims on or off, and replies already cached; for fast and lazy, which build their graph "
    "with no model, the graph and its communities themselves, every report request fast sends and every text "
    "either embeds. Modelled (Rates in method/estimate.py), from indexes of a novella and contracts measured "
    "against the test suite's model server: reply lengths, and for standard the description summaries (0.08 a "
    "text unit), report requests (0.25 a unit) and their prompts (1,200 tokens each and a fifth of the text), and "
    "what is embedded besides the text. A real model's replies are longer or shorter: completion tokens are the "
    "least sure figure. Prompts: prompts/ and the corpus's own files (not tuned ones)."
)


def estimate_corpus(
    corpora: CorporaResource,
    corpus: str,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    ops: dict | None = None,
) -> dict:
    """The estimate of indexing `corpus` with every method, with the index's step settings from `ops` (a run
    config's ops section), as {"corpus", "model", "methods": {name: {...}}, "text_units", "assumptions"}."""
    run_config = {"ops": ops or {}}

    def config(cls, step: str):
        return step_config(run_config, cls, step)

    ingest = config(IngestConfig, "corpus_documents")
    graph = config(GraphConfig, "entity_graph")
    claims = config(ClaimsConfig, "covariates")
    folder = corpora.folder(corpus)
    read = read_documents(corpora, folder, ingest)
    units, _ = chunk_documents(read.documents, ingest.chunk_size, ingest.chunk_overlap)
    rows = index_prompt_rows({}, folder / CORPUS_PROMPTS_FOLDER, f"data/{corpus}")
    prompts = PromptSet.of({row["id"]: row["template"] for row in rows})
    settings = IndexSettings(
        entity_types=tuple(graph.entity_types),
        max_gleanings=graph.max_gleanings,
        claims=claims.enabled,
        claim_description=claims.claim_description,
        claims_max_gleanings=claims.max_gleanings,
    )
    concepts = _concept_graph(
        units, graph, config(AliasConfig, "entity_aliases"), config(CommunityConfig, "communities"), folder
    )
    report = report_settings(config(ReportConfig, "community_reports"))
    chat_settings, embedding_settings = chat.settings(), embeddings.settings()
    chat_cache = _cache(chat.configured, chat_settings.cache_dir)
    embedding_cache = _cache(embeddings.configured, embedding_settings.cache_dir)
    try:
        chat_cached = (
            (lambda messages, params=None: chat_cache.get(chat_request(chat_settings, messages, params)[1]))
            if chat_cache is not None
            else None
        )
        found = {
            "standard": estimate_standard_index(
                units,
                settings,
                prompts,
                cached=chat_cached and (lambda prompt: chat_cached([{"role": "user", "content": prompt}]) is not None),
            ),
            **estimate_concept_index(
                concepts,
                report,
                prompts,
                chat_cached=chat_cached,
                embedding_cached=(lambda text: embedding_key(embedding_settings, text) in embedding_cache)
                if embedding_cache is not None
                else None,
                embedding_batch=(embeddings.batch_size, embeddings.batch_tokens),
            ),
        }
    finally:
        for cache in (chat_cache, embedding_cache):
            if cache is not None:
                cache.close()
    methods = {name: _priced(e, chat, embeddings, batch=False) for name, e in found.items()}
    methods["standard_batch"] = _priced(found["standard"], chat, embeddings, batch=True)
    return {
        "corpus": corpus,
        "model": chat.model,
        "embedding_model": embeddings.model,
        "text_units": len(units),
        "text_tokens": int(units["n_tokens"].sum()) if len(units) else 0,
        "methods": methods,
        "assumptions": ASSUMPTIONS,
    }


def _cache(configured: bool, folder: str | None) -> diskcache.Cache | None:
    return diskcache.Cache(folder) if configured and folder else None


def _concept_graph(
    units: pd.DataFrame, graph: GraphConfig, alias: AliasConfig, community: CommunityConfig, folder
) -> ConceptGraph:
    """The graph a fast or lazy index builds from these units, with no model, as its steps build it: noun phrases,
    aliases confirmed by rule and by the corpus's aliases.csv, and communities."""
    settings = graph_settings(graph.model_copy(update={"method": "fast"}))
    # In the order the index reads them from the store: a concept's description is its first sentences met.
    units = units.sort_values("id", ignore_index=True)
    built = asyncio.run(build_entity_graph(None, units, settings))
    table = pd.DataFrame(columns=aliases.ALIAS_COLUMNS)
    candidates = aliases.candidate_pairs(built.entities, alias.min_name_overlap) if alias.enabled else None
    if candidates is not None and not candidates.empty:
        table = candidates.assign(confirmed_by="rule", accepted=aliases.confirm_by_rule(candidates))
    table, _ = aliases.apply_overrides(table, aliases.read_overrides(folder)[0], built.entities)
    entities, relationships = aliases.resolve(built.entities, built.relationships, table)
    communities = build_communities(
        entities, relationships, community.max_cluster_size, community.seed, community.use_lcc
    )
    return ConceptGraph(units, built.entities, entities, relationships, communities)


def _priced(found: MethodEstimate, chat: ChatModelResource, embeddings: EmbeddingModelResource, batch: bool) -> dict:
    """One method's figures: requests and tokens of chat and embeddings together, dollars (None: unknown) and the
    minutes the configured rate limits need for it (None: no limit configured, or the Batch API's day)."""
    requests = found.chat.requests + found.embeddings.requests
    chat_price, embedding_price = chat.settings().price(), embeddings.settings().price()

    def cost(price, tokens: int, completion: int) -> float | None:
        if not tokens and not completion:
            return 0.0
        if price is None:
            return None
        return price.cost(tokens, completion, *((tokens, completion) if batch else (0, 0)))

    dollars = total_cost(
        [
            cost(chat_price, found.chat.prompt_tokens, found.chat.completion_tokens),
            cost(embedding_price, found.embeddings.prompt_tokens, 0),
        ]
    )
    bounds = [
        found.chat.requests / chat.requests_per_minute if chat.requests_per_minute else None,
        (found.chat.prompt_tokens + found.chat.completion_tokens) / chat.tokens_per_minute
        if chat.tokens_per_minute
        else None,
    ]
    known = [b for b in bounds if b is not None]
    return {
        "requests": requests,
        "embedding_requests": found.embeddings.requests,
        "prompt_tokens": found.chat.prompt_tokens + found.embeddings.prompt_tokens,
        "completion_tokens": found.chat.completion_tokens,
        "embedding_tokens": found.embeddings.prompt_tokens,
        "cached_requests": found.chat.cached_requests,
        "cost_usd": None if dollars is None else round(dollars, 4),
        "minutes": None if batch or not known else round(max(known), 1),
    }


def estimate_table(estimate: dict) -> pd.DataFrame:
    """The estimate as a person reads it: a row per method."""
    rows = []
    for name, m in estimate["methods"].items():
        rows.append(
            {
                "method": name.replace("_", " + "),
                "requests": f"{m['requests']:,}",
                "prompt tokens": f"{m['prompt_tokens']:,}",
                "completion tokens": f"{m['completion_tokens']:,}",
                "cached": f"{m['cached_requests']:,}",
                "cost": "unknown" if m["cost_usd"] is None else f"${m['cost_usd']:,.4f}",
                "minutes": "within 24 h"
                if name.endswith("batch")
                else ("no limit set" if m["minutes"] is None else f"{math.ceil(m['minutes']):,}"),
            }
        )
    return pd.DataFrame(rows)


@dg.asset(partitions_def=corpus_partitions, group_name="estimate", kinds={"python"})
def index_estimate(
    context: dg.AssetExecutionContext,
    corpora: CorporaResource,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
) -> dg.MaterializeResult:
    """What indexing this corpus would cost with each method, before any model request: materialize it before
    the index to see the price (the index job does not run it)."""
    found = estimate_corpus(corpora, context.partition_key, chat, embeddings)
    table = estimate_table(found)
    standard = found["methods"]["standard"]
    return dg.MaterializeResult(
        metadata={
            "estimate": markdown_table(table, list(table.columns), rows=len(table)),
            "standard_cost_usd": dg.MetadataValue.text("unknown")
            if standard["cost_usd"] is None
            else standard["cost_usd"],
            "standard_requests": standard["requests"],
            "text_units": found["text_units"],
            "model": found["model"],
            "assumptions": dg.MetadataValue.md(found["assumptions"]),
            "estimate_json": dg.MetadataValue.json(found),
        }
    )
