"""How close `graphrag-assets index --estimate` comes to the run it estimates.

    .venv/bin/python scripts/benchmark.py estimate

Four corpora of different shapes (the sample novella in four parts, supply contracts, council meeting transcripts,
short notes), each estimated with no model request and then indexed with each method (standard, fast, lazy)
against the test model server. Printed per corpus and method: requests and prompt tokens (chat and embeddings
together) estimated and actual, and estimate / actual; completion tokens too, the least sure figure. The rates
were measured on the novella and the contracts: the transcripts and notes are corpora the estimate was not fitted
to. Wall time of the estimate against the index it estimates is the last column.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
import duckdb
from harness import QUIET

from graphrag_assets.assets.estimate import estimate_corpus
from graphrag_assets.definitions import index_assets
from graphrag_assets.resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
from graphrag_assets_tests.corpora import meeting_transcripts, short_notes, split_sample, supply_contracts
from graphrag_assets_tests.model_server import FakeOpenAIServer

SHAPES = {
    "novella": lambda folder: split_sample(folder, 4),
    "contracts": lambda folder: supply_contracts(folder, 12),
    "transcripts": lambda folder: meeting_transcripts(folder, 6),
    "notes": lambda folder: short_notes(folder, 80),
}


def estimate_benchmark(args) -> None:
    main()


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="estimate-benchmark-"))
    try:
        print(f"{'corpus':<12} {'method':<9} {'requests est/actual':>22} {'prompt tokens est/actual':>30} "
              f"{'completion est/actual':>26} {'time est/index':>16}")  # fmt: skip
        for shape, write in SHAPES.items():
            for method in ("standard", "fast", "lazy"):
                row(root / f"{shape}-{method}", shape, write, method)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def row(root: Path, shape: str, write, method: str) -> None:
    write(root / "data" / shape)
    with FakeOpenAIServer() as server:
        chat = ChatModelResource(base_url=server.base_url, cache_dir=str(root / "cache"))
        embeddings = EmbeddingModelResource(base_url=server.base_url, cache_dir=str(root / "cache"))
        corpora = CorporaResource(root=str(root / "data"), conversion_cache_dir=str(root / "conversions"))
        ops = {"entity_graph": {"config": {"method": method}}}
        started = time.perf_counter()
        found = estimate_corpus(corpora, shape, chat, embeddings, ops)["methods"][method]
        estimating = time.perf_counter() - started
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("corpus", [shape])
        started = time.perf_counter()
        dg.materialize(
            index_assets,
            instance=instance,
            partition_key=shape,
            resources={
                "duckdb": DuckDBStoreResource(database=str(root / "store.duckdb"), vector_index_dir=str(root / "v")),
                "corpora": corpora,
                "chat": chat,
                "embeddings": embeddings,
            },
            run_config={"ops": ops, **QUIET},
        )
        indexing = time.perf_counter() - started
    with duckdb.connect(str(root / "store.duckdb"), read_only=True) as conn:
        requests, prompt, completion = conn.execute(
            "SELECT sum(requests), sum(prompt_tokens), sum(completion_tokens) FROM model_usage"
        ).fetchone()

    def pair(estimated: int, actual: int | None, width: int) -> str:
        actual = actual or 0
        ratio = f"{estimated / actual:.2f}x" if actual else "-"
        return f"{f'{estimated:,}/{actual:,} {ratio}':>{width}}"

    print(
        f"{shape:<12} {method:<9} {pair(found['requests'], requests, 22)} {pair(found['prompt_tokens'], prompt, 30)} "
        f"{pair(found['completion_tokens'], completion, 26)} {f'{estimating:.1f}s/{indexing:.0f}s':>16}"
    )


if __name__ == "__main__":
    main()
