"""Embeddings of text, documents and the graph, and their 2-D layouts."""

from collections import Counter

import dagster as dg
import polars as pl
import pyarrow as pa

from ..configs.index import LayoutConfig, Node2VecConfig, TextEmbeddingConfig
from ..method.embeddings.layouts import layout_nodes, plot_layout
from ..method.embeddings.node2vec import entity_adjacency, node2vec
from ..method.embeddings.text import (
    EMBEDDING_MODEL_TABLES,
    LocalEmbedder,
    embed_with_model,
    embedding_inputs,
)
from ..method.embeddings.text import document_embeddings as mean_document_embeddings
from ..method.graph.aliases import resolve
from ..method.schema import UNIT_LINKS, frame, vector_column
from ..resources import DuckDBStoreResource, EmbeddingModelResource
from ..store import keyword_index as keywords
from ..store import vector_index
from ..store.tables import row_count, write_table
from .common import corpus_asset
from .communities import RESOLVING_LEAVES_OUT
from .metadata import png
from .publishing import Step, lineage_for


def vectors_check(
    name: str, asset: str, df: pl.DataFrame, dimensions: int | None, expected_ids: set[str] | None = None
) -> dg.AssetCheckResult:
    """Every vector has the configured dimension and no NaN; every expected row is there."""
    lengths = df["embedding"].list.len()
    nan_rows = df["embedding"].list.eval(pl.element().is_nan()).list.any().sum()
    wrong = (lengths != (dimensions or lengths.max())).sum()
    missing = len(expected_ids - set(df["id"])) if expected_ids is not None else 0
    return dg.AssetCheckResult(
        check_name=name,
        asset_key=asset,
        passed=not (nan_rows or wrong or missing),
        metadata={
            "dimensions": lengths.max() or 0,
            "wrong_dimension": wrong,
            "rows_with_nan": nan_rows,
            "missing_rows": missing,
        },
    )


def with_vector_search(result: dg.MaterializeResult, step: Step, folder: str, threshold: int) -> dg.MaterializeResult:
    """Give each kind of vector with more rows than the threshold an up-to-date HNSW index; say how each is searched.

    An index already built from this data version is kept, so a reused step builds nothing.
    """
    version, corpus = result.data_version.value, step.corpus
    search = {}
    with step.duckdb.get_connection() as conn:
        for kind, count in conn.execute(
            "SELECT kind, count(*) FROM text_embeddings WHERE corpus = ? GROUP BY kind ORDER BY kind", [corpus]
        ).fetchall():
            if count <= threshold:
                search[kind] = f"exact scan of {count} vectors"
                continue
            path = vector_index.index_path(folder, corpus, kind)
            existing = vector_index.NearestIndex.open(path, version)
            if existing is None:
                vector_index.build(path, stored_vectors(conn, corpus, kind), version)
            else:
                existing.close()
            search[kind] = f"HNSW index of {count} vectors ({path})"
    return result._replace(metadata={**result.metadata, "vector_search": dg.MetadataValue.json(search)})


def stored_vectors(conn, corpus: str, kind: str, batch_rows: int = 50_000):
    """One kind's ids and vectors in batches of (ids, matrix), through Arrow: no Python list per vector."""
    reader = conn.execute(
        "SELECT id, embedding FROM text_embeddings WHERE corpus = ? AND kind = ? ORDER BY id", [corpus, kind]
    ).fetch_record_batch(batch_rows)
    for batch in reader:
        yield vector_index.ids_and_matrix(pa.Table.from_batches([batch]))


# Columns text_embeddings never reads: at 200 MB of text, the links and the reports' JSON are as large as the texts.
EMBEDDING_LEAVES_OUT = {
    "entities": ("text_unit_ids",),
    "text_units": (*UNIT_LINKS, "pages", "location"),
    "community_reports": ("children", "summary", "rating_explanation", "findings", "full_content_json", "error"),
}


