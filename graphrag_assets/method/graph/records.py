"""What model replies must look like, and the gleaning loop that asks for more.

An extraction reply is records like ("entity"<|>NAME<|>TYPE<|>DESCRIPTION) separated by "##"
and ending with <|COMPLETE|>. A reply is checked before it is used or cached: without the
completion marker it was cut off, and a record of a kind the prompt did not ask for means the
model answered another question; both make the reply invalid, and it is asked for again.
Within a valid reply parsing is lenient: a record of the right kind whose fields do not fit
is dropped and counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import json_repair

from ..model_interface import ChatModel, InvalidReply

TUPLE_DELIMITER = "<|>"
RECORD_DELIMITER = "##"
COMPLETION_DELIMITER = "<|COMPLETE|>"
# The delimiters as the extraction prompts name them: every prompt that asks for records formats them in.
DELIMITERS = {
    "tuple_delimiter": TUPLE_DELIMITER,
    "record_delimiter": RECORD_DELIMITER,
    "completion_delimiter": COMPLETION_DELIMITER,
}
_RECORD = re.compile(r"^\s*\((.*)\)\s*$", re.DOTALL)


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


def check_records_reply(reply: str, is_expected: Callable[[list[str]], bool], expected: str) -> str:
    """The reply itself if it ends with the completion marker and holds only records of the expected kind."""
    if COMPLETION_DELIMITER not in reply:
        raise InvalidReply(
            f"the reply does not end with {COMPLETION_DELIMITER}: it was cut off or is not in the record format"
        )
    for record in parse_records(reply).records:
        if not is_expected(record):
            raise InvalidReply(
                f"the reply holds a record that is not {expected}: ({TUPLE_DELIMITER.join(record)[:80]})"
            )
    return reply


def check_yes_no(reply: str) -> str:
    answer = reply.strip().strip('"*').upper()[:1]
    if answer not in ("Y", "N"):
        raise InvalidReply(f"expected Y or N, got {reply.strip()[:40]!r}")
    return answer


_REFUSAL = re.compile(
    r"^\W*(I'?m sorry|I am sorry|sorry,|I can(?:no|')t|I can not|I'?m unable|I am unable|"
    r"I won'?t|As an AI)\b",
    re.IGNORECASE,
)


def check_free_text(reply: str) -> str:
    """Prose the index keeps (a description summary): not a refusal or an apology."""
    if _REFUSAL.match(reply):
        raise InvalidReply(f"the model declined to answer ({reply.strip()[:80]!r})")
    return reply.strip()


# A model declining the request itself ("I'm sorry, I can't help with that."), as opposed to an answer that says
# the data does not hold what was asked, which an answer may well say.
_DECLINED = re.compile(
    r"^\W*(?:(?:I'?m|I am) sorry|sorry|apologies)?[\s,.!]*(?:but\s+)?(?:as an AI,?\s+)?I\s+"
    r"(?:can(?:no|')t|can not|won'?t|am unable to|'m unable to|am not able to)\s+"
    r"(?:help|assist|comply|do that|answer (?:that|this)|provide (?:that|this|an answer))\b",
    re.IGNORECASE,
)


def check_answer_text(reply: str) -> str:
    """An answer to a question, in prose: it may say the data does not tell, but it must not decline to answer, nor
    be a JSON value (a model answering in the map step's format), which would be shown to the asker as it is."""
    if _DECLINED.match(reply):
        raise InvalidReply(f"the model declined to answer ({reply.strip()[:80]!r})")
    text = _FENCE.sub(r"\1", reply).strip()
    if text[:1] in "{[":
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            raise InvalidReply("the reply is a JSON value where a written answer was asked for")
    return reply.strip()


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_json_reply(reply: str) -> tuple[dict | list, bool]:
    """(value, whether it needed repair). A reply cut off mid-JSON is invalid, never completed by repair."""
    fenced = _FENCE.match(reply)
    text = (fenced.group(1) if fenced else reply).strip()
    try:
        value, repaired = json.loads(text), False
    except json.JSONDecodeError:
        if not text.endswith(("}", "]")):
            raise InvalidReply("the JSON reply is cut off or is not JSON") from None
        value, repaired = json_repair.loads(text), True
    if not isinstance(value, (dict, list)):
        raise InvalidReply("the reply is not a JSON object")
    return value, repaired


async def complete_with_gleaning(
    chat: ChatModel,
    prompt: str,
    continue_prompt: str,
    loop_prompt: str,
    max_gleanings: int,
    check: Callable[[str], str],
) -> list[str] | None:
    """The first reply plus up to `max_gleanings` replies to "you missed some, add them".

    Every reply is checked with `check`. Returns None when any call of the conversation got no
    valid reply, so the unit counts as failed rather than quietly losing what gleaning would add.
    Each call starts with the messages of the one before, unchanged, so an endpoint with prefix caching
    (OpenAI, Azure OpenAI, vLLM) serves that part from its cache and gleaning pays the full rate only for
    what is new. Every call carries the whole conversation, so each is cached on its own and a re-run
    replays the conversation without paying again.
    """
    messages = [{"role": "user", "content": prompt}]
    first = await chat.complete(messages, parse=check)
    if first is None:
        return None
    replies = [first]
    for round_number in range(max_gleanings):
        messages = messages + [
            {"role": "assistant", "content": replies[-1]},
            {"role": "user", "content": continue_prompt},
        ]
        more = await chat.complete(messages, parse=check)
        if more is None:
            return None
        replies.append(more)
        if round_number == max_gleanings - 1:
            break
        answer = await chat.complete(
            messages + [{"role": "assistant", "content": more}, {"role": "user", "content": loop_prompt}],
            parse=check_yes_no,
            allow_truncated=True,
            max_tokens=1,
        )
        if answer is None:
            return None
        if answer != "Y":
            break
    return replies
