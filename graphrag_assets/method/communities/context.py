"""The context of a community report, built as the paper's section 3.1.5 says.

Leaf communities: element summaries in order of edge prominence (source degree + target
degree): source node, target node, the edge, their claims, until the token budget is full.
Higher communities: if all their element summaries fit, they are used as for a leaf; if not,
the sub-communities with the largest element summaries have them replaced by their (shorter)
reports, one at a time, until the context fits.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from functools import cached_property

import polars as pl

from ..ingest.tokens import count_tokens
from ..schema import records


# Record ids in the context are short content-derived ids, not row numbers: adding a document to a corpus
# then leaves the context of an untouched community unchanged, and its report is served from the cache.
def short_id(element_id: str) -> str:
    return element_id[:8]


@dataclass(frozen=True)
class SubReport:
    community: int
    key: str  # the community's stable id
    titles: frozenset[str]  # its entities
    title: str
    summary: str


SECTIONS = (
    ("report", "-----Reports-----\ncommunity,title,report"),
    ("entity", "-----Entities-----\nid,entity,description,degree"),
    ("relationship", "-----Relationships-----\nid,source,target,description,combined_degree"),
    ("claim", "-----Claims-----\nid,subject,type,status,description"),
)


# A community of a graph built without extraction (the fast method) is described by its concepts and the source
# passages they occur in, not by entity and relationship descriptions.
SOURCE_SECTIONS = (
    SECTIONS[0],
    ("concept", "-----Concepts-----\nid,concept,mentions"),
    ("source", "-----Sources-----\nid,text"),
)


@dataclass(frozen=True)
class Element:
    kind: str  # entity, relationship or claim
    key: str
    line: str
    owners: frozenset[str]  # entity titles it belongs with, to know which sub-community holds it

    @cached_property  # summed again for each sub-community tried in its place
    def tokens(self) -> int:
        return count_tokens(self.line) + 1


@dataclass
class CommunityContext:
    text: str
    tokens: int
    substituted: list[int] = field(default_factory=list)  # sub-communities whose report replaced elements
    replaced_elements: dict[int, int] = field(default_factory=dict)  # sub-community -> elements it replaced
    truncated: bool = False


def _csv(*values: object) -> str:
    return ",".join(str(v).replace("\n", " ").replace(",", ";") if isinstance(v, str) else str(v) for v in values)


class UnitTexts:
    """Text units' text by id, read from the frame's column when asked for: a Python string per unit held the
    corpus's text a second time (330 MiB at 200 MB of text, more where a unit's odd characters widen it)."""

    def __init__(self, text_units: pl.DataFrame):
        self.row = {unit: i for i, unit in enumerate(text_units["id"])}
        self.texts = text_units["text"]

    def __contains__(self, unit: str) -> bool:
        return unit in self.row

    def of(self, units) -> list[str]:
        """The texts of `units` that are known, in their order."""
        return self.texts.gather([self.row[u] for u in units if u in self.row]).to_list()

    def values(self):
        return iter(self.texts)


class GraphIndex:
    """The graph as the context builder reads it: its tables' columns, and a community's rows gathered from them
    when its context is built. A Python record per row, held for every community at once, was the step's largest
    object (1.3M relationships at 200 MB of text)."""

    def __init__(
        self,
        entities: pl.DataFrame,
        relationships: pl.DataFrame,
        covariates: pl.DataFrame,
        text_units: pl.DataFrame | None = None,
        from_sources: bool = False,
    ):
        self.units = UnitTexts(text_units) if text_units is not None else None
        sourced = ["frequency", "text_unit_ids"] if from_sources else []  # what source_elements reads
        self.entities = entities.select("id", "title", "description", "degree", *sourced)
        self.relationships = relationships.select("id", "source", "target", "description", "combined_degree")
        # a record type made once: making one per community took a tenth of an offline step's time
        self._entity, self._relationship = (namedtuple("Row", t.columns) for t in (self.entities, self.relationships))
        self.claims_by_subject: dict[str, list] = {}
        for row in records(covariates):
            self.claims_by_subject.setdefault(row.subject_id, []).append(row)

    def locate(self, communities: pl.DataFrame) -> pl.DataFrame:
        """`communities` with their members' and relationships' row numbers (entity_rows, relationship_rows) in
        place of their ids, in the same order; an id the graph lacks is left out."""
        located = communities
        for ids, table, rows in (
            ("entity_ids", self.entities, "entity_rows"),
            ("relationship_ids", self.relationships, "relationship_rows"),
        ):
            numbers = pl.int_range(len(table), dtype=pl.UInt32, eager=True)
            row_of = pl.element().replace_strict(table["id"], numbers, default=None, return_dtype=pl.UInt32)
            located = located.with_columns(pl.col(ids).list.eval(row_of).list.drop_nulls().alias(rows)).drop(ids)
        return located

    def members(self, rows) -> list:
        """Entity records at these row numbers (entity_rows of a located community)."""
        return [self._entity._make(self.entities.row(i)) for i in rows]

    def edges(self, rows) -> list:
        """Relationship records at these row numbers (relationship_rows of a located community)."""
        return [self._relationship._make(self.relationships.row(i)) for i in rows]

    def titles(self, rows) -> set[str]:
        return set(self.entities["title"].gather(list(rows)))

    def elements(self, entity_rows, relationship_rows) -> list[Element]:
        """Element summaries of a community, most prominent first."""
        ordered, seen = [], set()

        def add_entity(title: str, row) -> None:
            if ("entity", title) in seen:
                return
            seen.add(("entity", title))
            ordered.append(
                Element("entity", title, _csv(short_id(row.id), title, row.description, row.degree), frozenset([title]))
            )
            for claim in self.claims_by_subject.get(title, []):
                ordered.append(
                    Element(
                        "claim",
                        claim.id,
                        _csv(short_id(claim.id), title, claim.type, claim.status, claim.description),
                        frozenset([title]),
                    )
                )

        by_title = {row.title: row for row in self.members(entity_rows)}
        relationships = sorted(self.edges(relationship_rows), key=lambda r: (-r.combined_degree, r.id))
        for rel in relationships:
            add_entity(rel.source, by_title[rel.source])
            add_entity(rel.target, by_title[rel.target])
            ordered.append(
                Element(
                    "relationship",
                    rel.id,
                    _csv(short_id(rel.id), rel.source, rel.target, rel.description, rel.combined_degree),
                    frozenset([rel.source, rel.target]),
                )
            )
        for title, row in sorted(by_title.items(), key=lambda kv: (-kv[1].degree, kv[0])):
            add_entity(title, row)
        return ordered

    def source_elements(self, entity_rows) -> list[Element]:
        """A community's concepts, most mentioned first, then the text units they occur in, those holding the most
        of the community's concepts first: the context of a report written from source text."""
        rows = sorted(self.members(entity_rows), key=lambda r: (-r.frequency, r.title))
        concepts = [
            Element("concept", row.title, _csv(short_id(row.id), row.title, row.frequency), frozenset([row.title]))
            for row in rows
        ]
        held: dict[str, set[str]] = {}
        for row in rows:
            for unit in row.text_unit_ids:
                held.setdefault(unit, set()).add(row.title)
        ranked = sorted((u for u in held if u in self.units), key=lambda u: (-len(held[u]), u))
        sources = [
            Element("source", unit, _csv(short_id(unit), " ".join(text.split())), frozenset(held[unit]))
            for unit, text in zip(ranked, self.units.of(ranked), strict=True)
        ]
        return concepts + sources


