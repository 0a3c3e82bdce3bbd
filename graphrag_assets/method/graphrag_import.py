"""A Microsoft GraphRAG output folder (its parquet files) read into this project's tables, without a model call.

A corpus folder that holds GraphRAG's `entities.parquet`, `communities.parquet` and `community_reports.parquet`
(in the folder itself or in its `output/` subfolder) is an import. Its ids stay as they are, so answers cite
the same records GraphRAG would. Its hierarchy stops where Leiden stopped splitting; ours carries such a
community down as a copy to every deeper level (paper: C1-C3 partition the whole graph), so the copies are
added here, each repeating the report of the community it copies.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import polars as pl

from .communities.leiden import community_id
from .graph.claims import COVARIATE_COLUMNS
from .ingest.tokens import count_tokens
from .schema import frame, records

REQUIRED = ("entities", "relationships", "communities", "community_reports", "text_units", "documents")


class GraphRAGOutputError(ValueError):
    """A GraphRAG output that cannot be imported; the message names the file and what is wrong."""


def read(output: Path, name: str, columns: tuple[str, ...], only: tuple[str, ...] | None = None) -> list[dict]:
    """The rows of one of the output's tables, which must have `columns`; with `only`, just those of its columns
    the file has. Rows are read as Python values and converted one by one below: GraphRAG's versions wrote the
    same column as an integer, a float or a string."""
    path = output / f"{name}.parquet"
    if not path.is_file():
        raise GraphRAGOutputError(f"{path} is missing: a GraphRAG output has {', '.join(REQUIRED)}")
    try:
        present = list(pl.read_parquet_schema(path))
        missing = [c for c in columns if c not in present]
        if missing:
            raise GraphRAGOutputError(f"{path} lacks the columns {missing} of GraphRAG's output schema")
        return pl.read_parquet(path, columns=[c for c in present if only is None or c in only]).to_dicts()
    except GraphRAGOutputError:
        raise
    except Exception as problem:  # noqa: BLE001 - any unreadable file is the same user error
        raise GraphRAGOutputError(f"{path} is not a readable parquet file: {problem}") from None


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def check_output(output: Path) -> None:
    """The whole output checked before the first step builds on it, so that nothing is paid (embeddings, reports)
    for an index that cannot be imported: ids unique, the columns the tables need present and filled, and a
    community hierarchy whose levels count from 0 without gaps and whose parents are one level up."""
    keys = {
        "documents": ("id",),
        "text_units": ("id", "document_id"),
        "entities": ("id", "title"),
        "relationships": ("id", "source", "target"),
        "communities": ("community", "level"),
        "community_reports": ("community",),
    }
    # the checked columns only: a document's text is read once, by the step that imports it
    tables = {name: read(output, name, columns, only=(*columns, "parent")) for name, columns in keys.items()}
    for name, columns in keys.items():
        rows, path = tables[name], output / f"{name}.parquet"
        for column in columns:
            empty = next((number for number, row in enumerate(rows) if _missing(row[column])), None)
            if empty is not None:
                raise GraphRAGOutputError(f"{path}: column {column} is empty at row {empty}")
        unique = "community" if name in ("communities", "community_reports") else "id"
        first_row = {}
        for number, row in enumerate(rows):
            if row[unique] in first_row:
                raise GraphRAGOutputError(
                    f"{path}: column {unique} holds {row[unique]!r} twice (rows {first_row[row[unique]]} and {number})"
                )
            first_row[row[unique]] = number
    communities = tables["communities"]
    levels = sorted({int(row["level"]) for row in communities})
    if levels != list(range(len(levels))):
        raise GraphRAGOutputError(
            f"{output / 'communities.parquet'}: column level holds {levels[:10]}{'...' if len(levels) > 10 else ''}; "
            "levels count from 0 with no gap"
        )
    level_of = {int(row["community"]): int(row["level"]) for row in communities}
    for number, row in enumerate(communities):
        community, level, parent = int(row["community"]), int(row["level"]), _whole(row.get("parent"), -1)
        if level > 0 and level_of.get(parent) != level - 1:
            raise GraphRAGOutputError(
                f"{output / 'communities.parquet'}: column parent of community {community} (level {level}, row "
                f"{number}) is {parent}, which is not a community of level {level - 1}"
            )


def _ids(values) -> list[str]:
    return [str(v) for v in values] if values is not None and not isinstance(values, str) else []


def _text(value) -> str:
    return "" if _missing(value) else str(value)


def _whole(value, default: int) -> int:
    return default if _missing(value) else int(value)


def documents_and_units(output: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(documents, base_text_units) in our schema; a unit's chunk_index is its place in its document."""
    check_output(output)  # the first step of an import: nothing is paid for an output that cannot be used
    docs = read(output, "documents", ("id", "title", "text"))
    units = read(output, "text_units", ("id", "text", "document_id"))
    order = "human_readable_id" if units and "human_readable_id" in units[0] else "id"
    units = sorted(units, key=lambda unit: (_missing(unit[order]), unit[order]))  # stable, as GraphRAG numbered them
    base, by_document = [], {}
    for unit in units:
        ids = by_document.setdefault(str(unit["document_id"]), [])
        text, tokens = _text(unit["text"]), unit.get("n_tokens")  # older outputs have no n_tokens: counted here
        base.append(
            {
                "id": str(unit["id"]),
                "text": text,
                "n_tokens": count_tokens(text) if _missing(tokens) else int(tokens),
                "document_id": str(unit["document_id"]),
                "chunk_index": len(ids),
            }
        )
        ids.append(str(unit["id"]))
    documents = [
        {
            "id": str(doc["id"]),
            "title": _text(doc["title"]),
            "text": _text(doc["text"]),
            "source_path": f"{output.name}/documents.parquet#{number}",
            "metadata": json.dumps(
                {"imported_from": "graphrag", "creation_date": str(doc.get("creation_date") or "")}, sort_keys=True
            ),
            "text_unit_ids": by_document.get(str(doc["id"]), []),
        }
        for number, doc in enumerate(docs)
    ]
    return frame("documents", documents), frame("base_text_units", base)


