"""A chat front-end's housekeeping: the titles, tags and follow-up suggestions it asks the chat model for.

Open WebUI sends each as one user message to the chat's own model, in a documented form: it opens with
`### Task:`, names the JSON object it wants back under `### Output:` (`{ "title": ... }`, `{ "tags": [...] }`,
`{ "follow_ups": [...] }`, and `queries`, `text` and `prompt` for search queries, autocompletion and image prompts),
and quotes the chat as `USER:` and `ASSISTANT:` lines inside `<chat_history>`. Answered as questions about the
corpus, they were recorded as junk answers and left the chat without a title. Here they are answered without
retrieval and without a record: by the chat model when one is configured, its reply checked against the JSON the
task asks for, and otherwise (or when the model's reply does not hold) from the chat itself. Follow-up suggestions
come from the question-generation method, so that they are questions the corpus can answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..answers.asking import AnswerFailed, QuestionRefused, model_reply
from ..answers.service import AnswerService
from ..method.graph.records import parse_json_reply
from ..method.model_interface import InvalidReply

# The key each task's JSON reply holds, and whether it is a list of strings (else one string).
TASK_KEYS = {"title": False, "tags": True, "follow_ups": True, "queries": True, "text": False, "prompt": False}
_OUTPUT = re.compile(r'\{\s*"(' + "|".join(TASK_KEYS) + r')"\s*:')
_HISTORY = re.compile(r"<chat_history>(.*?)</chat_history>", re.DOTALL)
_TURN = re.compile(r"^(USER|ASSISTANT):\s?", re.MULTILINE)
MAX_TITLE_WORDS = 6


@dataclass(frozen=True)
class FrontEndTask:
    key: str  # what the reply's JSON object holds: title, tags, follow_ups, ...
    prompt: str  # the front-end's whole message, as a model is to read it
    user_turns: list[str]  # the questions of the chat it quotes, oldest first

    @property
    def is_list(self) -> bool:
        return TASK_KEYS[self.key]


def front_end_task(message: str) -> FrontEndTask | None:
    """The housekeeping task a user message is, or None for a question."""
    if not message.lstrip().startswith("### Task:"):
        return None
    output = message.split("### Output:", 1)[-1]
    found = _OUTPUT.search(output) or _OUTPUT.search(message)
    if found is None:
        return None
    history = _HISTORY.search(message)
    return FrontEndTask(found.group(1), message, _user_turns(history.group(1) if history else ""))


def _user_turns(history: str) -> list[str]:
    """The user's messages in a quoted chat (`USER: ...` up to the next `ASSISTANT:` or `USER:`)."""
    parts = _TURN.split(history)
    # split with a group gives [before, role, text, role, text, ...]
    return [text.strip() for role, text in zip(parts[1::2], parts[2::2]) if role == "USER" and text.strip()]


def checked(task: FrontEndTask) -> Callable[[str], str]:
    """A parser of the model's reply to the task: the JSON object it asked for, compact, or InvalidReply."""

    def parse(reply: str) -> str:
        value, _ = parse_json_reply(reply)
        if not isinstance(value, dict) or task.key not in value:
            raise InvalidReply(f'the reply has no "{task.key}"')
        held = value[task.key]
        if task.is_list:
            if not isinstance(held, list) or not all(isinstance(item, str) for item in held):
                raise InvalidReply(f'"{task.key}" is not a list of strings')
            held = [item.strip() for item in held if item.strip()]
        elif not isinstance(held, str):
            raise InvalidReply(f'"{task.key}" is not a string')
        elif task.key == "title" and not held.strip():
            raise InvalidReply("the title is empty")
        return json.dumps({task.key: held}, ensure_ascii=False)

    return parse


def plain_reply(task: FrontEndTask, corpus: str, suggestions: list[str]) -> str:
    """The task's JSON reply without a model: the chat's first question as its title, the corpus as its tag, the
    question-generation method's suggestions, the last question as the search query."""
    first = task.user_turns[0] if task.user_turns else ""
    last = task.user_turns[-1] if task.user_turns else ""
    words = re.sub(r"[^\w\s'-]", " ", first).split()
    value: object = {
        "title": " ".join(words[:MAX_TITLE_WORDS]) or corpus,
        "tags": [corpus],
        "follow_ups": suggestions,
        "queries": [last] if last else [],
        "text": "",
        "prompt": last,
    }[task.key]
    return json.dumps({task.key: value}, ensure_ascii=False)


def reply_to(task: FrontEndTask, corpus: str, service: AnswerService) -> tuple[str, dict[str, int]]:
    """The task's JSON reply and the tokens it spent: follow-ups from the question-generation method, the rest
    written by the chat model when there is one and its reply holds, and plainly otherwise."""
    spent = {"prompt_tokens": 0, "completion_tokens": 0}
    if task.key == "follow_ups":
        try:
            suggestions, spent = service.suggestions(corpus, task.user_turns or [task.prompt])
        except (QuestionRefused, AnswerFailed):  # a corpus the method cannot read, a model that failed: none
            suggestions = []
        return plain_reply(task, corpus, suggestions), spent
    if service.chat is not None:
        written, spent = model_reply(service.chat, [{"role": "user", "content": task.prompt}], checked(task))
        if written is not None:
            return written, spent
    return plain_reply(task, corpus, []), spent
