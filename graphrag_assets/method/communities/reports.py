"""Community reports, bottom-up: deepest level first, communities of one level concurrently."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field

import pandas as pd

from ..graph.records import ChatModel, InvalidReply, parse_json_reply
from ..offline.extractive import extractive_report
from ..progress import Progress
from ..prompts import load_prompt
from .context import CommunityContext, GraphIndex, SubReport, build_context

REPORT_COLUMNS = [
    "id",
    "human_readable_id",
    "community",
    "level",
    "parent",
    "children",
    "title",
    "summary",
    "full_content",
    "rank",
    "rating_explanation",
    "findings",
    "full_content_json",
    "size",
    "status",
    "error",
    "context_tokens",
    "substituted_communities",
]
REPORT_PROMPTS = ("community_report",)


@dataclass
class ReportStats:
    generated: int = 0
    repaired_json: int = 0  # complete replies whose JSON needed repair (a trailing comma, a code fence)
    reused: int = 0  # carried-down communities share their report
    failed: int = 0  # rows with status "failed"
    substitutions: list[dict] = field(default_factory=list)


def _text(data: dict, name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidReply(f"the report has no {name}")
    return value.strip()


def parse_report(reply: str) -> tuple[dict, bool]:
    """(the report, whether its JSON needed repair); InvalidReply unless it has every field the prompt asks for."""
    data, repaired = parse_json_reply(reply)
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
    report = {
        "title": _text(data, "title"),
        "summary": _text(data, "summary"),
        "rating": rating,
        "rating_explanation": str(data.get("rating_explanation") or ""),
        "findings": [{"summary": _text(f, "summary"), "explanation": _text(f, "explanation")} for f in findings],
    }
    return report, repaired


def markdown(report: dict) -> str:
    parts = [f"# {report['title']}", report["summary"]]
    parts += [f"## {f['summary']}\n\n{f['explanation']}" for f in report["findings"]]
    return "\n\n".join(parts)


async def llm_report(chat: ChatModel, context: CommunityContext, max_report_length: int) -> tuple[dict, bool] | None:
    """(report, whether its JSON needed repair), or None when no valid report came after the re-asks."""
    messages = [
        {
            "role": "user",
            "content": load_prompt("community_report").format(
                input_text=context.text, max_report_length=max_report_length
            ),
        }
    ]
    return await chat.complete(messages, parse=parse_report, response_format={"type": "json_object"})


async def generate_reports(
    chat: ChatModel | None,
    communities: pd.DataFrame,
    entities: pd.DataFrame,
    relationships: pd.DataFrame,
    covariates: pd.DataFrame,
    text_units: pd.DataFrame,
    max_context_tokens: int = 8000,
    max_report_length: int = 1500,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, ReportStats]:
    """One report per community; with no chat model, extractive reports from the community's text."""
    graph = GraphIndex(entities, relationships, covariates)
    stats = ReportStats()
    reports: dict[int, dict] = {}
    by_number = {row.community: row for row in communities.itertuples(index=False)}
    titles_of = {n: {graph.entity[e].title for e in row.entity_ids} for n, row in by_number.items()}
    units = text_units.set_index("id")["text"].to_dict() if chat is None else {}

    async def one(row) -> dict:
        children = list(row.children)
        if len(children) == 1 and by_number[children[0]].carried_from == row.community:
            stats.reused += 1
            return {**reports[children[0]], "substituted_communities": []}
        if chat is None:
            report = extractive_report(row, graph, titles_of[row.community], units)
            stats.generated += 1
            return {**report, "status": "ok", "error": None, "context_tokens": 0, "substituted_communities": []}
        subs = [
            SubReport(c, by_number[c].id, frozenset(titles_of[c]), reports[c]["title"], reports[c]["summary"])
            for c in children
            if reports.get(c, {}).get("status") == "ok"
        ]
        context = build_context(
            graph.elements(list(row.entity_ids), list(row.relationship_ids)), max_context_tokens, subs
        )
        if context.substituted:
            stats.substitutions.append({"community": row.community, "replaced_by_reports": context.replaced_elements})
        parsed = await llm_report(chat, context, max_report_length)
        common = {"context_tokens": context.tokens, "substituted_communities": context.substituted}
        if parsed is None:
            return {
                "title": f"Community {row.community}",
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

    for level in sorted(communities["level"].unique(), reverse=True):
        rows = [r for r in communities.itertuples(index=False) if r.level == level]
        for row, report in zip(rows, await asyncio.gather(*(one(r) for r in rows))):
            reports[row.community] = report
            if progress:
                progress.advance(failed=report["status"] != "ok")

    table = []
    for number, report in sorted(reports.items()):
        row = by_number[number]
        table.append(
            {
                "id": hashlib.sha256(f"report:{row.id}".encode()).hexdigest()[:32],
                "human_readable_id": number,
                "community": number,
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
        )
    table = pd.DataFrame(table, columns=REPORT_COLUMNS)
    stats.failed = int((table["status"] == "failed").sum())  # carried-down copies of a failure count too
    return table, stats
