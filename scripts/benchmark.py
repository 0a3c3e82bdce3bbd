"""Benchmarks, not tests: the figures depend on the machine, so each is a ratio to a baseline
measured in the same run.

    .venv/bin/python scripts/benchmark.py models [--latency 0.05] [--rpm 3000] [--tpm 2000000]
    .venv/bin/python scripts/benchmark.py graph [--nodes 8500] [--edges 20000]
    .venv/bin/python scripts/benchmark.py queries [--latency 0.2]
    .venv/bin/python scripts/benchmark.py incremental [--parts 20]
    .venv/bin/python scripts/benchmark.py ingest [--megabytes 50] [--pages 200] [--docx-megabytes 20]
    .venv/bin/python scripts/benchmark.py growth [--sizes 5 50 200] [--text generated|python-doc|book]
    .venv/bin/python scripts/benchmark.py faults
    .venv/bin/python scripts/benchmark.py compare [--latency 0.05] [--token-latency 0.001] [--rpm N --tpm N]
    .venv/bin/python scripts/benchmark.py edits
    .venv/bin/python scripts/benchmark.py prompts [--against REVISION]
    .venv/bin/python scripts/benchmark.py methods [--documents 40] [--concept-phrases noun_phrases] [--full-reports]
    .venv/bin/python scripts/benchmark.py batch [--delay 10] [--poll 1] [--latency 0.05]
    .venv/bin/python scripts/benchmark.py limits [--documents 30] [--rpm 10000] [--tpm 2000000] [--runs 5]
    .venv/bin/python scripts/benchmark.py tuning [--documents 30]
    .venv/bin/python scripts/benchmark.py retrieval
    .venv/bin/python scripts/benchmark.py serve [--questions 40] [--clients 16] [--latency 0.2]
    .venv/bin/python scripts/benchmark.py estimate
    .venv/bin/python scripts/benchmark.py frames --against REVISION [--megabytes 50] [--repeats 2]

models: the model-calling part of the index of the sample corpus (extraction, claims, reports) against
  the test model server, concurrent (the
  project's defaults) against the lower bound the rate limit allows, max(requests / RPM,
  tokens / TPM); baseline: the same index with one call at a time; plus a re-run answered from
  the response cache, and the offline engine.
queries: one question answered by every method against the test model server: context tokens,
  model calls and wall time per method and community level; baseline: the TS condition (map-reduce
  over source texts), as in the paper's Table 2 ("C0 needs 9-43x fewer context tokens than TS").
incremental: the sample cut into many documents; after a full index, one more document is added and the
  corpus re-indexed: model calls and tokens of the re-index against the full index (the baseline).
ingest: reading a large text file (robustness_benchmark.py), then converting a long PDF and a large Word file
  against plain text of the same size (formats_benchmark.py).
faults: see robustness_benchmark.py.
compare, edits: side by side with nano-graphrag, and what edits and re-runs cost: see comparison_benchmark.py.
prompts: prompt tokens per call against the prompts of an earlier commit: see prompt_benchmark.py.
methods: what the standard, fast and lazy index methods cost on the sample: see methods_benchmark.py.
batch: the index through the Batch API next to one request at a time: see batch_benchmark.py.
limits: a high rate limit used by the derived ceiling on requests in flight, next to a fixed 64: see
  limits_benchmark.py.
tuning: a corpus of another domain indexed with default and with tuned prompts: see tuning_benchmark.py.
retrieval: how often each method's context holds the passage that answers, with answer keys, against BM25 and
  vectors alone: see retrieval_benchmark.py.
serve: `graphrag-assets serve` answering one and many clients, against the same answers in-process: see
  serve_benchmark.py.
estimate: `index --estimate` against the index it estimates, on four corpora of different shapes and with each
  method: see estimate_benchmark.py.
frames: peak memory and wall time of the offline index of a large corpus and of a query, against an earlier
  commit: see frames_benchmark.py.
graph: each non-model step (communities, node2vec, UMAP, offline text embeddings) on the sample
  corpus graph and on a synthetic graph the size of the paper's podcast graph, each in a fresh
  process for its peak memory; baseline: the bare library call on the same input.
"""

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg

