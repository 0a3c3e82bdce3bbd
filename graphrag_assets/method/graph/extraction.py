"""Graph extraction with a chat model: one conversation per text unit, merged across units."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from dataclasses import dataclass, field

import polars as pl

from ..defaults import MAX_GLEANINGS
from ..model_interface import ChatModel
from ..progress import Progress
from ..prompts import DEFAULT_PROMPTS, PromptSet
from .records import (
    DELIMITERS,
    check_records_reply,
    complete_with_gleaning,
    parse_records,
)

DEFAULT_ENTITY_TYPES = ("organization", "person", "geo", "event")
EXTRACTION_PROMPTS = ("extract_graph", "extract_graph_continue", "gleaning_loop")


@dataclass
class ExtractionStats:
    units: int = 0
    failed_units: list[str] = field(default_factory=list)
    dropped_records: int = 0
    orphan_relationships: int = 0

    def as_metadata(self) -> dict:
        return {
            "text_units": self.units,
            "failed_text_units": len(self.failed_units),
            "dropped_records": self.dropped_records,
            "orphan_relationships_dropped": self.orphan_relationships,
        }


def entity_id(title: str) -> str:
    return hashlib.sha256(f"entity:{title}".encode()).hexdigest()[:32]


def relationship_id(source: str, target: str) -> str:
    return hashlib.sha256(f"relationship:{source}->{target}".encode()).hexdigest()[:32]


def _strength(value: str) -> float | None:
    try:
        strength = float(value)
    except ValueError:
        return None
    return strength if strength > 0 else None


def check_graph_reply(reply: str) -> str:
    """An extraction reply holds entity and relationship records only, and is complete."""
    return check_records_reply(
        reply, lambda record: record[0].lower() in ("entity", "relationship"), "an entity or a relationship"
    )


def records_to_graph(replies: list[str]) -> tuple[list[dict], list[dict], int]:
    """Entities and relationships of one text unit's replies, plus how many records were dropped."""
    entities, relationships, dropped = [], [], 0
    for reply in replies:
        parsed = parse_records(reply)
        dropped += parsed.dropped
        for record in parsed.records:
            kind = record[0].lower() if record else ""
            if kind == "entity" and len(record) >= 4 and record[1]:
                entities.append({"title": record[1].upper(), "type": record[2].upper(), "description": record[3]})
            elif kind == "relationship" and len(record) >= 5 and record[1] and record[2]:
                strength = _strength(record[4])
                if strength is None:
                    dropped += 1
                    continue
                relationships.append(
                    {
                        "source": record[1].upper(),
                        "target": record[2].upper(),
                        "description": record[3],
                        "strength": strength,
                    }
                )
            else:
                dropped += 1
    return entities, relationships, dropped


_WORDS = pl.List(pl.String)
# Entities and relationships merged from every text unit's records, with their descriptions still a list each.
MERGED_ENTITY_SCHEMA = {
    "title": pl.String,
    "type": pl.String,
    "descriptions": _WORDS,
    "text_unit_ids": _WORDS,
    "frequency": pl.Int32,
}
MERGED_RELATIONSHIP_SCHEMA = {
    "source": pl.String,
    "target": pl.String,
    "descriptions": _WORDS,
    "weight": pl.Float64,
    "text_unit_ids": _WORDS,
}


def merge_entities(per_unit: list[tuple[str, list[dict]]]) -> pl.DataFrame:
    """Merge by exact title: descriptions become a list, type the most frequent one."""
    # Descriptions and text units are kept in dicts used as ordered sets: a list's `in` made an entity seen in
    # every text unit of a large corpus quadratic in them (50 MB of text: the entity step grew 49x for 10x).
    merged: dict[str, dict] = {}
    for unit_id, entities in per_unit:
        for entity in entities:
            row = merged.setdefault(entity["title"], {"types": Counter(), "descriptions": {}, "text_unit_ids": {}})
            if entity["type"]:
                row["types"][entity["type"]] += 1
            if entity["description"]:
                row["descriptions"].setdefault(entity["description"])
            row["text_unit_ids"].setdefault(unit_id)
    return pl.DataFrame(
        [
            {
                "title": title,
                "type": row["types"].most_common(1)[0][0] if row["types"] else "",
                "descriptions": list(row["descriptions"]),
                "text_unit_ids": list(row["text_unit_ids"]),
                "frequency": len(row["text_unit_ids"]),
            }
            for title, row in merged.items()
        ],
        schema=MERGED_ENTITY_SCHEMA,
    )


def merge_relationships(per_unit: list[tuple[str, list[dict]]]) -> pl.DataFrame:
    """Merge by (source, target): descriptions become a list, weight sums the strengths."""
    merged: dict[tuple[str, str], dict] = {}
    for unit_id, relationships in per_unit:
        for rel in relationships:
            if rel["source"] == rel["target"]:
                continue
            row = merged.setdefault(
                (rel["source"], rel["target"]), {"descriptions": {}, "weight": 0.0, "text_unit_ids": {}}
            )
            row["weight"] += rel["strength"]
            if rel["description"]:
                row["descriptions"].setdefault(rel["description"])
            row["text_unit_ids"].setdefault(unit_id)
    return pl.DataFrame(
        [
            {
                "source": s,
                "target": t,
                "descriptions": list(row["descriptions"]),
                "weight": row["weight"],
                "text_unit_ids": list(row["text_unit_ids"]),
            }
            for (s, t), row in merged.items()
        ],
        schema=MERGED_RELATIONSHIP_SCHEMA,
    )


def extraction_prompt(text: str, entity_types: tuple[str, ...], prompts: PromptSet = DEFAULT_PROMPTS) -> str:
    return prompts["extract_graph"].format(
        entity_types=",".join(entity_types),
        **DELIMITERS,
        input_text=text,
    )


async def extract_graph(
    chat: ChatModel,
    text_units: pl.DataFrame,
    entity_types: tuple[str, ...] = DEFAULT_ENTITY_TYPES,
    max_gleanings: int = MAX_GLEANINGS,
    progress: Progress | None = None,
    prompts: PromptSet = DEFAULT_PROMPTS,
) -> tuple[pl.DataFrame, pl.DataFrame, ExtractionStats]:
    """Extract and merge entities and relationships from every text unit, concurrently."""
    continue_prompt = prompts["extract_graph_continue"].format(
        **DELIMITERS,
    )
    loop_prompt = prompts["gleaning_loop"].template

    async def one(unit_id: str, text: str):
        replies = await complete_with_gleaning(
            chat,
            extraction_prompt(text, entity_types, prompts),
            continue_prompt,
            loop_prompt,
            max_gleanings,
            check_graph_reply,
        )
        if progress:
            progress.advance(failed=replies is None)
        return unit_id, replies

    results = await asyncio.gather(*(one(u, text) for u, text in zip(text_units["id"], text_units["text"])))
    stats = ExtractionStats(units=len(results))
    entities_per_unit, relationships_per_unit = [], []
    for unit_id, replies in results:
        if replies is None:
            stats.failed_units.append(unit_id)
            continue
        entities, relationships, dropped = records_to_graph(replies)
        stats.dropped_records += dropped
        entities_per_unit.append((unit_id, entities))
        relationships_per_unit.append((unit_id, relationships))
    return merge_entities(entities_per_unit), merge_relationships(relationships_per_unit), stats
