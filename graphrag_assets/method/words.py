"""Words and sentences of plain text: what the offline engine, alias search and extractive answers share."""

from __future__ import annotations

import functools
import re
import threading

import snowballstemmer

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)]*\s+|\n\s*\n")
_CONTENT_WORD = re.compile(r"[a-z][a-z'\-]+")
STOPWORDS = frozenset(
    """a about after again all also an and another any are as at be because been before being but by can could
    did do does done each even ever every for from had has have he her here hers him his how i if in into is it
    its just let like may me might mine more most much must my no nor not now o of off oh on once one only or our
    out over own perhaps said say see shall she should so some still such than that the their them then there
    these they this those though thou thus thy to too under until up upon us very was we well were what when where
    whether which while who whom whose why will with would yes yet you your""".split()
)


def split_sentences(text: str, pattern: re.Pattern = _SENTENCE_END) -> list[str]:
    return [s.strip() for s in pattern.split(text) if s and s.strip()]


# What a reader calls a sentence, for quoting: not ended by a title's period ("Mr. Scrooge") or by a question or
# exclamation in quotes that a lower-case word goes on from ("'What is it?' cried Fred."). The index keeps the
# plainer rule above: text units are cut on it, and every model call of an index is cached by its unit's text.
_QUOTED_SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)[\"'”’)]*\s+(?![a-z\s])|\n\s*\n"
)


def quoted_sentences(text: str) -> list[str]:
    return split_sentences(text, _QUOTED_SENTENCE_END)


def terms(text: str) -> set[str]:
    """The content words of a text, lower case: no stop words, none shorter than three letters."""
    return {w for w in _CONTENT_WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 2}


_STEMMERS = threading.local()  # a Snowball stemmer keeps its word in progress: one per thread (the server's)


def stems(text: str) -> set[str]:
    """The content words of a text (see terms), stemmed by Snowball's English stemmer."""
    return {_stem(word) for word in terms(text)}


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    # Cached: a corpus repeats its words, and stemming in Python was 18 times the cost of the rest of the quoting.
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)