def graph(output: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    entities = read(output, "entities", ("id", "title", "type", "description", "text_unit_ids"))
    relationships = read(output, "relationships", ("id", "source", "target", "description", "weight"))
    entity_rows = [
        {
            "id": str(entity["id"]),
            "human_readable_id": _whole(entity.get("human_readable_id"), number),
            "title": str(entity["title"]),
            "type": _text(entity["type"]),
            "description": _text(entity["description"]),
            "text_unit_ids": _ids(entity["text_unit_ids"]),
            "frequency": _whole(entity.get("frequency", len(_ids(entity["text_unit_ids"]))), 0),
            "degree": _whole(entity.get("degree"), 0),
        }
        for number, entity in enumerate(entities)
    ]
    relationship_rows = [
        {
            "id": str(relationship["id"]),
            "human_readable_id": _whole(relationship.get("human_readable_id"), number),
            "source": str(relationship["source"]),
            "target": str(relationship["target"]),
            "description": _text(relationship["description"]),
            "weight": float(relationship["weight"]),
            "combined_degree": _whole(relationship.get("combined_degree"), 0),
            "text_unit_ids": _ids(relationship.get("text_unit_ids")),
        }
        for number, relationship in enumerate(relationships)
    ]
    return frame("entities", entity_rows), frame("relationships", relationship_rows)


def covariates(output: Path) -> pl.DataFrame:
    """Claims, or none when GraphRAG ran without claim extraction (it then writes no covariates file)."""
    if not (output / "covariates.parquet").is_file():
        return frame("covariates")
    claims = read(output, "covariates", ("id", "subject_id", "description", "text_unit_id"))
    return frame(
        "covariates",
        (
            {column: None if _missing(claim.get(column)) else str(claim[column]) for column in COVARIATE_COLUMNS}
            | {"human_readable_id": _whole(claim.get("human_readable_id"), number)}
            for number, claim in enumerate(claims)
        ),
    )


def carry_down(rows: list[dict]) -> list[dict]:
    """Add a copy of every community that is not split to each deeper level; `carried_from` names the original."""
    for row in rows:
        row["carried_from"] = -1
    deepest = max((r["level"] for r in rows), default=0)
    number = max((r["community"] for r in rows), default=-1)
    for level in range(deepest):
        for row in [r for r in rows if r["level"] == level and not r["children"]]:
            number += 1
            copy = {
                **row,
                "id": community_id(level + 1, row["entity_ids"]),
                "human_readable_id": number,
                "community": number,
                "level": level + 1,
                "parent": row["community"],
                "children": [],
                "title": f"Community {number}",
                "carried_from": row["community"],
            }
            row["children"] = [number]
            rows.append(copy)
    return rows


def communities(output: Path) -> pl.DataFrame:
    table = read(output, "communities", ("community", "level", "parent", "entity_ids"))
    rows = []
    for community in table:
        number, entity_ids = int(community["community"]), _ids(community["entity_ids"])
        children = community.get("children")
        rows.append(
            {
                "id": str(community["id"]) if "id" in community else f"community-{number}",
                "human_readable_id": number,
                "community": number,
                "level": int(community["level"]),
                "parent": _whole(community["parent"], -1),
                "children": [int(c) for c in children]
                if children is not None and not isinstance(children, str)
                else [],
                "title": str(community["title"]) if "title" in community else f"Community {number}",
                "entity_ids": entity_ids,
                "relationship_ids": _ids(community.get("relationship_ids")),
                "text_unit_ids": _ids(community.get("text_unit_ids")),
                "size": int(community["size"]) if "size" in community else len(entity_ids),
            }
        )
    return frame("communities", sorted(carry_down(rows), key=lambda r: (r["level"], r["community"])))


def community_reports(output: Path, ours: pl.DataFrame) -> pl.DataFrame:
    """GraphRAG's reports, plus one for each carried-down copy in `ours` (our communities table), repeating
    the report of the community it copies; parent and children follow our hierarchy."""
    reports = read(output, "community_reports", ("community", "title", "summary", "full_content", "rank"))
    by_number = {int(r["community"]): r for r in reports}
    rows = []
    copied_from = dict(zip(ours["community"], ours["carried_from"], strict=True))
    for community in records(ours):
        original = community.community if community.carried_from < 0 else community.carried_from
        while original not in by_number and original in copied_from:  # a copy of a copy
            original = copied_from[original]
        report = by_number.get(original)
        if report is None:
            continue
        findings = report.get("findings")
        findings = [dict(f) for f in findings] if findings is not None and not isinstance(findings, str) else []
        rows.append(
            {
                "id": str(report.get("id") or original)
                if community.carried_from < 0
                else hashlib.sha256(f"report:{community.id}".encode()).hexdigest()[:32],
                "human_readable_id": int(community.community),
                "community": int(community.community),
                "level": int(community.level),
                "parent": int(community.parent),
                "children": list(community.children),
                "title": str(report["title"]),
                "summary": str(report["summary"]),
                "full_content": str(report["full_content"]),
                "rank": float(report["rank"]),
                "rating_explanation": str(report.get("rating_explanation") or ""),
                "findings": json.dumps(findings),
                "full_content_json": str(report.get("full_content_json") or "{}"),
                "size": int(community.size),
                "status": "ok",
                "error": None,
                "context_tokens": 0,
                "substituted_communities": [],
            }
        )
    return frame("community_reports", rows)
