"""Extractive community reports: the offline engine's stand-in for an LLM-written report.

Nothing is generated: the title names the community's most central entities (most connected inside it, names
before ordinary words), the summary is the sentences of its text that mention the most of its entities, and the
findings are its most prominent relationships with their descriptions. The rating is the community's share of
entity degree, rescaled to 0-10, and says so.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from ..words import split_sentences

MAX_SUMMARY_SENTENCES = 3
MAX_FINDINGS = 5


_WORD = re.compile(r"\w+")


def central_sentences(texts: list[str], titles: set[str], limit: int = MAX_SUMMARY_SENTENCES) -> list[str]:
    """Sentences mentioning the most distinct community entities (first occurrence wins ties).

    A title is looked for only in sentences holding its first word: `\\bTitle\\b` cannot match elsewhere, and trying
    every title's pattern on every sentence made a large community's report quadratic (the root community of a real
    corpus has thousands of entities and all of its sentences)."""
    by_first_word: dict[str, list[tuple[str, str]]] = {}
    everywhere = []  # titles without a word, or whose lower case changes their length: tried on every sentence
    for title in sorted(titles):
        found = (title.casefold(), title)
        first = _WORD.search(title)
        if first is None or len(first.group().lower()) != len(first.group()):
            everywhere.append(found)
        else:
            by_first_word.setdefault(first.group().lower(), []).append(found)
    patterns: dict[str, re.Pattern] = {}  # compiled when a sentence first holds the title: most never do

    def said(title: str, sentence: str) -> bool:
        pattern = patterns.get(title)
        if pattern is None:
            pattern = patterns[title] = re.compile(rf"\b{re.escape(title)}\b", re.IGNORECASE)
        return pattern.search(sentence) is not None

    scored, seen = [], set()
    for position, sentence in enumerate(s for text in texts for s in split_sentences(text)):
        sentence = " ".join(sentence.split())
        if sentence in seen or len(sentence) > 400:
            continue
        seen.add(sentence)
        words, folded = set(_WORD.findall(sentence.lower())), sentence.casefold()
        candidates = [p for word in words & by_first_word.keys() for p in by_first_word[word]] + everywhere
        # A title the regex matches is in the sentence, both case-folded: the substring test is the cheap half.
        hits = sum(1 for folded_title, title in candidates if folded_title in folded and said(title, sentence))
        if hits:
            scored.append((-hits, position, sentence))
    return [sentence for _, _, sentence in sorted(scored)[:limit]]


_DETERMINED = re.compile(r"\b(?i:the|a|an|each|every|this|that|his|her|its|their|our|my|your) ([A-Z][a-z'-]+)\b")


class WordCases:
    """How often each word of the corpus is written in lower case, and capitalised in mid-sentence."""

    def __init__(self, texts):
        self.lower, self.capitalised, self.determined = Counter(), Counter(), Counter()
        for text in texts:
            self.lower.update(re.findall(r"\b[a-z][a-z'-]+\b", text))
            self.capitalised.update(w.lower() for w in re.findall(r"[a-z,;] ([A-Z][a-z'-]+)\b", text))
            self.determined.update(w.lower() for w in _DETERMINED.findall(text))

    def ordinary(self, title: str) -> bool:
        """A one-word entity the corpus writes in lower case more often than capitalised mid-sentence ("Come",
        "Poor"): a word that opened sentences, not a name, and a poor name for a community."""
        word = title.strip().lower()
        return " " not in word and self.lower[word] > self.capitalised[word]

    def kind(self, word: str) -> bool:
        """A word that names a kind of thing: written in lower case ("nephew"), or capitalised after an article as
        a contract's defined terms are ("the Supplier"), at least as often as capitalised bare, as names are
        ("Scrooge", "Christmas")."""
        word = word.lower()
        bare = self.capitalised[word] - self.determined[word]
        return self.lower[word] + self.determined[word] >= max(bare, 1)


def extractive_report(members: list, relationships: list, texts: list[str], cases: WordCases) -> dict:
    """The report on a community of these entity and relationship records, quoting its units' `texts`."""
    titles = {m.title for m in members}
    relationships = sorted(relationships, key=lambda r: (-r.combined_degree, r.id))
    # Named by its most central entities: the most connected inside the community, names before ordinary words.
    inside = Counter(end.upper() for r in relationships for end in (r.source, r.target))
    members = sorted(members, key=lambda e: (cases.ordinary(e.title), -inside[e.title.upper()], -e.degree, e.title))
    named = [m for m in members if not cases.ordinary(m.title)] or members  # ordinary words only if nothing else
    names = [m.title.title() for m in named[:3]]
    relationships = relationships[:MAX_FINDINGS]
    summary = central_sentences(texts, titles)
    degree = sum(m.degree for m in members)
    return {
        "title": ("Community of " + ", ".join(names[:-1]) + " and " + names[-1])
        if len(names) > 1
        else f"Community of {names[0]}",
        "summary": " ".join(summary) or members[0].description,
        "rating": round(min(10.0, 2.5 * math.log1p(degree)), 1),
        "rating_explanation": "Extractive report (offline engine): the rating grows with the total degree of the "
        f"community's {len(members)} entities; no model judged its importance.",
        "findings": [
            {"summary": f"{r.source.title()} and {r.target.title()}", "explanation": r.description}
            for r in relationships
        ]
        or [{"summary": m.title.title(), "explanation": m.description} for m in members[:MAX_FINDINGS]],
    }
