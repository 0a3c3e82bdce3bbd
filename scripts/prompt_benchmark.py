"""What the prompts cost per call, against the prompts of an earlier commit (the baseline).

    .venv/bin/python scripts/benchmark.py prompts [--against a6c789b]

Each prompt file is a fixed template plus the data a call fills in, so what a rewrite saves per call
is the difference in the templates' own tokens (placeholders left out). The first table prints that,
per file, against the same file at the baseline commit. The second indexes the sample corpus (claims
on, one gleaning round) and asks one question of every query method against the test server, and
prints per kind of call the calls made, the mean prompt tokens sent per call now, and what the same
calls sent with the baseline's templates (now plus the templates' difference: the data is the same).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import dagster as dg
from harness import QUIET

from graphrag_assets.definitions import index_assets, query_assets
from graphrag_assets.method.ingest.tokens import count_tokens
from graphrag_assets.resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
from graphrag_assets_tests.model_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "prompts"
CORPUS = "a-christmas-carol"
QUESTION = "What are the main themes of the story, and how does Scrooge change?"
QUERIES = [
    ("global_search", {"question": QUESTION, "community_level": 1}),
    ("global_search", {"question": QUESTION, "community_level": 1, "dynamic_community_selection": True}),
    ("local_search", {"question": QUESTION}),
    ("basic_search", {"question": QUESTION}),
    ("drift_search", {"question": QUESTION}),
    ("question_generation", {"previous_questions": [QUESTION]}),
]
# The later calls of a gleaning conversation carry the first prompt and these too.
FOLLOW_UPS = {
    "gleaning": ("extract_graph_continue",),
    "claims_gleaning": ("extract_claims_continue",),
    "loop": ("extract_graph_continue", "gleaning_loop"),
}


def template_tokens(text: str) -> int:
    return count_tokens(re.sub(r"\{[a-z_]+\}", "", text))


def baseline_templates(revision: str) -> dict[str, str]:
    templates = {}
    for path in sorted(PROMPTS.glob("*.txt")):
        shown = subprocess.run(
            ["git", "show", f"{revision}:prompts/{path.name}"], cwd=REPO, capture_output=True, text=True
        )
        if shown.returncode == 0:
            templates[path.stem] = shown.stdout
    return templates


def prompt_of(first_message: str) -> str:
    """The prompt file a request was built from: the one whose opening words it starts with."""
    for path in sorted(PROMPTS.glob("*.txt")):
        opening = path.read_text(encoding="utf-8").split("{", 1)[0][:60]
        if first_message.startswith(opening):
            return path.stem
    return "unknown"


def served_calls() -> list:
    """Every request the test server answered for one index and one question per query method."""
    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    try:
        with FakeOpenAIServer() as server:
            resources = {
                "duckdb": DuckDBStoreResource(database=str(work / "graphrag.duckdb")),
                "corpora": CorporaResource(root=str(REPO / "data")),
                "chat": ChatModelResource(base_url=server.base_url, cache_dir=str(work / "cache")),
                "embeddings": EmbeddingModelResource(base_url=server.base_url, cache_dir=str(work / "cache")),
            }
            instance = dg.DagsterInstance.ephemeral()
            instance.add_dynamic_partitions("corpus", [CORPUS])
            dg.materialize(
                index_assets,
                selection=dg.AssetSelection.assets(*index_assets) - dg.AssetSelection.groups("exports"),
                instance=instance,
                partition_key=CORPUS,
                resources=resources,
                run_config=QUIET,
            )
            for asset, config in QUERIES:
                dg.materialize(
                    [*index_assets, *query_assets],
                    selection=[asset],
                    instance=instance,
                    partition_key=CORPUS,
                    resources=resources,
                    run_config={**QUIET, "ops": {asset: {"config": config}}},
                )
            return [s for s in server.served if s.status == 200 and s.kind not in ("embed", "probe")]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prompts_benchmark(args) -> None:
    before = {name: template_tokens(text) for name, text in baseline_templates(args.against).items()}
    after = {path.stem: template_tokens(path.read_text(encoding="utf-8")) for path in sorted(PROMPTS.glob("*.txt"))}
    print(f"template tokens (placeholders left out), baseline: prompts/ at {args.against}\n")
    header = f"{'prompt':<26}{'baseline':>10}{'now':>8}{'now/baseline':>14}"
    print(header + "\n" + "-" * len(header))
    for name in sorted(after):
        old = before.get(name)
        ratio = f"{after[name] / old:>13.2f}x" if old else f"{'new':>14}"
        print(f"{name:<26}{old if old is not None else '-':>10}{after[name]:>8}{ratio}")
    shared = [name for name in after if name in before]  # prompts added since the baseline have nothing to compare
    total_before, total_after = sum(before[n] for n in shared), sum(after[n] for n in shared)
    print(f"{'all in both':<26}{total_before:>10}{total_after:>8}{total_after / total_before:>13.2f}x")

    calls: dict[tuple[str, str], list[int]] = defaultdict(list)
    for served in served_calls():
        calls[(served.kind, prompt_of(served.prompt))].append(served.prompt_tokens)
    print(f"\nprompt tokens per call, sample corpus index and one question per query method: {QUESTION!r}\n")
    header = f"{'kind of call':<18}{'prompt':<24}{'calls':>7}{'mean now':>10}{'mean baseline':>15}{'now/baseline':>14}"
    print(header + "\n" + "-" * len(header))
    sent_now = sent_before = 0
    for (kind, name), tokens in sorted(calls.items()):
        saved = sum(before.get(p, after[p]) - after[p] for p in (name, *FOLLOW_UPS.get(kind, ())) if p in after)
        now = sum(tokens) / len(tokens)
        sent_now, sent_before = sent_now + sum(tokens), sent_before + sum(tokens) + saved * len(tokens)
        print(f"{kind:<18}{name:<24}{len(tokens):>7}{now:>10.0f}{now + saved:>15.0f}{now / (now + saved):>13.2f}x")
    print(
        f"\nall prompt tokens sent: {sent_now} now, {sent_before} with the baseline's templates "
        f"({sent_now / sent_before:.2f}x)"
    )
    print(
        "The test server's replies are short, so the data part of a real model's calls is larger: the "
        "per-call savings stay, the ratio moves toward 1."
    )
