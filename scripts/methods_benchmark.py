"""What each index method costs (see benchmark.py for how to run it).

methods: the sample corpus indexed with the standard, fast and lazy methods, each in a new workspace against the
  test model server with an empty response cache: chat requests, chat tokens (prompt + completion), embedding
  requests and tokens, and wall time; baseline: the standard method.
  The test server's replies are shaped like a model's but written by rule, so the token counts of prompts are
  real and those of replies are indicative; answer quality needs a real model (the evaluation group).
"""

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METHODS = ("standard", "fast", "lazy")


def _index(root: Path, method: str) -> dict:
    sys.path.insert(0, str(REPO))
    from graphrag_assets_tests.conftest import SAMPLE_CORPUS, Workspace, chat_resource, embedding_resource
    from graphrag_assets_tests.model_server import FakeOpenAIServer

    workspace = Workspace(root)
    workspace.add_sample_corpus()
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    export = {"config": {"folder": str(root / "exports")}}
    with FakeOpenAIServer() as server:
        started = time.perf_counter()
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache),
            embeddings=embedding_resource(server.base_url, workspace.cache),
            run_config={
                **quiet,
                "ops": {
                    "entity_graph": {"config": {"method": method}},
                    "graphml_export": export,
                    "parquet_export": export,
                },
            },
        )
        wall = time.perf_counter() - started
        served = [s for s in server.served if s.status == 200]
    assert result.success, method
    chat = [s for s in served if s.endpoint == "chat"]
    embedded = [s for s in served if s.endpoint == "embeddings"]
    counts = {
        name: int(workspace.sql(f"SELECT count(*) AS n FROM {name}")["n"][0])
        for name in ("entities", "relationships", "communities", "community_reports", "covariates")
    }
    return {
        "chat_requests": len(chat),
        "chat_tokens": sum(s.prompt_tokens + s.completion_tokens for s in chat),
        "embedding_requests": len(embedded),
        "embedding_tokens": sum(s.prompt_tokens for s in embedded),
        "wall_s": wall,
        **counts,
    }


def methods_benchmark(args) -> None:
    figures = {}
    with tempfile.TemporaryDirectory(prefix="graphrag-methods-") as work:
        for method in METHODS:
            (Path(work) / method).mkdir()
            figures[method] = _index(Path(work) / method, method)
    base = figures["standard"]
    header = (
        f"{'method':<10}{'chat req':>9}{'chat tokens':>12}{'x std':>7}{'embed req':>10}{'embed tokens':>13}"
        f"{'wall s':>8}{'entities':>9}{'relations':>10}{'communities':>12}{'reports':>8}{'claims':>7}"
    )
    print(header)
    print("-" * len(header))
    for method, f in figures.items():
        ratio = f["chat_tokens"] / base["chat_tokens"] if base["chat_tokens"] else 0
        print(
            f"{method:<10}{f['chat_requests']:>9}{f['chat_tokens']:>12,}{ratio:>7.3f}{f['embedding_requests']:>10}"
            f"{f['embedding_tokens']:>13,}{f['wall_s']:>8.1f}{f['entities']:>9}{f['relationships']:>10}"
            f"{f['communities']:>12}{f['community_reports']:>8}{f['covariates']:>7}"
        )
    print(
        "\nx std: chat tokens against the standard index's (targets: fast at most 0.15, lazy at most 0.01). Every "
        "run starts with an empty response cache; the test server's replies are written by rule, so answer "
        "quality needs a real model: run the evaluation group with one."
    )
