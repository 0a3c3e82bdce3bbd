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
import shutil
import socket
import sys
import time
import traceback
from pathlib import Path

# Only the standard library at import: `--help` and a mistyped argument answer at once. Dagster, DuckDB and the
# method are imported by the commands that use them.

REPO = Path(__file__).resolve().parents[1]
SUMMARY_TABLES = ("documents", "text_units", "entities", "relationships", "covariates")  # whose rows `index` prints
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
def _instance():
    import dagster as dg
    from dagster_shared.telemetry import get_or_set_instance_id

    from .automation.runs import fail_runs_of_dead_processes

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
    from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
    from dagster._core.storage.tags import REPOSITORY_LABEL_TAG

    from .automation.runs import HOST_TAG, PID_TAG

    return {
        PID_TAG: str(os.getpid()),
        HOST_TAG: socket.gethostname(),
        REPOSITORY_LABEL_TAG: f"{SINGLETON_REPOSITORY_NAME}@{CODE_LOCATION}",
    }


# The instance chosen with --instance in a dg project: its project's root, defs.yaml and attributes (empty: this
# repository's own project, by GRAPHRAG_ variables).
_CHOSEN: dict = {}


def use_instance(name: str) -> None:
    """Point the command at one GraphRAG instance of the dg project it runs in: its store, corpora and endpoint
    become the GRAPHRAG_ variables, before anything reads them, and its jobs are the ones launched."""
    from .instance_files import dg_project_root, instance_environment, instances

    root = dg_project_root(Path.cwd())
    if root is None:
        raise UserError(
            f"--instance {name}: {Path.cwd()} is in no dg project (a pyproject.toml with [tool.dg]); run it in the "
            "project that holds the instance's defs.yaml, or leave --instance out for this repository's project"
        )
    found = instances(root)
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise UserError(f"--instance {name}: the project at {root} has no GraphRAG instance of that name ({known})")
    where, attributes = found[name]
    os.chdir(root)
    os.environ.update(instance_environment(attributes, root))
    _CHOSEN.update(root=root, where=where, attributes=attributes)


@functools.cache
def _definitions():
    """The Definitions the command launches runs of: this repository's, or the chosen instance's."""
    if not _CHOSEN:
        from .definitions import defs

        return defs
    import pydantic

    from .components import GraphRAG
    from .project import graphrag_definitions

    try:
        component = GraphRAG.model_validate(_CHOSEN["attributes"])
    except pydantic.ValidationError as problem:
        mistakes = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in problem.errors())
        raise UserError(f"{_CHOSEN['where']}: {mistakes}") from None
    return graphrag_definitions(component.settings(_CHOSEN["root"]))


def _names():
    from .naming import InstanceNames

    return InstanceNames(_CHOSEN.get("attributes", {}).get("key_prefix", ""))


def _resource(name: str):
    return _definitions().resources[_names().name(name)]


def _logging(verbose: bool) -> dict:
    return {"loggers": {"console": {"config": {"log_level": "INFO" if verbose else "CRITICAL"}}}}


