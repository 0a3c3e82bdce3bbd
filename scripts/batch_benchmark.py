"""What the Batch API changes (see benchmark.py for how to run it).

batch: the sample corpus indexed twice against the test model server, each in a new workspace with an empty
  response cache: one request at a time (the baseline), then through the Batch API with the server holding each
  batch for --delay seconds. Prints batches per step, requests answered by batch and alone, tokens, the estimated
  cost at gpt-4o-mini's and text-embedding-3-small's list prices (batch tokens at half), wall time, and whether
  the two indexes are equal.
"""

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRICES = {"prompt_price_per_million": 0.15, "completion_price_per_million": 0.60}  # gpt-4o-mini, per 1M tokens
EMBEDDING_PRICE = {"prompt_price_per_million": 0.02}  # text-embedding-3-small
MODEL_ASSETS = ("entities", "covariates", "community_reports", "text_embeddings")
COMPARED = ("entities", "relationships", "covariates", "community_reports", "text_embeddings")


def _index(root: Path, batch: bool, args) -> dict:
    sys.path.insert(0, str(REPO))
    import duckdb

    from graphrag_assets.store.batch_ledger import recorded_batches
    from graphrag_assets_tests.model_server import FakeOpenAIServer
    from graphrag_assets_tests.workspaces import (
        SAMPLE_CORPUS,
        Workspace,
        chat_resource,
        embedding_resource,
        materialization_metadata,
    )

    root.mkdir()
    workspace = Workspace(root)
    workspace.add_sample_corpus()
    settings = {"batch_api": batch, "batch_poll_seconds": args.poll}
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    export = {"config": {"folder": str(root / "exports")}}
    with FakeOpenAIServer(latency_seconds=args.latency, batch_seconds=args.delay) as server:
        started = time.perf_counter()
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache, **PRICES, **settings),
            embeddings=embedding_resource(server.base_url, workspace.cache, **EMBEDDING_PRICE, **settings),
            run_config={**quiet, "ops": {"graphml_export": export, "parquet_export": export}},
        )
        wall = time.perf_counter() - started
        served = [s for s in server.served if s.status == 200 and s.kind != "probe"]
    assert result.success
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        per_step = Counter(b["step"] for b in recorded_batches(conn)) if batch else Counter()
    metadata = {asset: materialization_metadata(result, asset) for asset in MODEL_ASSETS}
    return {
        "workspace": workspace,
        "batches": sum(per_step.values()),
        "per_step": per_step,
        "by_batch": sum(s.via == "batch" for s in served),
        "alone": sum(s.via == "sync" for s in served),
        "tokens": sum(s.prompt_tokens + s.completion_tokens for s in served),
        "cost": sum(float(m.get("estimated_cost_usd", 0.0)) for m in metadata.values()),
        "wall": wall,
    }


def batch_benchmark(args) -> None:
    with tempfile.TemporaryDirectory() as folder:
        sync = _index(Path(folder) / "sync", False, args)
        batch = _index(Path(folder) / "batch", True, args)
        same = all(
            sync["workspace"]
            .sql(f"SELECT * FROM {name} ORDER BY id")
            .equals(batch["workspace"].sql(f"SELECT * FROM {name} ORDER BY id"))
            for name in COMPARED
        )
    print(
        f"sample corpus, test server: {args.latency:g} s per synchronous request, each batch held {args.delay:g} s, "
        f"checked every {args.poll:g} s at first\n"
    )
    header = f"{'mode':<14}{'batches':>8}{'by batch':>10}{'alone':>7}{'tokens':>10}{'cost $':>10}{'wall s':>8}"
    print(header)
    print("-" * len(header))
    for name, row in (("synchronous", sync), ("batch", batch)):
        print(
            f"{name:<14}{row['batches']:>8}{row['by_batch']:>10}{row['alone']:>7}{row['tokens']:>10,}"
            f"{row['cost']:>10.5f}{row['wall']:>8.1f}"
        )
    ratios = {key: batch[key] / max(sync[key], 1e-9) for key in ("tokens", "cost", "wall")}
    print(
        f"\nbatch / synchronous: tokens {ratios['tokens']:.2f}x, cost {ratios['cost']:.2f}x, "
        f"wall time {ratios['wall']:.2f}x"
    )
    print("batches per step: " + ", ".join(f"{step} {n}" for step, n in sorted(batch["per_step"].items())))
    print(f"same index (entities, relationships, claims, reports, embeddings): {'yes' if same else 'NO'}")
