"""graphrag-assets ask: answer a question here, from the published index, and record the answer."""

import argparse
import functools
import logging
import sys

from .common import UserError, command_name, dagster_instance

# The CLI's method names, and the names the answering path (and query_answers) uses.
METHODS = {
    "global": "global",
    "local": "local",
    "drift": "drift",
    "basic": "basic",
    "text-summary": "text_summary",
    "lazy": "lazy",
    "questions": "question_generation",
}


def ask(args: argparse.Namespace, run_config: dict) -> int:
    """Answer in this process, from the published index, and record the answer (no Dagster run per question: the
    answer shows in Dagster as an observation of its query asset). `run_config` holds the method's --set options."""
    corpus, method, question, level, follow_up = args.corpus, args.method, args.question, args.level, args.follow_up
    if not question.strip():
        raise UserError('the question is empty: ask something, for example `graphrag-assets ask "Who is Scrooge?"`')
    instance = dagster_instance()  # sweeps runs left behind by dead processes, and is where the answer is observed
    if not args.verbose:  # a failed answer ends in one line that says why; each failed call's warning is for --verbose
        logging.getLogger("graphrag_assets.models").setLevel(logging.ERROR)
    from ..answers.asking import AnswerFailed, Question
    from ..answers.options import METHODS as ANSWERING
    from ..answers.service import AnswerService, endpoint_settings_from_environment, observe_in_dagster
    from ..models.prices import dollars
    from ..settings import DATABASE

    chat, embeddings = endpoint_settings_from_environment()
    observe = functools.partial(observe_in_dagster, instance=instance)
    service = AnswerService(DATABASE, chat=chat, embeddings=embeddings, observe=observe)
    if not follow_up:
        corpus, method = corpus or "a-christmas-carol", method or "global"
    name = METHODS[method] if method else None
    settings = run_config.get("ops", {}).get(ANSWERING[name].asset, {}).get("config", {}) if name else {}
    try:
        found = service.ask(
            Question(
                corpus=corpus,
                text=question,
                method=name,
                level=level,
                dynamic=args.dynamic,
                follow_up=follow_up,
                max_cost_usd=args.budget,
                settings=settings,
            ),
            asked_by="cli",
        )
    except AnswerFailed as failure:
        print(f"failed: {failure}", file=sys.stderr)
        return 1
    recorded = service.flush(wait=5)
    show_answer(found)
    print(
        f"\n{found.method.replace('_', ' ')} search of {found.corpus}, {found.usage['model_calls']} model calls, "
        f"{found.usage['prompt_tokens'] + found.usage['completion_tokens']} chat tokens, "
        f"{found.usage['embedding_tokens']} embedding tokens, {dollars(found.cost_usd)}, {found.seconds:.2f} s"
    )
    if recorded:
        print(f"trace it: SELECT * FROM answer_sources WHERE answer_id = '{found.id}'")
    else:
        print("the store is busy (an index run is writing it): the answer is queued, and the next command records it")
    if found.method != "question_generation":  # suggested questions keep no conversation to continue
        print(f'continue the conversation: {command_name()} ask --follow-up {found.id} "..."')
    return 0


def show_answer(found) -> None:
    """The answer rendered for a terminal (markdown, wrapped to its width), or as plain text when piped; then its
    sources, one line each."""
    from ..answers.sources import where

    if sys.stdout.isatty():
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(found.text))
    else:
        print(found.text)
    if not found.sources:
        print("\nno sources: nothing relevant was found")
        return
    print("\nsources:")
    labels = {"report": "Reports", "text_unit": "Sources", "entity": "Entities", "relationship": "Relationships"}
    for source in found.sources:
        place = where(source) if source["kind"] == "text_unit" else source["title"]
        excerpt = " ".join(str(source["text"]).split())[:100]
        print(f"  [{labels[source['kind']]} {source['number']}] {place}: {excerpt}")
