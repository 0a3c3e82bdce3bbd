"""`graphrag-assets`: run the index through Dagster from a terminal, so runs show up in the UI."""

import argparse
import os
import sys
from pathlib import Path

import dagster as dg
import duckdb

REPO = Path(__file__).resolve().parents[1]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
INDEX_TABLES = ("documents", "text_units", "entities", "relationships", "covariates")


def _instance() -> dg.DagsterInstance:
    # The repo's dagster.yaml is the instance config unless the user points DAGSTER_HOME elsewhere.
    os.environ.setdefault("DAGSTER_HOME", str(REPO))
    return dg.DagsterInstance.get()


def index(corpora: list[str]) -> int:
    from .definitions import DATABASE, defs

    instance = _instance()
    names = corpora or defs.resources["corpora"].names()
    if not names:
        print("no corpus folders under data/: add one (data/<name>/*.txt) and try again", file=sys.stderr)
        return 2
    instance.add_dynamic_partitions("corpus", [n for n in names if not instance.has_dynamic_partition("corpus", n)])
    job = defs.resolve_job_def("index_corpus")
    for name in names:
        result = job.execute_in_process(instance=instance, partition_key=name, raise_on_error=False, run_config=QUIET)
        print(f"{'indexed' if result.success else 'FAILED '} {name} (run {result.run_id})")
        if not result.success:
            return 1
    database = Path(DATABASE).resolve()
    with duckdb.connect(str(database), read_only=True) as conn:
        for table in INDEX_TABLES:
            counts = dict(conn.execute(f"SELECT corpus, count(*) FROM {table} GROUP BY corpus").fetchall())
            print(f"  {table:<14}" + "  ".join(f"{name}: {counts.get(name, 0)} rows" for name in names))
        engine = conn.execute("SELECT arg_max(engine, materialized_at) FROM lineage WHERE asset = 'entities'").fetchone()[0]
    print(f"\nengine: {engine}   (set GRAPHRAG_API_BASE / GRAPHRAG_API_KEY to use a model)")
    print(f"DuckDB file: {database}")
    print(f"  query it:   .venv/bin/python -c \"import duckdb; print(duckdb.connect('{database}', read_only=True)"
          ".sql('select title, degree from entities order by degree desc limit 10'))\"")
    print(f"Dagster UI:   DAGSTER_HOME={os.environ['DAGSTER_HOME']} .venv/bin/dagster dev   then open http://127.0.0.1:3000")
    return 0


METHODS = {"global": "global_search", "local": "local_search", "drift": "drift_search", "basic": "basic_search",
           "text-summary": "text_summary_search", "questions": "question_generation"}


def ask(corpus: str, method: str, question: str, level: int | None, dynamic: bool) -> int:
    from .definitions import defs

    instance = _instance()
    if not instance.has_dynamic_partition("corpus", corpus):
        print(f"corpus {corpus!r} was never indexed here: run `graphrag-assets index --corpus {corpus}` first",
              file=sys.stderr)
        return 2
    asset = METHODS[method]
    config: dict = {"previous_questions": [question]} if method == "questions" else {"question": question}
    if level is not None and method in ("global", "local", "drift", "questions"):
        config["community_level"] = level
    if dynamic:
        config["dynamic_community_selection"] = True
    result = defs.resolve_job_def(f"ask_{asset}").execute_in_process(
        instance=instance, partition_key=corpus, raise_on_error=False,
        run_config={**QUIET, "ops": {asset: {"config": config}}})
    if not result.success:
        failure = result.get_step_failure_events()[0].step_failure_data
        print(f"failed: {failure.user_failure_data.description if failure.user_failure_data else failure.error.message}",
              file=sys.stderr)
        return 1
    metadata = {k: v.value for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()}
    print(metadata["answer"])
    print(f"\n--- sources ---\n{metadata['sources']}")
    print(f"\n{method} search, context {metadata['context_tokens']} tokens, {metadata.get('model_calls', 0)} model calls, "
          f"run {result.run_id}\ntrace it: {metadata['trace_sql']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="graphrag-assets", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    index_parser = commands.add_parser("index", help="index corpora (all folders under data/ by default)")
    index_parser.add_argument("--corpus", action="append", default=[], help="corpus folder name; repeatable")
    ask_parser = commands.add_parser("ask", help="ask a question of an indexed corpus (a Dagster run, recorded)")
    ask_parser.add_argument("question")
    ask_parser.add_argument("--corpus", default="a-christmas-carol")
    ask_parser.add_argument("--method", choices=sorted(METHODS), default="global")
    ask_parser.add_argument("--level", type=int, default=None, help="community level (0 = root)")
    ask_parser.add_argument("--dynamic", action="store_true", help="global search: dynamic community selection")
    args = parser.parse_args(argv)
    if args.command == "ask":
        return ask(args.corpus, args.method, args.question, args.level, args.dynamic)
    return index(args.corpus)


if __name__ == "__main__":
    sys.exit(main())
