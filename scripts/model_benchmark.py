"""The model-calling part of the index against the test model server (models), the query methods (queries), and
a re-index after one added document (incremental): see benchmark.py."""

import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
from harness import QUIET, peak_rss_mib

from graphrag_assets.definitions import index_assets
from graphrag_assets.resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
from graphrag_assets_tests.model_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
CORPUS = "a-christmas-carol"
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
