"""Noun-phrase co-occurrence graph, the offline stand-in for LLM extraction.

Like the "fast" and LazyGraphRAG indexing variants, entities are noun phrases found
by a rule, and two entities are related when they appear in the same sentence. No
part-of-speech model can be downloaded here, so the rule is orthographic: runs of
capitalised words (with "of"/"the" inside, honorifics kept), excluding words that
are only ever capitalised at the start of a sentence, and a book's headings and apparatus ("Stave One",
"Chapter XII", "Illustration", roman numerals).
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import combinations

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..graph.extraction import MERGED_ENTITY_SCHEMA, MERGED_RELATIONSHIP_SCHEMA
from ..words import STOPWORDS, split_sentences

_WORD = r"[A-Z][a-zA-Z'’\-]*[a-zA-Z]"
_HONORIFIC = r"(?:Mr|Mrs|Ms|Miss|Dr|St|Sir|Lady|Lord|Master|Old)\.?"
_PHRASE = re.compile(rf"\b(?:{_HONORIFIC}\s+)?{_WORD}(?:\s+(?:of\s+|the\s+|of\s+the\s+)?{_WORD})*")
_POSSESSIVE = re.compile(r"'s\b")
_HONORIFIC_ONLY = re.compile(_HONORIFIC)
# Headings and apparatus of a book ("Stave One", "Chapter XII", "Illustration"), not names in it.
_STRUCTURE = re.compile(
    r"\b(?:chapter|stave|book|part|volume|section|contents|illustrations?|page|footnote|transcriber|heading|tailpiece"
    r"|frontispiece)\b",
    re.IGNORECASE,
)
_ROMAN = re.compile(r"[IVXLCDM]+")
MIN_MENTIONS = 2
MAX_DESCRIPTIONS = 3
MAX_KEYWORDS = 30
_KEYWORD = re.compile(r"[^\W\d_]{3,}")


def _trim(phrase: str) -> str:
    words = phrase.split()
    while words and words[0].lower() in STOPWORDS:
        words.pop(0)
    while words and words[-1].lower() in STOPWORDS | {"of", "the"}:
        words.pop()
    return " ".join(words)


def candidate_phrases(sentence: str) -> list[tuple[str, bool]]:
    """(phrase, starts the sentence) for each capitalised run in a sentence."""
    found = []
    for match in _PHRASE.finditer(sentence):
        phrase = _trim(_POSSESSIVE.sub("", match.group(0).replace("’", "'")))
        # Contractions ("I'll", "It's") and bare honorifics are not names.
        if len(phrase) < 3 or "'" in phrase or _HONORIFIC_ONLY.fullmatch(phrase):
            continue
        if _STRUCTURE.search(phrase) or _ROMAN.fullmatch(phrase):
            continue
        found.append((phrase, sentence[: match.start()].strip(" \"'“‘(") == ""))
    return found


class _Mentions:
    """Every sentence's phrases as numbers: one integer a mention and one a sentence (0 ends it), negative where the
    phrase opens its sentence. A tuple, a list and the sentence's text per sentence took more memory than the text
    itself; the graph splits a unit's sentences again when it needs their words."""

    def __init__(self, texts: Iterable[str], find: Callable[[str], list[tuple[str, bool]]]):
        self.phrases: list[str] = [""]  # by number; 0 is no phrase
        self.counts: Counter[int] = Counter()  # mentions by signed number
        self.units: list[array] = []
        numbers: dict[str, int] = {}
        for text in texts:
            codes = array("i")
            for sentence in split_sentences(text):
                for phrase, at_start in find(sentence):
                    number = numbers.get(phrase)
                    if number is None:
                        number = numbers[phrase] = len(self.phrases)
                        self.phrases.append(phrase)
                    codes.append(-number if at_start else number)
                codes.append(0)
            self.counts.update(codes)
            self.units.append(codes)
        del self.counts[0]

    def sentences(self, unit: int) -> Iterator[array]:
        """The unit's sentences in order, each as the numbers of its phrases."""
        codes, start = self.units[unit], 0
        for end, code in enumerate(codes):
            if code == 0:
                yield codes[start:end]
                start = end + 1

    def total(self, phrase_of: Callable[[int], str]) -> Counter[str]:
        """Mentions by phrase, where `phrase_of` says which phrase each signed number stands for."""
        counted: Counter[str] = Counter()
        for code, mentions in self.counts.items():
            counted[phrase_of(code)] += mentions
        return counted


