"""How fast `graphrag-assets serve` answers, and what it adds to answering in-process.

    .venv/bin/python scripts/benchmark.py serve [--questions 40] [--clients 16] [--latency 0.2]

On the sample corpus, in a temporary workspace: the offline index, then a real `graphrag-assets serve` process.
1. One client, each method: p50 and p95 of the HTTP round trip, against the same questions answered in-process
   from the loaded index (the baseline: the method alone, no server).
2. `--clients` clients at once, asking local, basic and global in turn: errors, p50, p95, answers a second.
3. With a model endpoint (the test server answering after `--latency` seconds): the index built with it, then local
   search through the server against the same answering in-process; the difference is what the server adds.
4. The CLI: `--help`, a mistyped argument and an offline `ask`, each a fresh process (wall time).
The server's peak resident memory (VmHWM) is printed with each part. Figures are from this machine, this run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import httpx
from harness import QUIET

from graphrag_assets.answers.asking import answer
from graphrag_assets.answers.service import AnswerService
from graphrag_assets.definitions import index_assets
from graphrag_assets.resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
from graphrag_assets_tests.model_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
CORPUS = "a-christmas-carol"
SUBJECTS = ("Scrooge", "Bob Cratchit", "Tiny Tim", "Marley", "Fred", "the Ghost of Christmas Past", "Belle", "Fezziwig")


def questions(count: int, tag: str = "") -> list[str]:
    return [
        f"What do we learn about {SUBJECTS[i % len(SUBJECTS)]}?{' ' + tag + str(i) if tag else ''}"
        for i in range(count)
    ]


def index(root: Path, base_url: str | None = None) -> Path:
    (root / "data").mkdir(parents=True)
    shutil.copytree(REPO / "data" / CORPUS, root / "data" / CORPUS)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [CORPUS])
    models = dict(base_url=base_url, cache_dir=str(root / "cache"), rate_limits_file=str(root / "rate-limits.sqlite"))
    dg.materialize(
        index_assets,
        instance=instance,
        partition_key=CORPUS,
        run_config={
            **QUIET,
            "ops": {e: {"config": {"folder": str(root / "exports")}} for e in ("graphml_export", "parquet_export")},
        },
        resources={
            "duckdb": DuckDBStoreResource(
                database=str(root / "graphrag.duckdb"), vector_index_dir=str(root / "vectors")
            ),
            "corpora": CorporaResource(root=str(root / "data"), conversion_cache_dir=str(root / "conversions")),
            "chat": ChatModelResource(**models),
            "embeddings": EmbeddingModelResource(**models),
            "judge": ChatModelResource(cache_dir=str(root / "cache")),
        },
    )
    return root / "graphrag.duckdb"


def environment(root: Path, base_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHRAG_")}
    (root / "home").mkdir(exist_ok=True)
    (root / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env |= {
        "GRAPHRAG_HOME": str(root),
        "GRAPHRAG_DUCKDB": str(root / "graphrag.duckdb"),
        "GRAPHRAG_CACHE_DIR": str(root / "cache"),
        "GRAPHRAG_VECTOR_INDEX_DIR": str(root / "vectors"),
        "GRAPHRAG_RATE_LIMITS_FILE": str(root / "rate-limits.sqlite"),
        "GRAPHRAG_DATA_DIR": str(root / "data"),
        "DAGSTER_HOME": str(root / "home"),
    }
    return env | ({"GRAPHRAG_API_BASE": base_url} if base_url else {})


@contextmanager
def server(root: Path, base_url: str | None = None):
    with socket_port() as port:
        pass
    process = subprocess.Popen(
        [sys.executable, "-m", "graphrag_assets.cli", "serve", "--port", str(port)],
        env=environment(root, base_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    try:
        yield url, process.pid
    finally:
        process.terminate()
        process.wait()


@contextmanager
def socket_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return statistics.median(ordered) * 1000, ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000


def ask(client: httpx.Client, url: str, method: str, question: str) -> tuple[float, int]:
    started = time.perf_counter()
    reply = client.post(f"{url}/api/ask", json={"corpus": CORPUS, "question": question, "method": method}, timeout=120)
    return time.perf_counter() - started, reply.status_code


def in_process(database: Path, method: str, asked: list[str], chat=None, embeddings=None) -> list[float]:
    service = AnswerService(str(database), vector_index_dir=None, chat=chat, embeddings=embeddings)
    loaded = service.loaded(CORPUS)
    from graphrag_assets.answers.asking import options_for

    took = []
    for question in asked:
        started = time.perf_counter()
        answer(CORPUS, loaded.index, method, options_for(method, question), chat, embeddings)
        took.append(time.perf_counter() - started)
    return took


def offline(root: Path, count: int, clients: int) -> None:
    database = index(root)
    print(f"offline index of the sample in {root}\n")
    print("1. one client, the same questions through the server and in-process (the method alone)")
    print(f"{'method':<8} {'server p50':>11} {'p95':>8} {'in-process p50':>15} {'added p50':>10}")
    with server(root) as (url, pid), httpx.Client() as client:
        for method in ("local", "basic", "global", "drift", "lazy"):
            asked = questions(count)
            ask(client, url, method, asked[0])  # the first answer of a method warms what it uses
            served = [ask(client, url, method, q)[0] for q in asked]
            direct = in_process(database, method, asked)
            (p50, p95), (d50, _) = percentiles(served), percentiles(direct)
            print(f"{method:<8} {p50:>9.1f} ms {p95:>5.1f} ms {d50:>12.1f} ms {p50 - d50:>7.1f} ms")
        print(f"server peak memory: {peak_mib(pid):.0f} MiB\n")

        print(f"2. {clients} clients at once, {count} questions each (local, basic, global in turn)")
        mix = ("local", "basic", "global")

        def one_client(number: int) -> list[tuple[float, int]]:
            with httpx.Client() as own:
                return [ask(own, url, mix[i % 3], q) for i, q in enumerate(questions(count, f"client {number} #"))]

        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            results = [r for client_results in pool.map(one_client, range(clients)) for r in client_results]
        wall = time.perf_counter() - started
        errors = sum(status != 200 for _, status in results)
        p50, p95 = percentiles([s for s, _ in results])
        print(
            f"{len(results)} answers, {errors} errors, p50 {p50:.0f} ms, p95 {p95:.0f} ms, "
            f"{len(results) / wall:.1f} answers/s"
        )
        print(f"server peak memory: {peak_mib(pid):.0f} MiB\n")
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/health").json()["queued_answers"] and time.monotonic() < deadline:
            time.sleep(0.5)
    with duckdb.connect(str(database), read_only=True) as conn:
        recorded = conn.execute("SELECT count(*) FROM query_answers").fetchone()[0]
    print(f"answers recorded after the server stopped: {recorded} (asked: {5 * (count + 1) + len(results)})\n")

    print("4. the CLI, each a fresh process (wall time)")
    env = environment(root, None)
    for label, args in (
        ("--help", ["--help"]),
        ("mistyped argument", ["ask", "--levl", "1", "Who?"]),
        ("ask, offline, local", ["ask", "--method", "local", "Who is Bob Cratchit?"]),
        ("ask, offline, global", ["ask", "What are the main themes?"]),
    ):
        took = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "graphrag_assets.cli", *args], env=env, capture_output=True, cwd=root)
            took.append(time.perf_counter() - started)
        print(f"  {label:<22} {statistics.median(took):.2f} s (median of 3)")


def with_model(root: Path, count: int, latency: float) -> None:
    print(f"\n3. with a model endpoint answering after {latency:g} s: local search, new questions each time")
    with FakeOpenAIServer(latency_seconds=latency) as model:
        database = index(root, model.base_url)
        settings = dict(
            base_url=model.base_url, cache_dir=str(root / "cache"), rate_limits_file=str(root / "rate-limits.sqlite")
        )
        chat = ChatModelResource(**settings).settings()
        embeddings = EmbeddingModelResource(**settings).settings()
        direct = in_process(database, "local", questions(count, "direct "), chat, embeddings)
        with server(root, model.base_url) as (url, pid), httpx.Client() as client:
            ask(client, url, "local", "Who is Scrooge? warm-up")
            served = [ask(client, url, "local", q)[0] for q in questions(count, "served ")]
            memory = peak_mib(pid)
    (p50, p95), (d50, d95) = percentiles(served), percentiles(direct)
    print(
        f"server p50 {p50:.0f} ms (p95 {p95:.0f}), in-process p50 {d50:.0f} ms (p95 {d95:.0f}): "
        f"the server adds {p50 - d50:.0f} ms at the median; peak memory {memory:.0f} MiB"
    )


def serve_benchmark(args) -> None:
    main(args.questions, args.clients, args.latency)


def main(count: int, clients: int, latency: float) -> None:
    with tempfile.TemporaryDirectory(prefix="serve-benchmark-") as folder:
        offline(Path(folder) / "offline", count, clients)
        with_model(Path(folder) / "model", max(10, count // 2), latency)