def _yaml(text: str, where: str):
    """YAML, or one line saying where it is broken."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"{where} is not valid YAML{at}: {getattr(problem, 'problem', None) or problem}") from None


def step_settings(config_file: str | None, settings: list[str]) -> dict:
    """Run config from a YAML file (step settings, or a Dagster run config with ops: and resources:) and
    key=value overrides."""
    ops: dict = {}
    resources: dict = {}
    if config_file:
        try:
            text = Path(config_file).read_text()
        except OSError as problem:
            raise UserError(f"cannot read the run config {config_file}: {problem.strerror}") from None
        loaded = _yaml(text, f"the run config {config_file}") or {}
        if not isinstance(loaded, dict):
            raise UserError(f"{config_file} must hold a mapping of steps to settings")
        if {"ops", "resources"} & set(loaded):  # Dagster's run config, as the launchpad shows it
            ops = {step: dict((value or {}).get("config", {})) for step, value in (loaded.get("ops") or {}).items()}
            resources = loaded.get("resources") or {}
        else:
            ops = {step: dict(value or {}) for step, value in loaded.items()}
    for setting in settings:
        match = re.fullmatch(r"(?:(\w+)\.)?(\w+)=(.*)", setting, re.DOTALL)
        if not match or not (match.group(1) or match.group(2) in RUN_SETTINGS):
            raise UserError(
                f"--set {setting!r} is not of the form step.key=value (for example entities.max_gleanings=2)"
            )
        step, key, value = match.groups()
        step = step or RUN_SETTINGS[key]
        ops.setdefault(step, {})[key] = _yaml(value, f"the value of --set {setting!r}") if value else ""
    merged: dict = {}
    for step, values in ops.items():
        merged.setdefault(OP_OF_ASSET.get(step, step), {}).update(values)
    config = {"ops": {op: {"config": values} for op, values in merged.items()}}
    return config | ({"resources": resources} if resources else {})


def resource_settings(defs, given: dict) -> dict:
    """A run config's resource settings over what the environment configured: in run config, a resource's settings
    replace its configured ones whole, and a run would lose the endpoint it was not given again."""
    import dagster as dg

    merged = {}
    for name, value in given.items():
        resource = defs.resources.get(name)
        if resource is None:
            raise UserError(
                f"the run config sets resource {name!r}; the resources are {', '.join(sorted(defs.resources))}"
            )
        configured = {
            field: {"env": v.env_var_name} if isinstance(v, dg.EnvVar) else v  # the key stays a variable's name
            for field, v in resource._get_non_default_public_field_values().items()
        }
        merged[name] = {"config": {**configured, **((value or {}).get("config") or {})}}
    return merged


def check_settings(job, run_config: dict) -> None:
    """Refuse a setting out of its range (a negative count, a zero where one is needed) in one line, before a run
    is launched: Dagster's own check knows the settings' types, not their ranges, which each step's config
    class checks when the step starts."""
    import typing

    import pydantic

    for op, values in run_config.get("ops", {}).items():
        node = job.graph.node_dict.get(op)
        function = getattr(getattr(node.definition, "compute_fn", None), "decorated_fn", None) if node else None
        config_class = typing.get_type_hints(function).get("config") if function else None
        if (
            config_class is None
            or not isinstance(config_class, type)
            or not issubclass(config_class, pydantic.BaseModel)
        ):
            continue
        try:
            config_class(**(values or {}).get("config", {}))
        except pydantic.ValidationError as problem:
            first = problem.errors()[0]
            name = ".".join(str(part) for part in first["loc"])
            given = f" {first['input']!r}" if "input" in first and not isinstance(first["input"], dict) else ""
            raise UserError(f"the setting {op}.{name}{given} is refused: {first['msg']}") from None


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
    from .settings import DATABASE, DUCKLAKE_DATA_PATH
    from .store.connection import connect, is_local_file

    if is_local_file(DATABASE):
        database = Path(DATABASE).resolve()
        if not database.exists():
            raise UserError(f"there is no store at {database} yet: run `graphrag-assets index` first")
        return connect_when_free(database, read_only=read_only)
    return connect(DATABASE, data_path=DUCKLAKE_DATA_PATH, read_only=read_only)


def connect_when_free(database: Path, read_only: bool = False):
    """Connect to a DuckDB file, waiting while one of our runs holds it; one clear message when anything else does.

    Runs of this project hold the file only while they read or write, so one of them is waited for; any other
    holder (a notebook's connection, even read-only) would make the run wait ~100 s and fail, so it is named now.
    The connection itself is the check: a separate check before connecting leaves a gap another process can
    take the lock in.
    """
    import duckdb

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


def interrupted(result) -> bool:
    """Whether the run ended because the user pressed Ctrl-C (or the process was asked to stop)."""
    for failure in result.get_step_failure_events():
        error = failure.step_failure_data.error
        while error is not None:
            if error.cls_name == "DagsterExecutionInterruptedError":
                return True
            error = error.cause
    return False


def execute(job_name: str, corpus: str, run_config: dict, verbose: bool, tags: dict[str, str] | None = None):
    import dagster as dg

    from .settings import DATABASE
    from .store.connection import is_local_file

    if is_local_file(DATABASE) and Path(DATABASE).exists():
        connect_when_free(Path(DATABASE).resolve()).close()
    defs, names = _definitions(), _names()
    job_name = names.name(job_name)
    job = defs.resolve_job_def(job_name)
    run_config = {
        section: {names.name(key): value for key, value in run_config[section].items()}
        for section in ("ops", "resources")
        if section in run_config
    } | {key: value for key, value in run_config.items() if key not in ("ops", "resources")}
    run_config = _merged(job.get_run_config_for_partition_key(corpus), run_config)  # the job's own defaults under
    check_settings(job, run_config)
    if run_config.get("resources"):
        run_config = {**run_config, "resources": resource_settings(defs, run_config["resources"])}
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


def _merged(defaults: dict, given: dict) -> dict:
    """`given` over `defaults`, mapping by mapping: a setting given replaces that setting, not its step's others."""
    merged = dict(defaults)
    for key, value in given.items():
        both = isinstance(value, dict) and isinstance(defaults.get(key), dict)
        merged[key] = _merged(defaults[key], value) if both else value
    return merged


def estimate(corpora: list[str], run_config: dict, as_json: bool) -> int:
    """What indexing each corpus would cost, with no model request and no run."""
    from .assets.estimate import estimate_corpus, estimate_table
    from .assets.metadata import markdown
    from .method.ingest.documents import has_documents

    folders = _resource("corpora")
    names = corpora or folders.scan()[0]
    for name in names:
        if not has_documents(folders.folder(name)):
            raise UserError(f"corpus folder {folders.root}/{name} holds no documents yet: add files to it")
    chat, embeddings = _resource("chat"), _resource("embeddings")
    if not chat.configured:
        print("no model is set: the offline engine indexes for nothing; the figures are what a model would be asked")
    for name in names:
        found = estimate_corpus(folders, name, chat, embeddings, run_config.get("ops"))
        if as_json:
            print(json.dumps({key: found[key] for key in ("corpus", "model", "methods")}))
            continue
        print(
            f"\n{name}: {found['text_units']:,} text units, {found['text_tokens']:,} tokens; "
            f"model {found['model']}, embeddings {found['embedding_model']}"
        )
        print(markdown(estimate_table(found)))
        print(f"\n{found['assumptions']}")
    return 0


def _dollars(value: str) -> float:
    """A --budget: a number of dollars above 0."""
    try:
        amount = float(value.strip().lstrip("$"))
    except ValueError:
        amount = -1.0
    if not amount > 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not an amount of dollars above 0 (for example 2.50)")
    return amount


def index(
    corpora: list[str], run_config: dict, verbose: bool, batch: bool | None = None, budget: float | None = None
) -> int:
    from .method.ingest.documents import has_documents
    from .resources import BATCH_API_TAG, MAX_COST_TAG
    from .settings import DATABASE
    from .store.connection import is_local_file, redacted

    instance, partitions = _instance(), _names().name("corpus")
    corpora_folders = _resource("corpora")
    if corpora:
        names = corpora
        for name in names:  # a clear error for a name that is unsafe, has no folder, or nothing in it
            if not has_documents(corpora_folders.folder(name)):
                raise UserError(f"corpus folder {corpora_folders.root}/{name} holds no documents yet: add files to it")
    else:
        names, refused = corpora_folders.scan()
        for folder, reason in refused.items():
            print(f"skipped {corpora_folders.root}/{folder}: {reason}", file=sys.stderr)
    if not names:
        raise UserError(f"no corpus to index under {corpora_folders.root}/: add one (<name>/*.txt) and try again")
    instance.add_dynamic_partitions(partitions, [n for n in names if not instance.has_dynamic_partition(partitions, n)])
    failed: dict[str, str] = {}
    for name in names:  # one corpus that fails does not keep the others from being indexed
        tags = {BATCH_API_TAG: str(batch).lower()} if batch is not None else {}
        if budget is not None:
            tags[MAX_COST_TAG] = str(budget)
        result = execute("index_corpus", name, run_config, verbose, tags)
        spent = _spending(result, name, instance)
        if not result.success:
            _discard_stage(result.dagster_run, instance)
        if not result.success and interrupted(result):
            print(
                f"interrupted: the last complete index of {name} is unchanged, and the model replies received so far "
                f"are cached: `{_command()} index --corpus {name}` goes on from them",
                file=sys.stderr,
            )
            return 130
        print(f"{'indexed' if result.success else 'FAILED '} {name} (run {result.run_id})")
        print(f"  spent       {spent}")
        if not result.success:
            from .failures import failure_message

            failed[name] = failure_message(result)
            print(f"failed: {failed[name]}", file=sys.stderr)
    names = [name for name in names if name not in failed]
    if not names:
        return 1
    with open_store() as conn:  # another run of ours may be writing a DuckDB file: wait for it, as runs do
        for table in SUMMARY_TABLES:
            counts = dict(conn.execute(f"SELECT corpus, count(*) FROM {table} GROUP BY corpus").fetchall())
            print(f"  {table:<14}" + "  ".join(f"{name}: {counts.get(name, 0)} rows" for name in names))
        engine = conn.execute(
            "SELECT arg_max(engine, materialized_at) FROM lineage WHERE asset = 'entities'"
        ).fetchone()[0]
    print(
        f"\nengine: {engine}"
        + ("   (set GRAPHRAG_API_BASE / GRAPHRAG_API_KEY to use a model)" if engine == "offline" else "")
    )
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
    _flush_queued_answers()
    if failed:
        print(
            f"{len(failed)} of {len(failed) + len(names)} corpora failed: "
            + "; ".join(f"{name} ({why})" for name, why in failed.items()),
            file=sys.stderr,
        )
        return 1
    return 0


def _spending(result, corpus: str, instance) -> str:
    """What the run spent, in a line, and as tags on the run (graphrag/cost_usd and the like); read from its
    steps' lineage rows (the `model_usage` view), before a failed run's stage is dropped."""
    from .models.prices import dollars
    from .settings import DATABASE
    from .store.connection import is_local_file
    from .store.tables import stage_name, usage_totals

    if is_local_file(DATABASE) and not Path(DATABASE).exists():
        return "nothing: the run failed before it made the store"
    schema = "main" if result.success else stage_name(corpus, result.run_id)
    with contextlib.closing(open_store()) as conn:
        totals = usage_totals(conn, [result.run_id], schema)
    if totals is None:
        return "no model requests: $0"
    instance.add_run_tags(
        result.run_id, {f"graphrag/{name}": "unknown" if v is None else str(v) for name, v in totals.items()}
    )
    retried = totals["retries"]
    answered = "all answered" if not totals["failed_calls"] else f"{totals['failed_calls']} never answered"
    batch = totals["batch_requests"]
    return (
        f"{totals['requests']:,} model requests"
        + (f" ({retried:,} retried, {answered})" if retried else "")
        + f", {totals['cache_hits']:,} replies from cache; chat tokens {totals['prompt_tokens']:,} prompt + "
        f"{totals['completion_tokens']:,} completion, embedding tokens {totals['embedding_tokens']:,}; "
        f"{dollars(totals['cost_usd'])}"
        + (f" (Batch API: {batch:,} requests, {dollars(totals['batch_cost_usd'])})" if batch else "")
    )


def _discard_stage(run, instance) -> None:
    """A failed run of ours is not retried: what it staged goes now, not at the next publication."""
    from .assets.publication import discard_failed_stage
    from .settings import DATABASE
    from .store.connection import is_local_file

    if is_local_file(DATABASE) and not Path(DATABASE).exists():
        return  # the run failed before it made the store: nothing was staged
    with contextlib.closing(open_store(read_only=False)) as conn:
        discard_failed_stage(conn, instance, run)


def _flush_queued_answers() -> None:
    """Answers asked while a run held the store wait in a queue: write them now that it is free."""
    from .answers.service import AnswerService, observe_in_dagster
    from .settings import DATABASE

    observe = functools.partial(observe_in_dagster, instance=_instance())
    written = AnswerService(DATABASE, observe=observe).flush(wait=5)
    if written:
        print(f"recorded {written} answer(s) that waited while the store was busy")


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


def _command() -> str:
    """This command as a user can type it again: by name where the shell finds it, else by its path."""
    found = shutil.which("graphrag-assets")
    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0].endswith("graphrag-assets") else None
    if found and (here is None or Path(found).resolve() == here):
        return "graphrag-assets"
    return str(here) if here else f"{sys.executable} -m graphrag_assets.cli"


