"""What indexing a corpus will cost, before paying: the `index_estimate` asset, `graphrag-assets index --estimate`,
and the check the new-corpus sensor makes against a run's budget. No model request is made."""

import math

import dagster as dg
import diskcache
import polars as pl

from ..configs.index import (
    AliasConfig,
    ClaimsConfig,
    CommunityConfig,
    GraphConfig,
    IngestConfig,
    ReportConfig,
    step_config,
)
from ..method.corpus_folder import PROMPTS_FOLDER
from ..method.estimate import (
    METHODS,
    IndexSettings,
    MethodEstimate,
    build_concept_graph,
    estimate_concept_index,
    estimate_standard_index,
)
from ..method.graph.aliases import read_overrides
from ..method.ingest.text_units import chunk_documents
from ..method.prompts import PromptSet
from ..method.tuning import index_prompt_rows
from ..models.endpoint import chat_request, embedding_key
from ..models.prices import total_cost
from ..resources import ChatModelResource, CorporaResource, EmbeddingModelResource
from .common import corpus_asset
from .communities import report_settings
from .index import graph_settings, read_documents
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
    methods: tuple[str, ...] = METHODS,
) -> dict:
    """The estimate of indexing `corpus` with each of `methods`, with the index's step settings from `ops` (a run
    config's ops section), as {"corpus", "model", "methods": {name: {...}}, "text_units", "assumptions"}. The fast
    and lazy estimates build the corpus's noun-phrase graph: a caller that needs only standard's says so."""
    run_config = {"ops": ops or {}}

    def config(cls, step: str):
        return step_config(run_config, cls, step)

    ingest = config(IngestConfig, "corpus_documents")
    graph = config(GraphConfig, "entity_graph")
    claims = config(ClaimsConfig, "covariates")
    folder = corpora.folder(corpus)
    read = read_documents(corpora, folder, ingest)
    units, _ = chunk_documents(read.documents, ingest.chunk_size, ingest.chunk_overlap)
    rows = index_prompt_rows({}, folder / PROMPTS_FOLDER, f"data/{corpus}")
    prompts = PromptSet.of({row["id"]: row["template"] for row in rows})
    settings = IndexSettings(
        entity_types=tuple(graph.entity_types),
        max_gleanings=graph.max_gleanings,
        claims=claims.enabled,
        claim_description=claims.claim_description,
        claims_max_gleanings=claims.max_gleanings,
    )
    with _CachedReplies(chat, embeddings) as cached:
        found = {}
        if "standard" in methods:
            found["standard"] = estimate_standard_index(units, settings, prompts, cached=cached.prompt)
        if {"fast", "lazy"} & set(methods):
            concept_estimates = _concept_estimates(units, run_config, folder, prompts, cached, embeddings)
            found |= {name: concept_estimates[name] for name in ("fast", "lazy") if name in methods}
    priced = {name: _priced(e, chat, embeddings, batch=False) for name, e in found.items()}
    if "standard" in found:
        priced["standard_batch"] = _priced(found["standard"], chat, embeddings, batch=True)
    return {
        "corpus": corpus,
        "model": chat.model,
        "embedding_model": embeddings.model,
        "text_units": len(units),
        "text_tokens": int(units["n_tokens"].sum()) if len(units) else 0,
        "methods": priced,
        "assumptions": ASSUMPTIONS,
    }


class _CachedReplies:
    """Which requests the response cache already answers (None: no endpoint, or no cache, so none)."""

    def __init__(self, chat: ChatModelResource, embeddings: EmbeddingModelResource):
        self.chat_settings, self.embedding_settings = chat.settings(), embeddings.settings()
        self.chat_cache = _cache(chat.configured, self.chat_settings.cache_dir)
        self.embedding_cache = _cache(embeddings.configured, self.embedding_settings.cache_dir)
        self.chat = self._chat if self.chat_cache is not None else None
        self.prompt = self._prompt if self.chat_cache is not None else None
        self.embedding = self._embedding if self.embedding_cache is not None else None

    def _chat(self, messages: list[dict], params: dict | None = None):
        return self.chat_cache.get(chat_request(self.chat_settings, messages, params)[1])

    def _prompt(self, prompt: str) -> bool:
        return self._chat([{"role": "user", "content": prompt}]) is not None

    def _embedding(self, text: str) -> bool:
        return embedding_key(self.embedding_settings, text) in self.embedding_cache

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for cache in (self.chat_cache, self.embedding_cache):
            if cache is not None:
                cache.close()


def _concept_estimates(units, run_config: dict, folder, prompts, cached: _CachedReplies, embeddings) -> dict:
    """The fast and lazy estimates: the index's own noun-phrase graph and communities, then its reports and
    embeddings against models that send nothing."""
    graph, alias = (
        step_config(run_config, GraphConfig, "entity_graph"),
        step_config(run_config, AliasConfig, "entity_aliases"),
    )
    community = step_config(run_config, CommunityConfig, "communities")
    concepts = build_concept_graph(
        units,
        graph_settings(graph.model_copy(update={"method": "fast"})),
        alias.min_name_overlap if alias.enabled else None,
        read_overrides(folder)[0],
        (community.max_cluster_size, community.seed, community.use_lcc),
    )
    return estimate_concept_index(
        concepts,
        report_settings(step_config(run_config, ReportConfig, "community_reports")),
        prompts,
        chat_cached=cached.chat,
        embedding_cached=cached.embedding,
        embedding_batch=(embeddings.batch_size, embeddings.batch_tokens),
    )


def _cache(configured: bool, folder: str | None) -> diskcache.Cache | None:
    return diskcache.Cache(folder) if configured and folder else None


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


def estimate_table(estimate: dict) -> pl.DataFrame:
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
    return pl.DataFrame(rows)


@corpus_asset("estimate", kinds={"python"})
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
