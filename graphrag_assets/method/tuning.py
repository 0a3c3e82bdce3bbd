"""Prompts tuned to one corpus (Microsoft GraphRAG's prompt-tune): from a sample of its text units, what the corpus
is, who reads it, its language and the kinds of entity it holds, plus extraction examples taken from its own text;
from these, the corpus's extraction, claim, summary and report prompts.

Every reply is checked before it is used or cached: the entity types must be a short list of kinds, an example must
parse as records of those types whose names the sample text contains.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from .communities.reports import REPORT_PROMPTS, SOURCE_REPORT_PROMPTS
from .embeddings.text import LocalEmbedder, embed_with_model
from .graph.claims import CLAIM_PROMPTS
from .graph.extraction import DEFAULT_ENTITY_TYPES, EXTRACTION_PROMPTS, check_graph_reply, records_to_graph
from .graph.records import COMPLETION_DELIMITER, DELIMITERS, RECORD_DELIMITER, TUPLE_DELIMITER, parse_json_reply
from .ingest.tokens import count_tokens, truncate_to_tokens
from .model_interface import ChatModel, InvalidReply
from .prompts import Prompt, load_prompt, user_message
from .schema import seeded_sample
from .words import STOPWORDS, split_sentences

# What tuning rewrites; the other prompts of the index (gleaning, alias resolution) stay the files in prompts/.
TUNED_PROMPTS = ("extract_graph", "extract_claims", "summarize_descriptions", *REPORT_PROMPTS, *SOURCE_REPORT_PROMPTS)
# The prompts an index is built with that a corpus may replace with a file of its own.
INDEX_PROMPTS = tuple(dict.fromkeys((*EXTRACTION_PROMPTS, *CLAIM_PROMPTS, *TUNED_PROMPTS)))
# The prompts tuning itself is made of: their hash versions the tuned prompts.
TUNING_PROMPTS = ("tune_corpus", "tune_entity_types", "tuned_extract_graph", "tuned_context")
SAMPLINGS = ("random", "clusters")
CLUSTER_POOL = 20  # clusters sampling embeds at most this many text units per unit it picks
OFFLINE = "offline"
_JSON_REPLY = {"response_format": {"type": "json_object"}}
_TYPE = re.compile(r"[^\W\d_][^\W\d_ '&/-]*(?:[ '&/-][^\W\d_]+)*")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
MAX_PROMPT_CHARS = 100_000  # some 25,000 tokens: more than a prompt, whatever the model's window
# What the index fills in when it sends the tuned extraction prompt.
_RUNTIME_FIELDS = {"tuple_delimiter", "record_delimiter", "completion_delimiter", "input_text", "entity_types"}
# Placeholders a corpus's own prompt may write out instead of keeping (its delimiters, types, lengths).
_WRITABLE_OUT = {
    "tuple_delimiter",
    "record_delimiter",
    "completion_delimiter",
    "entity_types",
    "entity_specs",
    "claim_description",
    "max_length",
    "max_report_length",
}


class PromptFileError(ValueError):
    """A corpus's prompt file that cannot be used; the message names the file."""


@dataclass
class Example:
    text_unit_id: str
    excerpt: str
    records: str  # the records, as the extraction prompt asks for them


@dataclass
class CorpusProfile:
    """What tuning learned of a corpus; `derived_by` says how (a model, or the offline noun-phrase rule)."""

    domain: str
    persona: str
    language: str
    entity_types: list[str]
    examples: list[Example] = field(default_factory=list)
    sampled_text_unit_ids: list[str] = field(default_factory=list)
    derived_by: str = "model"


def excerpt(text: str, max_tokens: int) -> str:
    """The text's first sentences within `max_tokens` (at least its first sentence, cut to the budget)."""
    kept, used = [], 0
    for sentence in split_sentences(" ".join(text.split())):
        tokens = count_tokens(sentence)
        if kept and used + tokens > max_tokens:
            break
        kept.append(sentence)
        used += tokens
    joined = " ".join(kept)
    return truncate_to_tokens(joined, max_tokens)


