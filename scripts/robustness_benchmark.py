"""Benchmarks of issue-8 guarantees (see benchmark.py for how to run them).

ingest: peak RSS of reading and chunking one large text file (documents + base_text_units, offline),
  each corpus in a fresh process; baseline: the sample corpus in the same way.
growth: wall time of every offline index step, and peak memory, at several sizes of text (5, 50 and 200 MB by
  default) of a kind: generated (a growing vocabulary with real dirt, graphrag_assets_tests/corpora.py),
  python-doc (Debian's python3.11-doc HTML pages) or book (the sample book repeated); each size in a fresh process;
  the growth exponent of each step between sizes against n log n's.
faults: the index of the sample corpus against a misbehaving endpoint next to a healthy one (the
  baseline): rows of every table, whether the tables are equal, and the requests each run sent.
"""

import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harness import run_in_child

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "a-christmas-carol"


def _ingest(root: Path, corpus: str) -> dict:
    return run_in_child("ingest", root, corpus)


def _growth_index(work: Path) -> dict:
    """Every step's seconds and peak RSS, each in a fresh process."""
    from scale_benchmark import STEPS  # the index's steps in pipeline order, by the assets each writes

    figures = {}
    for step, assets in STEPS.items():
        figures[step] = run_in_child("index_step", work, *assets, check=False)
        if "failed" in figures[step]:
            raise SystemExit(f"{step} failed: {figures[step]['failed']}")
        # Each step as it ends: a run stopped part way (200 MB takes an hour) still leaves what it measured.
        print(f"  {step}: {figures[step]['seconds']:.1f} s, {figures[step]['peak_rss_mib']:,.0f} MiB", flush=True)
    return figures


PYTHON_DOC = Path("/usr/share/doc/python3.11/html")  # Debian's python3.11-doc: about 70 MB of real HTML pages


def _growth_corpus(text: str, folder: Path, megabytes: float) -> int:
    """A corpus of about `megabytes` of the kind asked, in `folder`; returns the bytes written."""
    folder.mkdir(parents=True)
    if text == "generated":
        from graphrag_assets_tests.corpora import dirty_corpus

        return sum(dirty_corpus(folder, megabytes, long_line_mb=2, huge_document_mb=20).values())
    if text == "python-doc":
        pages = sorted(PYTHON_DOC.rglob("*.html")) if PYTHON_DOC.is_dir() else []
        if not pages:
            raise SystemExit(f"{PYTHON_DOC} is missing: apt-get install python3.11-doc")
        written = 0
        for page in pages:
            if written >= megabytes * 2**20:
                break
            target = folder / page.relative_to(PYTHON_DOC)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
            written += page.stat().st_size
        return written
    from graphrag_assets.method.ingest.documents import strip_boilerplate

    book = strip_boilerplate(next(SAMPLE.glob("*.txt")).read_text(encoding="utf-8"))[0]
    written, copy = 0, 0
    with open(folder / "big.txt", "w", encoding="utf-8") as out:
        while written < megabytes * 2**20:
            copy += 1
            written += out.write(f"\n\nPart {copy}\n\n{book}")
    return written


