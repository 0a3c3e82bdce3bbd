"""`graphrag-assets`: run the index and questions through Dagster from a terminal, so runs show up in the UI.

Settings of any step: `--config run.yaml` (Dagster run config, or {step: {key: value}}) and
`--set step.key=value` (repeatable; the value is read as YAML, so numbers, booleans and lists work).
A step is named by its asset (entities, covariates, text_embeddings, ...) or its op.
"""

# A module per command; only the standard library at import, so `--help` and a mistyped argument answer at once.
# Dagster, DuckDB and the method are imported by the commands that use them.

import argparse
import os
import sys
import traceback

from .ask import METHODS, ask
from .common import CODE_LOCATION, UserError, enter_project, use_instance
from .evaluation import evaluate, tune
from .index import dollars_argument, estimate, index
from .serving import mcp_stdio, new_key, serve
from .step_settings import resource_settings, step_settings

__all__ = ["CODE_LOCATION", "main", "resource_settings", "step_settings"]


def _is_user_error(problem: Exception) -> bool:
    """Something the user can fix, said in one line: a bad argument or setting, an unknown corpus or answer, a
    refused question, or a store another process holds."""
    if isinstance(problem, (UserError, ValueError, LookupError, FileNotFoundError)):
        return True
    dagster = sys.modules.get("dagster")
    if dagster is not None and isinstance(problem, dagster.DagsterError):
        return True
    from ..answers.service import StoreBusy
    from ..store.connection import StoreLocked

    return isinstance(problem, (StoreBusy, StoreLocked))


def _store_error(problem: Exception) -> str | None:
    """A lock taken by another process at any point of the command, in one paragraph; None for anything else."""
    duckdb = sys.modules.get("duckdb")
    if duckdb is None or not isinstance(problem, duckdb.IOException):
        return None
    from ..settings import DATABASE
    from ..store.connection import LOCK_HOLDER, lock_message, redacted

    locked = LOCK_HOLDER.search(str(problem)) or "lock" in str(problem).lower()
    return lock_message(redacted(DATABASE), problem) if locked else str(problem)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphrag-assets", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verbose", action="store_true", help="show Dagster's log and full tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)
    index_parser, ask_parser = _index_command(commands), _ask_command(commands)
    serve_parser = _serve_command(commands)
    mcp_parser = commands.add_parser("mcp", help="an MCP server on standard input and output, for desktop MCP clients")
    key_parser = commands.add_parser("key", help="make an API key for `serve` and print its keys-file entry")
    key_parser.add_argument("name", help="who the key is for: answers record it")
    key_parser.add_argument("--corpus", action="append", default=[], help="a corpus it may read; repeatable (all)")
    key_parser.add_argument("--per-minute", type=int, default=None, help="its own rate of questions a minute")
    evaluate_parser = commands.add_parser(
        "evaluate", help="the paper's evaluation of an indexed corpus: questions, answers, judgements, win rates"
    )
    evaluate_parser.add_argument("--corpus", default="a-christmas-carol")
    tune_parser = commands.add_parser(
        "tune", help="tune a corpus's extraction, claim, summary and report prompts to its text, and show them"
    )
    tune_parser.add_argument("--corpus", required=True)
    for sub, what in ((index_parser, "the run's"), (ask_parser, "the answer's")):
        sub.add_argument(
            "--budget",
            type=dollars_argument,
            default=None,
            metavar="USD",
            help=f"most {what} model requests may spend; a request that could pass it is not sent",
        )
    for sub in (index_parser, ask_parser, evaluate_parser, tune_parser):
        sub.add_argument("--config", help="YAML file of step settings (Dagster run config, or {step: {key: value}})")
        sub.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="STEP.KEY=VALUE",
            help="one setting, e.g. entities.max_gleanings=2 or covariates.enabled=false; repeatable",
        )
    for sub in (index_parser, ask_parser, evaluate_parser, tune_parser, serve_parser):
        sub.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for sub in (index_parser, ask_parser, evaluate_parser, tune_parser, serve_parser, mcp_parser):
        sub.add_argument(
            "--instance",
            metavar="NAME",
            help="in a dg project: the GraphRAG component instance to use (its key_prefix, or its folder's name)",
        )
    return parser


