"""What an answer was built from: the context records it cites first, as tables for Dagster's metadata and as a
list of sources for the terminal, the API, MCP and the chat page."""

from __future__ import annotations

import re

import pandas as pd

from ..method.search.context import Index, SearchResult

_SOURCES_SHOWN = 10  # rows of each sources table besides the cited ones, which are always shown


def cited(answer: str, kind: str) -> list[int]:
    """The record numbers an answer cites as `[Data: <kind> (3, 7)]`, in order, once each."""
    numbers = (n for group in re.findall(rf"{kind} \(([\d, +more]+)\)", answer) for n in re.findall(r"\d+", group))
    return list(dict.fromkeys(int(n) for n in numbers))


def cited_first(ids: list[str], numbers: pd.Series, answer: str, kind: str) -> list[str]:
    """The context's records of a kind with every one the answer cites first, then the rest up to the limit."""
    wanted = set(cited(answer, kind))
    known = [i for i in dict.fromkeys(ids) if i in numbers.index]  # a record the context read twice is one source
    cited_ids = [i for i in known if numbers[i] in wanted]
    rest = [i for i in known if numbers[i] not in wanted][: max(0, _SOURCES_SHOWN - len(cited_ids))]
    return cited_ids + rest


def sources_markdown(index: Index, result: SearchResult) -> str:
    """What the answer was built from, each record with the number the answer cites it by."""
    parts = []
    if result.context.get("reports"):
        numbers = index.citation_numbers("reports")
        shown = cited_first(result.context["reports"], numbers, result.answer, "Reports")
        rows = index.reports.set_index("id").loc[shown].rename(columns={"cited_as": "report"})
        parts.append("**Community reports**\n\n" + rows[["report", "level", "title"]].to_markdown(index=False))
    if result.context.get("points"):
        points = pd.DataFrame(result.context["points"])[["score", "description"]]
        parts.append("**Scored points (map step)**\n\n" + points.head(15).to_markdown(index=False))
    if result.context.get("communities"):  # lazy search: where the walk found relevant text
        parts.append(
            "**Communities where relevant text was found**: " + ", ".join(map(str, result.context["communities"]))
        )
    if result.context.get("entities"):
        titles = index.entities.set_index("id").loc[result.context["entities"], "title"]
        parts.append("**Entities**: " + ", ".join(t.title() for t in titles.head(20)))
    if result.context.get("text_units"):
        numbers = index.citation_numbers("text_units")
        shown = cited_first(result.context["text_units"], numbers, result.answer, "Sources")
        units = index.text_units.set_index("id").loc[shown]
        titles = index.documents.set_index("id")["title"]
        table = pd.DataFrame(
            {
                "source": numbers[units.index].to_numpy(),
                "document": units["document_id"].map(titles).to_numpy(),
                "where": units["location"].to_numpy() if "location" in units else None,
                "chunk": units["chunk_index"].to_numpy(),
                "text": units["text"].str.replace(r"\s+", " ", regex=True).str[:200].to_numpy(),
            }
        )
        if table["where"].isna().all():  # plain text has no pages or headings to point at
            table = table.drop(columns="where")
        parts.append(
            "**Source text units** (an answer's `Sources (n)` is the row numbered n)\n\n"
            + table.to_markdown(index=False)
        )
    return "\n\n".join(parts) or "_no sources: nothing relevant was found_"


def _document_fields(index: Index, unit_ids: list[str]) -> list[dict]:
    units = index.text_units.set_index("id").loc[unit_ids]
    titles = index.documents.set_index("id")["title"]
    numbers = index.citation_numbers("text_units")
    fields = []
    for unit_id, unit in units.iterrows():
        pages = [int(p) for p in unit["pages"]] if "pages" in unit and len(unit["pages"]) else []
        fields.append(
            {
                "kind": "text_unit",
                "id": unit_id,
                "number": int(numbers[unit_id]),
                "title": titles.get(unit["document_id"], ""),
                "text": unit["text"],
                "document_id": unit["document_id"],
                "document": titles.get(unit["document_id"], ""),
                "location": unit.get("location") or None,
                "pages": pages,
                "chunk": int(unit["chunk_index"]),
            }
        )
    return fields


def source_list(index: Index, result: SearchResult) -> list[dict]:
    """The answer's sources, each {kind, id, number, title, text, ...}: the records it cites first, then the rest of
    its context up to a limit per kind. Text units say their document, and the pages or heading they sit under."""
    sources: list[dict] = []
    context = result.context
    if context.get("reports"):
        numbers = index.citation_numbers("reports")
        reports = index.reports.set_index("id")
        for report_id in cited_first(context["reports"], numbers, result.answer, "Reports"):
            report = reports.loc[report_id]
            sources.append(
                {
                    "kind": "report",
                    "id": report_id,
                    "number": int(numbers[report_id]),
                    "title": report["title"],
                    "text": report["summary"],
                    "level": int(report["level"]),
                }
            )
    if context.get("entities"):
        entities = index.entities.set_index("id")
        for entity_id in [e for e in dict.fromkeys(context["entities"]) if e in entities.index][:_SOURCES_SHOWN]:
            entity = entities.loc[entity_id]
            sources.append(
                {
                    "kind": "entity",
                    "id": entity_id,
                    "number": int(entity["human_readable_id"]),
                    "title": entity["title"].title(),
                    "text": entity["description"],
                }
            )
    if context.get("relationships"):
        relationships = index.relationships.set_index("id")
        shown = [r for r in dict.fromkeys(context["relationships"]) if r in relationships.index][:_SOURCES_SHOWN]
        for relationship_id in shown:
            relationship = relationships.loc[relationship_id]
            sources.append(
                {
                    "kind": "relationship",
                    "id": relationship_id,
                    "number": int(relationship["human_readable_id"]),
                    "title": f"{relationship['source'].title()} - {relationship['target'].title()}",
                    "text": relationship["description"],
                }
            )
    if context.get("text_units"):
        numbers = index.citation_numbers("text_units")
        shown = cited_first(context["text_units"], numbers, result.answer, "Sources")
        sources.extend(_document_fields(index, shown))
    return sources


EXCERPT_CHARS = 300


def excerpt(source: dict) -> dict:
    """A source as an answer's record keeps it: a passage's text cut to its beginning."""
    if source["kind"] != "text_unit" or len(source["text"]) <= EXCERPT_CHARS:
        return source
    return {**source, "text": source["text"][:EXCERPT_CHARS], "excerpt": True}


def whole(sources: list[dict], units: pd.DataFrame) -> list[dict]:
    """Recorded sources with each passage's whole text again, from the corpus's text units (where it still has
    the passage)."""
    texts = units.set_index("id")["text"]
    return [
        {k: v for k, v in s.items() if k != "excerpt"} | {"text": texts[s["id"]]}
        if s.get("excerpt") and s["id"] in texts.index
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