def ask(args: argparse.Namespace, run_config: dict) -> int:
    """Answer in this process, from the published index, and record the answer (no Dagster run per question: the
    answer shows in Dagster as an observation of its query asset). `run_config` holds the method's --set options."""
    corpus, method, question, level, follow_up = args.corpus, args.method, args.question, args.level, args.follow_up
    if not question.strip():
        raise UserError('the question is empty: ask something, for example `graphrag-assets ask "Who is Scrooge?"`')
    instance = _instance()  # sweeps runs left behind by dead processes, and is where the answer is observed
    if not args.verbose:  # a failed answer ends in one line that says why; each failed call's warning is for --verbose
        logging.getLogger("graphrag_assets.models").setLevel(logging.ERROR)
    from .answers.asking import AnswerFailed, Question
    from .answers.options import METHODS as ANSWERING
    from .answers.service import AnswerService, endpoint_settings_from_environment, observe_in_dagster
    from .models.prices import dollars
    from .settings import DATABASE

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
        print(f'continue the conversation: {_command()} ask --follow-up {found.id} "..."')
    return 0


def show_answer(found) -> None:
    """The answer rendered for a terminal (markdown, wrapped to its width), or as plain text when piped; then its
    sources, one line each."""
    from .answers.sources import where

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


def serve(
    host: str,
    port: int,
    keys: str | None,
    cors: list[str],
    poll_seconds: float,
    rate: int,
    question_budget: float | None = None,
) -> int:
    from .server.app import ServerSettings, load_keys, run

    settings = ServerSettings(
        host=host,
        port=port,
        keys_file=keys,
        cors_origins=cors,
        poll_seconds=poll_seconds,
        rate=rate,
        question_budget=question_budget,
    )
    load_keys(settings)  # refused in one line before anything loads
    return run(settings, instance=_instance())


