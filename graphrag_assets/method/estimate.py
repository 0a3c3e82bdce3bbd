"""What indexing a corpus will ask of the model, worked out before any request: per method, the requests, prompt
tokens and completion tokens, of chat and of embeddings apart (their prices differ).

Counted: the text units (the corpus is read and chunked as the index does), each unit's extraction and claims
prompt as the index writes it, the gleaning rounds, claims on or off, and the first requests whose replies are
already cached (a re-index of unchanged documents pays for none of them). Modelled, from `Rates`: how much the
model answers, and what depends on the graph it extracts (description summaries, communities and their reports,
the text that is embedded). A change to the pipeline or the prompts that the rates do not follow makes
`test_estimate` fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import pandas as pd

from .defaults import MAX_GLEANINGS
from .graph.claims import DEFAULT_CLAIM_DESCRIPTION, claims_prompt
from .graph.extraction import DEFAULT_ENTITY_TYPES, extraction_prompt
from .graph.records import COMPLETION_DELIMITER, RECORD_DELIMITER, TUPLE_DELIMITER
from .ingest.tokens import count_tokens
from .prompts import DEFAULT_PROMPTS, PromptSet

METHODS = ("standard", "fast", "lazy")


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
    fast_report_requests: tuple[float, float] = (0.063, 0.00014)  # per text unit, and per token of text
    fast_report_prompt: tuple[float, float] = (500.0, 1.15)
    fast_report_reply: float = 300.0
    # Tokens embedded besides the text (entity descriptions, reports, concepts): per text unit, and per token
    embedded: dict = field(
        default_factory=lambda: {"standard": (150.0, 0.0), "fast": (25.0, 0.2), "lazy": (18.0, 0.085)}
    )
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
            tuple_delimiter=TUPLE_DELIMITER,
            record_delimiter=RECORD_DELIMITER,
            completion_delimiter=COMPLETION_DELIMITER,
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


def estimate_index(
    units: pd.DataFrame,
    settings: IndexSettings = IndexSettings(),
    prompts: PromptSet = DEFAULT_PROMPTS,
    rates: Rates = Rates(),
    cached: Callable[[str], bool] | None = None,
) -> dict[str, MethodEstimate]:
    """Per method, what an index of the text units (columns `text`, `n_tokens`) will ask. `cached(prompt)` says
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
    fast = Requests()
    per_unit, per_text_token = rates.fast_report_requests
    reports = max(1.0, per_unit * count + per_text_token * text) if count else 0.0
    (fixed, per_token) = rates.fast_report_prompt
    fast.add(reports, fixed * reports + per_token * text, rates.fast_report_reply * reports)
    # Each step that calls the model first sends it a probe of a few tokens (a dead endpoint fails in seconds).
    standard.add(2 + settings.claims, 0)
    fast.add(1, 0)

    def embedded(method: str) -> Requests:
        per_unit, per_token = rates.embedded[method]
        tokens = text * (1 + per_token) + per_unit * count
        requests = math.ceil(tokens / rates.embedding_batch_tokens) + 1 if tokens else 0
        return Requests(requests=requests, prompt_tokens=round(tokens))

    return {
        "standard": MethodEstimate(standard, embedded("standard")),
        "fast": MethodEstimate(fast, embedded("fast")),
        "lazy": MethodEstimate(Requests(), embedded("lazy")),
    }
