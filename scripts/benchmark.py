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
import importlib

from harness import Benchmark, argument

LATENCY = "seconds the test model server takes per reply"
BENCHMARKS = (
    Benchmark(
        "models",
        "model calls, tokens and wall time of the whole index",
        "model_benchmark:models_benchmark",
        (
            argument("--latency", type=float, default=0.05, help=LATENCY),
            argument("--rpm", type=int, default=3000, help="requests per minute, enforced by client and server"),
            argument("--tpm", type=int, default=2_000_000, help="tokens per minute the client allows"),
            argument("--concurrency", type=int, default=8),
        ),
    ),
    Benchmark(
        "queries",
        "context tokens, calls and time per query method and level",
        "model_benchmark:queries_benchmark",
        (argument("--latency", type=float, default=0.2, help=LATENCY),),
    ),
    Benchmark(
        "incremental",
        "model calls of a re-index after adding one document",
        "model_benchmark:incremental_benchmark",
        (argument("--parts", type=int, default=20),),
    ),
    Benchmark(
        "ingest",
        "peak memory of a large text file; PDF and DOCX conversion speed",
        "formats_benchmark:ingest_benchmark",
        (
            argument("--megabytes", type=int, default=50, help="size of the text file (0: skip it)"),
            argument("--pages", type=int, default=200, help="pages of the PDF"),
            argument("--docx-megabytes", type=float, default=20, help="size of the Word file"),
        ),
    ),
    Benchmark(
        "methods",
        "chat requests and tokens of the standard, fast and lazy methods",
        "methods_benchmark:methods_benchmark",
        (
            argument(
                "--documents", type=int, default=0, help="a synthetic corpus of this many documents (0: the sample)"
            ),
            argument(
                "--concept-phrases",
                help="the fast and lazy methods' concepts, a value of entity_graph.concept_phrases (unset: its "
                "default)",
            ),
            argument(
                "--full-reports",
                action="store_true",
                help="the test server writes reports as long as the report prompt asks a model for (up to 10 findings "
                "of a paragraph), not one row per finding",
            ),
        ),
    ),
    Benchmark(
        "faults",
        "the index against a misbehaving endpoint next to a healthy one",
        "robustness_benchmark:faults_benchmark",
    ),
    Benchmark(
        "batch",
        "the index through the Batch API next to one request at a time",
        "batch_benchmark:batch_benchmark",
        (
            argument("--delay", type=float, default=10.0, help="seconds the server holds each batch"),
            argument("--poll", type=float, default=1.0, help="first wait between checks of a batch"),
            argument("--latency", type=float, default=0.05, help="seconds per synchronous request"),
        ),
    ),
    Benchmark(
        "limits",
        "a high rate limit: derived ceiling on requests in flight vs 64",
        "limits_benchmark:limits_benchmark",
        (
            argument("--documents", type=int, default=30, help="synthetic documents of about 5,000 tokens"),
            argument("--rpm", type=int, default=10_000),
            argument("--tpm", type=int, default=2_000_000),
            argument("--latency", type=float, default=0.4, help="seconds per request"),
            argument("--token-latency", type=float, default=0.03, help="and per completion token"),
            argument("--runs", type=int, default=1, help="runs with the default settings (each run's cause if red)"),
            argument(
                "--no-baseline",
                dest="baseline",
                action="store_false",
                help="skip the run at a fixed 64 requests in flight (each run is still measured against the bound)",
            ),
        ),
    ),
    Benchmark(
        "serve",
        "latency of the server per method and under concurrent clients",
        "serve_benchmark:serve_benchmark",
        (
            argument("--questions", type=int, default=40),
            argument("--clients", type=int, default=16),
            argument("--latency", type=float, default=0.2, help=LATENCY),
        ),
    ),
    Benchmark(
        "estimate",
        "the estimate of an index against the run, on corpora of four shapes",
        "estimate_benchmark:estimate_benchmark",
    ),
    Benchmark(
        "retrieval",
        "whether each method's context holds the passage that answers",
        "retrieval_benchmark:retrieval_benchmark",
        (
            argument(
                "--endpoint",
                action="store_true",
                help="embed with the endpoint that GRAPHRAG_API_BASE, GRAPHRAG_API_KEY and GRAPHRAG_EMBEDDING_MODEL "
                "name",
            ),
        ),
    ),
    Benchmark(
        "tuning",
        "a contracts corpus indexed with default and with tuned prompts",
        "tuning_benchmark:tuning_benchmark",
        (argument("--documents", type=int, default=30, help="fictional supply agreements"),),
    ),
    Benchmark(
        "growth",
        "every offline step's time and the peak memory as the text grows",
        "robustness_benchmark:growth_benchmark",
        (
            argument("--sizes", type=float, nargs="+", default=[5, 50, 200], help="megabytes of text, ascending"),
            argument("--text", choices=("generated", "python-doc", "book"), default="generated"),
        ),
    ),
    Benchmark(
        "compare",
        "this project next to nano-graphrag 0.0.8.2 on one endpoint",
        "comparison_benchmark:compare_benchmark",
        (
            argument("--latency", type=float, default=0.05, help="seconds the server takes per request"),
            argument("--token-latency", type=float, default=0.001, help="and per completion token"),
            argument("--rpm", type=int, default=0, help="requests per minute the server allows (0: no limit)"),
            argument("--tpm", type=int, default=0, help="tokens per minute the server allows (0: no limit)"),
        ),
    ),
    Benchmark(
        "edits",
        "tokens of a re-index after an edit or an added document; no-change re-run",
        "comparison_benchmark:edits_benchmark",
    ),
    Benchmark(
        "prompts",
        "prompt tokens per call against an earlier commit's prompts",
        "prompt_benchmark:prompts_benchmark",
        (argument("--against", default="a6c789b", help="the baseline commit (before the prompt rewrite)"),),
    ),
    Benchmark(
        "graph",
        "time and memory of the non-model steps",
        "graph_benchmark:graph_benchmark",
        (argument("--nodes", type=int, default=8500), argument("--edges", type=int, default=20000)),
    ),
    Benchmark(
        "vectors",
        "recall and latency of HNSW against the exact scan",
        "vector_benchmark:vectors_benchmark",
        (
            argument("--count", type=int, default=1_000_000),
            argument("--dimensions", type=int, default=1536),
            argument("--queries", type=int, default=100),
            argument("--exact-queries", type=int, default=5, help="the exact scan is slow: time fewer"),
            argument("--k", type=int, default=10),
            argument(
                "--ef-search",
                type=int,
                nargs="+",
                default=None,
                help="search widths (default: the project's for the size)",
            ),
            argument("--m", type=int, default=16, help="HNSW's M (the project's default)"),
            argument("--ef-construction", type=int, default=64, help="HNSW's ef_construction (the default)"),
            argument("--work", default=None, help="folder for the index file (default: the system's temp)"),
        ),
    ),
    Benchmark(
        "frames",
        "memory and time of an offline index and a query vs a commit",
        "frames_benchmark:frames_benchmark",
        (
            argument("--against", required=True, help="the baseline commit"),
            argument("--megabytes", type=float, default=50, help="size of the corpus (the sample book repeated)"),
            argument("--repeats", type=int, default=2, help="runs of each tree; the best figures are shown"),
        ),
    ),
    Benchmark(
        "scale",
        "wall time and peak RSS per step as the corpus grows",
        "scale_benchmark:scale_benchmark",
        (
            argument("--sizes", type=int, nargs="+", default=[250, 500, 1000], help="documents of ~5,000 tokens"),
            argument("--work", default=None, help="folder for the corpora and the store (default: temp)"),
        ),
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for benchmark in BENCHMARKS:
        command = commands.add_parser(benchmark.name, help=benchmark.help)
        for flags, options in benchmark.arguments:
            command.add_argument(*flags, **options)
        command.set_defaults(run=benchmark.run)
    args = parser.parse_args()
    module, function = args.run.split(":")
    getattr(importlib.import_module(module), function)(args)


if __name__ == "__main__":
    main()