@corpus_asset(
    "embeddings",
    deps=["entities", "text_units", "community_reports"],
    model=True,
    revision="e2",  # e2: a corpus past FIT_CHARACTERS is fitted offline in single precision
    check_specs=[dg.AssetCheckSpec("text_embeddings_complete", asset="text_embeddings")],
)
def text_embeddings(
    context: dg.AssetExecutionContext,
    config: TextEmbeddingConfig,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
):
    """Entity descriptions, text units and community reports as vectors (kind tells which)."""
    step, index_dir, threshold = Step(context, duckdb), duckdb.vector_index_dir, config.approximate_search_above
    engine = embeddings.engine if embeddings.configured else "offline:tfidf-svd"
    reused = step.reuse_previous("text_embeddings", engine, config)
    if reused:
        yield with_vector_search(reused, step, index_dir, threshold)
        yield vectors_check("text_embeddings_complete", "text_embeddings", step.read("text_embeddings"), None)
        return
    tables = step.inputs("text_embeddings", without=EMBEDDING_LEAVES_OUT)
    inputs = embedding_inputs(tables.pop("entities"), tables.pop("text_units"), tables.pop("community_reports"))
    vectors, failed, usage, local_model = embedded(context, step, config, embeddings, inputs["text"])
    # The texts and the array are let go before the table is written: held with it, they were the step's peak
    # (1.7 GiB at 200 MB of text).
    ids = inputs.select("id", "kind")
    del inputs
    # Stored once the vectors are made, just before them: stored before embedding, a run stopped while embedding
    # would leave a new model beside the old vectors, and questions embedded in a space the vectors are not in.
    keep_embedding_model(step, local_model, engine)
    dimensions, local_model = (local_model.dimensions if local_model else None), None
    table = ids.with_columns(vector_column(vectors)).filter(pl.col("embedding").is_not_null())
    del vectors
    published = step.publish(
        "text_embeddings",
        table,
        engine=engine,
        paid=(embeddings, usage),
        settings=config,
        metadata=embedding_metadata(
            table, failed, dimensions, None if embeddings.configured else config.offline_dimensions
        ),
    )
    yield with_vector_search(published, step, index_dir, threshold)
    yield vectors_check("text_embeddings_complete", "text_embeddings", table, dimensions, set(ids["id"]))


# The keyword index searches reports by title and summary: their bodies are most of the table (400 MiB at 200 MB of
# text, read whole).
REPORT_BODIES = ("full_content", "full_content_json", "findings", "rating_explanation")