async def sample_text_units(units: pl.DataFrame, count: int, sampling: str, seed: int, embed=None) -> pl.DataFrame:
    """`count` text units: at random, or one per cluster of their embeddings (`embed`: texts -> vectors), so that
    a corpus of several kinds of document is sampled from each kind."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling {sampling!r} is not one of {', '.join(SAMPLINGS)}")
    if len(units) <= count:
        return units
    if sampling == "random":
        return seeded_sample(units, count, seed)
    from sklearn.cluster import KMeans

    pool = seeded_sample(units, min(len(units), CLUSTER_POOL * count), seed)
    vectors = np.asarray(await embed(list(pool["text"])), dtype=np.float64)
    clusters = KMeans(n_clusters=count, random_state=seed, n_init=4).fit(vectors)
    distances = np.linalg.norm(vectors - clusters.cluster_centers_[clusters.labels_], axis=1)
    picked = set()
    for cluster in range(count):
        members = np.flatnonzero(clusters.labels_ == cluster)
        picked.add(int(members[np.argmin(distances[members])]))
    return pool[sorted(picked)]


def _no_placeholder(name: str, value: str) -> str:
    if "{" in value or "}" in value:
        raise InvalidReply(f"the {name} holds braces, which the prompts reserve for their own fields")
    return value


def parse_profile(reply: str) -> dict:
    """The corpus's domain, persona and language, each a short text."""
    data, _ = parse_json_reply(reply)
    if not isinstance(data, dict):
        raise InvalidReply("the reply is not a JSON object")
    limits = {"domain": 200, "persona": 300, "language": 40}
    found = {}
    for name, limit in limits.items():
        value = data.get(name)
        if not isinstance(value, str) or not value.strip():
            raise InvalidReply(f"the reply has no {name}")
        value = " ".join(value.split()).rstrip(".")
        if len(value) > limit:
            raise InvalidReply(f"the {name} is {len(value)} characters long; a short phrase was asked for")
        found[name] = _no_placeholder(name, value)
    if not re.fullmatch(r"[^\W\d_]+(?:[ -][^\W\d_]+)*", found["language"]):
        raise InvalidReply(f"the language {found['language']!r} is not the name of a language")
    found["persona"] = found["persona"][0].lower() + found["persona"][1:]
    return found


def entity_type_list(max_types: int):
    """A parser for the entity types: 2 to `max_types` distinct kinds, each one to three words."""

    def parse(reply: str) -> list[str]:
        data, _ = parse_json_reply(reply)
        values = data.get("entity_types") if isinstance(data, dict) else None
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidReply("the reply has no list of strings under 'entity_types'")
        types = list(dict.fromkeys(" ".join(v.split()).lower() for v in values if v.strip()))
        if not 2 <= len(types) <= max_types:
            raise InvalidReply(f"asked for 2 to {max_types} entity types, got {len(types)}")
        wrong = [t for t in types if len(t) > 40 or len(t.split()) > 3 or not _TYPE.fullmatch(t)]
        if wrong:
            raise InvalidReply(f"these are not kinds of entity in one to three words: {wrong[:3]}")
        return types

    return parse


def _normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def render_records(entities: list[dict], relationships: list[dict]) -> str:
    records = [
        f'("entity"{TUPLE_DELIMITER}{e["title"]}{TUPLE_DELIMITER}{e["type"]}{TUPLE_DELIMITER}{e["description"]})'
        for e in entities
    ]
    records += [
        f'("relationship"{TUPLE_DELIMITER}{r["source"]}{TUPLE_DELIMITER}{r["target"]}{TUPLE_DELIMITER}'
        f"{r['description']}{TUPLE_DELIMITER}{r['strength']:g})"
        for r in relationships
    ]
    return f"\n{RECORD_DELIMITER}\n".join(records) + f"\n{COMPLETION_DELIMITER}"


def example_records(text: str, entity_types: list[str]):
    """A parser for an extraction example: records of the listed types only, every entity named in `text`, every
    relationship between two of them; the records rendered again in the prompt's format."""
    allowed = {t.upper() for t in entity_types}
    in_text = _normalised(text)

    def parse(reply: str) -> str:
        entities, relationships, _ = records_to_graph([check_graph_reply(reply)])
        if not entities:
            raise InvalidReply("the example has no entity")
        other_types = sorted({e["type"] for e in entities} - allowed)
        if other_types:
            raise InvalidReply(f"the example uses types that are not listed: {other_types[:3]}")
        unquoted = [e["title"] for e in entities if _normalised(e["title"]) not in in_text]
        if unquoted:
            raise InvalidReply(f"the example names entities the sample text does not: {unquoted[:3]}")
        names = {e["title"] for e in entities}
        stray = [f"{r['source']} -> {r['target']}" for r in relationships if not {r["source"], r["target"]} <= names]
        if stray:
            raise InvalidReply(f"the example relates names that are none of its entities: {stray[:3]}")
        rendered = render_records(entities, relationships)
        fields = sorted(set(_PLACEHOLDER.findall(text + rendered)) & _RUNTIME_FIELDS)
        if fields:  # the index would fill them in inside the example
            named = ", ".join("{" + f + "}" for f in fields)
            raise InvalidReply(f"the example holds {named}, which the prompt fills in")
        return rendered

    return parse


def _context_sentence(profile: CorpusProfile) -> str:
    if not profile.domain:
        return ""
    return (
        load_prompt("tuned_context")
        .format(domain=profile.domain, persona=profile.persona, language=profile.language)
        .strip()
    )