def _keyword_titles(texts: Iterable[str]) -> tuple[_Mentions, dict[int, str]]:
    """The most frequent words that are not stop words, as the phrases of their sentences."""
    words = _Mentions(texts, lambda s: [(w, False) for w in _KEYWORD.findall(s.lower()) if w not in STOPWORDS])
    counted = words.total(lambda code: words.phrases[code])
    chosen = {w for w, _ in sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_KEYWORDS]}
    return words, {code: words.phrases[code].upper() for code in words.counts if words.phrases[code] in chosen}


def extract_nlp_graph(text_units: pl.DataFrame, min_mentions: int = MIN_MENTIONS) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Entities and relationships (merged across text units) from noun-phrase co-occurrence."""
    mentions = _Mentions(text_units["text"], candidate_phrases)
    # A word capitalised only at sentence starts is an ordinary word ("Nothing", "Later").
    mid_sentence_words = {w for code in mentions.counts if code > 0 for w in mentions.phrases[code].split()}

    def phrase_of(code: int) -> str:
        phrase = mentions.phrases[abs(code)]
        first, _, rest = phrase.partition(" ")
        return rest if code < 0 and rest and first not in mid_sentence_words else phrase

    counted = mentions.total(phrase_of)
    keep = {p for p, n in counted.items() if n >= min_mentions and (" " in p or p in mid_sentence_words)}
    if not keep and not counted:
        # A corpus with no capitalised phrase at all: its most frequent content words.
        return _cooccurrence_graph(text_units, *_keyword_titles(text_units["text"]))
    keep = keep or set(counted)  # a small or oddly written corpus: any capitalised phrase
    titles = {code: phrase.upper() for code in mentions.counts if (phrase := phrase_of(code)) in keep}
    return _cooccurrence_graph(text_units, mentions, titles)


def _cooccurrence_graph(
    text_units: pl.DataFrame, mentions: _Mentions, titles: dict[int, str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Entities (the phrases `titles` names, described by their first sentences) and relationships (two phrases in
    one sentence), merged across text units.

    Each mention is a few integers (phrase or pair, unit, sentence) in arrays, merged by polars once all are met: a
    Python object and two lists per pair took 700 MiB for the 1.3M pairs of 200 MB of text, which Python's allocator
    kept after they were let go (a record per mention took 5 GB for 50 MB). A sentence is kept once, as text, when
    it mentions a phrase."""
    number_of: dict[str, int] = {}  # title -> number, in order of first mention
    sentences = _Sentences()
    entity_mentions = _MentionArrays("title")
    pair_mentions = _MentionArrays("source", "target")
    for unit, text in enumerate(text_units["text"]):
        split = None
        for number, codes in enumerate(mentions.sentences(unit)):
            present = sorted({titles[code] for code in codes if code in titles})
            if not present:
                continue
            split = split or split_sentences(text)
            sentence = sentences.add(" ".join(split[number].split()))
            numbers = [number_of.setdefault(title, len(number_of)) for title in present]
            for title in numbers:
                entity_mentions.add(unit, sentence, title)
            for pair in combinations(numbers, 2):
                pair_mentions.add(unit, sentence, *pair)
    names = pl.Series(list(number_of), dtype=pl.String)
    del number_of
    texts = _distinct_sentences(sentences.series())
    del sentences
    unit_ids = text_units["id"]
    # An entity is described by the distinct sentences among its first MAX_DESCRIPTIONS mentions, a pair by its
    # first MAX_DESCRIPTIONS distinct sentences.
    entities = (
        entity_mentions.frame(texts)
        .group_by("title", maintain_order=True)
        .agg(
            pl.col("unit").unique(maintain_order=True).alias("units"),
            pl.col("sentence").head(MAX_DESCRIPTIONS).drop_nulls().unique(maintain_order=True).alias("descriptions"),
        )
    )
    entity_frame = pl.DataFrame(
        {
            "title": names.gather(entities["title"]),
            "type": pl.repeat("NOUN PHRASE", len(entities), eager=True),
            "descriptions": _named_lists(entities["descriptions"], texts["text"]),
            "text_unit_ids": _named_lists(entities["units"], unit_ids),
            "frequency": entities["units"].list.len(),
        }
    ).cast(MERGED_ENTITY_SCHEMA)
    del entities, entity_mentions
    pairs = (
        pair_mentions.frame(texts)
        .group_by("source", "target", maintain_order=True)
        .agg(
            pl.len().alias("weight"),
            pl.col("unit").unique(maintain_order=True).alias("units"),
            pl.col("sentence").drop_nulls().unique(maintain_order=True).head(MAX_DESCRIPTIONS).alias("descriptions"),
        )
    )
    relationship_frame = pl.DataFrame(
        {
            "source": names.gather(pairs["source"]),
            "target": names.gather(pairs["target"]),
            "descriptions": _named_lists(pairs["descriptions"], texts["text"]),
            "weight": pairs["weight"],
            "text_unit_ids": _named_lists(pairs["units"], unit_ids),
        }
    ).cast(MERGED_RELATIONSHIP_SCHEMA)
    return entity_frame, relationship_frame


