"""What indexing a corpus will ask of the model, worked out before any request: per method, the requests, prompt
tokens and completion tokens, of chat and of embeddings apart (their prices differ).

Counted: the text units (the corpus is read and chunked as the index does), each unit's extraction and claims
prompt as the index writes it, the gleaning rounds, claims on or off, and the first requests whose replies are
already cached (a re-index of unchanged documents pays for none of them). The fast and lazy methods build their
graph with no model, so the estimate builds it too, with their communities, and counts every report request and
every embedded text by running the index's own code against a model that sends nothing (`DryRunChat`,
`DryRunEmbedder`). Modelled, from `Rates`: how much the model answers, and for the standard method what depends
on the graph it extracts (description summaries, communities and their reports, the text that is embedded). A
change to the pipeline or the prompts that the rates do not follow makes `test_estimate` fail.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import polars as pl

from . import defaults
from .communities.leiden import build_communities
from .communities.reports import ReportSettings, generate_reports
from .defaults import MAX_GLEANINGS
from .embeddings.text import embed_with_model, embedding_inputs
from .entity_graph import INDEX_METHODS, GraphSettings, build_entity_graph
from .graph import aliases
from .graph.claims import DEFAULT_CLAIM_DESCRIPTION, claims_prompt
from .graph.extraction import DEFAULT_ENTITY_TYPES, extraction_prompt
from .graph.records import DELIMITERS
from .ingest.tokens import count_tokens
from .prompts import DEFAULT_PROMPTS, PromptSet
from .schema import frame

METHODS = INDEX_METHODS


@dataclass(frozen=True)
class Rates:
    """What a run's own replies decide, per text unit or per token of its text. Measured on indexes of
    three corpora of different kinds (a novella split in four, supply contracts, meeting transcripts) against the
    test suite's model server; `scripts/benchmark.py estimate` measures them again."""

    extraction_reply: tuple[float, float] = (130.0, 0.08)  # completion tokens of a reply: a + b x unit tokens
    claims_reply: tuple[float, float] = (40.0, 0.02)
    summaries: float = 0.08  # description summaries (of what was described more than once), per text unit
    summary_prompt: float = 400.0  # tokens of one summary request
    summary_reply: float = 60.0
    report_requests: float = 0.25  # report requests per text unit (small communities share a request)
    report_prompt: tuple[float, float] = (1200.0, 0.20)  # a + b x text tokens, per request and per token
    report_reply: float = 250.0  # per request
    fast_report_reply: float = 300.0  # completion tokens of a fast report written alone
    fast_batch_report_reply: float = 150.0  # of each report in a reply on several communities
    # Tokens the standard method embeds besides the text (entity descriptions, reports): per text unit
    embedded: float = 150.0
    embedding_batch_tokens: int = 30_000  # a request of embeddings holds texts up to about this many tokens


