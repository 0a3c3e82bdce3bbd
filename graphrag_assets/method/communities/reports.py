"""Community reports, bottom-up where it matters: a community whose own context fits the budget is written at
once, whatever its level; one that needs its sub-communities' reports (a context too large, or a community carried
down unchanged) waits for those reports alone, which are asked one to a request."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import dataclass, field, replace

import polars as pl

from .. import defaults
from ..graph.records import parse_json_reply
from ..model_interface import ChatModel, InvalidReply
from ..offline.extractive import WordCases, extractive_report
from ..progress import Progress
from ..prompts import DEFAULT_PROMPTS, PromptSet
from ..schema import columns, frame, records
from .context import SECTIONS, SOURCE_SECTIONS, CommunityContext, GraphIndex, SubReport, build_context, fits

REPORT_COLUMNS = columns("community_reports")
REPORT_PROMPTS = ("community_report", "community_report_batch")
# The fast method's reports, written from each community's concepts and source passages.
SOURCE_REPORT_PROMPTS = ("community_report_sources", "community_report_sources_batch")
REPORT_PARAMS = {"response_format": {"type": "json_object"}}
# A report written with others in one request is kept short, so that a batch fits one reply.
BATCH_REPORT_WORDS = 200
_ROW_ID = re.compile(r"^([0-9a-f]{8}),", re.MULTILINE)
_CITED_ID = re.compile(r"\b[0-9a-f]{8}\b")


@dataclass
class ReportStats:
    generated: int = 0
    repaired_json: int = 0  # complete replies whose JSON needed repair (a trailing comma, a code fence)
    reused: int = 0  # carried-down communities share their report
    batched: int = 0  # small communities reported several to a request
    batch_requests: int = 0
    failed: int = 0  # rows with status "failed"
    substitutions: list[dict] = field(default_factory=list)


def _text(data: dict, name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidReply(f"the report has no {name}")
    return value.strip()


def _report_fields(data: object) -> dict:
    """The report in `data`, or InvalidReply unless it has every field the prompt asks for."""
    if not isinstance(data, dict):
        raise InvalidReply("the report is not a JSON object")
    try:
        rating = float(data.get("rating"))
    except (TypeError, ValueError):
        raise InvalidReply(f"the report's rating {data.get('rating')!r} is not a number") from None
    if not 0 <= rating <= 10:
        raise InvalidReply(f"the report's rating {rating:g} is outside 0-10")
    findings = data.get("findings")
    if not isinstance(findings, list) or not findings:
        raise InvalidReply("the report has no findings")
    if not all(isinstance(f, dict) for f in findings):
        raise InvalidReply("a finding is not an object with summary and explanation")
    return {
        "title": _text(data, "title"),
        "summary": _text(data, "summary"),
        "rating": rating,
        "rating_explanation": str(data.get("rating_explanation") or ""),
        "findings": [{"summary": _text(f, "summary"), "explanation": _text(f, "explanation")} for f in findings],
    }


def parse_report(reply: str, rows: set[str] | None = None) -> tuple[dict, bool]:
    """(the report, whether its JSON needed repair); InvalidReply unless it has every field the prompt asks for,
    and, given the context's `rows`, unless every row id it cites is one of them."""
    data, repaired = parse_json_reply(reply)
    report = _report_fields(data)
    if rows is not None:
        unknown = sorted(set(_CITED_ID.findall(json.dumps(report["findings"]))) - rows)
        if unknown:
            raise InvalidReply(f"the report cites rows {unknown[:5]} that are not in its community's data")
    return report, repaired


