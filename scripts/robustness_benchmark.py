"""Benchmarks of issue-8 guarantees (see benchmark.py for how to run them).

ingest: peak RSS of reading and chunking one large text file (documents + base_text_units, offline),
  each corpus in a fresh process; baseline: the sample corpus in the same way.
growth: wall time of every offline index step on one text file of 5 and 50 MB (the sample book's body repeated),
  each size in a fresh process; the ratio of each step against n log n of the input.
faults: the index of the sample corpus against a misbehaving endpoint next to a healthy one (the
  baseline): rows of every table, whether the tables are equal, and the requests each run sent.
"""

import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "a-christmas-carol"

_INGEST_CHILD = """
import json, resource, sys, time
import dagster as dg
from graphrag_assets.definitions import index_assets
from graphrag_assets.resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
root, corpus = sys.argv[1], sys.argv[2]
instance = dg.DagsterInstance.ephemeral()
instance.add_dynamic_partitions("corpus", [corpus])
resources = {"duckdb": DuckDBStoreResource(database=root + "/graphrag.duckdb"),
             "corpora": CorporaResource(root=root + "/data"), "chat": ChatModelResource(cache_dir=root + "/cache"),
             "embeddings": EmbeddingModelResource(cache_dir=root + "/cache")}
started = time.perf_counter()
result = dg.materialize(index_assets, instance=instance, partition_key=corpus, resources=resources,
                        selection=["documents", "base_text_units"],
                        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})
units = [e.materialization for e in result.get_asset_materialization_events()
         if e.materialization.asset_key.path == ["base_text_units"]]
print(json.dumps({"wall_s": time.perf_counter() - started, "text_units": units[0].metadata["dagster/row_count"].value,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _ingest(root: Path, corpus: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _INGEST_CHILD, str(root), corpus], cwd=REPO, check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# A child process's set-up for an offline index of corpus "big" under the folder given as its argument.
OFFLINE_INDEX_CHILD = """
import json, resource, sys, time
import dagster as dg
from graphrag_assets.definitions import index_assets
from graphrag_assets.resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
root = sys.argv[1]
instance = dg.DagsterInstance.ephemeral()
instance.add_dynamic_partitions("corpus", ["big"])
cache = root + "/cache"
resources = {"duckdb": DuckDBStoreResource(database=root + "/graphrag.duckdb", vector_index_dir=root + "/vectors"),
             "corpora": CorporaResource(root=root + "/data"), "chat": ChatModelResource(cache_dir=cache),
             "embeddings": EmbeddingModelResource(cache_dir=cache), "judge": ChatModelResource(cache_dir=cache)}
"""

_GROWTH_CHILD = (
    OFFLINE_INDEX_CHILD
    + """
keys = [k.to_user_string() for a in index_assets for k in a.keys]
steps = [k for k in keys if not k.endswith("export") and k != "published_index"]
quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
result = dg.materialize(index_assets, instance=instance, partition_key="big", resources=resources, selection=steps,
                        run_config=quiet)
started, seconds = {}, {}
for record in instance.all_logs(result.run_id):
    event = record.dagster_event
    if event is not None and event.event_type_value == "STEP_START":
        started[event.step_key] = record.timestamp
    if event is not None and event.event_type_value == "STEP_SUCCESS":
        seconds[event.step_key] = record.timestamp - started[event.step_key]