@dataclass
class Requests:
    """One kind of model traffic: requests, tokens, and how many requests are answered from the cache."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_requests: int = 0

    def add(self, requests: float, prompt: float, completion: float = 0.0, cached: float = 0.0) -> None:
        self.requests += round(requests)
        self.prompt_tokens += round(prompt)
        self.completion_tokens += round(completion)
        self.cached_requests += round(cached)

    def __iadd__(self, other: Requests) -> Requests:
        self.add(other.requests, other.prompt_tokens, other.completion_tokens, other.cached_requests)
        return self


@dataclass
class MethodEstimate:
    chat: Requests
    embeddings: Requests

    def as_dict(self) -> dict:
        return {"chat": asdict(self.chat), "embeddings": asdict(self.embeddings)}


@dataclass(frozen=True)
class IndexSettings:
    """The settings of the index that change what it asks (the asset configs' fields of the same names)."""

    entity_types: tuple[str, ...] = DEFAULT_ENTITY_TYPES
    max_gleanings: int = MAX_GLEANINGS
    claims: bool = True
    claim_description: str = DEFAULT_CLAIM_DESCRIPTION
    claims_max_gleanings: int = MAX_GLEANINGS


def _continue_tokens(prompts: PromptSet, name: str) -> int:
    return count_tokens(
        prompts[name].format(
            **DELIMITERS,
        )
    )


def _gleaned(
    first_prompts: list[int],
    unit_tokens: list[int],
    reply_rate: float,
    gleanings: int,
    continue_tokens: int,
    loop_tokens: int,
    cached: list[bool],
) -> Requests:
    """A conversation per unit: the first request, then each gleaning round resends all before it with the new
    ask; every round but the last asks whether more is missing (answered, at most, with one token). The loop is
    assumed to go on to the last round: an upper bound, which is what a budget wants."""
    total = Requests()
    for prompt, tokens, hit in zip(first_prompts, unit_tokens, cached):
        reply = reply_rate[0] + reply_rate[1] * tokens
        conversation, requests, prompt_sum, completion = prompt, 1, prompt, reply
        for round_number in range(gleanings):
            conversation += reply + continue_tokens
            requests += 1
            prompt_sum += conversation
            completion += reply
            if round_number < gleanings - 1:
                requests += 1
                prompt_sum += conversation + reply + loop_tokens
                completion += 1
        if hit:  # the same units, the same prompts: the whole conversation is cached, not only its first reply
            total.add(0, 0, 0, cached=requests)
        else:
            total.add(requests, prompt_sum, completion)
    return total


def estimate_standard_index(
    units: pl.DataFrame,
    settings: IndexSettings = IndexSettings(),
    prompts: PromptSet = DEFAULT_PROMPTS,
    rates: Rates = Rates(),
    cached: Callable[[str], bool] | None = None,
) -> MethodEstimate:
    """What a standard index of the text units (columns `text`, `n_tokens`) will ask. `cached(prompt)` says
    whether the reply to a first request with this prompt is in the cache (None: nothing is)."""
    unit_tokens = [int(n) for n in units["n_tokens"]]
    corpus_tokens = sum(unit_tokens)
    types = tuple(settings.entity_types)
    extraction = [extraction_prompt(text, types, prompts) for text in units["text"]]
    loop_tokens = count_tokens(prompts["gleaning_loop"].template)
    extracted = _gleaned(
        [count_tokens(p) for p in extraction],
        unit_tokens,
        rates.extraction_reply,
        settings.max_gleanings,
        _continue_tokens(prompts, "extract_graph_continue"),
        loop_tokens,
        [bool(cached and cached(p)) for p in extraction],
    )
    fresh = 1 - extracted.cached_requests / max(extracted.cached_requests + extracted.requests, 1)

    standard = Requests(**asdict(extracted))
    if settings.claims:
        claims = [claims_prompt(text, types, settings.claim_description, prompts) for text in units["text"]]
        standard_claims = _gleaned(
            [count_tokens(p) for p in claims],
            unit_tokens,
            rates.claims_reply,
            settings.claims_max_gleanings,
            _continue_tokens(prompts, "extract_claims_continue"),
            loop_tokens,
            [bool(cached and cached(p)) for p in claims],
        )
        standard += standard_claims
    # What follows the extraction is paid again only where the extraction is new (the rest is cached too).
    count = len(unit_tokens) * fresh
    text = corpus_tokens * fresh
    summaries = rates.summaries * count
    standard.add(summaries, summaries * rates.summary_prompt, summaries * rates.summary_reply)
    reports = max(1.0, rates.report_requests * count) if count else 0.0
    (fixed, per_token) = rates.report_prompt
    standard.add(reports, fixed * reports + per_token * text, rates.report_reply * reports)
    # Each step that calls the model first sends it a probe of a few tokens (a dead endpoint fails in seconds).
    standard.add(2 + settings.claims, 0)
    tokens = text + rates.embedded * count
    embedded = Requests()
    embedded.add(math.ceil(tokens / rates.embedding_batch_tokens) + 1 if tokens else 0, tokens)
    return MethodEstimate(standard, embedded)


_COMMUNITY_BLOCK = re.compile(r'<community id="(\d+)">')


class DryRunChat:
    """A chat model that sends nothing: it counts each request, and answers it with the cached reply when there is
    one (counted as cached), else with a report of the length the rates give in the shape the prompt asks for, so
    that the index's own report writing runs as it would against a model."""

    def __init__(self, rates: Rates, cached: Callable[[list[dict], dict], str | None] | None = None):
        self.rates, self.cached_reply, self.traffic = rates, cached, Requests()

    @staticmethod
    def _report(words: float, community: int | None = None) -> dict:
        filler = " ".join(["word"] * max(1, round(words)))  # about a token a word, and never a row id
        report = {"title": "report", "summary": filler, "rating": 5, "rating_explanation": "estimated"}
        report["findings"] = [{"summary": "finding", "explanation": filler}]
        return report if community is None else {"community": community, **report}

    async def complete(self, messages: list[dict], *, parse=None, allow_truncated: bool = False, **params):
        reply = self.cached_reply(messages, params) if self.cached_reply is not None else None
        if reply is not None:
            self.traffic.add(0, 0, 0, cached=1)
            return parse(reply) if parse else reply
        prompt = "".join(m["content"] for m in messages)
        communities = [int(n) for n in _COMMUNITY_BLOCK.findall(prompt)]
        if communities:
            each = self.rates.fast_batch_report_reply / 2
            reply = json.dumps({"reports": [self._report(each, n) for n in communities]})
        else:
            reply = json.dumps(self._report(self.rates.fast_report_reply / 2))
        self.traffic.add(1, count_tokens(prompt), count_tokens(reply))
        return parse(reply) if parse else reply

    def cached(self, messages: list[dict], *, parse=None, **params):
        return None  # `complete` answers from the cache and counts it

    def remember(self, messages: list[dict], text: str, **params) -> None:
        pass


class DryRunEmbedder:
    """An embedding model that sends nothing: it counts each batch the index would send (texts already cached
    are not sent) and answers with empty vectors."""

    def __init__(self, cached: Callable[[str], bool] | None = None):
        self.is_cached, self.traffic = cached, Requests()

    def cached_embeddings(self, texts: list[str]) -> list[list[float] | None]:
        return [[0.0] if self.is_cached and self.is_cached(text) else None for text in texts]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.traffic.add(1, sum(count_tokens(t) for t in texts))
        return [[0.0] for _ in texts]


@dataclass(frozen=True)
class ConceptGraph:
    """A fast or lazy index's graph, built as the index builds it (no model is needed for it)."""

    text_units: pl.DataFrame  # the base text units: id, text, n_tokens
    extracted: pl.DataFrame  # the entities as found, before aliases are merged: what is embedded
    entities: pl.DataFrame  # with every alias group one entity: what communities and reports are made of
    relationships: pl.DataFrame
    communities: pl.DataFrame


def build_concept_graph(
    units: pl.DataFrame,
    settings: GraphSettings,
    alias_min_overlap: float | None,
    alias_overrides: list[tuple[str, str, bool]],
    communities: tuple[int, int, bool] = (defaults.MAX_CLUSTER_SIZE, defaults.COMMUNITY_SEED, False),
) -> ConceptGraph:
    """The graph a fast or lazy index builds from these units, with no model, as its steps build it: noun phrases,
    aliases confirmed by rule (`alias_min_overlap` None: aliases off) and by the corpus's overrides, then
    communities (max cluster size, seed, largest connected component only)."""
    # In the order the index reads them from the store: a concept's description is its first sentences met.
    units = units.sort("id")
    built = asyncio.run(build_entity_graph(None, units, settings))
    table = frame("entity_aliases")
    candidates = aliases.candidate_pairs(built.entities, alias_min_overlap) if alias_min_overlap is not None else None
    if candidates is not None and not candidates.is_empty():
        table = aliases.aliases_by_rule(candidates)
    table, _ = aliases.apply_overrides(table, alias_overrides, built.entities)
    entities, relationships = aliases.resolve(built.entities, built.relationships, table)
    clustered = build_communities(entities, relationships, *communities)
    return ConceptGraph(units, built.entities, entities, relationships, clustered)


def estimate_concept_index(
    graph: ConceptGraph,
    report: ReportSettings | None = None,
    prompts: PromptSet = DEFAULT_PROMPTS,
    rates: Rates = Rates(),
    chat_cached: Callable[[list[dict], dict], str | None] | None = None,
    embedding_cached: Callable[[str], bool] | None = None,
    embedding_batch: tuple[int, int] = (256, 50_000),
) -> dict[str, MethodEstimate]:
    """What a fast and a lazy index of the graph will ask: the fast one's reports, written by the index's own code
    against a model that sends nothing, and both indexes' embeddings, batched as the index batches them.
    `chat_cached(messages, params)` is the cached reply to a request (None: there is none); `embedding_cached(text)`
    whether a text's vector is cached."""
    chat = DryRunChat(rates, chat_cached)
    reports, _ = asyncio.run(
        generate_reports(
            chat,
            graph.communities,
            graph.entities,
            graph.relationships,
            frame("covariates"),
            graph.text_units,
            replace(report or ReportSettings(), from_sources=True, templates=prompts),
        )
    )
    fast_chat = chat.traffic
    if fast_chat.requests:
        fast_chat.add(1, 0)  # the probe before the reports

    def embedded(reports: pl.DataFrame) -> Requests:
        embedder = DryRunEmbedder(embedding_cached)
        texts = embedding_inputs(graph.extracted, graph.text_units, reports)["text"].to_list()
        asyncio.run(embed_with_model(embedder, texts, *embedding_batch))
        if embedder.traffic.requests:
            embedder.traffic.add(1, 0)  # the probe
        return embedder.traffic

    no_reports = reports.clear()
    return {
        "fast": MethodEstimate(fast_chat, embedded(reports)),
        "lazy": MethodEstimate(Requests(), embedded(no_reports)),
    }
