"""What tuned prompts change (see benchmark.py for how to run it).

tuning: a corpus of short fictional supply agreements (graphrag_assets_tests/corpora.py), a domain far from the
  sample's novella, indexed twice against the test model server, each in a new workspace with an empty response
  cache: with the default prompts (the baseline), and with prompts tuned to it (tuned_prompts, then the index with
  prompts=tuned). Printed for both: chat requests and tokens of tuning and of the index, the mean prompt tokens of
  an extraction request, and the entities found per type.
  The test server names a corpus's kinds by rule (the words that most often follow "the") and types each name it
  finds from the prompt's list, so the per-type counts show that the tuned types reach the graph, not that a model
  would find better entities with them: judge that with a real model and the evaluation group.
"""

import multiprocessing
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from harness import peak_rss_mib

CORPUS = "contracts"


def _run(root: Path, documents: int, tuned: bool) -> dict:
    import dagster as dg

    from graphrag_assets.definitions import index_assets, tuning_assets
    from graphrag_assets_tests.corpora import supply_contracts
    from graphrag_assets_tests.model_server import FakeOpenAIServer
    from graphrag_assets_tests.workspaces import Workspace, chat_resource, embedding_resource

    workspace = Workspace(root)
    supply_contracts(workspace.data / CORPUS, documents)
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    export = {"config": {"folder": str(root / "exports")}}
    with FakeOpenAIServer() as server:
        chat = chat_resource(server.base_url, workspace.cache)
        embeddings = embedding_resource(server.base_url, workspace.cache)
        started = time.perf_counter()
        if tuned:
            instance = dg.DagsterInstance.ephemeral()
            instance.add_dynamic_partitions("corpus", [CORPUS])
            dg.materialize(
                [*index_assets, *tuning_assets],
                selection=["tuned_prompts"],
                instance=instance,
                partition_key=CORPUS,
                resources=workspace.resources(chat, embeddings),
                run_config=quiet,
            )
        tuning = [s for s in server.served if s.status == 200 and s.endpoint == "chat" and s.kind != "probe"]
        before = len(server.served)
        result = workspace.materialize(
            CORPUS,
            chat,
            embeddings=embeddings,
            run_config={
                **quiet,
                "ops": {
                    "index_prompts": {"config": {"prompts": "tuned" if tuned else "default"}},
                    "graphml_export": export,
                    "parquet_export": export,
                },
            },
        )
        wall = time.perf_counter() - started
        served = [s for s in server.served[before:] if s.status == 200 and s.endpoint == "chat" and s.kind != "probe"]
    assert result.success
    extractions = [s for s in served if s.kind == "extract"]
    types = workspace.sql("SELECT type, count(*) AS n FROM entities GROUP BY type ORDER BY n DESC, type")
    return {
        "tuning_requests": len(tuning),
        "tuning_tokens": sum(s.prompt_tokens + s.completion_tokens for s in tuning),
        "requests": len(served),
        "tokens": sum(s.prompt_tokens + s.completion_tokens for s in served),
        "extraction_prompt": sum(s.prompt_tokens for s in extractions) / max(len(extractions), 1),
        "per_kind": Counter(s.kind for s in served),
        "types": dict(zip(types["type"], types["n"])),
        "entities": int(types["n"].sum()),
        "wall_s": wall,
        "peak_mib": peak_rss_mib(),
    }


def tuning_benchmark(args) -> None:
    with tempfile.TemporaryDirectory(prefix="graphrag-tuning-") as work:
        runs = {}
        for name, tuned in (("default", False), ("tuned", True)):
            (Path(work) / name).mkdir()
            # Each in a fresh process, so that neither pays alone for imports and compiled code.
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as process:
                runs[name] = process.submit(_run, Path(work) / name, args.documents, tuned).result()
    base = runs["default"]
    print(f"corpus: {args.documents} fictional supply agreements\n")
    header = (
        f"{'prompts':<9}{'tune req':>9}{'tune tokens':>12}{'index req':>10}{'index tokens':>13}{'x default':>10}"
        f"{'extract prompt':>15}{'entities':>9}{'wall s':>8}{'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, f in runs.items():
        print(
            f"{name:<9}{f['tuning_requests']:>9}{f['tuning_tokens']:>12,}{f['requests']:>10}{f['tokens']:>13,}"
            f"{(f['tokens'] + f['tuning_tokens']) / base['tokens']:>10.3f}{f['extraction_prompt']:>15.0f}"
            f"{f['entities']:>9}{f['wall_s']:>8.1f}{f['peak_mib']:>9.0f}"
        )
    for name, f in runs.items():
        print(f"\n{name}: requests per kind: {', '.join(f'{k} {n}' for k, n in sorted(f['per_kind'].items()))}")
        print(f"{name}: entities per type:  {', '.join(f'{t} {n}' for t, n in f['types'].items())}")
    print(
        "\nx default: tuning and index tokens together, against the default index's. extract prompt: mean prompt "
        "tokens of one extraction request (the tuned prompt carries examples from the corpus)."
    )