print(json.dumps({"seconds": seconds, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
)


def growth_benchmark(args) -> None:
    """Per-step wall time of the offline index at two sizes of one text file, against n log n of the input."""
    from graphrag_assets.method.ingest.documents import strip_boilerplate

    book = strip_boilerplate(next(SAMPLE.glob("*.txt")).read_text(encoding="utf-8"))[0]
    figures = {}
    for megabytes in args.sizes:
        work = Path(tempfile.mkdtemp(prefix="graphrag-growth-"))
        try:
            (work / "data" / "big").mkdir(parents=True)
            with open(work / "data" / "big" / "big.txt", "w", encoding="utf-8") as out:
                written, copy = 0, 0
                while written < megabytes * 2**20:
                    copy += 1
                    written += out.write(f"\n\nPart {copy}\n\n{book}")
            done = subprocess.run(
                [sys.executable, "-c", _GROWTH_CHILD, str(work)], cwd=REPO, check=True, capture_output=True, text=True
            )
            figures[megabytes] = (written, json.loads(done.stdout.strip().splitlines()[-1]))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    (small, (small_bytes, first)), (large, (large_bytes, last)) = list(figures.items())[0], list(figures.items())[-1]
    n_log_n = (large_bytes * math.log(large_bytes)) / (small_bytes * math.log(small_bytes))
    header = f"{'step':<22}{f'{small} MB s':>10}{f'{large} MB s':>10}{'ratio':>8}{'/ n log n':>11}"
    print(header)
    print("-" * len(header))
    for step in sorted(first["seconds"], key=lambda s: -last["seconds"].get(s, 0)):
        a, b = first["seconds"][step], last["seconds"].get(step, float("nan"))
        print(f"{step:<22}{a:>10.1f}{b:>10.1f}{b / a:>8.1f}{b / a / n_log_n:>11.2f}")
    a, b = sum(first["seconds"].values()), sum(last["seconds"].values())
    print(f"{'all steps':<22}{a:>10.1f}{b:>10.1f}{b / a:>8.1f}{b / a / n_log_n:>11.2f}")
    print(
        f"\ninput grew {large_bytes / small_bytes:.1f}x; n log n grew {n_log_n:.1f}x. Peak RSS "
        f"{first['peak_rss_mib']:.0f} MiB and {last['peak_rss_mib']:.0f} MiB. A step whose last column exceeds 1 "
        "grew faster than n log n (steps under a second are noise)."
    )


def ingest_benchmark(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    try:
        shutil.copytree(SAMPLE, work / "data" / "sample")
        big = work / "data" / "big"
        big.mkdir()
        book = next(SAMPLE.glob("*.txt")).read_text(encoding="utf-8")
        with open(big / "big.txt", "w", encoding="utf-8") as out:
            written, copy = 0, 0
            while written < args.megabytes * 1024 * 1024:
                copy += 1
                written += out.write(f"\n\nCopy {copy}\n\n{book}")
        size_mib = (big / "big.txt").stat().st_size / 2**20
        baseline, large = _ingest(work, "sample"), _ingest(work, "big")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = f"{'corpus':<26}{'file MiB':>9}{'text units':>12}{'wall s':>8}{'peak RSS MiB':>14}{'vs sample':>11}"
    print(header)
    print("-" * len(header))
    for name, figures, size in (
        ("sample (baseline)", baseline, 0.18),
        (f"{args.megabytes} MB text file", large, size_mib),
    ):
        print(
            f"{name:<26}{size:>9.1f}{figures['text_units']:>12}{figures['wall_s']:>8.1f}{figures['peak_rss_mib']:>14.0f}"
            f"{figures['peak_rss_mib'] / baseline['peak_rss_mib']:>10.2f}x"
        )
    print(
        f"\npeak RSS above the sample's, per MiB of input: "
        f"{(large['peak_rss_mib'] - baseline['peak_rss_mib']) / size_mib:.1f} MiB"
    )


def faults_benchmark(args) -> None:
    sys.path.insert(0, str(REPO))
    from graphrag_assets_tests.conftest import SAMPLE_CORPUS, index, table
    from graphrag_assets_tests.model_server import Faults

    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    faults = Faults(
        transient_every=5,
        retry_after_seconds=0.01,
        truncated_every=20,
        garbled_every=20,
        malformed_every=40,
        wrong_kind_every=40,
        refusal_every=40,
    )
    try:
        runs = {}
        for name, run_faults in (("healthy endpoint (baseline)", None), ("misbehaving endpoint", faults)):
            (work / name).mkdir()
            started = time.perf_counter()
            workspace, result, server = index(work / name, run_faults)
            runs[name] = (workspace, time.perf_counter() - started, server)
        tables = ("entities", "relationships", "covariates", "community_reports")
        print(
            "faults: 20% HTTP 429/500 (first attempt), 5% cut off at max_tokens, 5% garbled HTTP body, 2.5% each of "
            "prose, wrong record kind, refusal\n"
        )
        header = f"{'run':<30}" + "".join(f"{t:>18}" for t in tables) + f"{'requests':>10}{'wall s':>8}"
        print(header)
        print("-" * len(header))
        for name, (workspace, wall, server) in runs.items():
            rows = "".join(f"{len(table(workspace, t)):>18}" for t in tables)
            print(f"{name:<30}{rows}{len(server.served):>10}{wall:>8.1f}")
        (clean, _, clean_server), (faulty, _, faulty_server) = runs.values()
        equal = [
            t
            for t in tables + ("text_units", "communities", "text_embeddings")
            if table(clean, t).equals(table(faulty, t))
        ]
        print(f"\ntables equal to the healthy run's: {len(equal)} of 7 ({', '.join(equal)})")
        print(
            f"requests: {len(faulty_server.served) / len(clean_server.served):.2f}x the healthy run's; "
            f"sample corpus {SAMPLE_CORPUS}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
