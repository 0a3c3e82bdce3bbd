"""Whether each method's context holds the passage that answers (see benchmark.py for how to run it).

retrieval: the sample corpus, then the tutorial and how-to guides of Python's documentation (Debian's
  python3.11-doc, where installed), each indexed offline, then every question of its answer-key set
  (scripts/answer_keys/*.json: a question, the words that answer it, and its kind: a fact, a name said once, a
  number, or two passages) asked of basic, local, DRIFT and lazy search, each with keyword_weight 0 (vectors alone,
  the methods before hybrid retrieval: the baseline) and with the default weight, next to two retrievers alone:
  BM25's top 10 text units and the vectors' top 10. For each: how often the answer passage is in the context (a
  text unit holding every answer word; for a two-passage question, each word in some unit), how often the
  offline answer then quotes the answer words (of the questions whose answer passage it had), the median context
  tokens and the mean time per question.
"""

import json
import re
import statistics
import tempfile
import time
from pathlib import Path

KEYS = Path(__file__).with_name("answer_keys")
METHODS = ("basic", "local", "drift", "lazy")


def _plain(text: str) -> str:
    """Lower case, one space between words (a key phrase may cross a line break), and Markdown's marks gone: a web
    page is indexed as Markdown, its "break statement" as "[`break`](../reference/...) statement"."""
    text = _LINK.sub(r"\1", text).replace("`", "")
    return " ".join(text.lower().split())


_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def _found(keys: list[str], kind: str, texts: list[str]) -> bool:
    keys, lowered = [_plain(k) for k in keys], [_plain(t) for t in texts]
    if kind == "two-passage":
        return all(any(k.lower() in t for t in lowered) for k in keys)
    return any(all(k.lower() in t for k in keys) for t in lowered)


def _embedded(questions: list[dict], index, embeddings) -> list:
    """Each question's vector: by the endpoint's model (`embeddings`, its settings) or offline."""
    from graphrag_assets.method.search.context import embed_query
    from graphrag_assets.models import ModelClient
    from graphrag_assets.models.interrupts import run_interruptibly

    async def embed_all():
        client = ModelClient(embeddings) if embeddings else None
        try:
            return [await embed_query(client, index, q["question"]) for q in questions]
        finally:
            if client is not None:
                await client.close()

    return run_interruptibly(embed_all())


