"""`graphrag-assets`: run the index and questions through Dagster from a terminal, so runs show up in the UI.

Settings of any step: `--config run.yaml` (Dagster run config, or {step: {key: value}}) and
`--set step.key=value` (repeatable; the value is read as YAML, so numbers, booleans and lists work).
A step is named by its asset (entities, covariates, text_embeddings, ...) or its op.
"""

import argparse
import contextlib
import functools
import io
import json
import logging
import os
import re
import socket
import sys
import time
import traceback
from pathlib import Path

import dagster as dg
import duckdb
import yaml
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.storage.tags import REPOSITORY_LABEL_TAG
from dagster_shared.telemetry import get_or_set_instance_id

from .automation.runs import HOST_TAG, PID_TAG, fail_runs_of_dead_processes
from .method.progress import PROGRESS_TO_TERMINAL
from .resources import BATCH_API_TAG
from .store.connection import connect, is_local_file, redacted

REPO = Path(__file__).resolve().parents[1]
INDEX_TABLES = ("documents", "text_units", "entities", "relationships", "covariates")
METHODS = {
    "global": "global_search",
    "local": "local_search",
    "drift": "drift_search",
    "basic": "basic_search",
    "text-summary": "text_summary_search",
    "lazy": "lazy_search",
    "questions": "question_generation",
}
# Multi-assets run as one op named after their function; users think in assets.
OP_OF_ASSET = {
    "documents": "corpus_documents",
    "base_text_units": "corpus_documents",
    "entities": "entity_graph",
    "relationships": "entity_graph",
}
# Settings of one run as a whole, given without a step (--set prompts=tuned): the step that holds each.
RUN_SETTINGS = {"prompts": "index_prompts"}


class UserError(Exception):
    """Something the user can fix; printed as one paragraph, without a traceback."""