def parse_report_batch(
    reply: str, contexts: dict[int, CommunityContext], cite_own_rows: bool = False
) -> dict[int, dict]:
    """The report on each community asked for, by number; InvalidReply unless there is exactly one on each,
    complete, and none cites rows that only another community of the request has (the reports got mixed up), or
    with `cite_own_rows`, any row its own community lacks.
    """
    data, _ = parse_json_reply(reply)
    items = data.get("reports") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise InvalidReply('the reply has no "reports" list')
    rows = {number: set(_ROW_ID.findall(context.text)) for number, context in contexts.items()}
    reports: dict[int, dict] = {}
    for item in items:
        number = item.get("community") if isinstance(item, dict) else None
        try:
            number = int(number)
        except (TypeError, ValueError):
            raise InvalidReply(f"a report names no community it is on ({number!r})") from None
        if number not in contexts:
            raise InvalidReply(f"a report is on community {number}, which was not asked for")
        if number in reports:
            raise InvalidReply(f"community {number} has two reports")
        report = _report_fields(item)
        cited = set(_CITED_ID.findall(json.dumps(report["findings"]))) - rows[number]
        if cite_own_rows and cited:
            raise InvalidReply(f"the report on community {number} cites rows {sorted(cited)[:5]} not in its data")
        for other, other_rows in rows.items():
            if cited & other_rows:
                raise InvalidReply(f"the report on community {number} cites rows of community {other}")
        reports[number] = report
    missing = sorted(set(contexts) - set(reports))
    if missing:
        raise InvalidReply(f"the reply has no report on communities {missing}")
    return reports


def markdown(report: dict) -> str:
    parts = [f"# {report['title']}", report["summary"]]
    parts += [f"## {f['summary']}\n\n{f['explanation']}" for f in report["findings"]]
    return "\n\n".join(parts)


@dataclass(frozen=True)
class ReportPrompts:
    """The prompts reports are written with (names, and the set they come from), and whether a report must cite
    only its own community's rows."""

    single: str = REPORT_PROMPTS[0]
    batch: str = REPORT_PROMPTS[1]
    cite_own_rows: bool = False
    templates: PromptSet = DEFAULT_PROMPTS

    def parse(self, context: CommunityContext):
        rows = set(_ROW_ID.findall(context.text)) if self.cite_own_rows else None
        return lambda reply: parse_report(reply, rows)


ENTITY_REPORTS = ReportPrompts()
SOURCE_REPORTS = ReportPrompts(*SOURCE_REPORT_PROMPTS, cite_own_rows=True)


def report_messages(
    context: CommunityContext, max_report_length: int, prompts: ReportPrompts = ENTITY_REPORTS
) -> list[dict]:
    prompt = prompts.templates[prompts.single]
    return [{"role": "user", "content": prompt.format(input_text=context.text, max_report_length=max_report_length)}]


async def llm_report(
    chat: ChatModel, context: CommunityContext, max_report_length: int, prompts: ReportPrompts = ENTITY_REPORTS
) -> tuple[dict, bool] | None:
    """(report, whether its JSON needed repair), or None when no valid report came after the re-asks."""
    return await chat.complete(
        report_messages(context, max_report_length, prompts), parse=prompts.parse(context), **REPORT_PARAMS
    )


async def llm_reports_batch(
    chat: ChatModel,
    contexts: dict[int, CommunityContext],
    max_report_length: int,
    stats: ReportStats,
    prompts: ReportPrompts = ENTITY_REPORTS,
) -> dict[int, tuple[dict, bool] | None]:
    """Reports on several small communities from one request, each then cached as the answer to its own
    request: a later run whose contexts changed for some of them asks only for those. A reply that stays
    invalid after the re-asks gives way to one request per community.
    """
    if len(contexts) > 1:
        blocks = "\n\n".join(f'<community id="{n}">\n{c.text}\n</community>' for n, c in contexts.items())
        words = min(max_report_length, BATCH_REPORT_WORDS)
        prompt = prompts.templates[prompts.batch].format(communities=blocks, max_report_length=words)
        stats.batch_requests += 1
        together = await chat.complete(
            [{"role": "user", "content": prompt}],
            parse=lambda reply: parse_report_batch(reply, contexts, prompts.cite_own_rows),
            **REPORT_PARAMS,
        )
        if together is not None:
            stats.batched += len(together)
            for number, report in together.items():
                chat.remember(
                    report_messages(contexts[number], max_report_length, prompts), json.dumps(report), **REPORT_PARAMS
                )
            return {number: (report, False) for number, report in together.items()}
    reports = await asyncio.gather(*(llm_report(chat, c, max_report_length, prompts) for c in contexts.values()))
    return dict(zip(contexts, reports))