def extraction_template(profile: CorpusProfile, examples: list[Example] | None = None) -> str:
    """The corpus's extraction prompt: its types written out, its context and its examples; the runtime fields (the
    delimiters, the text) left to fill."""
    examples = profile.examples if examples is None else examples
    shown = "".join(
        f"\nExample {n}:\n<example_text>\n{e.excerpt}\n</example_text>\n{e.records}\n"
        for n, e in enumerate(examples, 1)
    )
    context = _context_sentence(profile)
    return load_prompt("tuned_extract_graph").format(
        context=f" {context}" if context else "",
        entity_types=",".join(profile.entity_types),
        language=profile.language,
        examples=shown,
    )


def tuned_templates(profile: CorpusProfile) -> dict[str, str]:
    """Every prompt tuning rewrites, by name."""
    context = _context_sentence(profile)
    preface = f"{context}\n\n" if context else ""
    claims = (
        load_prompt("extract_claims")
        .format(entity_specs=", ".join(profile.entity_types))
        .replace("Write in English", f"Write in {profile.language}")
    )
    templates = {"extract_graph": extraction_template(profile), "extract_claims": preface + claims}
    for name in ("summarize_descriptions", *REPORT_PROMPTS, *SOURCE_REPORT_PROMPTS):
        templates[name] = preface + load_prompt(name).template
    return templates


async def profile_corpus(
    chat: ChatModel, samples: pl.DataFrame, max_entity_types: int, examples: int, excerpt_tokens: int
) -> CorpusProfile | None:
    """Ask the model what the corpus is and which kinds of entity it holds, then for examples of extraction from
    the first `examples` sampled units. None when the profile or the types got no valid reply; an example that
    got none is left out."""
    excerpts = [(unit_id, excerpt(text, excerpt_tokens)) for unit_id, text in zip(samples["id"], samples["text"])]
    passages = "\n\n".join(text for _, text in excerpts)
    about = await chat.complete(user_message("tune_corpus", passages=passages), parse=parse_profile, **_JSON_REPLY)
    if about is None:
        return None
    types = await chat.complete(
        user_message("tune_entity_types", **about, passages=passages, max_types=max_entity_types),
        parse=entity_type_list(max_entity_types),
        **_JSON_REPLY,
    )
    if types is None:
        return None
    profile = CorpusProfile(**about, entity_types=types, sampled_text_unit_ids=list(samples["id"]))
    frame = extraction_template(profile, examples=[])

    async def example(unit_id: str, text: str) -> Example | None:
        prompt = Prompt("extract_graph", frame).format(
            **DELIMITERS,
            input_text=text,
        )
        records = await chat.complete([{"role": "user", "content": prompt}], parse=example_records(text, types))
        return Example(unit_id, text, records) if records else None

    found = await asyncio.gather(*(example(u, t) for u, t in excerpts[:examples]))
    profile.examples = [e for e in found if e is not None]
    return profile


@dataclass(frozen=True)
class TuningSettings:
    """How a corpus is sampled and profiled (the tuned_prompts step's config gives every value)."""

    sampled_text_units: int
    sampling: str  # random, or clusters: one unit per cluster of text-unit embeddings
    seed: int
    max_entity_types: int
    examples: int
    excerpt_tokens: int
    embedding_batch: tuple[int, int] = (256, 50_000)  # texts and tokens per embedding request at most


class SampleNotEmbedded(RuntimeError):
    """Clustered sampling could not embed every text unit it needed."""


async def profile_sample(chat: ChatModel | None, embedder, units: pl.DataFrame, settings: TuningSettings):
    """Sample the corpus's text units and profile them: with the model, or offline (no chat model). The embedder
    (None: the offline TF-IDF vectors) serves clustered sampling. None when the model gave no valid profile."""

    async def embed(texts: list[str]):
        if embedder is None:
            return LocalEmbedder.fit(texts).embed(texts)
        vectors, failed = await embed_with_model(embedder, texts, *settings.embedding_batch)
        if failed:
            raise SampleNotEmbedded(f"{failed} of {len(texts)} sampled text units got no embedding")
        return vectors

    s = settings
    samples = await sample_text_units(units, s.sampled_text_units, s.sampling, s.seed, embed)
    if chat is None:
        return offline_profile(samples, s.max_entity_types)
    return await profile_corpus(chat, samples, s.max_entity_types, s.examples, s.excerpt_tokens)


def tuned_prompt_rows(profile: CorpusProfile, templates: dict[str, str]) -> pl.DataFrame:
    """The tuned_prompts table: each tuned template with its hash, its default's, and what it was derived from."""
    basis = {
        "domain": profile.domain,
        "persona": profile.persona,
        "language": profile.language,
        "entity_types": json.dumps(profile.entity_types),
        "examples": json.dumps([vars(e) for e in profile.examples]),
        "sampled_text_unit_ids": json.dumps(profile.sampled_text_unit_ids),
        "derived_by": profile.derived_by,
    }
    return pl.DataFrame(
        [
            {"id": name, "template": template, "sha": Prompt(name, template).sha, "default_sha": load_prompt(name).sha}
            | basis
            for name, template in templates.items()
        ]
    )


