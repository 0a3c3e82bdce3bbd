"""Description summarization: an element seen with several descriptions gets one summary."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import polars as pl

from ..ingest.tokens import count_tokens
from ..model_interface import ChatModel
from ..prompts import DEFAULT_PROMPTS, PromptSet
from .records import check_free_text


@dataclass
class SummaryStats:
    summarized: int = 0
    single_description: int = 0
    joined: int = 0  # short enough to keep as they are, joined, without a model call
    failed: int = 0


def _batches(descriptions: list[str], max_input_tokens: int) -> list[list[str]]:
    batches, current, used = [], [], 0
    for description in sorted(descriptions):
        tokens = count_tokens(description)
        if current and used + tokens > max_input_tokens:
            batches.append(current)
            current, used = [], 0
        current.append(description)
        used += tokens
    if current:
        batches.append(current)
    return batches


def summary_prompt(
    name: str, descriptions: list[str], max_summary_tokens: int, prompts: PromptSet = DEFAULT_PROMPTS
) -> str:
    # The prompt counts words; a word is about 4/3 tokens, so the reply fits its max_tokens.
    return prompts["summarize_descriptions"].format(
        entity_name=name,
        description_list="\n".join(f"- {d}" for d in descriptions),
        max_length=max_summary_tokens * 3 // 4,
    )


async def summarize_one(
    chat: ChatModel,
    name: str,
    descriptions: list[str],
    max_input_tokens: int,
    max_summary_tokens: int,
    prompts: PromptSet = DEFAULT_PROMPTS,
) -> str | None:
    """Summaries of batches that fit the context window, each batch carrying the summary so far."""
    summary: str | None = None
    for batch in _batches(descriptions, max_input_tokens):
        listed = ([summary] if summary else []) + batch
        reply = await chat.complete(
            [{"role": "user", "content": summary_prompt(name, listed, max_summary_tokens, prompts)}],
            parse=check_free_text,
            max_tokens=max_summary_tokens,
        )
        if reply is None:
            return None
        summary = reply
    return summary


def joined_descriptions(table: pl.DataFrame) -> tuple[pl.DataFrame, SummaryStats]:
    """With no model: the table with its `descriptions` joined into one `description`, as summarize_descriptions
    joins them offline. Columnar: a coroutine and a Python list per row held a large graph in memory twice."""
    single = int((table["descriptions"].list.len() <= 1).sum())
    joined = table.with_columns(description=pl.col("descriptions").list.join(" ")).drop("descriptions")
    return joined, SummaryStats(single_description=single)


async def summarize_descriptions(
    chat: ChatModel | None,
    items: list[tuple[str, list[str]]],
    max_input_tokens: int = 4000,
    max_summary_tokens: int = 500,
    summarize_above_tokens: int = 500,
    prompts: PromptSet = DEFAULT_PROMPTS,
) -> tuple[list[str], SummaryStats]:
    """One description per item. Descriptions that together fit `summarize_above_tokens` are joined as they
    are, which costs nothing and loses nothing; longer lists get a model-written summary. Without a model
    descriptions are joined; when the model fails for an item, its descriptions are joined too and the item
    is counted in `failed`, which the caller must judge."""
    stats = SummaryStats()

    async def one(name: str, descriptions: list[str]) -> str:
        if len(descriptions) <= 1:
            stats.single_description += 1
            return descriptions[0] if descriptions else ""
        if chat is not None and count_tokens(" ".join(descriptions)) <= summarize_above_tokens:
            stats.joined += 1
            return " ".join(descriptions)
        summary = (
            await summarize_one(chat, name, descriptions, max_input_tokens, max_summary_tokens, prompts)
            if chat
            else None
        )
        if summary is None:
            stats.failed += chat is not None
            return " ".join(descriptions)
        stats.summarized += 1
        return summary

    summaries = await asyncio.gather(*(one(name, list(descriptions)) for name, descriptions in items))
    return list(summaries), stats