def mcp_stdio() -> int:
    from .server.mcp_tools import run_stdio

    run_stdio(instance=_instance())
    return 0


def new_key(name: str, corpora: list[str], per_minute: int | None) -> int:
    from .server.keys import new_key_entry

    key, entry = new_key_entry(name, corpora or ["*"], per_minute)
    print(f"key for {name} (shown once; give it to them, keep only the entry below):\n\n  {key}\n")
    print(f"add to your keys file (GRAPHRAG_SERVER_KEYS, or serve --keys FILE):\n\n{entry}")
    return 0


def tune(corpus: str, run_config: dict, verbose: bool) -> int:
    """Tune the corpus's prompts, then show what tuning found and how each prompt differs from prompts/."""
    from .method.tuning import prompt_diff

    _resource("corpora").folder(corpus)  # a clear error for a name that is unsafe or has no folder
    instance, partitions = _instance(), _names().name("corpus")
    if not instance.has_dynamic_partition(partitions, corpus):
        instance.add_dynamic_partitions(partitions, [corpus])
    result = execute("tune_prompts", corpus, run_config, verbose)
    if not result.success:
        from .failures import failure_message

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
    if derived_by.startswith("offline"):
        print(
            "\nwithout a model, tuning finds the kinds of thing the sample names most often and nothing else. They "
            "matter when a model indexes the corpus: the offline index finds noun phrases and uses no entity types. "
            "With GRAPHRAG_API_BASE set, a model tunes the domain, persona and examples too."
        )
    print(f"\nindex with them:  graphrag-assets index --corpus {corpus} --prompts tuned")
    return 0