def _report_line(report: SubReport) -> str:
    return _csv(short_id(report.key), report.title, report.summary)


def render(elements: list[Element], reports: list[SubReport] = (), sections=SECTIONS) -> str:
    parts = []
    lines = {"report": [_report_line(r) for r in reports]}
    for element in elements:
        lines.setdefault(element.kind, []).append(element.line)
    for kind, header in sections:
        if lines.get(kind):
            parts.append(header + "\n" + "\n".join(lines[kind]))
    return "\n\n".join(parts)


def _pack(elements: list[Element], budget: int) -> tuple[list[Element], bool]:
    packed, used = [], 0
    for element in elements:
        if used + element.tokens > budget:
            return packed, True
        packed.append(element)
        used += element.tokens
    return packed, False


def _overhead(sections) -> int:
    return sum(count_tokens(header) + 2 for _, header in sections)


def fits(elements: list[Element], budget: int, sections=SECTIONS) -> bool:
    """Whether a community's own elements fit `budget`: if so, its context does not use its sub-communities'
    reports, and it can be written before them."""
    return sum(e.tokens for e in elements) + _overhead(sections) <= budget


def build_context(
    elements: list[Element], budget: int, sub_communities: list[SubReport] = (), sections=SECTIONS
) -> CommunityContext:
    """The context of one community within `budget` tokens, given the reports of its sub-communities."""
    overhead = _overhead(sections)
    if fits(elements, budget, sections) or not sub_communities:
        packed, truncated = _pack(elements, budget - overhead)
        text = render(packed, sections=sections)
        return CommunityContext(text, count_tokens(text), truncated=truncated)

    def owner(element: Element) -> int | None:
        for sub in sub_communities:
            if element.owners <= sub.titles:
                return sub.community
        return None  # an edge between two sub-communities stays with the community itself

    owned: dict[int, list[Element]] = {sub.community: [] for sub in sub_communities}
    for element in elements:
        number = owner(element)
        if number is not None:
            owned[number].append(element)
    largest_first = sorted(sub_communities, key=lambda s: (-sum(e.tokens for e in owned[s.community]), s.community))
    substituted: list[SubReport] = []
    for sub in largest_first:
        substituted.append(sub)
        replaced = {s.community for s in substituted}
        remaining = [e for e in elements if owner(e) not in replaced]
        report_tokens = sum(count_tokens(_report_line(r)) + 1 for r in substituted)
        if report_tokens + sum(e.tokens for e in remaining) + overhead <= budget:
            break
    # Whatever still does not fit is cut, reports first kept, then elements by prominence.
    kept_reports, used = [], overhead
    for report in substituted:
        cost = count_tokens(_report_line(report)) + 1
        if used + cost <= budget:
            kept_reports.append(report)
            used += cost
    packed, truncated = _pack(remaining, budget - used)
    text = render(packed, kept_reports, sections)
    return CommunityContext(
        text,
        count_tokens(text),
        substituted=[s.community for s in substituted],
        replaced_elements={s.community: len(owned[s.community]) for s in substituted},
        truncated=truncated or len(kept_reports) < len(substituted),
    )