def _groups(contexts: dict[int, CommunityContext], size: int) -> list[dict[int, CommunityContext]]:
    numbers = sorted(contexts)
    return [{n: contexts[n] for n in numbers[i : i + size]} for i in range(0, len(numbers), size)]


@dataclass(frozen=True)
class ReportSettings:
    """How reports are written (community_reports' config builds one). Communities whose context has at most
    `batch_below_tokens` tokens are reported `batch_size` to a request: a community of two or three entities needs
    a short report, not a request of its own. `from_sources` (the fast method): each context is the community's
    concepts and the text units they occur in, and a report may cite those rows only."""

    max_context_tokens: int = defaults.REPORT_MAX_CONTEXT_TOKENS
    max_report_length: int = defaults.REPORT_MAX_LENGTH
    batch_below_tokens: int = defaults.REPORT_BATCH_BELOW_TOKENS
    batch_size: int = defaults.REPORT_BATCH_SIZE
    from_sources: bool = False
    templates: PromptSet = DEFAULT_PROMPTS


async def generate_reports(
    chat: ChatModel | None,
    communities: pl.DataFrame,
    entities: pl.DataFrame,
    relationships: pl.DataFrame,
    covariates: pl.DataFrame,
    text_units: pl.DataFrame,
    settings: ReportSettings = ReportSettings(),
    progress: Progress | None = None,
) -> tuple[pl.DataFrame, ReportStats]:
    """One report per community; with no chat model, extractive reports from the community's text.

    Every level is written at once, each community as soon as it can be: one that needs its sub-communities'
    reports (see _ReportWriter.needs_sub_reports) waits for those reports alone, not for the rest of their level."""
    # Offline, a report quotes its units' text; the fast method's contexts hold it.
    quoted = settings.from_sources or chat is None
    graph = GraphIndex(entities, relationships, covariates, text_units if quoted else None, settings.from_sources)
    writer = _ReportWriter(chat, graph, communities, settings, progress)
    levels = sorted(communities["level"].unique().to_list(), reverse=True)
    # The columns the graph and the writer read are theirs now; the rest of the frames goes (a caller that holds
    # none of them lets the graph and the text go before the table is built).
    del communities, entities, relationships, covariates, text_units
    if chat is None:  # nothing to wait for: one level at a time, bottom-up, so one level's rows are held at once
        for level in levels:
            await writer.write_level(writer.rows(level))
    else:
        by_level = [writer.rows(level) for level in levels]
        writer.plan([row for rows in by_level for row in rows])
        await asyncio.gather(*(writer.write_level(rows) for rows in by_level))
    reports, by_number, stats = writer.reports, writer.by_number, writer.stats
    del writer, graph  # the graph's lookups: not held while the table is built
    table = _report_table(reports, by_number)
    stats.failed = int((table["status"] == "failed").sum())  # carried-down copies of a failure count too
    return table, stats