@corpus_asset("embeddings", deps=list(keywords.SOURCES))
def keyword_index(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """BM25 over text units, entities and community reports, for the methods' hybrid retrieval: a file beside the
    HNSW indexes, named by the data it was built from (the table's `built_from`)."""
    step, folder = Step(context, duckdb), duckdb.vector_index_dir
    with duckdb.get_connection() as conn:
        built_from = keywords.current_fingerprint(conn, step.corpus)
    path = keywords.index_path(folder, step.corpus, built_from)
    index = keywords.KeywordIndex.open(path, built_from)
    if index is None:  # an unchanged corpus keeps its file

        def texts() -> dict[str, pl.DataFrame]:
            entities = step.read("entities", without=("text_unit_ids",))
            aliases = step.read("entity_aliases", without=RESOLVING_LEAVES_OUT["entity_aliases"])
            entities, _ = resolve(entities, frame("relationships"), aliases)
            return keywords.keyword_texts(entities, step.read("community_reports", without=REPORT_BODIES))

        with duckdb.get_connection() as conn:
            keywords.build(path, texts, built_from, conn, step.corpus)
        index = keywords.KeywordIndex.open(path, built_from)
    sizes = index.sizes()
    index.close()
    rows = [{"id": kind, **size, "built_from": built_from} for kind, size in sizes.items()]
    metadata = {"file": dg.MetadataValue.path(str(path))} | {f"{k}_terms": size["terms"] for k, size in sizes.items()}
    result = step.publish("keyword_index", frame("keyword_index", rows), engine="duckdb-fts", metadata=metadata)
    # Older files go once nothing published names them; in a staged run, published_index removes the last one.
    with duckdb.get_connection() as conn:
        removed = keywords.prune(folder, step.corpus, keywords.published(conn, step.corpus) | {built_from})
    return result._replace(metadata={**result.metadata, "older_files_removed": len(removed)})


def embedded(
    context: dg.AssetExecutionContext,
    step: Step,
    config: TextEmbeddingConfig,
    embeddings: EmbeddingModelResource,
    texts: pl.Series,
) -> tuple:
    """(vectors, failed, usage, the offline model or None) of the texts, by the embedding model or offline."""
    if embeddings.configured:
        sent = texts.to_list()  # a Python string each only when sent
        (vectors, failed), usage = step.run_model(
            embeddings, lambda client: embed_with_model(client, sent, embeddings.batch_size, embeddings.batch_tokens)
        )
        step.fail_if_too_many_failed(
            "texts to embed", failed, len(texts), (embeddings, usage), config.max_failed_fraction
        )
        return vectors, failed, usage, None
    local_model = offline_embedder(context, texts, config)
    return local_model.embed(texts), 0, None, local_model


def offline_embedder(context: dg.AssetExecutionContext, texts: pl.Series, config: TextEmbeddingConfig) -> LocalEmbedder:
    """The offline engine's TF-IDF + SVD model fitted to the corpus (fewer dimensions than asked when it is small)."""
    model = LocalEmbedder.fit(texts, config.offline_dimensions, config.seed, config.offline_max_terms)
    if model.dimensions != config.offline_dimensions:
        context.log.info(
            f"offline embedding has {model.dimensions} dimensions, not {config.offline_dimensions}: "
            f"the corpus has {len(texts)} texts and {len(model.vocabulary)} distinct terms"
        )
    return model


def keep_embedding_model(step: Step, local_model: LocalEmbedder | None, engine: str) -> None:
    """The fitted offline model is kept so that questions can be embedded in the same space; with an embedding model
    there is none, and an older offline one must not outlive its vectors."""
    tables = local_model.to_tables() if local_model is not None else (frame(name) for name in EMBEDDING_MODEL_TABLES)
    with step.duckdb.get_connection() as conn:
        for name, rows in zip(EMBEDDING_MODEL_TABLES, tables):
            write_table(conn, name, step.corpus, rows, lineage_for(step.context, conn, name, engine, upstream=[]))


def embedding_metadata(table: pl.DataFrame, failed: int, dimensions: int | None, asked: int | None) -> dict:
    """`asked`: the offline engine's configured dimensions (None with an embedding model)."""
    reduced = asked is not None and dimensions != asked
    return {
        "failed_texts": failed,
        "dimensions": dimensions or 0,
        "offline_dimensions_note": f"reduced from {asked}: the corpus is small" if reduced else "none",
        "vectors_by_kind": dg.MetadataValue.json(dict(Counter(table["kind"]).most_common())),
    }


@corpus_asset(
    "embeddings",
    deps=["text_embeddings", "base_text_units"],
    check_specs=[dg.AssetCheckSpec("document_embeddings_valid", asset="document_embeddings")],
)
def document_embeddings(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource):
    """Each document as the token-weighted mean of its text units' embeddings."""
    step = Step(context, duckdb)
    units, vectors = step.read("base_text_units"), step.read("text_embeddings", "kind = 'text_unit'")
    table = mean_document_embeddings(units, vectors)
    yield step.publish("document_embeddings", table, engine="weighted-mean")
    yield vectors_check("document_embeddings_valid", "document_embeddings", table, None, set(units["document_id"]))


# node2vec walks the graph's names and weights: a large corpus's descriptions and text units are not read.
NOT_WALKED = ("description", "text_unit_ids")


@corpus_asset(
    "embeddings",
    deps=["entities", "relationships"],
    kinds={"duckdb", "gensim"},
    check_specs=[dg.AssetCheckSpec("graph_embeddings_valid", asset="graph_embeddings")],
)
def graph_embeddings(context: dg.AssetExecutionContext, config: Node2VecConfig, duckdb: DuckDBStoreResource):
    """node2vec vectors of the entities that have relationships."""
    step = Step(context, duckdb)
    reused = step.reuse_previous("graph_embeddings", "node2vec", config)
    if reused:
        yield reused
        table = step.read("graph_embeddings")
        yield vectors_check("graph_embeddings_valid", "graph_embeddings", table, config.dimensions)
        return
    entities = step.read("entities", without=NOT_WALKED)
    titles, ids, adjacency = entity_adjacency(entities, step.read("relationships", without=NOT_WALKED))
    table = node2vec(
        titles,
        ids,
        adjacency,
        config.dimensions,
        config.num_walks,
        config.walk_length,
        config.window_size,
        config.iterations,
        config.seed,
    )
    yield step.publish(
        "graph_embeddings",
        table,
        engine="node2vec",
        settings=config,
        metadata={"isolated_entities_skipped": entities["title"].n_unique() - len(table)},
    )
    yield vectors_check("graph_embeddings_valid", "graph_embeddings", table, config.dimensions)


@corpus_asset(
    "embeddings",
    deps=["graph_embeddings", "document_embeddings", "communities", "entities", "documents"],
    kinds={"duckdb", "umap"},
    check_specs=[dg.AssetCheckSpec("one_row_per_node", asset="layouts")],
)
def layouts(context: dg.AssetExecutionContext, config: LayoutConfig, duckdb: DuckDBStoreResource):
    """UMAP 2-D positions of entities (node2vec) and documents (embeddings), one nodes table."""
    step, corpus = Step(context, duckdb), context.partition_key
    reused = step.reuse_previous("layouts", "umap", config)
    if reused:
        yield reused
        with duckdb.get_connection() as conn:
            expected = row_count(conn, "graph_embeddings", corpus) + row_count(conn, "document_embeddings", corpus)
        yield nodes_check(step.read("layouts"), expected)
        return
    inputs = step.inputs("layouts", without=LAYOUTS_LEAVE_OUT)
    level_0 = inputs["communities"].filter(pl.col("level") == 0)
    top_community = {e: c for c, ids in zip(level_0["community"], level_0["entity_ids"]) for e in ids}
    nodes = layout_nodes(
        inputs["graph_embeddings"],
        inputs["entities"],
        top_community,
        inputs["document_embeddings"],
        inputs["documents"],
        n_neighbors=config.n_neighbors,
        min_dist=config.min_dist,
        seed=config.seed,
    )
    yield step.publish(
        "layouts",
        nodes,
        engine="umap",
        settings=config,
        metadata={
            "entity_layout": png(plot_layout(nodes, "entity", f"{corpus}: entities (node2vec + UMAP)"), "entities"),
            "document_layout": png(
                plot_layout(nodes, "document", f"{corpus}: documents (embeddings + UMAP)"), "documents"
            ),
        },
    )
    yield nodes_check(nodes, len(inputs["graph_embeddings"]) + len(inputs["document_embeddings"]))


# What a layout does not read: the documents' text, the graph's descriptions and text units, the communities' lists
# but their entities. Read whole, they were most of the step's memory on a large corpus.
LAYOUTS_LEAVE_OUT = {
    "documents": ("text", "metadata", "outline"),
    "entities": ("description", "text_unit_ids"),
    "communities": ("relationship_ids", "text_unit_ids"),
}


def nodes_check(nodes: pl.DataFrame, expected: int) -> dg.AssetCheckResult:
    duplicated = len(nodes) - nodes.select("kind", "id").n_unique()
    return dg.AssetCheckResult(
        check_name="one_row_per_node",
        passed=len(nodes) == expected and not duplicated,
        metadata={"rows": len(nodes), "expected": expected, "duplicated": duplicated},
    )