def _index_command(commands) -> argparse.ArgumentParser:
    index_parser = commands.add_parser("index", help="index corpora (all folders under data/ by default)")
    index_parser.add_argument("--corpus", action="append", default=[], help="corpus folder name; repeatable")
    index_parser.add_argument(
        "--batch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send the model requests to the Batch API (half the price, answered within 24 h); "
        "default: GRAPHRAG_BATCH_API",
    )
    index_parser.add_argument(
        "--prompts",
        choices=("default", "tuned"),
        default=None,
        help="the files in prompts/, or the corpus's tuned prompts (graphrag-assets tune); default: as last time",
    )
    index_parser.add_argument(
        "--estimate",
        action="store_true",
        help="say what indexing would cost with each method (requests, tokens, dollars, minutes), with no model "
        "request, and index nothing",
    )
    index_parser.add_argument("--json", action="store_true", help="with --estimate: one JSON object per corpus")
    return index_parser


def _ask_command(commands) -> argparse.ArgumentParser:
    ask_parser = commands.add_parser("ask", help="ask a question of an indexed corpus (answered here, recorded)")
    ask_parser.add_argument("question")
    ask_parser.add_argument("--corpus", default=None, help="default: a-christmas-carol, or the followed answer's")
    ask_parser.add_argument("--method", choices=sorted(METHODS), default=None, help="default: global, or as followed")
    ask_parser.add_argument("--follow-up", metavar="ANSWER_ID", help="continue the conversation of a stored answer")
    ask_parser.add_argument("--level", type=int, default=None, help="community level (0 = root)")
    ask_parser.add_argument("--dynamic", action="store_true", help="global search: dynamic community selection")
    return ask_parser


def _serve_command(commands) -> argparse.ArgumentParser:
    serve_parser = commands.add_parser(
        "serve", help="answer over HTTP: a JSON API, an OpenAI-compatible API, MCP at /mcp and a chat page at /"
    )
    serve_parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (another than localhost needs keys)"
    )
    serve_parser.add_argument("--port", type=int, default=8000)
    serve_parser.add_argument(
        "--keys", default=os.getenv("GRAPHRAG_SERVER_KEYS"), help="keys file (default: GRAPHRAG_SERVER_KEYS)"
    )
    serve_parser.add_argument(
        "--cors-origin", action="append", default=[], help="a web origin allowed to call the API; repeatable"
    )
    serve_parser.add_argument("--poll-seconds", type=float, default=1.0, help="how often to look for new indexes")
    serve_parser.add_argument(
        "--question-budget",
        type=dollars_argument,
        default=None,
        metavar="USD",
        help="most one answer's model requests may spend, whoever asks (a request may ask for less)",
    )
    serve_parser.add_argument(
        "--rate", type=int, default=60, help="questions a minute per key, unless its entry says otherwise"
    )
    return serve_parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "instance", None):
        enter_project()
    if not args.verbose:  # verbose shows Dagster's log, progress included
        from ..method.progress import PROGRESS_TO_TERMINAL

        os.environ[PROGRESS_TO_TERMINAL] = "1"
    try:
        if getattr(args, "instance", None):
            use_instance(args.instance)
        if args.command == "serve":
            return serve(
                args.host, args.port, args.keys, args.cors_origin, args.poll_seconds, args.rate, args.question_budget
            )
        if args.command == "mcp":
            return mcp_stdio()
        if args.command == "key":
            return new_key(args.name, args.corpus, args.per_minute)
        run_config = step_settings(args.config, args.set)
        if args.command == "evaluate":
            return evaluate(args.corpus, run_config, args.verbose)
        if args.command == "tune":
            return tune(args.corpus, run_config, args.verbose)
        if getattr(args, "prompts", None):  # index only
            run_config["ops"].setdefault("index_prompts", {"config": {}})["config"]["prompts"] = args.prompts
        if args.command == "ask":
            return ask(args, run_config)
        if args.estimate:
            return estimate(args.corpus, run_config, args.json)
        if args.json:
            raise UserError("--json goes with --estimate")
        return index(args.corpus, run_config, args.verbose, args.batch, args.budget)
    except KeyboardInterrupt:
        print("interrupted: nothing was recorded or published by this command", file=sys.stderr)
        return 130
    except Exception as problem:
        message = _store_error(problem) or (str(problem) if _is_user_error(problem) else None)
        if message is None:
            raise
        if args.verbose:
            traceback.print_exc()
        print(f"error: {message}", file=sys.stderr)
        return 2