class _ReportWriter:
    """The state one generate_reports call shares between its levels: the reports written so far, each waiting
    community's graph elements, and the counts."""

    def __init__(self, chat, graph: GraphIndex, communities, settings: ReportSettings, progress):
        self.chat, self.graph, self.settings, self.progress = chat, graph, settings, progress
        prompts, self.sections = (
            (SOURCE_REPORTS, SOURCE_SECTIONS) if settings.from_sources else (ENTITY_REPORTS, SECTIONS)
        )
        self.prompts = replace(prompts, templates=settings.templates)
        self.stats = ReportStats()
        self.reports: dict[int, dict] = {}
        self.communities = communities
        # Every community's place in the hierarchy; its members' ids only while its level is written (rows()).
        hierarchy = communities.select("community", "id", "level", "parent", "children", "size", "carried_from")
        self.by_number = {row.community: row for row in records(hierarchy)}
        self.titles_of: dict[int, set[str]] = {}
        self.cases = WordCases(graph.units.values()) if chat is None else None  # once for the corpus
        self._elements: dict[int, list] = {}
        self.written = {number: asyncio.Event() for number in self.by_number}
        self.waits: dict[int, bool] = {}  # community -> whether it waits for its sub-communities' reports
        self.awaited: set[int] = set()  # communities whose report one of those waits for

    def rows(self, level: int) -> list:
        """The level's communities with their members' row numbers; with a model, their entity titles kept for the
        level above, whose contexts may hold their reports."""
        rows = list(records(self.graph.locate(self.communities.filter(pl.col("level") == level))))
        for row in rows if self.chat is not None else ():
            self.titles_of[row.community] = self.graph.titles(row.entity_rows)
        return rows

    def elements(self, row) -> list:
        if row.community not in self._elements:
            self._elements[row.community] = (
                self.graph.source_elements(row.entity_rows)
                if self.settings.from_sources
                else self.graph.elements(row.entity_rows, row.relationship_rows)
            )
        return self._elements[row.community]

    def carried(self, row) -> bool:
        children = list(row.children)
        return len(children) == 1 and self.by_number[children[0]].carried_from == row.community

    def needs_sub_reports(self, row) -> bool:
        """A community carried down unchanged shares its child's report; one whose own context does not fit is
        written from its sub-communities' reports."""
        if self.carried(row):
            return True
        if self.chat is None or not len(row.children):
            return False
        if fits(self.elements(row), self.settings.max_context_tokens, self.sections):
            return False
        self._elements.pop(row.community)  # the largest communities: not held while they wait for their children
        return True

    def plan(self, rows: list) -> None:
        """Which rows wait for their sub-communities' reports, and whose reports those wait for: the children of a
        community written from them, and down through the copies a community carried down shares."""
        for row in rows:
            self.waits[row.community] = self.needs_sub_reports(row)
        for row in rows:
            if self.waits[row.community] and not self.carried(row):
                below = list(row.children)
                while below:
                    child = self.by_number[below.pop()]
                    self.awaited.add(child.community)
                    if self.carried(child):
                        below.extend(child.children)

    def context_of(self, row) -> CommunityContext:
        reports, by_number = self.reports, self.by_number
        subs = [
            SubReport(c, by_number[c].id, frozenset(self.titles_of[c]), reports[c]["title"], reports[c]["summary"])
            for c in row.children
            if reports.get(c, {}).get("status") == "ok"
        ]
        context = build_context(self.elements(row), self.settings.max_context_tokens, subs, self.sections)
        self._elements.pop(row.community)
        if context.substituted:
            replaced = context.replaced_elements
            self.stats.substitutions.append({"community": row.community, "replaced_by_reports": replaced})
        return context

    async def write(self, rows: list) -> None:
        """Writes the rows' reports, keeping each as soon as it is written."""
        contexts: dict[int, CommunityContext] = {}
        for row in rows:
            children = list(row.children)
            if self.carried(row):
                self.stats.reused += 1
                self.keep(row.community, {**self.reports[children[0]], "substituted_communities": []})
            elif self.chat is None:
                self.stats.generated += 1
                graph = self.graph
                members, edges = graph.members(row.entity_rows), graph.edges(row.relationship_rows)
                texts = graph.units.of(row.text_unit_ids)
                report = extractive_report(members, edges, texts, self.cases)
                extractive = {"status": "ok", "error": None, "context_tokens": 0, "substituted_communities": []}
                self.keep(row.community, {**report, **extractive})
            else:
                contexts[row.community] = self.context_of(row)
        await self.write_with_model(contexts)

    async def write_with_model(self, contexts: dict[int, CommunityContext]) -> None:
        """Large contexts one to a request; small ones from the cache, else several to a request."""
        chat, prompts, stats, settings = self.chat, self.prompts, self.stats, self.settings
        length = settings.max_report_length
        small: dict[int, CommunityContext] = {}
        alone: list[int] = []
        for number, context in contexts.items():
            # A report another waits for is asked alone: a request for several answers when its longest is done.
            if settings.batch_size < 2 or context.tokens > settings.batch_below_tokens or number in self.awaited:
                alone.append(number)
                continue
            messages = report_messages(context, length, prompts)
            cached = chat.cached(messages, parse=prompts.parse(context), **REPORT_PARAMS)
            if cached is not None:
                self.keep(number, _written(number, context, cached, stats))
            else:
                small[number] = context

        async def one(number: int) -> None:
            answer = await llm_report(chat, contexts[number], length, prompts)
            self.keep(number, _written(number, contexts[number], answer, stats))

        async def several(group: dict[int, CommunityContext]) -> None:
            for number, answer in (await llm_reports_batch(chat, group, length, stats, prompts)).items():
                self.keep(number, _written(number, contexts[number], answer, stats))

        await asyncio.gather(*map(one, alone), *map(several, _groups(small, settings.batch_size)))

    async def write_level(self, rows: list) -> None:
        """Writes the communities that need nothing from the level below at once, and each of the others when its
        sub-communities' reports are written: a community waits for its own children, not for their whole level."""
        self.plan([row for row in rows if row.community not in self.waits])
        waits = self.waits

        async def after_its_children(row) -> None:
            await asyncio.gather(*(self.written[child].wait() for child in row.children))
            await self.write([row])

        await asyncio.gather(
            self.write([r for r in rows if not waits[r.community]]),
            *(after_its_children(r) for r in rows if waits[r.community]),
        )

    def keep(self, number: int, report: dict) -> None:
        self.reports[number] = report
        self.written[number].set()
        if self.progress:
            self.progress.advance(failed=report["status"] != "ok")