class _Sentences:
    """Sentences by number, moved into polars a batch at a time: as Python strings, the sentences of 200 MB of text
    took 360 MiB until the end."""

    BATCH = 50_000

    def __init__(self):
        self.batches: list[pl.Series] = []
        self.batch: list[str] = []

    def add(self, sentence: str) -> int:
        """The sentence's number."""
        self.batch.append(sentence)
        number = len(self.batches) * self.BATCH + len(self.batch) - 1
        if len(self.batch) == self.BATCH:
            self.batches.append(pl.Series(self.batch, dtype=pl.String))
            self.batch = []
        return number

    def series(self) -> pl.Series:
        return pl.concat([*self.batches, pl.Series(self.batch, dtype=pl.String)])


class _MentionArrays:
    """Mentions as columns of integers: the unit, the sentence (its number among those kept) and what is mentioned."""

    def __init__(self, *mentioned: str):
        self.columns = {name: array("i") for name in ("unit", "sentence", *mentioned)}

    def add(self, unit: int, sentence: int, *mentioned: int) -> None:
        for column, value in zip(self.columns.values(), (unit, sentence, *mentioned), strict=True):
            column.append(value)

    def frame(self, texts: pl.DataFrame) -> pl.DataFrame:
        """The mentions, each sentence as the number of its first copy (None for an empty one)."""
        frame = pl.DataFrame({name: pl.Series(name, values, dtype=pl.Int32) for name, values in self.columns.items()})
        self.columns.clear()
        return frame.with_columns(sentence=texts["first"].gather(frame["sentence"]))


def _distinct_sentences(sentences: pl.Series) -> pl.DataFrame:
    """(text, first): each sentence and the number of the first sentence with the same text, so that a sentence
    said twice is one description (None for an empty one, which describes nothing)."""
    numbered = pl.DataFrame({"text": sentences}).with_row_index("first")
    numbered = numbered.with_columns(pl.col("first").min().over("text").cast(pl.Int32))
    return numbered.select("text", pl.when(pl.col("text") != "").then(pl.col("first")).alias("first"))


def _named_lists(lists: pl.Series, values: pl.Series) -> pl.Series:
    """Lists of positions as lists of the values at those positions: gathered, and strings shared with `values`
    rather than copied (a lookup table of the 2.4M sentences of 200 MB of text took 540 MiB more)."""
    positions = lists.rechunk().to_arrow()
    offsets = pc.subtract(positions.offsets, positions.offsets[0])
    named = values.gather(pl.Series(positions.flatten())).to_arrow(compat_level=pl.CompatLevel.newest())
    return pl.Series(lists.name, pa.LargeListArray.from_arrays(offsets, named))