def project_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds a Dagster workspace.yaml: the project a command is run in."""
    return next((folder for folder in (start, *start.parents) if (folder / "workspace.yaml").is_file()), None)


def enter_project() -> None:
    """Run from the project's root, wherever inside it the command was typed.

    The store, the cache, the corpora and the instance's storage are paths relative to the project
    (.graphrag/, data/, dagster.yaml's .dagster/): run from a sub-folder they would name other, empty places.
    """
    here = Path.cwd()
    root = project_root(here)
    if root is not None and root != here:
        print(f"note: using the project at {root}", file=sys.stderr)
        os.chdir(root)


class _WithoutConfigNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No dagster instance configuration file")


@functools.cache
def _instance() -> dg.DagsterInstance:
    # The project's dagster.yaml is the instance config unless the user points DAGSTER_HOME elsewhere.
    os.environ.setdefault("DAGSTER_HOME", str(Path.cwd() if (Path.cwd() / "dagster.yaml").is_file() else REPO))
    home = Path(os.environ["DAGSTER_HOME"])
    if not (home / "dagster.yaml").is_file():
        # Dagster says so in a warning per instance and, the first time, a telemetry banner: one line instead.
        print(
            f"note: DAGSTER_HOME {home} has no dagster.yaml, so Dagster's defaults apply; copy the project's "
            f"{REPO / 'dagster.yaml'} there for its settings (run queue, retries, no telemetry)",
            file=sys.stderr,
        )
        logging.getLogger("dagster").addFilter(_WithoutConfigNotice())
        with contextlib.redirect_stderr(io.StringIO()):
            get_or_set_instance_id()
    instance = dg.DagsterInstance.get()
    for run_id, pid in fail_runs_of_dead_processes(instance):
        print(f"note: run {run_id} was left STARTED by process {pid}, which is gone; marked failed", file=sys.stderr)
    return instance


CODE_LOCATION = "graphrag_assets"  # workspace.yaml and pyproject.toml's [tool.dg.project] name it so


def _run_tags() -> dict:
    """Who runs this run (a later command fails it if this process dies without saying so), and where its job
    lives: the UI lists a job's runs by this label, which runs launched from the UI get from their origin."""
    return {
        PID_TAG: str(os.getpid()),
        HOST_TAG: socket.gethostname(),
        REPOSITORY_LABEL_TAG: f"{SINGLETON_REPOSITORY_NAME}@{CODE_LOCATION}",
    }


def _logging(verbose: bool) -> dict:
    return {"loggers": {"console": {"config": {"log_level": "INFO" if verbose else "CRITICAL"}}}}


def step_settings(config_file: str | None, settings: list[str]) -> dict:
    """Run config for `ops` from a YAML file and key=value overrides."""
    ops: dict = {}
    if config_file:
        try:
            loaded = yaml.safe_load(Path(config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as problem:
            raise UserError(f"cannot read the run config {config_file}: {problem}") from None
        if not isinstance(loaded, dict):
            raise UserError(f"{config_file} must hold a mapping of steps to settings")
        if "ops" in loaded:
            ops = {step: dict(value.get("config", {})) for step, value in loaded["ops"].items()}
        else:
            ops = {step: dict(value) for step, value in loaded.items()}
    for setting in settings:
        match = re.fullmatch(r"(?:(\w+)\.)?(\w+)=(.*)", setting, re.DOTALL)
        if not match or not (match.group(1) or match.group(2) in RUN_SETTINGS):
            raise UserError(
                f"--set {setting!r} is not of the form step.key=value (for example entities.max_gleanings=2)"
            )
        step, key, value = match.groups()
        step = step or RUN_SETTINGS[key]
        ops.setdefault(step, {})[key] = yaml.safe_load(value) if value else ""
    merged: dict = {}
    for step, values in ops.items():
        merged.setdefault(OP_OF_ASSET.get(step, step), {}).update(values)
    return {"ops": {op: {"config": values} for op, values in merged.items()}}


_OUR_PROCESSES = re.compile(r"graphrag[_-]assets|dagster")
_STORE_WAIT_SECONDS = 120
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def open_store(read_only: bool = True):
    """The configured store; a local DuckDB file is opened once no run of ours holds it."""
    from .definitions import DATABASE, DUCKLAKE_DATA_PATH

    if is_local_file(DATABASE):
        database = Path(DATABASE).resolve()
        if not database.exists():
            raise UserError(f"there is no store at {database} yet: run `graphrag-assets index` first")
        return connect_when_free(database, read_only=read_only)
    return connect(DATABASE, data_path=DUCKLAKE_DATA_PATH, read_only=read_only)


def connect_when_free(database: Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Connect to a DuckDB file, waiting while one of our runs holds it; one clear message when anything else does.

    Runs of this project hold the file only while they read or write, so one of them is waited for; any other
    holder (a notebook's connection, even read-only) would make the run wait ~100 s and fail, so it is named now.
    The connection itself is the check: a separate check before connecting leaves a gap another process can
    take the lock in.
    """
    deadline = time.monotonic() + _STORE_WAIT_SECONDS
    while True:
        try:
            return duckdb.connect(str(database), read_only=read_only)
        except duckdb.IOException as problem:
            holder = _LOCK_HOLDER.search(str(problem))
            if holder and _OUR_PROCESSES.search(_command_line(int(holder.group(2)))) and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            raise UserError(store_locked(database, problem)) from None


def store_locked(database: Path | str, problem: Exception) -> str:
    """DuckDB's lock error as one paragraph a user can act on."""
    holder = _LOCK_HOLDER.search(str(problem))
    who = f"process {holder.group(2)} ({holder.group(1)})" if holder else "another process"
    return (
        f"the DuckDB file {database} is locked by {who}. DuckDB allows one writer, and an open "
        "connection (a notebook's, even read-only) blocks it: close that connection, or read a copy "
        "of the file (see docs/internals.md, 'Reading the store while runs write it')"
    )


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    failures = result.get_step_failure_events()
    if not failures:
        return "the run failed before any step ran"
    data = failures[0].step_failure_data
    if data.user_failure_data and data.user_failure_data.description:
        return f"{failures[0].step_key}: {data.user_failure_data.description}"
    error = data.error
    while error is not None and error.cause is not None:  # the user code's exception, not Dagster's wrapper
        error = error.cause
    message = error.message.strip() if error else "failed"
    return f"{failures[0].step_key}: {message} (run again with --verbose for the traceback)"


def execute(
    job_name: str, corpus: str, run_config: dict, verbose: bool, tags: dict[str, str] | None = None
) -> dg.ExecuteInProcessResult:
    from .definitions import DATABASE, defs

    if is_local_file(DATABASE) and Path(DATABASE).exists():
        connect_when_free(Path(DATABASE).resolve()).close()
    job = defs.resolve_job_def(job_name)
    try:
        return job.execute_in_process(
            instance=_instance(),
            partition_key=corpus,
            raise_on_error=False,
            run_config={**_logging(verbose), **run_config},
            tags={**_run_tags(), **(tags or {})},
        )
    except dg.DagsterInvalidConfigError as problem:
        details = "; ".join(error.message.split(" Expected")[0].rstrip(".") for error in problem.errors)
        steps = ", ".join(sorted(job.graph.node_dict))
        raise UserError(f"the settings are not valid for {job_name}: {details}. Steps of this job: {steps}") from None


def index(corpora: list[str], run_config: dict, verbose: bool, batch: bool | None = None) -> int:
    from .definitions import DATABASE, defs

    instance = _instance()
    names = corpora or defs.resources["corpora"].names()
    if not names:
        raise UserError("no corpus folders under data/: add one (data/<name>/*.txt) and try again")
    for name in names:
        defs.resources["corpora"].folder(name)  # a clear error for a name that is unsafe or has no folder
    instance.add_dynamic_partitions("corpus", [n for n in names if not instance.has_dynamic_partition("corpus", n)])
    for name in names:
        tags = {BATCH_API_TAG: str(batch).lower()} if batch is not None else {}
        result = execute("index_corpus", name, run_config, verbose, tags)
        print(f"{'indexed' if result.success else 'FAILED '} {name} (run {result.run_id})")
        if not result.success:
            print(f"failed: {failure_message(result)}", file=sys.stderr)
            return 1
    with open_store() as conn:  # another run of ours may be writing a DuckDB file: wait for it, as runs do
        for table in INDEX_TABLES:
            counts = dict(conn.execute(f"SELECT corpus, count(*) FROM {table} GROUP BY corpus").fetchall())
            print(f"  {table:<14}" + "  ".join(f"{name}: {counts.get(name, 0)} rows" for name in names))
        engine = conn.execute(
            "SELECT arg_max(engine, materialized_at) FROM lineage WHERE asset = 'entities'"
        ).fetchone()[0]
    print(f"\nengine: {engine}   (set GRAPHRAG_API_BASE / GRAPHRAG_API_KEY to use a model)")
    if is_local_file(DATABASE):
        database = Path(DATABASE).resolve()
        print(f"DuckDB file: {database}")
        print(
            f"  query it:   .venv/bin/python -c \"import duckdb; print(duckdb.connect('{database}', read_only=True)"
            ".sql('select title, degree from entities order by degree desc limit 10'))\""
        )
    else:
        print(f"store: {redacted(DATABASE)}")
    print(f"Dagster UI:   DAGSTER_HOME={os.environ['DAGSTER_HOME']} .venv/bin/dg dev   then open http://127.0.0.1:3000")
    return 0


# The method names query_answers stores, back to the CLI's.
METHOD_OF_STORED = {
    "global": "global",
    "local": "local",
    "drift": "drift",
    "basic": "basic",
    "text_summary": "text-summary",
}


def earlier_turns(answer_id: str) -> tuple[str, str, int | None, list[dict]]:
    """(corpus, method, level, conversation) of a stored answer, its own question and answer appended."""
    from .definitions import DATABASE

    with open_store() as conn:
        tables = {row[0] for row in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        row = (
            conn.execute(
                "SELECT corpus, method, community_level, question, answer, conversation "
                "FROM query_answers WHERE id = ?",
                [answer_id],
            ).fetchone()
            if "query_answers" in tables
            else None
        )
    if row is None or row[1] not in METHOD_OF_STORED:
        raise UserError(
            f"no answer {answer_id!r} to follow up in {redacted(DATABASE)}: use the answer id an `ask` printed (or the "
            "answer_id in its metadata) of a global, local, drift, basic or text-summary question"
        )
    corpus, method, level, question, answer, conversation = row
    turns = json.loads(conversation) if conversation else []
    return (
        corpus,
        METHOD_OF_STORED[method],
        level,
        [*turns, {"role": "user", "content": question}, {"role": "assistant", "content": answer}],
    )


def ask(
    corpus: str | None,
    method: str | None,
    question: str,
    level: int | None,
    dynamic: bool,
    run_config: dict,
    verbose: bool,
    follow_up: str | None = None,
) -> int:
    if not question.strip():
        raise UserError('the question is empty: ask something, for example `graphrag-assets ask "Who is Scrooge?"`')
    if level is not None and level < 0:
        raise UserError(f"--level {level} is not a community level: levels count from 0 (the root) down")
    conversation: list[dict] = []
    if follow_up:
        stored_corpus, stored_method, stored_level, conversation = earlier_turns(follow_up)
        corpus, method = corpus or stored_corpus, method or stored_method
        level = level if level is not None else stored_level
    corpus, method = corpus or "a-christmas-carol", method or "global"
    instance = _instance()
    if not instance.has_dynamic_partition("corpus", corpus):
        raise UserError(
            f"corpus {corpus!r} was never indexed here: run `graphrag-assets index --corpus {corpus}` first"
        )
    if level is not None:
        check_level(corpus, level)
    asset = METHODS[method]
    config: dict = {"previous_questions": [question]} if method == "questions" else {"question": question}
    if level is not None and method in ("global", "local", "drift", "questions"):
        config["community_level"] = level
    if dynamic:
        config["dynamic_community_selection"] = True
    if conversation:
        config["conversation"] = conversation
    ops = run_config.get("ops", {})
    ops[asset] = {"config": {**ops.get(asset, {}).get("config", {}), **config}}
    result = execute(f"ask_{asset}", corpus, {"ops": ops}, verbose)
    if not result.success:
        print(f"failed: {failure_message(result)}", file=sys.stderr)
        return 1
    metadata = {k: v.value for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()}
    print(metadata["answer"])
    print(f"\n--- sources ---\n{metadata['sources']}")
    print(
        f"\n{method} search, context {metadata['context_tokens']} tokens, "
        f"{metadata.get('model_calls', 0)} model calls, "
        f"run {result.run_id}\ntrace it: {metadata['trace_sql']}"
    )
    if method in METHOD_OF_STORED.values():  # question generation keeps no conversation to continue
        print(f'continue the conversation: graphrag-assets ask --follow-up {metadata["answer_id"]} "..."')
    return 0


def check_level(corpus: str, level: int) -> None:
    """Refuse a community level the corpus's index does not have, before a run is launched for it."""
    with open_store() as conn:
        try:
            levels = [
                row[0]
                for row in conn.execute(
                    "SELECT DISTINCT level FROM communities WHERE corpus = ? ORDER BY level", [corpus]
                ).fetchall()
            ]
        except duckdb.CatalogException:
            levels = []
    if not levels:
        raise UserError(f"corpus {corpus!r} has no communities yet: run `graphrag-assets index --corpus {corpus}`")
    if level not in levels:
        raise UserError(f"--level {level} does not exist in corpus {corpus!r}: its levels are {levels[0]}-{levels[-1]}")


def tune(corpus: str, run_config: dict, verbose: bool) -> int:
    """Tune the corpus's prompts, then show what tuning found and how each prompt differs from prompts/."""
    from .definitions import defs
    from .method.tuning import prompt_diff

    defs.resources["corpora"].folder(corpus)  # a clear error for a name that is unsafe or has no folder
    instance = _instance()
    if not instance.has_dynamic_partition("corpus", corpus):
        instance.add_dynamic_partitions("corpus", [corpus])
    result = execute("tune_prompts", corpus, run_config, verbose)
    if not result.success:
        print(f"failed: {failure_message(result)}", file=sys.stderr)
        return 1
    with open_store() as conn:
        rows = conn.execute(
            "SELECT id, template, domain, persona, language, entity_types, examples, derived_by FROM tuned_prompts "
            "WHERE corpus = ? ORDER BY id",
            [corpus],
        ).fetchall()
    for name, template, *_ in rows:
        print(prompt_diff(name, template) or f"{name}: as in prompts/{name}.txt")
    _, _, domain, persona, language, types, examples, derived_by = rows[0]
    print(f"\ntuned prompts of {corpus} (run {result.run_id}), derived by {derived_by}")
    print(f"  domain:       {domain or '(needs a model)'}")
    print(f"  persona:      {persona or '(needs a model)'}")
    print(f"  language:     {language}")
    print(f"  entity types: {', '.join(json.loads(types))}")
    print(f"  examples:     {len(json.loads(examples))} written from the corpus's text")
    print(f"\nindex with them:  graphrag-assets index --corpus {corpus} --prompts tuned")
    return 0


def evaluate(corpus: str, run_config: dict, verbose: bool) -> int:
    from .definitions import defs

    if not defs.resources["chat"].configured:
        raise UserError(
            "the evaluation needs a chat model to write questions, answer them and judge the answers, and none is "
            "set: export GRAPHRAG_API_BASE (and GRAPHRAG_API_KEY) and run it again"
        )
    if not _instance().has_dynamic_partition("corpus", corpus):
        raise UserError(
            f"corpus {corpus!r} was never indexed here: run `graphrag-assets index --corpus {corpus}` first"
        )
    result = execute("evaluate_corpus", corpus, run_config, verbose)
    if not result.success:
        print(f"failed: {failure_message(result)}", file=sys.stderr)
        return 1
    for event in result.get_asset_materialization_events():
        asset, metadata = event.materialization.asset_key.path[-1], event.materialization.metadata
        for name, value in metadata.items():
            if name.endswith(("_win_rates", "_accuracy")) or name in ("mean_per_answer", "agreement_with_judges"):
                print(f"\n## {asset}: {name.replace('_', ' ')}\n\n{value.value}")
    print(f"\nrun {result.run_id}: the heatmaps are in the win_rates asset's metadata in the Dagster UI")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="graphrag-assets", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verbose", action="store_true", help="show Dagster's log and full tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)
    index_parser = commands.add_parser("index", help="index corpora (all folders under data/ by default)")
    index_parser.add_argument("--corpus", action="append", default=[], help="corpus folder name; repeatable")
    index_parser.add_argument(
        "--batch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send the model requests to the Batch API (half the price, answered within 24 h); "
        "default: GRAPHRAG_BATCH_API",
    )
    ask_parser = commands.add_parser("ask", help="ask a question of an indexed corpus (a Dagster run, recorded)")
    ask_parser.add_argument("question")
    ask_parser.add_argument("--corpus", default=None, help="default: a-christmas-carol, or the followed answer's")
    ask_parser.add_argument("--method", choices=sorted(METHODS), default=None, help="default: global, or as followed")
    ask_parser.add_argument("--follow-up", metavar="ANSWER_ID", help="continue the conversation of a stored answer")
    ask_parser.add_argument("--level", type=int, default=None, help="community level (0 = root)")
    ask_parser.add_argument("--dynamic", action="store_true", help="global search: dynamic community selection")
    evaluate_parser = commands.add_parser(
        "evaluate", help="the paper's evaluation of an indexed corpus: questions, answers, judgements, win rates"
    )
    evaluate_parser.add_argument("--corpus", default="a-christmas-carol")
    tune_parser = commands.add_parser(
        "tune", help="tune a corpus's extraction, claim, summary and report prompts to its text, and show them"
    )
    tune_parser.add_argument("--corpus", required=True)
    index_parser.add_argument(
        "--prompts",
        choices=("default", "tuned"),
        default=None,
        help="the files in prompts/, or the corpus's tuned prompts (graphrag-assets tune); default: as last time",
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
        sub.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    enter_project()
    if not args.verbose:  # verbose shows Dagster's log, progress included
        os.environ[PROGRESS_TO_TERMINAL] = "1"
    try:
        run_config = step_settings(args.config, args.set)
        if args.command == "evaluate":
            return evaluate(args.corpus, run_config, args.verbose)
        if args.command == "tune":
            return tune(args.corpus, run_config, args.verbose)
        if getattr(args, "prompts", None):  # index only
            run_config["ops"].setdefault("index_prompts", {"config": {}})["config"]["prompts"] = args.prompts
        if args.command == "ask":
            return ask(
                args.corpus,
                args.method,
                args.question,
                args.level,
                args.dynamic,
                run_config,
                args.verbose,
                args.follow_up,
            )
        return index(args.corpus, run_config, args.verbose, args.batch)
    except (UserError, ValueError, FileNotFoundError, dg.DagsterError) as problem:
        if args.verbose:
            traceback.print_exc()
        print(f"error: {problem}", file=sys.stderr)
        return 2
    except duckdb.IOException as problem:  # a lock taken by another process at any point of the command
        if args.verbose:
            traceback.print_exc()
        from .definitions import DATABASE

        locked = _LOCK_HOLDER.search(str(problem)) or "lock" in str(problem).lower()
        print(f"error: {store_locked(redacted(DATABASE), problem) if locked else problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
