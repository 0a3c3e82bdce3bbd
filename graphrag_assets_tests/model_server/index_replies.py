"""The test server's replies to the index's prompts: graph extraction, gleaning, claims, description summaries and
community reports, each derived from the text it is given, always the same for the same request."""

from __future__ import annotations

import json
import re
from collections import Counter

_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")


_COMMON = frozenset(
    "The This That There They Then When What Where Which While With Who How And But For Not You Your His Her "
    "Its Our Their She Him Them Now Here Yes Why Let Come Said Upon After Before Into From Over Some One Two "
    "All Any Each Every Well Very Such Only Even Still Just Oh Ah Nay Aye Was Were Had Has Have Are Can".split()
)


def names_in(text: str, limit: int = 5) -> list[str]:
    counts = Counter(w for w in _NAME.findall(text) if w not in _COMMON)
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def _first_sentence_with(text: str, name: str) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if name in sentence:
            return " ".join(sentence.split())[:160]
    return ""


def _between(text: str, start: str, end: str) -> str:
    head = text.rsplit(start, 1)[-1]
    return head.split(end, 1)[0] if end in head else head


DEFAULT_TYPES = ["PERSON", "GEO", "ORGANIZATION", "EVENT"]


def listed_types(prompt: str) -> list[str]:
    """The entity types an extraction prompt lists; the default four in a fixed order for the default prompt."""
    found = re.search(r"^Entity types: (.+)$", prompt, re.MULTILINE)
    types = [t.strip().upper() for t in found.group(1).split(",")] if found else []
    return DEFAULT_TYPES if not types or set(types) == set(DEFAULT_TYPES) else types


_NOT_KINDS = frozenset("other same first last whole next following former latter".split())


def kind_words(text: str) -> list[str]:
    """Words that follow "the" in the text, most frequent first: what a tuning reply calls the corpus's kinds."""
    words = (w.lower() for w in re.findall(r"\b[Tt]he ([A-Za-z]{4,})\b", text))
    counts = Counter(w for w in words if w.capitalize() not in _COMMON and w not in _NOT_KINDS)
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def graph_reply(text: str, types: list[str] = DEFAULT_TYPES) -> str:
    names = names_in(text)
    records = [
        f'("entity"<|>{n.upper()}<|>{types[len(n) % len(types)]}<|>'
        f"{n} appears in the text: {_first_sentence_with(text, n)})"
        for n in names
    ]
    records += [
        f'("relationship"<|>{a.upper()}<|>{b.upper()}<|>{a} and {b} appear in the same passage'
        f"<|>{1 + (len(a) + len(b)) % 9})"
        for a, b in zip(names, names[1:])
    ]
    return "\n##\n".join(records) + "\n<|COMPLETE|>"


def gleaning_reply(text: str, kind: str = "EVENT") -> str:
    extra = [n for n in names_in(text, limit=8)[5:]]
    if not extra:
        return "<|COMPLETE|>"
    return (
        "\n##\n".join(f'("entity"<|>{n.upper()}<|>{kind}<|>{n} was found on a second look)' for n in extra)
        + "\n<|COMPLETE|>"
    )


def claims_reply(text: str) -> str:
    records = [
        f"({n.upper()}<|>NONE<|>MENTION<|>TRUE<|>NONE<|>NONE<|>{n} is mentioned in the text"
        f"<|>{_first_sentence_with(text, n)})"
        for n in names_in(text, limit=2)
    ]
    return "\n##\n".join(records) + "\n<|COMPLETE|>"


def tagged(prompt: str, tag: str) -> str:
    """The data between <tag> and </tag> (the last such block: examples come before the data)."""
    return _between(prompt, f"<{tag}>\n", f"\n</{tag}>")


def summary_reply(prompt: str) -> str:
    if "<descriptions>" in prompt:
        name, listed = _between(prompt, "all about ", ", into").strip(), tagged(prompt, "descriptions")
    else:  # another GraphRAG's prompt (the comparison benchmark)
        name, listed = _between(prompt, "Entities:", "\n").strip(), _between(prompt, "Description List:", "#######")
    descriptions = [d[2:].strip() for d in listed.splitlines() if d.startswith("- ")]
    return f"{name}: " + " ".join(sorted(descriptions))[:400]