def offline_profile(samples: pl.DataFrame, max_entity_types: int) -> CorpusProfile:
    """Without a model: the entity types are the most frequent kinds of noun phrase in the sample (the head noun of
    each phrase, 'agreement' for 'the supply agreement'); no domain, persona or examples, which need a model."""
    from textblob import Word

    from .offline.extractive import WordCases
    from .offline.nlp_graph import GENERIC_NOUNS, noun_phrases

    # A kind of thing is written in lower case ("supplier", "nephew"); a name is not ("Scrooge", "Christmas"),
    # and names are what the entities of a type are, not types.
    cases = WordCases(samples["text"])
    heads: Counter = Counter()
    for text in samples["text"]:
        for sentence in split_sentences(text):
            for phrase in noun_phrases(sentence):
                word = phrase.split()[-1].lower()
                head = Word(word).singularize()
                if len(head) > 2 and head not in STOPWORDS and head not in GENERIC_NOUNS and cases.kind(word):
                    heads[head] += 1
    types = [head for head, n in sorted(heads.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 2][:max_entity_types]
    return CorpusProfile(
        domain="",
        persona="",
        language="English",
        entity_types=types if len(types) >= 2 else list(DEFAULT_ENTITY_TYPES),
        sampled_text_unit_ids=list(samples["id"]),
        derived_by=f"{OFFLINE}: entity types are the sample's most frequent noun-phrase heads"
        if len(types) >= 2
        else f"{OFFLINE}: the sample has too few repeated noun phrases; the default entity types are kept",
    )


def check_prompt_file(name: str, template: str, source: str) -> None:
    """A corpus's own prompt must be one the index uses and keep the fields the index fills in."""
    if name not in INDEX_PROMPTS:
        raise PromptFileError(
            f"{source}: no prompt of the index is called {name!r}; the names are {', '.join(INDEX_PROMPTS)}"
        )
    if not template.strip():
        raise PromptFileError(f"{source}: the file is empty")
    if "\x00" in template:
        raise PromptFileError(f"{source}: the file holds binary data (NUL bytes), not a prompt's text")
    if len(template) > MAX_PROMPT_CHARS:
        raise PromptFileError(
            f"{source}: {len(template):,} characters is more than a prompt ({MAX_PROMPT_CHARS:,} at most)"
        )
    fields = set(_PLACEHOLDER.findall(load_prompt(name).template))
    used = set(_PLACEHOLDER.findall(template))
    missing, unknown = sorted(fields - _WRITABLE_OUT - used), sorted(used - fields)
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"lacks {', '.join('{' + m + '}' for m in missing)}, which the index fills in")
        if unknown:
            problems.append(
                f"has {', '.join('{' + u + '}' for u in unknown)}, which the index does not fill in and would send "
                "as it is"
            )
        raise PromptFileError(
            f"{source}: the prompt {' and '.join(problems)} (its fields are "
            f"{', '.join('{' + f + '}' for f in sorted(fields))}; see prompts/{name}.txt)"
        )


def index_prompt_rows(tuned: dict[str, str], folder: Path, shown_as: str) -> list[dict]:
    """The prompts an index is built with, one row each (id, template, sha, source): the files in prompts/, then
    `tuned`, then the corpus's own files in `folder` (named in messages under `shown_as`). PromptFileError names a
    file that cannot be used."""
    chosen = {name: (load_prompt(name).template, "default") for name in INDEX_PROMPTS}
    chosen.update({name: (template, "tuned") for name, template in tuned.items()})
    for path in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
        source = f"{shown_as}/{folder.name}/{path.name}"
        if path.stat().st_size > 4 * MAX_PROMPT_CHARS:  # not read whole: a prompt is never that large
            raise PromptFileError(f"{source}: {path.stat().st_size:,} bytes is more than a prompt")
        try:
            template = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise PromptFileError(f"{source}: not UTF-8 text") from None
        check_prompt_file(path.stem, template, source)
        chosen[path.stem] = (template, source)
    return [
        {"id": name, "template": template, "sha": Prompt(name, template).sha, "source": source}
        for name, (template, source) in chosen.items()
    ]


def prompt_diff(name: str, template: str) -> str:
    """The template against the file in prompts/, as a unified diff ('' when they are the same)."""
    default = load_prompt(name).template
    return "".join(
        difflib.unified_diff(
            default.splitlines(keepends=True),
            template.splitlines(keepends=True),
            fromfile=f"prompts/{name}.txt",
            tofile=f"{name} (this corpus)",
        )
    )