def growth_benchmark(args) -> None:
    """Per-step wall time and peak memory of the offline index at several sizes, each step in a fresh process, and
    how they grow: the exponent k of time ~ n^k between sizes, against n log n's."""
    sys.path.insert(0, str(REPO))
    figures = {}
    for megabytes in args.sizes:
        work = Path(tempfile.mkdtemp(prefix="graphrag-growth-"))
        try:
            written = _growth_corpus(args.text, work / "data" / "big", megabytes)
            print(f"{args.text} text, {written / 2**20:,.1f} MiB: indexing offline ...", flush=True)
            figures[megabytes] = (written, _growth_index(work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    sizes = list(figures)
    last = figures[sizes[-1]][1]
    header = f"{'step':<20}" + "".join(f"{f'{size:g} MB s':>11}{'MiB':>7}" for size in sizes) + "   time's exponent"
    print(f"\n{header}\n{'-' * (len(header) + 12)}")
    for step in sorted(last, key=lambda step: -last[step]["seconds"]):
        times = [steps[step]["seconds"] for _, steps in figures.values()]
        cells = "".join(
            f"{steps[step]['seconds']:>11.1f}{steps[step]['peak_rss_mib']:>7,.0f}" for _, steps in figures.values()
        )
        print(f"{step:<20}{cells}   {_exponents(sizes, figures, times)}")
    totals = [sum(f["seconds"] for f in steps.values()) for _, steps in figures.values()]
    peaks = [max(f["peak_rss_mib"] for f in steps.values()) for _, steps in figures.values()]
    cells = "".join(f"{total:>11.1f}{peak:>7,.0f}" for total, peak in zip(totals, peaks))
    print(f"{'all steps (largest)':<20}{cells}   {_exponents(sizes, figures, totals)}")
    n_log_n = [
        math.log((b * math.log(b)) / (a * math.log(a))) / math.log(b / a)
        for (a, _), (b, _) in zip(list(figures.values()), list(figures.values())[1:])
    ]
    print(
        f"\npeak memory's exponent: {_exponents(sizes, figures, peaks)}; n log n's exponent over the same steps: "
        f"{', '.join(f'{k:.2f}' for k in n_log_n)}. Each step runs in a process of its own, as a run launched from "
        "the UI runs it; MiB is that process's peak. Steps under a second are noise. Target: no step over 1,536 MiB "
        "at 200 MB of text."
    )


def _exponents(sizes: list, figures: dict, values: list[float]) -> str:
    """k such that value ~ n^k, between each pair of consecutive sizes (n in bytes written)."""
    out = []
    for (a, b), (small, large) in zip(zip(values, values[1:]), zip(sizes, sizes[1:])):
        ratio = figures[large][0] / figures[small][0]
        out.append(f"{math.log(b / a) / math.log(ratio):.2f}" if a > 0 and b > 0 and ratio != 1 else "-")
    return ", ".join(out)


def ingest_benchmark(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    try:
        shutil.copytree(SAMPLE, work / "data" / "sample")
        big = work / "data" / "big"
        big.mkdir()
        book = next(SAMPLE.glob("*.txt")).read_text(encoding="utf-8")
        with open(big / "big.txt", "w", encoding="utf-8") as out:
            written, copy = 0, 0
            while written < args.megabytes * 1024 * 1024:
                copy += 1
                written += out.write(f"\n\nCopy {copy}\n\n{book}")
        size_mib = (big / "big.txt").stat().st_size / 2**20
        baseline, large = _ingest(work, "sample"), _ingest(work, "big")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = f"{'corpus':<26}{'file MiB':>9}{'text units':>12}{'wall s':>8}{'peak RSS MiB':>14}{'vs sample':>11}"
    print(header)
    print("-" * len(header))
    for name, figures, size in (
        ("sample (baseline)", baseline, 0.18),
        (f"{args.megabytes} MB text file", large, size_mib),
    ):
        print(
            f"{name:<26}{size:>9.1f}{figures['text_units']:>12}{figures['wall_s']:>8.1f}{figures['peak_rss_mib']:>14.0f}"
            f"{figures['peak_rss_mib'] / baseline['peak_rss_mib']:>10.2f}x"
        )
    print(
        f"\npeak RSS above the sample's, per MiB of input: "
        f"{(large['peak_rss_mib'] - baseline['peak_rss_mib']) / size_mib:.1f} MiB"
    )


def faults_benchmark(args) -> None:
    sys.path.insert(0, str(REPO))
    from graphrag_assets_tests.model_server import Faults
    from graphrag_assets_tests.workspaces import SAMPLE_CORPUS, index, table

    work = Path(tempfile.mkdtemp(prefix="graphrag-bench-"))
    faults = Faults.misbehaving()
    try:
        runs = {}
        for name, run_faults in (("healthy endpoint (baseline)", None), ("misbehaving endpoint", faults)):
            (work / name).mkdir()
            started = time.perf_counter()
            workspace, result, server = index(work / name, run_faults)
            runs[name] = (workspace, time.perf_counter() - started, server)
        tables = ("entities", "relationships", "covariates", "community_reports")
        print(
            "faults: 20% HTTP 429/500 (first attempt), 5% cut off at max_tokens, 5% garbled HTTP body, 2.5% each of "
            "prose, wrong record kind, refusal\n"
        )
        header = f"{'run':<30}" + "".join(f"{t:>18}" for t in tables) + f"{'requests':>10}{'wall s':>8}"
        print(header)
        print("-" * len(header))
        for name, (workspace, wall, server) in runs.items():
            rows = "".join(f"{len(table(workspace, t)):>18}" for t in tables)
            print(f"{name:<30}{rows}{len(server.served):>10}{wall:>8.1f}")
        (clean, _, clean_server), (faulty, _, faulty_server) = runs.values()
        equal = [
            t
            for t in tables + ("text_units", "communities", "text_embeddings")
            if table(clean, t).equals(table(faulty, t))
        ]
        print(f"\ntables equal to the healthy run's: {len(equal)} of 7 ({', '.join(equal)})")
        print(
            f"requests: {len(faulty_server.served) / len(clean_server.served):.2f}x the healthy run's; "
            f"sample corpus {SAMPLE_CORPUS}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
