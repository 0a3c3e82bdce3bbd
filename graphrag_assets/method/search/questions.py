"""Question generation: candidate next questions from the local context of the previous ones."""

from __future__ import annotations

import re

from ..model_interface import ChatModel, Embedder
from ..prompts import user_message
from .context import Index, SearchResult
from .local_search import local_context_for
from .settings import QuestionGenerationSettings


async def generate_questions(
    chat: ChatModel | None,
    embedder: Embedder | None,
    index: Index,
    previous_questions: list[str],
    settings: QuestionGenerationSettings,
) -> SearchResult:
    count = settings.question_count
    context = await local_context_for(embedder, index, "\n".join(previous_questions), settings)
    if chat is None:
        # Offline: questions from templates over the context's strongest relationships and entities.
        rels = index.rows_of("relationships", context.ids["relationships"])
        questions = [f"How are {r.source.title()} and {r.target.title()} related?" for r in rels]
        entities = index.rows_of("entities", context.ids["entities"])
        questions += [f"What role does {e.title.title()} play?" for e in entities]
        questions = list(dict.fromkeys(questions))[:count]
        label = "**Template questions (offline engine: filled from the strongest relationships and entities).**"
    else:
        reply = await chat.complete(
            user_message(
                "question_generation",
                context_data=context.text,
                question_count=count,
                previous_questions="\n".join(f"- {q}" for q in previous_questions),
            )
        )
        questions = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip() for line in (reply or "").splitlines()]
        questions = [q for q in questions if q.endswith("?")][:count]
        label = ""
    answer = "\n".join(([label, ""] if label else []) + [f"- {q}" for q in questions])
    return SearchResult(answer, chat is None, context.tokens, context.ids, {"questions": questions})
