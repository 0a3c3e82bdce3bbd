"""graphrag-assets index: index corpora (or say what it would cost), and print what was built and spent."""

import argparse
import contextlib
import functools
import json
import os
import sys
from pathlib import Path

from .common import UserError, command_name, dagster_instance, instance_names, resource
from .runs import execute, interrupted, open_store

SUMMARY_TABLES = ("documents", "text_units", "entities", "relationships", "covariates")  # whose rows `index` prints


def estimate(corpora: list[str], run_config: dict, as_json: bool) -> int:
    """What indexing each corpus would cost, with no model request and no run."""
    from ..assets.estimate import estimate_corpus, estimate_table
    from ..assets.metadata import markdown
    from ..method.ingest.documents import has_documents

    folders = resource("corpora")
    names = corpora or folders.scan()[0]
    for name in names:
        if not has_documents(folders.folder(name)):
            raise UserError(f"corpus folder {folders.root}/{name} holds no documents yet: add files to it")
    chat, embeddings = resource("chat"), resource("embeddings")
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


def dollars_argument(value: str) -> float:
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
    from ..method.ingest.documents import has_documents
    from ..resources import BATCH_API_TAG, MAX_COST_TAG
    from ..settings import DATABASE
    from ..store.connection import is_local_file, redacted

    instance, partitions = dagster_instance(), instance_names().name("corpus")
    corpora_folders = resource("corpora")
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
                f"are cached: `{command_name()} index --corpus {name}` goes on from them",
                file=sys.stderr,
            )
            return 130
        print(f"{'indexed' if result.success else 'FAILED '} {name} (run {result.run_id})")
        print(f"  spent       {spent}")
        if not result.success:
            from ..failures import failure_message

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
    from ..models.prices import dollars
    from ..settings import DATABASE
    from ..store.connection import is_local_file
    from ..store.tables import stage_name, usage_totals

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
    from ..assets.publication import discard_failed_stage
    from ..settings import DATABASE
    from ..store.connection import is_local_file

    if is_local_file(DATABASE) and not Path(DATABASE).exists():
        return  # the run failed before it made the store: nothing was staged
    with contextlib.closing(open_store(read_only=False)) as conn:
        discard_failed_stage(conn, instance, run)


def _flush_queued_answers() -> None:
    """Answers asked while a run held the store wait in a queue: write them now that it is free."""
    from ..answers.service import AnswerService, observe_in_dagster
    from ..settings import DATABASE

    observe = functools.partial(observe_in_dagster, instance=dagster_instance())
    written = AnswerService(DATABASE, observe=observe).flush(wait=5)
    if written:
        print(f"recorded {written} answer(s) that waited while the store was busy")