def report_reply(prompt: str, full: bool = False) -> str:
    return community_report(tagged(prompt, "community"), full)


def report_batch_reply(prompt: str, full: bool = False) -> str:
    """One report on each community of the request, in order."""
    blocks = re.findall(r'<community id="(\d+)">\n(.*?)\n</community>', prompt, re.DOTALL)
    return json.dumps(
        {"reports": [{"community": int(n), **json.loads(community_report(data, full, 5))} for n, data in blocks]}
    )


PARAGRAPH = 600  # characters, about 100 words: 10 such findings stay under the prompt's 1,500 words


def community_report(data: str, full: bool = False, most: int = 10) -> str:
    """A report on a community's context. A finding is one row's description; `full`: as many findings as the
    report prompt asks of a model (`most`: 10, or 5 for a report of a batch), each a paragraph of the rows it
    cites (a relationship's description, then its two entities'), so that what global search reads per report is
    as long as a model's."""
    entities = _between(data, "-----Entities-----\nid,entity,description,degree\n", "\n\n").splitlines()
    names = [line.split(",")[1] for line in entities if line.count(",") >= 3]
    described = {line.split(",")[1]: line.split(",")[2] for line in entities if line.count(",") >= 3}
    reports = (
        _between(data, "-----Reports-----\ncommunity,title,report\n", "\n\n").splitlines()
        if "-----Reports-----" in data
        else []
    )
    relationships = (
        _between(data, "-----Relationships-----\nid,source,target,description,combined_degree\n", "\n\n").splitlines()
        if "-----Relationships-----" in data
        else []
    )

    def paragraph(row: list[str]) -> str:
        if not full:
            return row[3]
        return " ".join([row[3], described.get(row[1], ""), described.get(row[2], "")])[:PARAGRAPH]

    findings = [
        {
            "summary": f"{r.split(',')[1]} and {r.split(',')[2]}",
            "explanation": f"{paragraph(r.split(','))} [Data: Relationships ({r.split(',')[0]})]",
        }
        for r in relationships[: most if full else 5]
        if r.count(",") >= 4
    ]
    findings += [
        {"summary": f"Sub-community {r.split(',')[0]}", "explanation": r.split(",", 2)[-1]} for r in reports[:3]
    ]
    if "-----Sources-----" in data:  # a fast index's context: concepts and the passages they occur in
        concepts = _between(data, "-----Concepts-----\nid,concept,mentions\n", "\n\n").splitlines()
        names = [line.split(",")[1] for line in concepts if line.count(",") >= 2]
        sources = _between(data, "-----Sources-----\nid,text\n", "\n\n").splitlines()
        findings += [
            {
                "summary": f"Passage {r.split(',')[0]}",
                "explanation": f"{r.split(',', 1)[1][: PARAGRAPH if full else 160]} "
                f"[Data: Sources ({r.split(',')[0]})]",
            }
            for r in sources[: most if full else 5]
            if "," in r
        ]
    if not findings:  # a community of entities with no relationship between them: a model writes of the entities
        findings = [{"summary": name, "explanation": described[name]} for name in names[:3] if described.get(name)]
    title = "Community of " + " and ".join(n.title() for n in names[:2]) if names else "Community of sub-communities"
    return json.dumps(
        {
            "title": title,
            "summary": f"{title} has {len(names)} entities in its context and {len(reports)} sub-community reports.",
            "rating": float(len(names) % 10),
            "rating_explanation": "The rating counts the entities in the context.",
            "findings": findings,
        }
    )


def generic_report_reply(data: str) -> str:
    """A well-formed report JSON about the names in any community text."""
    names = names_in(data.title(), limit=6)
    title = "Community of " + " and ".join(names[:2]) if names else "A small community"
    return json.dumps(
        {
            "title": title,
            "summary": f"{title} has {len(names)} prominent names in its context.",
            "rating": float(len(names)),
            "rating_explanation": "The rating counts the prominent names.",
            "findings": [{"summary": n, "explanation": _first_sentence_with(data.title(), n)} for n in names],
        }
    )
