"""What each index method costs (see benchmark.py for how to run it).

methods: the sample corpus indexed with the standard, fast and lazy methods, each in a new workspace against the
  test model server with an empty response cache: chat requests, chat tokens (prompt + completion), embedding
  requests and tokens, and wall time; baseline: the standard method.
  The test server's replies are shaped like a model's but written by rule, so the token counts of prompts are
  real and those of replies are indicative; answer quality needs a real model (the evaluation group).
  --documents N indexes benchmark.py scale's synthetic corpus of N documents (about 5,000 tokens each) instead:
  global search maps over every report of its level, so its cost grows with the corpus, while lazy search's
  stays near its relevance budget; the sample (92 text units) is too small to show that.
  --full-reports: the test server writes each community report as long as the report prompt asks a model for
  (up to 10 findings of a paragraph each) instead of one row per finding; global search reads every report of
  its level, so its cost follows their length.
"""

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METHODS = ("standard", "fast", "lazy")


def _index(root: Path, method: str, documents: int, phrases: str | None, full_reports: bool) -> dict:
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "scripts"))
    from scale_benchmark import synthetic_corpus

    from graphrag_assets.method.ingest.tokens import count_tokens
    from graphrag_assets_tests.model_server import FakeOpenAIServer
    from graphrag_assets_tests.workspaces import Workspace, chat_resource, embedding_resource

    workspace = Workspace(root)
    if documents:
        corpus = SYNTHETIC
        synthetic_corpus(workspace.data / corpus, documents)
    else:
        corpus = workspace.add_sample_corpus()
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    export = {"config": {"folder": str(root / "exports")}}
    graph = {"method": method, **({"concept_phrases": phrases} if phrases else {})}
    with FakeOpenAIServer(full_reports=full_reports) as server:
        started = time.perf_counter()
        result = workspace.materialize(
            corpus,
            chat=chat_resource(server.base_url, workspace.cache),
            embeddings=embedding_resource(server.base_url, workspace.cache),
            run_config={
                **quiet,
                "ops": {
                    "entity_graph": {"config": graph},
                    "graphml_export": export,
                    "parquet_export": export,
                },
            },
        )
        wall = time.perf_counter() - started
        served = [s for s in server.served if s.status == 200]
        queries = _queries(workspace, server, root, corpus)
    assert result.success, method
    chat = [s for s in served if s.endpoint == "chat"]
    embedded = [s for s in served if s.endpoint == "embeddings"]
    counts = {
        name: int(workspace.sql(f"SELECT count(*) AS n FROM {name}")["n"][0])
        for name in ("entities", "relationships", "communities", "community_reports", "covariates")
    }
    # What global search maps over: a model's reports run longer than the test server's rule-written ones.
    reports = workspace.sql("SELECT full_content FROM community_reports WHERE status = 'ok'")["full_content"]
    report_tokens = sum(count_tokens(text) for text in reports) / len(reports) if len(reports) else 0
    return {
        "report_tokens": report_tokens,
        "queries": queries,
        "chat_requests": len(chat),
        "chat_tokens": sum(s.prompt_tokens + s.completion_tokens for s in chat),
        "embedding_requests": len(embedded),
        "embedding_tokens": sum(s.prompt_tokens for s in embedded),
        "wall_s": wall,
        **counts,
    }


SYNTHETIC = "synthetic"
QUESTIONS = {
    "global": "What are the main themes of the story?",
    "local": "Who is Bob Cratchit and what happens to him?",
}
SYNTHETIC_QUESTIONS = {  # the local one names the synthetic corpus's most connected entity
    "global": "What are the main events across these chronicles?",
    "local": "Who is {name} and what did they do?",
}
QUERIES = {
    "global C1": ("global_search", {"community_level": 1}),
    "global C2": ("global_search", {"community_level": 2}),
    "drift": ("drift_search", {}),
    "lazy 100": ("lazy_search", {"relevance_budget": 100}),
    "lazy 500": ("lazy_search", {"relevance_budget": 500}),
    "lazy 1500": ("lazy_search", {"relevance_budget": 1500}),
    "basic": ("basic_search", {}),
}


def _questions(workspace, corpus: str) -> dict:
    if corpus != SYNTHETIC:
        return QUESTIONS
    name = workspace.sql("SELECT title FROM entities ORDER BY degree DESC, title LIMIT 1")["title"][0]
    return {kind: question.format(name=name.title()) for kind, question in SYNTHETIC_QUESTIONS.items()}


