"""Extractive community reports: the offline engine's stand-in for an LLM-written report.

Nothing is generated: the title names the community's most connected entities, the summary
is the sentences of its text that mention the most of its entities, and the findings are its
most prominent relationships with their descriptions. The rating is the community's share of
entity degree, rescaled to 0-10, and says so.
"""

from __future__ import annotations

import math
import re

from ..words import split_sentences

MAX_SUMMARY_SENTENCES = 3
MAX_FINDINGS = 5


def central_sentences(texts: list[str], titles: set[str], limit: int = MAX_SUMMARY_SENTENCES) -> list[str]:
    """Sentences mentioning the most distinct community entities (first occurrence wins ties)."""
    patterns = [(t, re.compile(rf"\b{re.escape(t)}\b", re.IGNORECASE)) for t in titles]
    scored, seen = [], set()
    for position, sentence in enumerate(s for text in texts for s in split_sentences(text)):
        sentence = " ".join(sentence.split())
        if sentence in seen or len(sentence) > 400:
            continue
        seen.add(sentence)
        hits = sum(1 for _, pattern in patterns if pattern.search(sentence))
        if hits:
            scored.append((-hits, position, sentence))
    return [sentence for _, _, sentence in sorted(scored)[:limit]]


def extractive_report(community, graph, titles: set[str], unit_texts: dict[str, str]) -> dict:
    members = sorted((graph.entity[e] for e in community.entity_ids), key=lambda e: (-e.degree, e.title))
    names = [m.title.title() for m in members[:3]]
    relationships = sorted(
        (graph.relationship[r] for r in community.relationship_ids), key=lambda r: (-r.combined_degree, r.id)
    )[:MAX_FINDINGS]
    summary = central_sentences([unit_texts[u] for u in community.text_unit_ids if u in unit_texts], titles)
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
