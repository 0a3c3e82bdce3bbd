"""Using a high rate limit (see benchmark.py for how to run it).

limits: a synthetic corpus (benchmark.py scale's, --documents of about 3,800 tokens) indexed through its
  model-calling steps, run as the UI runs them (multiprocess executor, the repository's model pool), against
  the test server announcing --rpm and --tpm in its rate-limit headers (and refusing beyond them), answering
  in --latency seconds plus --token-latency per completion token. Once with the default settings (the ceiling
  on requests in flight derived from the announced limits), once with the former fixed ceiling of 64 (the
  baseline). For each: the model steps' wall time against the rate-limit bound (max of tokens / TPM and
  requests / RPM for the requests they made), the peak in flight at the server, the tokens and requests per
  minute achieved, the 429s, and when the second of the two steps that need only text units started.
"""

import concurrent.futures
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_STEPS = ("entity_graph", "entity_aliases", "covariates", "community_reports")


def _index(root: Path, args, ceiling: int | None) -> dict:
    """Index the model steps as a run launched from the UI executes: each step in a process of its own, as
    many at once as the job and the model pool allow."""
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "scripts"))
    import dagster as dg
    import yaml
    from scale_benchmark import synthetic_corpus

    from graphrag_assets.failures import failure_message
    from graphrag_assets_tests.model_server import FakeOpenAIServer
    from graphrag_assets_tests.workspaces import INDEX_ASSETS, Workspace, index_job, repository_concurrency

    root.mkdir()
    workspace = Workspace(root)
    tokens = synthetic_corpus(workspace.data / "synthetic", args.documents)
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(repository_concurrency()))
    selection = INDEX_ASSETS[: INDEX_ASSETS.index("community_reports") + 1]
    saved = dict(os.environ)
    with FakeOpenAIServer(
        latency_seconds=args.latency,
        latency_per_token_seconds=args.token_latency,
        requests_per_minute=args.rpm,
        tokens_per_minute=args.tpm,
    ) as server:
        os.environ.update(
            workspace.environment(
                server.base_url,
                GRAPHRAG_TIMEOUT_SECONDS="120",
                **({"GRAPHRAG_MAX_CONCURRENCY": str(ceiling)} if ceiling else {}),
            )
        )
        try:
            instance = dg.DagsterInstance.from_config(str(home))
            instance.add_dynamic_partitions("corpus", ["synthetic"])
            result = dg.execute_job(
                dg.reconstructable(index_job),
                instance=instance,
                tags={"dagster/partition": "synthetic"},
                asset_selection=[dg.AssetKey(name) for name in selection],
                run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
            )
            stats = {s.step_key: s for s in instance.get_run_step_stats(result.run_id)}
            failed = None if result.success else failure_message(result)
            instance.dispose()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        served = [s for s in server.served if s.status == 200 and s.kind != "probe"]
        refused = sum(s.status == 429 for s in server.served)
        peak = server.max_in_flight
    if failed:
        return {"failed": failed, "refused": refused, "requests": len(served)}
    intervals = sorted((stats[step].start_time, stats[step].end_time) for step in MODEL_STEPS if step in stats)
    model_seconds, reach = 0.0, 0.0  # the time at least one model step was running
    for start, end in intervals:
        model_seconds += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    requests = len(served)
    used = sum(s.prompt_tokens + s.completion_tokens for s in served)
    # entity_graph and covariates need only the text units: how long the later of the two waited after them
    ready = stats["corpus_documents"].end_time
    second_waited = max(stats[step].start_time - ready for step in ("entity_graph", "covariates"))
    first = min(s.start_time for s in stats.values())
    steps = {}
    for step in MODEL_STEPS:
        upstream = _upstream_steps(step) & stats.keys()
        inputs_ready = max((stats[u].end_time for u in upstream), default=stats[step].start_time)
        steps[step] = {
            "started_s": stats[step].start_time - first,
            "ran_s": stats[step].end_time - stats[step].start_time,
            "waited_s": max(0.0, stats[step].start_time - inputs_ready),
        }
    start = min(s.at for s in served)
    per_minute = [0] * (int((max(s.at for s in served) - start) // 60) + 1)
    for s in served:
        per_minute[int((s.at - start) // 60)] += s.prompt_tokens + s.completion_tokens
    return {
        "per_minute": per_minute,
        "corpus_tokens": tokens,
        "requests": requests,
        "tokens": used,
        "model_s": model_seconds,
        "bound_s": max(requests / args.rpm, used / args.tpm) * 60,
        "peak": peak,
        "refused": refused,
        "tpm": used / model_seconds * 60,
        "rpm": requests / model_seconds * 60,
        "second_waited_s": second_waited,
        "steps": steps,
    }


def _upstream_steps(step: str) -> set[str]:
    """The steps whose assets the given step reads."""
    from graphrag_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    parents = {
        parent
        for key in graph.get_all_asset_keys()
        if graph.get(key).assets_def.op.name == step
        for parent in graph.get(key).parent_keys
    }
    return {graph.get(parent).assets_def.op.name for parent in parents if graph.has(parent)} - {step}


def _fresh(root: Path, args, ceiling: int | None) -> dict:
    """_index in a new interpreter: its steps fork from a server that Python starts once per process, with the
    environment of that moment, so a second run in one process sent its requests to the first run's endpoint,
    long gone (a red run in three, whose cause the benchmark used to lose)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(_index, root, args, ceiling).result()


def limits_benchmark(args) -> None:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        runs = [_fresh(Path(folder) / f"derived-{n}", args, None) for n in range(args.runs)]
        fixed = _fresh(Path(folder) / "fixed", args, 64) if args.baseline else None
        total = time.perf_counter() - started
    green = [run for run in runs if "failed" not in run]
    for number, run in enumerate(runs, start=1):
        if "failed" in run:
            print(f"run {number} FAILED after {run['requests']:,} requests ({run['refused']} refused): {run['failed']}")
    if not green:
        raise SystemExit(f"no figures: none of {len(runs)} runs green")
    if fixed is not None and "failed" in fixed:
        print(f"the baseline (fixed 64) FAILED: {fixed['failed']}")
    derived = green[0]
    print(
        f"synthetic corpus of {derived['corpus_tokens']:,} tokens; endpoint: {args.rpm:,} RPM / {args.tpm:,} TPM "
        f"announced, {args.latency:g} s + {args.token_latency * 1000:g} ms per completion token; "
        f"{len(green)} of {len(runs)} runs with the default settings green\n"
    )
    header = (
        f"{'ceiling':<22}{'requests':>9}{'tokens':>11}{'model s':>9}{'bound s':>9}{'vs bound':>9}"
        f"{'peak':>6}{'TPM':>11}{'RPM':>7}{'429s':>6}{'2nd step waited s':>19}"
    )
    print(header)
    print("-" * len(header))
    named = [(f"derived (default) #{n}", run) for n, run in enumerate(runs, start=1) if "failed" not in run]
    baseline = [] if fixed is None or "failed" in fixed else [("fixed 64 (baseline)", fixed)]
    for name, row in (*named, *baseline):
        print(
            f"{name:<22}{row['requests']:>9,}{row['tokens']:>11,}{row['model_s']:>9.1f}{row['bound_s']:>9.1f}"
            f"{row['model_s'] / row['bound_s']:>8.2f}x{row['peak']:>6}{row['tpm']:>11,.0f}{row['rpm']:>7,.0f}"
            f"{row['refused']:>6}{row['second_waited_s']:>19.1f}"
        )
    print(f"\n{'model step':<22}{'started s':>10}{'ran s':>8}{'started after inputs s':>24}   (derived, then fixed 64)")
    for step in MODEL_STEPS:
        for name, row in (("", derived), *((("  fixed 64", fixed),) if baseline else ())):
            if step in row["steps"]:
                times = row["steps"][step]
                print(f"{name or step:<22}{times['started_s']:>10.1f}{times['ran_s']:>8.1f}{times['waited_s']:>24.1f}")
    for name, row in (*named, *baseline):
        minutes = " ".join(f"{tokens / 1e6:.2f}" for tokens in row["per_minute"])
        print(f"\n{name}: tokens served per minute (millions; the last minute is partial): {minutes}")
    if baseline:
        print(f"\nderived vs fixed 64: model steps {fixed['model_s'] / derived['model_s']:.2f}x faster")
    print(f"benchmark wall time {total:.0f} s")

    print(
        "model s: the time at least one model step ran (steps run as a UI-launched run runs them: each in a "
        "process, as many at once as the model pool allows); 2nd step waited: entity_graph and covariates both "
        "need only the text units, and this is how long the later of them started after those; started after "
        "inputs: how long after the steps it reads had finished a step started (a step's process takes a few "
        "seconds to start; more is a wait for a slot in the model pool held by another step)"
    )
