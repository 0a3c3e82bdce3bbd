"""What an answer was built from: the context records it cites first, as tables for Dagster's metadata and as a
list of sources for the terminal, the API, MCP and the chat page."""

from __future__ import annotations

import re

from tabulate import tabulate

from ..method.search.context import Index, SearchResult

_SOURCES_SHOWN = 10  # rows of each sources table besides the cited ones, which are always shown


def cited(answer: str, kind: str) -> list[int]:
    """The record numbers an answer cites as `[Data: <kind> (3, 7)]`, in order, once each."""
    numbers = (n for group in re.findall(rf"{kind} \(([\d, +more]+)\)", answer) for n in re.findall(r"\d+", group))
    return list(dict.fromkeys(int(n) for n in numbers))


def cited_first(ids: list[str], numbers: dict[str, int], answer: str, kind: str) -> list[str]:
    """The context's records of a kind with every one the answer cites first, then the rest up to the limit."""
    wanted = set(cited(answer, kind))
    known = [i for i in dict.fromkeys(ids) if i in numbers]  # a record the context read twice is one source
    cited_ids = [i for i in known if numbers[i] in wanted]
    rest = [i for i in known if numbers[i] not in wanted][: max(0, _SOURCES_SHOWN - len(cited_ids))]
    return cited_ids + rest


def _table(rows: list[tuple], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="pipe")


def sources_markdown(index: Index, result: SearchResult) -> str:
    """What the answer was built from, each record with the number the answer cites it by."""
    parts = []
    if result.context.get("reports"):
        shown = cited_first(result.context["reports"], index.citation_numbers("reports"), result.answer, "Reports")
        rows = [(r.cited_as, r.level, r.title) for r in index.rows_of("reports", shown)]
        parts.append("**Community reports**\n\n" + _table(rows, ["report", "level", "title"]))
    if result.context.get("points"):
        points = [(point["score"], point["description"]) for point in result.context["points"][:15]]
        parts.append("**Scored points (map step)**\n\n" + _table(points, ["score", "description"]))
    if result.context.get("communities"):  # lazy search: where the walk found relevant text
        parts.append(
            "**Communities where relevant text was found**: " + ", ".join(map(str, result.context["communities"]))
        )
    if result.context.get("entities"):
        entities = index.rows_of("entities", result.context["entities"])
        parts.append("**Entities**: " + ", ".join(e.title.title() for e in entities[:20]))
    if result.context.get("text_units"):
        numbers = index.citation_numbers("text_units")
        shown = cited_first(result.context["text_units"], numbers, result.answer, "Sources")
        units = index.rows_of("text_units", shown)
        titles = index.document_titles()
        places = [unit.location for unit in units]
        rows = [
            (numbers[u.id], titles.get(u.document_id), place, u.chunk_index, re.sub(r"\s+", " ", u.text)[:200])
            for u, place in zip(units, places)
        ]
        headers = ["source", "document", "where", "chunk", "text"]
        if all(place is None for place in places):  # plain text has no pages or headings to point at
            rows, headers = [row[:2] + row[3:] for row in rows], headers[:2] + headers[3:]
        parts.append(
            "**Source text units** (an answer's `Sources (n)` is the row numbered n)\n\n" + _table(rows, headers)
        )
    return "\n\n".join(parts) or "_no sources: nothing relevant was found_"


def _document_fields(index: Index, unit_ids: list[str]) -> list[dict]:
    titles = index.document_titles()
    numbers = index.citation_numbers("text_units")
    return [
        {
            "kind": "text_unit",
            "id": unit.id,
            "number": numbers[unit.id],
            "title": titles.get(unit.document_id, ""),
            "text": unit.text,
            "document_id": unit.document_id,
            "document": titles.get(unit.document_id, ""),
            "location": unit.location or None,
            "pages": list(unit.pages or []),
            "chunk": unit.chunk_index,
        }
        for unit in index.rows_of("text_units", unit_ids)
    ]


def source_list(index: Index, result: SearchResult) -> list[dict]:
    """The answer's sources, each {kind, id, number, title, text, ...}: the records it cites first, then the rest of
    its context up to a limit per kind. Text units say their document, and the pages or heading they sit under;
    a record that hybrid retrieval chose says which retrievers found it (`retrieved_by`), and a text unit of which
    the context held only part says which part (`passage`)."""
    sources: list[dict] = []
    context = result.context
    if context.get("reports"):
        numbers = index.citation_numbers("reports")
        shown = cited_first(context["reports"], numbers, result.answer, "Reports")
        sources += [
            {
                "kind": "report",
                "id": report.id,
                "number": numbers[report.id],
                "title": report.title,
                "text": report.summary,
                "level": report.level,
            }
            for report in index.rows_of("reports", shown)
        ]
    if context.get("entities"):
        entities = index.rows_of("entities", list(dict.fromkeys(context["entities"])))[:_SOURCES_SHOWN]
        sources += [
            {
                "kind": "entity",
                "id": entity.id,
                "number": entity.human_readable_id,
                "title": entity.title.title(),
                "text": entity.description,
            }
            for entity in entities
        ]
    if context.get("relationships"):
        shown = index.rows_of("relationships", list(dict.fromkeys(context["relationships"])))[:_SOURCES_SHOWN]
        sources += [
            {
                "kind": "relationship",
                "id": relationship.id,
                "number": relationship.human_readable_id,
                "title": f"{relationship.source.title()} - {relationship.target.title()}",
                "text": relationship.description,
            }
            for relationship in shown
        ]
    if context.get("text_units"):
        numbers = index.citation_numbers("text_units")
        shown = cited_first(context["text_units"], numbers, result.answer, "Sources")
        sources.extend(_document_fields(index, shown))
    found_by = context.get("retrieved_by") or {}
    passages = context.get("passages") or {}
    return [
        source
        | ({"retrieved_by": found_by[source["id"]]} if source["id"] in found_by else {})
        | ({"passage": passages[source["id"]]} if source["id"] in passages else {})
        for source in sources
    ]


EXCERPT_CHARS = 300


def excerpt(source: dict) -> dict:
    """A source as an answer's record keeps it: a passage's text cut to its beginning."""
    if source["kind"] != "text_unit" or len(source["text"]) <= EXCERPT_CHARS:
        return source
    return {**source, "text": source["text"][:EXCERPT_CHARS], "excerpt": True}


def whole(sources: list[dict], index: Index) -> list[dict]:
    """Recorded sources with each passage's whole text again, from the corpus's text units (where it still has
    the passage)."""
    texts = index.texts(s["id"] for s in sources if s.get("excerpt"))
    return [
        {k: v for k, v in s.items() if k != "excerpt"} | {"text": texts[s["id"]]}
        if s.get("excerpt") and s["id"] in texts
        else s
        for s in sources
    ]


def where(source: dict) -> str:
    """Where a text unit sits, as a person would say it: "ledger.pdf, pages 12-13", "notes.md, Setup > Keys"."""
    pages = source.get("pages") or []
    place = (
        f"page {pages[0]}" if len(pages) == 1 else f"pages {pages[0]}-{pages[-1]}" if pages else source.get("location")
    )
    return ", ".join(part for part in (source.get("document"), place) if part)