def _retriever_rows(index, questions: list[dict], embeddings=None) -> list[tuple]:
    """BM25 alone and vectors alone, top 10 text units each."""
    vectors = _embedded(questions, index, embeddings)
    rows = []
    for name in ("BM25 top 10", "vectors top 10"):
        hits, tokens, seconds = 0, [], 0.0
        for q, query in zip(questions, vectors):
            started = time.perf_counter()
            if name.startswith("BM25"):
                ids = [i for i, _ in index.keyword_search("text_unit", q["question"], 10)]
            else:
                ids = [i for i, _ in index.nearest("text_unit", query, 10)]
            seconds += time.perf_counter() - started
            texts = list(index.texts(ids).values())
            hits += _found(q["answer"], q["kind"], texts)
            tokens.append(sum(len(t.split()) * 4 // 3 for t in texts))  # about 4/3 tokens a word
        rows.append((name, hits, None, statistics.median(tokens), seconds / len(questions)))
    return rows


def _method_rows(index, questions: list[dict], corpus: str, embeddings=None) -> list[tuple]:
    from graphrag_assets.answers.asking import answer, options_for
    from graphrag_assets.method import defaults

    rows = []
    for method in METHODS:
        for weight in (0.0, defaults.KEYWORD_WEIGHT):
            hits, quoted, tokens, seconds = 0, 0, [], 0.0
            for q in questions:
                options = options_for(method, q["question"], keyword_weight=weight)
                found = answer(corpus, index, method, options, None, embeddings)
                seconds += found.seconds
                # What the context held: a unit whole, or the passage of it that was packed
                context = found.result.context
                texts = list((index.texts(context.get("text_units", [])) | context.get("passages", {})).values())
                hit = _found(q["answer"], q["kind"], texts)
                hits += hit
                quoted += hit and _found(q["answer"], q["kind"], [found.result.answer])  # quoted from the context
                tokens.append(found.result.context_tokens)
            label = f"{method}, keyword_weight {weight:g}"
            rows.append((label, hits, quoted, statistics.median(tokens), seconds / len(questions)))
    return rows


PYTHON_DOC = Path("/usr/share/doc/python3.11/html")  # Debian's python3.11-doc (bin/test installs it)


def _indexed(root: Path, corpus: str, endpoint: bool = False):
    """The corpus indexed in a new workspace, and its loaded index (its keyword index from the asset's file).
    Offline, or with `endpoint` the embeddings of the endpoint the environment configures (GRAPHRAG_API_BASE,
    GRAPHRAG_API_KEY, GRAPHRAG_EMBEDDING_MODEL); the answers stay extractive either way."""
    import os
    import shutil

    from graphrag_assets.answers.published import load_index
    from graphrag_assets.resources import EmbeddingModelResource
    from graphrag_assets.settings import API_KEY_VARIABLE, endpoint_settings
    from graphrag_assets.store.connection import connect
    from graphrag_assets_tests.workspaces import SAMPLE_CORPUS, Workspace

    workspace = Workspace(root)
    if corpus == SAMPLE_CORPUS:
        workspace.add_sample_corpus()
    else:  # the tutorial and the how-to guides: 37 pages of technical prose
        for part in ("tutorial", "howto"):
            shutil.copytree(PYTHON_DOC / part, workspace.data / corpus / part)
    embeddings = None
    if endpoint:
        fields = {**endpoint_settings("embeddings", os.getenv(API_KEY_VARIABLE)), "cache_dir": str(root / "cache")}
        embeddings = EmbeddingModelResource(**fields)
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    workspace.materialize(corpus, embeddings=embeddings, run_config=quiet)
    with connect(str(workspace.database), read_only=True) as conn:
        return load_index(conn, corpus, str(root / "vector-index")), embeddings and embeddings.settings()


def retrieval_benchmark(args) -> None:
    from graphrag_assets_tests.workspaces import SAMPLE_CORPUS

    corpora = [SAMPLE_CORPUS] + (["python-doc"] if (PYTHON_DOC / "tutorial").exists() else [])
    if len(corpora) == 1:
        print("python-doc skipped: Debian's python3.11-doc is not installed (apt-get install python3.11-doc)\n")
    for corpus in corpora:
        questions = json.loads((KEYS / f"{corpus}.json").read_text())
        with tempfile.TemporaryDirectory() as folder:
            index, embeddings = _indexed(Path(folder), corpus, args.endpoint)
            every = _plain(" ".join(index.texts().values()))
            unkeyed = [q["question"] for q in questions if any(_plain(k) not in every for k in q["answer"])]
            questions = [q for q in questions if q["question"] not in unkeyed]
            rows = _retriever_rows(index, questions, embeddings) + _method_rows(index, questions, corpus, embeddings)
            index.close()
        _print(corpus, questions, rows, unkeyed, "with the endpoint's embeddings" if args.endpoint else "offline")
    print(
        "keyword_weight 0 is each method as it was before hybrid retrieval (vectors alone). Context tokens of the "
        "two retrievers are estimated from words (4/3 a word); offline, lazy search's context is its claims, none."
    )


def _print(corpus: str, questions: list[dict], rows: list[tuple], unkeyed: list[str], how: str) -> None:
    kinds = sorted({q["kind"] for q in questions})
    print(f"{corpus} indexed {how}; {len(questions)} questions with answer keys ({', '.join(kinds)})")
    for question in unkeyed:
        print(f"  left out, its answer words are in no text unit as indexed: {question}")
    header = f"{'retriever or method':<34}{'answer passage in context':>27}{'quoted, of those':>18}"
    header += f"{'context tokens (median)':>25}{'ms a question':>15}"
    print(header)
    print("-" * len(header))
    for label, hits, quoted, tokens, seconds in rows:
        quotes = "" if quoted is None else f"{quoted} ({quoted / max(hits, 1):.0%})"
        print(f"{label:<34}{f'{hits} of {len(questions)}':>27}{quotes:>18}{tokens:>25,.0f}{seconds * 1000:>15.0f}")
    print()