def evaluate(corpus: str, run_config: dict, verbose: bool) -> int:
    if not _resource("chat").configured:
        raise UserError(
            "the evaluation needs a chat model to write questions, answer them and judge the answers, and none is "
            "set: export GRAPHRAG_API_BASE (and GRAPHRAG_API_KEY) and run it again"
        )
    if not _instance().has_dynamic_partition(_names().name("corpus"), corpus):
        raise UserError(
            f"corpus {corpus!r} was never indexed here: run `graphrag-assets index --corpus {corpus}` first"
        )
    result = execute("evaluate_corpus", corpus, run_config, verbose)
    if not result.success:
        from .failures import failure_message

        print(f"failed: {failure_message(result)}", file=sys.stderr)
        return 1
    for event in result.get_asset_materialization_events():
        asset, metadata = event.materialization.asset_key.path[-1], event.materialization.metadata
        for name, value in metadata.items():
            if name.endswith(("_win_rates", "_accuracy")) or name in ("mean_per_answer", "agreement_with_judges"):
                print(f"\n## {asset}: {name.replace('_', ' ')}\n\n{value.value}")
    print(f"\nrun {result.run_id}: the heatmaps are in the win_rates asset's metadata in the Dagster UI")
    return 0


def _is_user_error(problem: Exception) -> bool:
    """Something the user can fix, said in one line: a bad argument or setting, an unknown corpus or answer, a
    refused question, or a store another process holds."""
    if isinstance(problem, (UserError, ValueError, LookupError, FileNotFoundError)):
        return True
    dagster = sys.modules.get("dagster")
    if dagster is not None and isinstance(problem, dagster.DagsterError):
        return True
    from .answers.service import StoreBusy

    return isinstance(problem, StoreBusy)


def _store_error(problem: Exception) -> str | None:
    """A lock taken by another process at any point of the command, in one paragraph; None for anything else."""
    duckdb = sys.modules.get("duckdb")
    if duckdb is None or not isinstance(problem, duckdb.IOException):
        return None
    from .settings import DATABASE
    from .store.connection import redacted

    locked = _LOCK_HOLDER.search(str(problem)) or "lock" in str(problem).lower()
    return store_locked(redacted(DATABASE), problem) if locked else str(problem)


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
            type=_dollars,
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
        type=_dollars,
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
        from .method.progress import PROGRESS_TO_TERMINAL

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


if __name__ == "__main__":
    sys.exit(main())
