"""Peak memory and wall time of the offline index of a large corpus and of answering from it, this checkout next
to an earlier commit (the baseline), each in a fresh process (see benchmark.py frames).

Made for the move of the data frames from pandas to polars: the corpus is the sample book repeated to the size
asked, indexed offline (every step but the exports), then one question is asked of every offline method from the
published index (timed with its imports). The baseline commit runs from a git worktree with this checkout's
.venv, alternating with this checkout, so both see the same machine.
"""

import shutil
import subprocess
import tempfile
from pathlib import Path

from harness import run_in_child

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "a-christmas-carol"


def _child(name: str, tree: Path, work: Path) -> dict:
    """A child of this checkout's children.py, run against the package of `tree`."""
    return run_in_child(name, work, cwd=tree, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "HOME": str(work)})


def _corpus(work: Path, megabytes: float) -> int:
    from graphrag_assets.method.ingest.documents import strip_boilerplate

    book = strip_boilerplate(next(SAMPLE.glob("*.txt")).read_text(encoding="utf-8"))[0]
    (work / "data" / "big").mkdir(parents=True)
    written, copy = 0, 0
    with open(work / "data" / "big" / "big.txt", "w", encoding="utf-8") as out:
        while written < megabytes * 2**20:
            copy += 1
            written += out.write(f"\n\nPart {copy}\n\n{book}")
    return written


def frames_benchmark(args) -> None:
    baseline = Path(tempfile.mkdtemp(prefix="graphrag-baseline-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.against], cwd=REPO, check=True)
    figures = {"baseline": [], "this checkout": []}
    try:
        for _ in range(args.repeats):
            for name, tree in (("baseline", baseline), ("this checkout", REPO)):
                work = Path(tempfile.mkdtemp(prefix="graphrag-frames-"))
                try:
                    size = _corpus(work, args.megabytes)
                    figures[name].append((_child("offline_index", tree, work), _child("ask_every_method", tree, work)))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=REPO, check=False)
    print(
        f"offline index of {size / 2**20:.1f} MB of text, then one question to each offline method; baseline: "
        f"{args.against}; best of {args.repeats} runs each\n"
    )
    header = f"{'':<16}{'index s':>9}{'index MiB':>11}{'query s':>9}{'query MiB':>11}"
    print(header)
    print("-" * len(header))
    best = {}
    for name, runs in figures.items():
        best[name] = (
            min(index["seconds"] for index, _ in runs),
            min(index["peak_rss_mib"] for index, _ in runs),
            min(query["seconds"] for _, query in runs),
            min(query["peak_rss_mib"] for _, query in runs),
        )
        print(f"{name:<16}{best[name][0]:>9.1f}{best[name][1]:>11.0f}{best[name][2]:>9.1f}{best[name][3]:>11.0f}")
    ratio = [now / then for now, then in zip(best["this checkout"], best["baseline"], strict=True)]
    print(f"{'ratio':<16}{ratio[0]:>9.2f}{ratio[1]:>11.2f}{ratio[2]:>9.2f}{ratio[3]:>11.2f}")
    sources = {name: runs[-1][1]["sources"] for name, runs in figures.items()}
    if sources["baseline"] != sources["this checkout"]:
        print(f"\nthe answers' sources differ: {sources}")