def _written(number: int, context: CommunityContext, parsed: tuple[dict, bool] | None, stats: ReportStats) -> dict:
    """A community's report as the table keeps it, or a failed one; counts what it was in `stats`."""
    common = {"context_tokens": context.tokens, "substituted_communities": context.substituted}
    if parsed is None:
        return {
            "title": f"Community {number}",
            "summary": "",
            "rating": 0.0,
            "rating_explanation": "",
            "findings": [],
            "status": "failed",
            "error": "no valid report after the re-asks, or the model call failed",
            **common,
        }
    report, repaired = parsed
    stats.repaired_json += repaired
    stats.generated += 1
    return {**report, "status": "ok", "error": None, **common}


def _report_table(reports: dict[int, dict], by_number: dict) -> pl.DataFrame:
    """The community_reports table: one row per community, in community order. Built a thousand rows at a time,
    each report let go as its rows join the table (`reports` ends empty): the reports, their rows and the table
    held all at once were the offline step's peak (1,448 MiB at 50 MB of text)."""
    numbers, parts = sorted(reports), []
    for start in range(0, len(numbers), 1000):
        chunk = numbers[start : start + 1000]
        parts.append(frame("community_reports", [_report_row(reports.pop(n), by_number[n]) for n in chunk]))
    return pl.concat(parts) if parts else frame("community_reports")


def _report_row(report: dict, row) -> dict:
    return {
        "id": hashlib.sha256(f"report:{row.id}".encode()).hexdigest()[:32],
        "human_readable_id": row.community,
        "community": row.community,
        "level": row.level,
        "parent": row.parent,
        "children": list(row.children),
        "title": report["title"],
        "summary": report["summary"],
        "full_content": markdown(report) if report["status"] == "ok" else "",
        "rank": report["rating"],
        "rating_explanation": report["rating_explanation"],
        "findings": json.dumps(report["findings"]),
        "full_content_json": json.dumps(
            {k: report[k] for k in ("title", "summary", "rating", "rating_explanation", "findings")}
        ),
        "size": row.size,
        "status": report["status"],
        "error": report["error"],
        "context_tokens": report["context_tokens"],
        "substituted_communities": report["substituted_communities"],
    }