def _queries(workspace, server, root: Path, corpus: str) -> dict:
    """Chat requests and tokens of each query method on each question, each with a response cache of its own."""
    from graphrag_assets_tests.workspaces import chat_resource, embedding_resource

    figures = {}
    for name, (asset, config) in QUERIES.items():
        for kind, question in _questions(workspace, corpus).items():
            cache = root / f"cache-{name}-{kind}".replace(" ", "-")
            before = len(server.served)
            answered = workspace.ask(
                corpus,
                asset,
                {"question": question, **config},
                chat=chat_resource(server.base_url, cache),
                embeddings=embedding_resource(server.base_url, cache),
                raise_on_error=False,
            )
            chat = [s for s in server.served[before:] if s.endpoint == "chat" and s.kind != "probe"]
            if answered.success:
                figures[name, kind] = f"{len(chat)} / {sum(s.prompt_tokens + s.completion_tokens for s in chat):,}"
            else:  # a lazy index has no reports; a small concept graph, no deeper level
                failure = answered.get_step_failure_events()[0].step_failure_data.user_failure_data.description
                figures[name, kind] = "no such level" if "does not exist" in failure else "needs reports"
            figures[name, kind, "tokens"] = sum(s.prompt_tokens + s.completion_tokens for s in chat)
    return figures


def methods_benchmark(args) -> None:
    figures = {}
    with tempfile.TemporaryDirectory(prefix="graphrag-methods-") as work:
        for method in METHODS:
            (Path(work) / method).mkdir()
            figures[method] = _index(
                Path(work) / method, method, args.documents, args.concept_phrases, args.full_reports
            )
    base = figures["standard"]
    corpus = f"synthetic, {args.documents} documents" if args.documents else "the sample"
    reports = "as long as the prompt asks (--full-reports)" if args.full_reports else "one row per finding"
    concepts = args.concept_phrases or "the default"
    print(f"corpus: {corpus}; fast and lazy concepts: {concepts}; test-server reports: {reports}\n")
    header = (
        f"{'method':<10}{'chat req':>9}{'chat tokens':>12}{'x std':>7}{'embed req':>10}{'embed tokens':>13}"
        f"{'wall s':>8}{'entities':>9}{'relations':>10}{'communities':>12}{'reports':>8}{'report tok':>11}"
        f"{'claims':>7}"
    )
    print(header)
    print("-" * len(header))
    for method, f in figures.items():
        ratio = f["chat_tokens"] / base["chat_tokens"] if base["chat_tokens"] else 0
        print(
            f"{method:<10}{f['chat_requests']:>9}{f['chat_tokens']:>12,}{ratio:>7.3f}{f['embedding_requests']:>10}"
            f"{f['embedding_tokens']:>13,}{f['wall_s']:>8.1f}{f['entities']:>9}{f['relationships']:>10}"
            f"{f['communities']:>12}{f['community_reports']:>8}{f['report_tokens']:>11.0f}{f['covariates']:>7}"
        )
    print("\nqueries: chat requests / tokens per question (global, local), each with an empty cache")
    header = f"{'query':<12}" + "".join(f"{method + ' ' + kind:>24}" for method in figures for kind in QUESTIONS)
    print(header)
    print("-" * len(header))
    for name in QUERIES:
        cells = []
        for method in figures:
            for kind in QUESTIONS:
                cells.append(figures[method]["queries"][name, kind])
        print(f"{name:<12}" + "".join(f"{cell:>24}" for cell in cells))
    c2 = figures["standard"]["queries"]["global C2", "global", "tokens"]
    lazy = figures["standard"]["queries"]["lazy 100", "global", "tokens"]
    basic = figures["standard"]["queries"]["basic", "global", "tokens"]
    print(
        f"\nglobal question, standard index: lazy 100 spends {lazy / c2:.2f}x global C2's tokens "
        f"(target at most 0.10) and {lazy / basic:.2f}x basic search's"
    )
    print(
        "\nx std: chat tokens against the standard index's (targets: fast at most 0.15, lazy at most 0.01). Every "
        "run starts with an empty response cache; the test server's replies are written by rule, so answer "
        "quality needs a real model: run the evaluation group with one. report tok: a report's average length, "
        "what global search reads per community; the report prompt asks a model for 5 to 10 findings of a "
        "paragraph or more."
    )
