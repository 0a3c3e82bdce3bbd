"""The tuple output format the field uses for extraction, and the gleaning loop that asks for more.

A reply is records like ("entity"<|>NAME<|>TYPE<|>DESCRIPTION) separated by "##" and
ending with <|COMPLETE|>. Parsing is lenient: a record that does not fit is dropped
and counted, never fatal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

TUPLE_DELIMITER = "<|>"
RECORD_DELIMITER = "##"
COMPLETION_DELIMITER = "<|COMPLETE|>"
_RECORD = re.compile(r"^\s*\((.*)\)\s*$", re.DOTALL)


class ChatModel(Protocol):
    """What the method needs of a chat model: messages in, text out, None when the call failed for good."""

    async def complete(self, messages: list[dict], **params: object) -> str | None: ...


@dataclass
class ParsedRecords:
    records: list[list[str]]
    dropped: int


def clean_field(value: str) -> str:
    return value.strip().strip('"').strip("'").strip()


def parse_records(reply: str) -> ParsedRecords:
    """Split a reply into records (lists of cleaned fields); text that is not a record counts as dropped."""
    body = reply.split(COMPLETION_DELIMITER)[0]
    records, dropped = [], 0
    for raw in body.split(RECORD_DELIMITER):
        raw = raw.strip()
        if not raw:
            continue
        match = _RECORD.match(raw)
        if not match:
            dropped += 1
            continue
        records.append([clean_field(field) for field in match.group(1).split(TUPLE_DELIMITER)])
    return ParsedRecords(records, dropped)


async def complete_with_gleaning(
    chat: ChatModel,
    prompt: str,
    continue_prompt: str,
    loop_prompt: str,
    max_gleanings: int,
) -> list[str] | None:
    """The first reply plus up to `max_gleanings` replies to "you missed some, add them".

    Returns None when the first call failed; a failed gleaning round keeps what came before.
    Every call carries the whole conversation, so each is cached on its own and a re-run
    replays the conversation without paying again.
    """
    messages = [{"role": "user", "content": prompt}]
    first = await chat.complete(messages)
    if first is None:
        return None
    replies = [first]
    for round_number in range(max_gleanings):
        messages = messages + [
            {"role": "assistant", "content": replies[-1]},
            {"role": "user", "content": continue_prompt},
        ]
        more = await chat.complete(messages)
        if more is None:
            break
        replies.append(more)
        if round_number == max_gleanings - 1:
            break
        answer = await chat.complete(
            messages + [{"role": "assistant", "content": more}, {"role": "user", "content": loop_prompt}],
            max_tokens=1,
        )
        if answer is None or answer.strip().upper()[:1] != "Y":
            break
    return replies