from graphrag_assets.definitions import index_assets
from graphrag_assets.resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
from graphrag_assets_tests.model_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
CORPUS = "a-christmas-carol"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
MODEL_ASSETS = ("entities", "covariates", "community_reports")
# The models benchmark leaves out the steps that call no model (node2vec, UMAP, exports): `graph` times them.
MODEL_SELECTION = [
    "documents",
    "base_text_units",
    "entities",
    "relationships",
    "covariates",
    "text_units",
    "communities",
    "community_reports",
]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def index_once(root: Path, chat: ChatModelResource) -> dict:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [CORPUS])
    started = time.perf_counter()
    result = dg.materialize(
        index_assets,
        instance=instance,
        partition_key=CORPUS,
        run_config=QUIET,
        selection=MODEL_SELECTION,
        resources={
            "duckdb": DuckDBStoreResource(database=str(root / "graphrag.duckdb")),
            "corpora": CorporaResource(root=str(REPO / "data")),
            "chat": chat,
            "embeddings": EmbeddingModelResource(cache_dir=str(root / "cache")),  # not used by MODEL_SELECTION
        },
    )
    wall = time.perf_counter() - started
    figures = {"wall_s": wall, "calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for event in result.get_asset_materialization_events():
        if event.materialization.asset_key.path[0] in MODEL_ASSETS:
            metadata = event.materialization.metadata
            for name, key in (
                ("calls", "model_calls"),
                ("cache_hits", "cache_hits"),
                ("prompt_tokens", "prompt_tokens"),
                ("completion_tokens", "completion_tokens"),
            ):
                figures[name] += metadata[key].value if key in metadata else 0
    figures["peak_rss_mib"] = peak_rss_mib()
    return figures


def models_benchmark(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    try:
        # The server allows a little more than the client asks for, as a provider's limit would.
        with FakeOpenAIServer(latency_seconds=args.latency, requests_per_minute=int(args.rpm * 1.05)) as server:

            def chat(cache: str, concurrency: int) -> ChatModelResource:
                return ChatModelResource(
                    base_url=server.base_url,
                    cache_dir=str(work / cache),
                    requests_per_minute=args.rpm,
                    tokens_per_minute=args.tpm,
                    max_concurrency=concurrency,
                )

            (work / "a").mkdir()
            (work / "b").mkdir()
            (work / "c").mkdir()
            (work / "d").mkdir()
            concurrent = index_once(work / "a", chat("cache-a", args.concurrency))
            sequential = index_once(work / "b", chat("cache-b", 1))
            cached = index_once(work / "c", chat("cache-a", args.concurrency))
            rate_limited = sum(1 for s in server.served if s.kind == "rate_limited")
        offline = index_once(work / "d", ChatModelResource(cache_dir=str(work / "cache-d")))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    tokens = concurrent["prompt_tokens"] + concurrent["completion_tokens"]
    # Extraction, gleaning and summaries are a chain of three dependent calls per text unit at least.
    bound = max(concurrent["calls"] / args.rpm * 60, tokens / args.tpm * 60, 3 * args.latency)
    print(f"sample corpus '{CORPUS}', server latency {args.latency}s, limits {args.rpm} RPM / {args.tpm} TPM\n")
    header = f"{'run':<28}{'wall s':>8}{'calls':>7}{'cache hits':>11}{'tokens':>10}{'peak RSS MiB':>14}{'vs bound':>10}"
    print(header)
    print("-" * len(header))
    for name, figures in (
        ("rate-limit lower bound", None),
        (f"concurrent ({args.concurrency})", concurrent),
        ("baseline: one at a time", sequential),
        ("re-run from cache", cached),
        ("offline engine", offline),
    ):
        if figures is None:
            print(f"{name:<28}{bound:>8.1f}")
            continue
        total = figures["prompt_tokens"] + figures["completion_tokens"]
        print(
            f"{name:<28}{figures['wall_s']:>8.1f}{figures['calls']:>7}{figures['cache_hits']:>11}{total:>10}"
            f"{figures['peak_rss_mib']:>14.0f}{figures['wall_s'] / bound:>9.2f}x"
        )
    print(
        f"\nconcurrent vs one-at-a-time: {sequential['wall_s'] / concurrent['wall_s']:.1f}x faster; "
        f"requests the server refused for its rate limit: {rate_limited}"
    )
    print("peak RSS is the process high-water mark so far, so later rows include earlier ones")


def queries_benchmark(args) -> None:
    from graphrag_assets.definitions import query_assets

    question = "What are the main themes of the story, and how does Scrooge change?"
    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    rows = []
    try:
        with FakeOpenAIServer(latency_seconds=args.latency) as server:
            limits = dict(
                base_url=server.base_url,
                cache_dir=str(work / "cache"),
                requests_per_minute=100_000,
                tokens_per_minute=100_000_000,
            )
            chat, embeddings = ChatModelResource(**limits), EmbeddingModelResource(**limits)
            resources = {
                "duckdb": DuckDBStoreResource(database=str(work / "graphrag.duckdb")),
                "corpora": CorporaResource(root=str(REPO / "data")),
                "chat": chat,
                "embeddings": embeddings,
            }
            instance = dg.DagsterInstance.ephemeral()
            instance.add_dynamic_partitions("corpus", [CORPUS])
            export = {"config": {"folder": str(work / "exports")}}
            dg.materialize(
                index_assets,
                instance=instance,
                partition_key=CORPUS,
                resources=resources,
                run_config={**QUIET, "ops": {"graphml_export": export, "parquet_export": export}},
            )
            import duckdb

            with duckdb.connect(str(work / "graphrag.duckdb"), read_only=True) as conn:
                levels = [r[0] for r in conn.execute("SELECT DISTINCT level FROM communities ORDER BY 1").fetchall()]
            cases = [(f"C{level} global", "global_search", {"community_level": level}) for level in levels]
            cases += [
                (
                    f"C{levels[-1]} dynamic global",
                    "global_search",
                    {"community_level": levels[-1], "dynamic_community_selection": True},
                ),
                ("TS text summary", "text_summary_search", {}),
                ("SS basic", "basic_search", {}),
                ("local", "local_search", {}),
                ("DRIFT", "drift_search", {}),
            ]
            for name, asset, config in cases:
                started = time.perf_counter()
                result = dg.materialize(
                    [*index_assets, *query_assets],
                    selection=[asset],
                    instance=instance,
                    partition_key=CORPUS,
                    resources=resources,
                    run_config={**QUIET, "ops": {asset: {"config": {"question": question, **config}}}},
                )
                wall = time.perf_counter() - started
                metadata = result.get_asset_materialization_events()[0].materialization.metadata
                rows.append((name, metadata["context_tokens"].value, metadata["model_calls"].value, wall))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ts_tokens = next(tokens for name, tokens, _, _ in rows if name.startswith("TS"))
    print(f"question: {question!r}; test server latency {args.latency}s per call\n")
    header = f"{'condition':<22}{'context tokens':>15}{'TS / this':>11}{'model calls':>13}{'wall s':>8}"
    print(header)
    print("-" * len(header))
    for name, tokens, calls, wall in rows:
        print(f"{name:<22}{tokens:>15}{ts_tokens / max(tokens, 1):>10.1f}x{calls:>13}{wall:>8.2f}")
    print("\nThe test server writes short reports, so report tokens are lower than a real model's would be.")


def incremental_benchmark(args) -> None:
    from graphrag_assets_tests.corpora import split_sample

    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    rows = []
    try:
        names = split_sample(work / "data" / "many", args.parts)
        held_out = work / "data" / "many" / names[-1]
        held_text = held_out.read_text()
        held_out.unlink()
        with FakeOpenAIServer(latency_seconds=0.01) as server:
            limits = dict(
                base_url=server.base_url,
                cache_dir=str(work / "cache"),
                requests_per_minute=100_000,
                tokens_per_minute=100_000_000,
            )
            resources = {
                "duckdb": DuckDBStoreResource(database=str(work / "graphrag.duckdb")),
                "corpora": CorporaResource(root=str(work / "data")),
                "chat": ChatModelResource(**limits),
                "embeddings": EmbeddingModelResource(**limits),
            }
            export = {"config": {"folder": str(work / "exports")}}
            for name in (
                f"full index, {args.parts - 1} documents",
                "re-index, nothing changed",
                "re-index, one document added",
            ):
                if name.endswith("added"):
                    held_out.write_text(held_text)
                instance = dg.DagsterInstance.ephemeral()
                instance.add_dynamic_partitions("corpus", ["many"])
                started = time.perf_counter()
                result = dg.materialize(
                    index_assets,
                    instance=instance,
                    partition_key="many",
                    resources=resources,
                    run_config={**QUIET, "ops": {"graphml_export": export, "parquet_export": export}},
                )
                wall = time.perf_counter() - started
                calls = tokens = 0
                for event in result.get_asset_materialization_events():
                    metadata = event.materialization.metadata
                    if "model_calls" in metadata:
                        calls += metadata["model_calls"].value
                        tokens += sum(
                            metadata[k].value for k in ("prompt_tokens", "completion_tokens") if k in metadata
                        )
                rows.append((name, calls, tokens, wall))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    full_calls = rows[0][1]
    header = f"{'run':<34}{'model calls':>12}{'tokens':>10}{'vs full (calls)':>17}{'wall s':>8}"
    print(header)
    print("-" * len(header))
    for name, calls, tokens, wall in rows:
        print(f"{name:<34}{calls:>12}{tokens:>10}{calls / max(full_calls, 1):>16.1%}{wall:>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    models = commands.add_parser("models", help="model calls, tokens and wall time of the whole index")
    models.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per reply")
    models.add_argument("--rpm", type=int, default=3000, help="requests per minute, enforced by client and server")
    models.add_argument("--tpm", type=int, default=2_000_000, help="tokens per minute the client allows")
    models.add_argument("--concurrency", type=int, default=8)
    queries = commands.add_parser("queries", help="context tokens, calls and time per query method and level")
    queries.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per reply")
    incremental = commands.add_parser("incremental", help="model calls of a re-index after adding one document")
    incremental.add_argument("--parts", type=int, default=20)
    ingest = commands.add_parser("ingest", help="peak memory of a large text file; PDF and DOCX conversion speed")
    ingest.add_argument("--megabytes", type=int, default=50, help="size of the text file (0: skip it)")
    ingest.add_argument("--pages", type=int, default=200, help="pages of the PDF")
    ingest.add_argument("--docx-megabytes", type=float, default=20, help="size of the Word file")
    methods = commands.add_parser("methods", help="chat requests and tokens of the standard, fast and lazy methods")
    methods.add_argument(
        "--documents", type=int, default=0, help="a synthetic corpus of this many documents (0: the sample)"
    )
    methods.add_argument(
        "--concept-phrases",
        help="the fast and lazy methods' concepts, a value of entity_graph.concept_phrases (unset: its default)",
    )
    methods.add_argument(
        "--full-reports",
        action="store_true",
        help="the test server writes reports as long as the report prompt asks a model for (up to 10 findings of a "
        "paragraph), not one row per finding",
    )
    commands.add_parser("faults", help="the index against a misbehaving endpoint next to a healthy one")
    batch = commands.add_parser("batch", help="the index through the Batch API next to one request at a time")
    batch.add_argument("--delay", type=float, default=10.0, help="seconds the server holds each batch")
    batch.add_argument("--poll", type=float, default=1.0, help="first wait between checks of a batch")
    batch.add_argument("--latency", type=float, default=0.05, help="seconds per synchronous request")
    limits = commands.add_parser("limits", help="a high rate limit: derived ceiling on requests in flight vs 64")
    limits.add_argument("--documents", type=int, default=30, help="synthetic documents of about 5,000 tokens")
    limits.add_argument("--rpm", type=int, default=10_000)
    limits.add_argument("--tpm", type=int, default=2_000_000)
    limits.add_argument("--latency", type=float, default=0.4, help="seconds per request")
    limits.add_argument("--token-latency", type=float, default=0.03, help="and per completion token")
    limits.add_argument("--runs", type=int, default=1, help="runs with the default settings (each run's cause if red)")
    serve = commands.add_parser("serve", help="latency of the server per method and under concurrent clients")
    serve.add_argument("--questions", type=int, default=40)
    serve.add_argument("--clients", type=int, default=16)
    serve.add_argument("--latency", type=float, default=0.2, help="seconds the test model server takes to answer")
    commands.add_parser("estimate", help="the estimate of an index against the run, on corpora of four shapes")
    retrieval = commands.add_parser("retrieval", help="whether each method's context holds the passage that answers")
    retrieval.add_argument(
        "--endpoint",
        action="store_true",
        help="embed with the endpoint that GRAPHRAG_API_BASE, GRAPHRAG_API_KEY and GRAPHRAG_EMBEDDING_MODEL name",
    )
    tuning = commands.add_parser("tuning", help="a contracts corpus indexed with default and with tuned prompts")
    tuning.add_argument("--documents", type=int, default=30, help="fictional supply agreements")
    growth = commands.add_parser("growth", help="every offline step's time and the peak memory as the text grows")
    growth.add_argument("--sizes", type=float, nargs="+", default=[5, 50, 200], help="megabytes of text, ascending")
    growth.add_argument("--text", choices=("generated", "python-doc", "book"), default="generated")
    compare = commands.add_parser("compare", help="this project next to nano-graphrag 0.0.8.2 on one endpoint")
    compare.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per request")
    compare.add_argument("--token-latency", type=float, default=0.001, help="and per completion token")
    compare.add_argument("--rpm", type=int, default=0, help="requests per minute the server allows (0: no limit)")
    compare.add_argument("--tpm", type=int, default=0, help="tokens per minute the server allows (0: no limit)")
    commands.add_parser("edits", help="tokens of a re-index after an edit or an added document; no-change re-run")
    prompts = commands.add_parser("prompts", help="prompt tokens per call against an earlier commit's prompts")
    prompts.add_argument("--against", default="a6c789b", help="the baseline commit (before the prompt rewrite)")
    graph = commands.add_parser("graph", help="time and memory of the non-model steps")
    graph.add_argument("--nodes", type=int, default=8500)
    graph.add_argument("--edges", type=int, default=20000)
    vectors = commands.add_parser("vectors", help="recall and latency of HNSW against the exact scan")
    vectors.add_argument("--count", type=int, default=1_000_000)
    vectors.add_argument("--dimensions", type=int, default=1536)
    vectors.add_argument("--queries", type=int, default=100)
    vectors.add_argument("--exact-queries", type=int, default=5, help="the exact scan is slow: time fewer")
    vectors.add_argument("--k", type=int, default=10)
    vectors.add_argument(
        "--ef-search", type=int, nargs="+", default=None, help="search widths (default: the project's for the size)"
    )
    vectors.add_argument("--m", type=int, default=16, help="HNSW's M (the project's default)")
    vectors.add_argument("--ef-construction", type=int, default=64, help="HNSW's ef_construction (the default)")
    vectors.add_argument("--work", default=None, help="folder for the index file (default: the system's temp)")
    frames = commands.add_parser("frames", help="memory and time of an offline index and a query vs a commit")
    frames.add_argument("--against", required=True, help="the baseline commit")
    frames.add_argument("--megabytes", type=float, default=50, help="size of the corpus (the sample book repeated)")
    frames.add_argument("--repeats", type=int, default=2, help="runs of each tree; the best figures are shown")
    scale = commands.add_parser("scale", help="wall time and peak RSS per step as the corpus grows")
    scale.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000], help="documents of ~5,000 tokens")
    scale.add_argument("--work", default=None, help="folder for the corpora and the store (default: temp)")
    args = parser.parse_args()
    if args.command == "models":
        models_benchmark(args)
    elif args.command == "queries":
        queries_benchmark(args)
    elif args.command == "incremental":
        incremental_benchmark(args)
    elif args.command in ("ingest", "faults", "growth"):
        import robustness_benchmark

        if args.command != "ingest" or args.megabytes:
            getattr(robustness_benchmark, f"{args.command}_benchmark")(args)
        if args.command == "ingest":
            from formats_benchmark import formats_benchmark

            print()
            formats_benchmark(args)
    elif args.command in ("compare", "edits"):
        import comparison_benchmark

        getattr(comparison_benchmark, f"{args.command}_benchmark")(args)
    elif args.command == "frames":
        from frames_benchmark import frames_benchmark

        frames_benchmark(args)
    elif args.command == "scale":
        from scale_benchmark import scale_benchmark

        scale_benchmark(args)
    elif args.command == "vectors":
        from vector_benchmark import vectors_benchmark

        vectors_benchmark(args)
    elif args.command == "limits":
        from limits_benchmark import limits_benchmark

        limits_benchmark(args)
    elif args.command == "batch":
        from batch_benchmark import batch_benchmark

        batch_benchmark(args)
    elif args.command == "estimate":
        from estimate_benchmark import main as estimate_main

        estimate_main()
    elif args.command == "serve":
        from serve_benchmark import main as serve_main

        serve_main(args.questions, args.clients, args.latency)
    elif args.command == "retrieval":
        from retrieval_benchmark import retrieval_benchmark

        retrieval_benchmark(args)
    elif args.command == "tuning":
        from tuning_benchmark import tuning_benchmark

        tuning_benchmark(args)
    elif args.command == "methods":
        from methods_benchmark import methods_benchmark

        methods_benchmark(args)
    elif args.command == "prompts":
        from prompt_benchmark import prompts_benchmark

        prompts_benchmark(args)
    else:
        from graph_benchmark import graph_benchmark

        graph_benchmark(args)


if __name__ == "__main__":
    main()