# Nouns that name no concept: what a part-of-speech tagger calls a noun in "nothing", "the way", "a kind of".
GENERIC_NOUNS = frozenset(
    "nothing something anything everything none thing things way ways kind sort time times day days moment "
    "place right part lot end side word words matter case fact one ones "
    # the body and the weather of a story: common in any narrative, the kind of nothing a graph is about
    "hand head face eye eyes voice heart air night morning evening".split()
)


def noun_phrases(sentence: str, particular_only: bool = False) -> list[str]:
    """The noun phrases of a sentence, from TextBlob's rule-based tagger and chunker (its lexicon ships with it; no
    model is downloaded): each noun-phrase chunk's adjectives and nouns, through its last noun.

    `particular_only` keeps the phrases that name something particular, as Microsoft GraphRAG's fast extractor
    does: one with a proper noun, of two words or more, or a hyphenated compound. A lone common noun ("clerk",
    "fire") is in too many unrelated passages to say where a topic is."""
    from textblob.en import parse  # imports nltk: only the fast and lazy methods pay for it

    chunks: list[list[tuple[str, str]]] = []
    tagged = parse(sentence, chunks=True, relations=False, lemmata=False).split()  # [[word, tag, chunk, pnp]]
    for word, tag, chunk, *_ in (token for part in tagged for token in part):
        if chunk == "B-NP" or not chunk.endswith("NP"):
            chunks.append([])
        if chunk.endswith("NP") and tag[:2] in ("NN", "JJ") and chunks:
            chunks[-1].append((word.replace("&slash;", "/"), tag))
    phrases = []
    for chunk in chunks:
        while chunk and not chunk[-1][1].startswith("NN"):
            chunk.pop()
        kept = [(w, t) for w, t in chunk if _KEYWORD.fullmatch(w.replace("-", "")) and w.lower() not in STOPWORDS]
        words = [w for w, _ in kept]
        phrase = " ".join(words)
        if not words or phrase.lower() in GENERIC_NOUNS or _STRUCTURE.search(phrase) or _ROMAN.fullmatch(words[0]):
            continue
        particular = len(words) > 1 or "-" in phrase.strip("-") or any(t.startswith("NNP") for _, t in kept)
        if particular or not particular_only:
            phrases.append(phrase)
    return phrases


def extract_concept_graph(
    text_units: pl.DataFrame, min_mentions: int = MIN_MENTIONS
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The fast and lazy methods' graph: the noun phrases that name something particular (see noun_phrases), found
    by a part-of-speech chunker, common nouns too, not only names; related when they share a sentence. Phrases
    mentioned fewer than `min_mentions` times are left out."""
    mentions = _Mentions(
        text_units["text"], lambda s: [(p.lower(), False) for p in noun_phrases(s, particular_only=True)]
    )
    counted = mentions.total(lambda code: mentions.phrases[code])
    keep = {p for p, n in counted.items() if n >= min_mentions} or set(counted)
    titles = {code: mentions.phrases[code].upper() for code in mentions.counts if mentions.phrases[code] in keep}
    return _cooccurrence_graph(text_units, mentions, titles)


def prune_concept_graph(
    entities: pl.DataFrame,
    relationships: pl.DataFrame,
    units: int,
    max_unit_fraction: float,
    min_edge_weight: float,
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """The concept graph of a paid index (the fast and lazy methods): phrases in more than `max_unit_fraction` of
    the text units say nothing about where a topic is, and edges seen in fewer than `min_edge_weight` sentences
    are chance. (entities, relationships, what was pruned). A corpus of under 10 units keeps its ubiquitous
    phrases: there every phrase is in a large share of them."""
    too_common = max_unit_fraction * units if units >= 10 else float("inf")
    gone = entities.filter(pl.col("frequency") > too_common)["title"]
    touching = pl.col("source").is_in(gone.implode()) | pl.col("target").is_in(gone.implode())
    weak = pl.col("weight") < min_edge_weight
    pruned = {
        "ubiquitous_phrases_pruned": len(gone),
        "ubiquitous_examples": ", ".join(sorted(gone)[:10]) or "none",
        "weak_edges_pruned": relationships.filter(weak & ~touching).height,
    }
    return entities.filter(pl.col("frequency") <= too_common), relationships.filter(~touching & ~weak), pruned
