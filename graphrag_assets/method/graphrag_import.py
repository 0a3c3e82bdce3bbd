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
from pathlib import Path

import pandas as pd
import polars as pl

from .communities.leiden import community_id
from .graph.claims import COVARIATE_COLUMNS
from .ingest.tokens import count_tokens
from .schema import frame, records

REQUIRED = ("entities", "relationships", "communities", "community_reports", "text_units", "documents")


class GraphRAGOutputError(ValueError):
    """A GraphRAG output that cannot be imported; the message names the file and what is wrong."""


def read(output: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    path = output / f"{name}.parquet"
    if not path.is_file():
        raise GraphRAGOutputError(f"{path} is missing: a GraphRAG output has {', '.join(REQUIRED)}")
    try:
        df = pd.read_parquet(path)
    except Exception as problem:  # noqa: BLE001 - any unreadable file is the same user error
        raise GraphRAGOutputError(f"{path} is not a readable parquet file: {problem}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise GraphRAGOutputError(f"{path} lacks the columns {missing} of GraphRAG's output schema")
    return df.reset_index(drop=True)


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
    tables = {name: read(output, name, columns) for name, columns in keys.items()}
    for name, columns in keys.items():
        table, path = tables[name], output / f"{name}.parquet"
        for column in columns:
            empty = table[column].isna()
            if empty.any():
                raise GraphRAGOutputError(f"{path}: column {column} is empty at row {int(empty.idxmax())}")
        unique = "community" if name in ("communities", "community_reports") else "id"
        repeated = table[unique].duplicated(keep=False)
        if repeated.any():
            rows = list(table.index[repeated][:2])
            raise GraphRAGOutputError(
                f"{path}: column {unique} holds {table[unique][rows[0]]!r} twice (rows {rows[0]} and {rows[1]})"
            )
    communities = tables["communities"]
    levels = sorted(int(level) for level in communities["level"].unique())
    if levels != list(range(len(levels))):
        raise GraphRAGOutputError(
            f"{output / 'communities.parquet'}: column level holds {levels[:10]}{'...' if len(levels) > 10 else ''}; "
            "levels count from 0 with no gap"
        )
    level_of = dict(zip(communities["community"].astype(int), communities["level"].astype(int)))
    parents = communities["parent"].fillna(-1).astype(int) if "parent" in communities else None
    for row, (community, level) in enumerate(
        zip(communities["community"].astype(int), communities["level"].astype(int))
    ):
        parent = int(parents.iloc[row]) if parents is not None else -1
        if level > 0 and level_of.get(parent) != level - 1:
            raise GraphRAGOutputError(
                f"{output / 'communities.parquet'}: column parent of community {community} (level {level}, row {row}) "
                f"is {parent}, which is not a community of level {level - 1}"
            )


def _ids(values) -> list[str]:
    return [str(v) for v in values] if values is not None and not isinstance(values, str) else []


def documents_and_units(output: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(documents, base_text_units) in our schema; a unit's chunk_index is its place in its document."""
    check_output(output)  # the first step of an import: nothing is paid for an output that cannot be used
    docs = read(output, "documents", ("id", "title", "text"))
    units = read(output, "text_units", ("id", "text", "document_id"))
    if "n_tokens" not in units or units["n_tokens"].isna().any():  # older outputs: counted here as chunking does
        counted = units["text"].astype(str).map(count_tokens)
        units["n_tokens"] = units["n_tokens"].fillna(counted) if "n_tokens" in units else counted
    order = "human_readable_id" if "human_readable_id" in units else "id"
    units = units.sort_values(order, kind="stable")
    units["chunk_index"] = units.groupby("document_id").cumcount()
    base = pd.DataFrame(
        {
            "id": units["id"].astype(str),
            "text": units["text"].astype(str),
            "n_tokens": units["n_tokens"].astype(int),
            "document_id": units["document_id"].astype(str),
            "chunk_index": units["chunk_index"].astype(int),
        }
    ).reset_index(drop=True)
    by_document = base.groupby("document_id")["id"].apply(list).to_dict()
    documents = pd.DataFrame(
        {
            "id": docs["id"].astype(str),
            "title": docs["title"].astype(str),
            "text": docs["text"].astype(str),
            "source_path": [f"{output.name}/documents.parquet#{i}" for i in range(len(docs))],
            "metadata": [
                json.dumps({"imported_from": "graphrag", "creation_date": str(d or "")}, sort_keys=True)
                for d in (docs["creation_date"] if "creation_date" in docs else [""] * len(docs))
            ],
            "text_unit_ids": [by_document.get(str(i), []) for i in docs["id"]],
        }
    )
    return _ours("documents", documents), _ours("base_text_units", base)


def _ours(table: str, df: pd.DataFrame) -> pl.DataFrame:
    """A table read from a GraphRAG output, in our columns and types. The reading above is pandas, lenient with
    the loose types of the outputs of several GraphRAG versions; the index gets polars frames, as from any step."""
    return frame(table, df.to_dict("records"))


def graph(output: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    entities = read(output, "entities", ("id", "title", "type", "description", "text_unit_ids"))
    relationships = read(output, "relationships", ("id", "source", "target", "description", "weight"))
    entities = pd.DataFrame(
        {
            "id": entities["id"].astype(str),
            "human_readable_id": entities.get("human_readable_id", pd.Series(range(len(entities)))).astype(int),
            "title": entities["title"].astype(str),
            "type": entities["type"].fillna("").astype(str),
            "description": entities["description"].fillna("").astype(str),
            "text_unit_ids": entities["text_unit_ids"].map(_ids),
            "frequency": entities.get("frequency", entities["text_unit_ids"].map(len)).fillna(0).astype(int),
            "degree": entities.get("degree", pd.Series([0] * len(entities))).fillna(0).astype(int),
        }
    )
    relationships = pd.DataFrame(
        {
            "id": relationships["id"].astype(str),
            "human_readable_id": relationships.get("human_readable_id", pd.Series(range(len(relationships)))).astype(
                int
            ),
            "source": relationships["source"].astype(str),
            "target": relationships["target"].astype(str),
            "description": relationships["description"].fillna("").astype(str),
            "weight": relationships["weight"].astype(float),
            "combined_degree": relationships.get("combined_degree", pd.Series([0] * len(relationships)))
            .fillna(0)
            .astype(int),
            "text_unit_ids": relationships.get("text_unit_ids", pd.Series([[]] * len(relationships))).map(_ids),
        }
    )
    return _ours("entities", entities), _ours("relationships", relationships)


def covariates(output: Path) -> pd.DataFrame:
    """Claims, or none when GraphRAG ran without claim extraction (it then writes no covariates file)."""
    if not (output / "covariates.parquet").is_file():
        return frame("covariates")
    claims = read(output, "covariates", ("id", "subject_id", "description", "text_unit_id"))
    table = pd.DataFrame({c: claims[c] if c in claims else None for c in COVARIATE_COLUMNS})
    table["human_readable_id"] = claims.get("human_readable_id", pd.Series(range(len(claims)))).astype(int)
    for column in COVARIATE_COLUMNS:
        if column != "human_readable_id":
            table[column] = table[column].map(lambda v: None if v is None or pd.isna(v) else str(v))
    return _ours("covariates", table)


def carry_down(communities: pd.DataFrame) -> pd.DataFrame:
    """Add a copy of every community that is not split to each deeper level; `carried_from` names the original."""
    rows = communities.to_dict("records")
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
    return pd.DataFrame(rows)


def communities(output: Path) -> pd.DataFrame:
    table = read(output, "communities", ("community", "level", "parent", "entity_ids"))
    table = pd.DataFrame(
        {
            "id": table["id"].astype(str) if "id" in table else table["community"].map(lambda c: f"community-{c}"),
            "human_readable_id": table["community"].astype(int),
            "community": table["community"].astype(int),
            "level": table["level"].astype(int),
            "parent": table["parent"].fillna(-1).astype(int),
            "children": table.get("children", pd.Series([[]] * len(table))).map(
                lambda v: [int(c) for c in v] if v is not None and not isinstance(v, str) else []
            ),
            "title": table.get("title", table["community"].map(lambda c: f"Community {c}")).astype(str),
            "entity_ids": table["entity_ids"].map(_ids),
            "relationship_ids": table.get("relationship_ids", pd.Series([[]] * len(table))).map(_ids),
            "text_unit_ids": table.get("text_unit_ids", pd.Series([[]] * len(table))).map(_ids),
            "size": table.get("size", table["entity_ids"].map(len)).astype(int),
        }
    )
    return _ours("communities", carry_down(table).sort_values(["level", "community"]))


def community_reports(output: Path, ours: pl.DataFrame) -> pl.DataFrame:
    """GraphRAG's reports, plus one for each carried-down copy in `ours` (our communities table), repeating
    the report of the community it copies; parent and children follow our hierarchy."""
    reports = read(output, "community_reports", ("community", "title", "summary", "full_content", "rank"))
    by_number = {int(r["community"]): r for r in reports.to_dict("records")}
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
