"""How each step of the index grows with the corpus (see benchmark.py scale).

A synthetic corpus of documents of about 5,000 tokens each is indexed at several sizes against the test
server (fast replies). Each step runs in a fresh interpreter, as Dagster's multiprocess executor runs it,
so its wall time and peak RSS are its own; the figures and their growth from one size to the next are
printed against n log n.
"""

import math
import os
import random
import tempfile
import time
from pathlib import Path

from harness import run_in_child

REPO = Path(__file__).resolve().parents[1]
# The index's steps in pipeline order, each with the assets it writes; exports are left out (they copy tables).
STEPS = {
    "documents": ["documents", "base_text_units"],
    "index_prompts": ["index_prompts"],  # the graph and report steps read the prompts it records
    "entity_graph": ["entities", "relationships"],
    "entity_aliases": ["entity_aliases"],
    "covariates": ["covariates"],
    "text_units": ["text_units"],
    "communities": ["communities"],
    "community_reports": ["community_reports"],
    "text_embeddings": ["text_embeddings"],
    "keyword_index": ["keyword_index"],
    "document_embeddings": ["document_embeddings"],
    "graph_embeddings": ["graph_embeddings"],
    "layouts": ["layouts"],
}
PLACES = ["Harbour", "Market", "Mill", "Chapel", "Station", "Bridge", "Quay", "Tower", "Garden", "Academy"]
VERBS = ["met", "wrote to", "argued with", "travelled with", "worked beside", "owed money to", "visited"]


def synthetic_corpus(folder: Path, documents: int, seed: int = 11) -> int:
    """Documents of about 5,000 tokens: each has a cast drawn from a shared population (popular names recur
    across documents, as main characters do) and places; returns the total words written."""
    rng = random.Random(seed)
    syllables = ["al", "ber", "cor", "dan", "el", "fen", "gar", "hal", "ith", "jor", "kel", "lam", "mor", "nis"]
    population = sorted({"".join(rng.choice(syllables) for _ in range(3)).title() for _ in range(30_000)})
    weights = [1 / (rank + 1) ** 0.8 for rank in range(len(population))]
    folder.mkdir(parents=True)
    words = 0
    for number in range(documents):
        cast = rng.choices(population, weights, k=25)
        places = [f"{rng.choice(cast)} {rng.choice(PLACES)}" for _ in range(6)]
        paragraphs = []
        while sum(len(p.split()) for p in paragraphs) < 3_700:  # about 5,000 tokens
            sentences = [
                f"{rng.choice(cast)} {rng.choice(VERBS)} {rng.choice(cast)} near the {rng.choice(places)} "
                f"in the year {1800 + rng.randrange(120)}, and the matter was talked of for weeks."
                for _ in range(rng.randint(3, 7))
            ]
            paragraphs.append(" ".join(sentences))
        text = f"Chronicle {number}\n\n" + "\n\n".join(paragraphs)
        (folder / f"chronicle-{number:04d}.txt").write_text(text)
        words += len(text.split())
    return words


def run_step(op: str, corpus: str, env: dict) -> dict:
    """One step in a process of its own: its wall time from before its imports, and its peak memory."""
    figures = run_in_child("configured_step", corpus, *STEPS[op], env=env, check=False)
    if "failed" in figures:
        raise SystemExit(f"{op} failed on {corpus}: {figures['failed']}")
    return {"wall": figures["wall_s"], "rss": figures["peak_rss_mib"]}


def scale_benchmark(args) -> None:
    from graphrag_assets_tests.model_server import FakeOpenAIServer

    sizes = sorted(args.sizes)
    figures: dict[int, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(dir=args.work) as work, FakeOpenAIServer(embedding_dimensions=1536) as server:
        root = Path(work)
        env = {
            **os.environ,
            "GRAPHRAG_DATA_DIR": str(root / "data"),
            "GRAPHRAG_DUCKDB": str(root / "graphrag.duckdb"),
            "GRAPHRAG_VECTOR_INDEX_DIR": str(root / "vector-index"),
            "GRAPHRAG_API_BASE": server.base_url,
            "GRAPHRAG_API_KEY": "benchmark",
            "GRAPHRAG_MAX_CONCURRENCY": "32",
        }
        for size in sizes:
            corpus = f"synthetic-{size}"
            words = synthetic_corpus(root / "data" / corpus, size)
            print(f"\n{corpus}: {size} documents, {words:,} words", flush=True)
            figures[size] = {}
            calls_before = len(server.served)
            # A cache of its own: the larger corpora begin with the smaller ones' documents.
            sized = {**env, "GRAPHRAG_CACHE_DIR": str(root / "cache" / corpus)}
            for op in STEPS:
                started = time.perf_counter()
                figures[size][op] = run_step(op, corpus, sized)
                print(
                    f"  {op:<20} {figures[size][op]['wall']:>8.1f} s  {figures[size][op]['rss']:>8,.0f} MiB"
                    f"  (process {time.perf_counter() - started:.1f} s)",
                    flush=True,
                )
            print(f"  model requests: {len(server.served) - calls_before:,}")

    print("\nper step: wall seconds and peak RSS (MiB) by corpus size, and growth against n log n")
    header = "".join(f"{f'{size} docs':>18}" for size in sizes)
    print(f"{'step':<20}{header}   growth (n log n allows)")
    worst = 0.0
    for op in [*STEPS, "total"]:
        cells, walls = [], []
        for size in sizes:
            if op == "total":
                wall = sum(f["wall"] for f in figures[size].values())
                rss = max(f["rss"] for f in figures[size].values())
            else:
                wall, rss = figures[size][op]["wall"], figures[size][op]["rss"]
            walls.append(wall)
            cells.append(f"{wall:>9.1f} s{rss:>7,.0f}")
        growth = []
        for (small, large), (a, b) in zip(zip(sizes, sizes[1:]), zip(walls, walls[1:])):
            allowed = (large * math.log(large)) / (small * math.log(small))
            growth.append(f"{b / a:.2f}x ({allowed:.2f}x)")
            if a > 1.0:  # below a second, start-up noise decides the ratio
                worst = max(worst, (b / a) / allowed)
        print(f"{op:<20}{''.join(f'{c:>18}' for c in cells)}   {', '.join(growth)}")
    peak = max(f["rss"] for steps in figures.values() for f in steps.values())
    print(f"\nlargest ratio of growth to n log n (steps over 1 s): {worst:.2f}; peak RSS of any step {peak:,.0f} MiB")
