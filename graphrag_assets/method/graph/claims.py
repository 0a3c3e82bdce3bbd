"""Claim (covariate) extraction: statements about entities with a status and a time span."""

from __future__ import annotations

import asyncio
import hashlib

import polars as pl

from ..defaults import MAX_GLEANINGS
from ..model_interface import ChatModel, InvalidReply
from ..progress import Progress
from ..prompts import DEFAULT_PROMPTS, PromptSet
from ..schema import columns, frame
from .extraction import ExtractionStats
from .records import (
    DELIMITERS,
    check_records_reply,
    complete_with_gleaning,
    parse_records,
)

COVARIATE_COLUMNS = columns("covariates")
CLAIM_PROMPTS = ("extract_claims", "extract_claims_continue", "gleaning_loop")
DEFAULT_CLAIM_DESCRIPTION = (
    "Statements of fact about an entity: what it did, what was done to it, what others say of it."
)
_STATUSES = {"TRUE", "FALSE", "SUSPECTED"}


def _date(value: str) -> str | None:
    return None if not value or value.upper() in {"NONE", "NULL", "UNKNOWN"} else value


CLAIM_FIELDS = 8  # subject, object, type, status, start, end, description, source text


def _normalized(text: str) -> str:
    return " ".join(text.split()).lower()


def check_claims_reply(reply: str, text: str | None = None) -> str:
    """A claims reply holds claim records only (eight fields; not an entity or relationship tuple), and each
    claim's source quote is found in `text`, the unit it was asked about (case and white space aside)."""
    check_records_reply(
        reply, lambda r: len(r) >= CLAIM_FIELDS and r[0].lower() not in ("entity", "relationship"), "a claim"
    )
    if text is not None:
        unit = _normalized(text)
        for record in parse_records(reply).records:
            quote = _normalized(record[CLAIM_FIELDS - 1]).strip("\"'“”‘’ ")
            if quote not in unit:
                raise InvalidReply(
                    f"the claim about {record[0][:40]} quotes text that is not in the input: {quote[:80]!r}; "
                    "the source text must be copied from the input"
                )
    return reply


def records_to_claims(unit_id: str, replies: list[str]) -> tuple[list[dict], int]:
    claims, dropped = [], 0
    for reply in replies:
        parsed = parse_records(reply)
        dropped += parsed.dropped
        for record in parsed.records:
            if len(record) < CLAIM_FIELDS or not record[0]:
                dropped += 1
                continue
            subject, obj, claim_type, status, start, end, description, source = record[:CLAIM_FIELDS]
            status = status.upper() if status.upper() in _STATUSES else "SUSPECTED"
            claims.append(
                {
                    "covariate_type": "claim",
                    "type": claim_type.upper(),
                    "description": description,
                    "subject_id": subject.upper(),
                    "object_id": None if obj.upper() in {"", "NONE"} else obj.upper(),
                    "status": status,
                    "start_date": _date(start),
                    "end_date": _date(end),
                    "source_text": source,
                    "text_unit_id": unit_id,
                }
            )
    return claims, dropped


def claims_prompt(
    text: str, entity_specs: tuple[str, ...], claim_description: str, prompts: PromptSet = DEFAULT_PROMPTS
) -> str:
    return prompts["extract_claims"].format(
        entity_specs=", ".join(entity_specs),
        claim_description=claim_description,
        **DELIMITERS,
        input_text=text,
    )


async def extract_claims(
    chat: ChatModel,
    text_units: pl.DataFrame,
    entity_specs: tuple[str, ...],
    claim_description: str = DEFAULT_CLAIM_DESCRIPTION,
    max_gleanings: int = MAX_GLEANINGS,
    progress: Progress | None = None,
    prompts: PromptSet = DEFAULT_PROMPTS,
) -> tuple[pl.DataFrame, ExtractionStats]:
    continue_prompt = prompts["extract_claims_continue"].format(
        **DELIMITERS,
    )
    loop_prompt = prompts["gleaning_loop"].template

    async def one(unit_id: str, text: str):
        replies = await complete_with_gleaning(
            chat,
            claims_prompt(text, entity_specs, claim_description, prompts),
            continue_prompt,
            loop_prompt,
            max_gleanings,
            lambda reply: check_claims_reply(reply, text),
        )
        if progress:
            progress.advance(failed=replies is None)
        return unit_id, replies

    results = await asyncio.gather(*(one(u, text) for u, text in zip(text_units["id"], text_units["text"])))
    stats = ExtractionStats(units=len(results))
    rows = []
    for unit_id, replies in results:
        if replies is None:
            stats.failed_units.append(unit_id)
            continue
        claims, dropped = records_to_claims(unit_id, replies)
        stats.dropped_records += dropped
        rows.extend(claims)
    for i, row in enumerate(rows):
        key = f"claim:{row['text_unit_id']}:{i}:{row['subject_id']}:{row['description']}"
        row.update(id=hashlib.sha256(key.encode()).hexdigest()[:32], human_readable_id=i)
    return frame("covariates", rows), stats
