"""A corpus's published index, as the query methods read it, and what its publication says about it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

import duckdb

from ..method.embeddings.text import EMBEDDING_MODEL_TABLES, LocalEmbedder
from ..method.graph.aliases import canonical_of, resolve
from ..method.schema import frame
from ..method.search.context import Index
from ..store import keyword_index as keywords
from ..store import vector_index
from ..store.keyword_index import KeywordIndex, keyword_texts
from ..store.tables import latest_versions, read_table, row_count, table_exists
from .options import METHODS

INDEX_TABLES = (
    "entities",
    "relationships",
    "covariates",
    "communities",
    "community_reports",
    "text_units",
    "documents",
    "text_embeddings",
)
# Claims are optional, a lazy index writes no reports, and a corpus whose names never meet twice in a passage has
# entities but no relationships: each such index still answers.
_OPTIONAL = ("covariates", "community_reports", "relationships")


class NotIndexed(LookupError):
    """The corpus has no complete index to answer from."""


def load_index(conn: duckdb.DuckDBPyConnection, corpus: str, vector_index_dir: str | None = None) -> Index:
    """The corpus's tables for the query methods; vectors that have an up-to-date HNSW index stay on disk."""
    missing = [t for t in INDEX_TABLES if t not in _OPTIONAL and not row_count(conn, t, corpus)]
    if missing:
        raise NotIndexed(
            f"corpus {corpus!r} is not indexed: no rows in {', '.join(missing)}. Run "
            f"`graphrag-assets index --corpus {corpus}` (the index_corpus job) first"
        )
    version = latest_versions(conn, corpus, ["text_embeddings"]).get("text_embeddings")
    approximate = vector_index.open_all(vector_index_dir, corpus, version) if vector_index_dir else {}
    links = read_table(conn, "entity_aliases", corpus) if row_count(conn, "entity_aliases", corpus) else None
    entities, relationships = read_table(conn, "entities", corpus), read_table(conn, "relationships", corpus)
    if links is not None:
        entities, relationships = resolve(entities, relationships, links)
    local_embedder = None
    if row_count(conn, "embedding_models", corpus):
        model, terms = EMBEDDING_MODEL_TABLES
        # An older store's model row has no terms table beside it; from_tables says to rebuild it.
        stored_terms = read_table(conn, terms, corpus) if table_exists(conn, terms) else frame(terms)
        local_embedder = LocalEmbedder.from_tables(read_table(conn, model, corpus), stored_terms)
    index = Index(
        entities=entities,
        relationships=relationships,
        covariates=read_table(conn, "covariates", corpus),
        communities=read_table(conn, "communities", corpus),
        reports=read_table(conn, "community_reports", corpus),
        text_units=read_table(conn, "text_units", corpus),
        documents=read_table(conn, "documents", corpus, without=("text",)),  # the text units hold it already
        embeddings=read_table(
            conn, "text_embeddings", corpus, where="NOT list_contains(?, kind)", params=[list(approximate)]
        ),
        local_embedder=local_embedder,
        aliases=canonical_of(links) if links is not None else {},
        approximate=approximate,
    )
    index.keywords = published_keywords(conn, corpus, vector_index_dir) or KeywordIndex(
        keyword_texts(index.entities, index.reports, index.text_units)
    )
    return index


def published_keywords(conn: duckdb.DuckDBPyConnection, corpus: str, folder: str | None) -> KeywordIndex | None:
    """The keyword_index asset's file for the corpus, if it was built from the published tables (an index whose
    text units were rematerialized by hand since, or whose file is gone, is indexed in memory instead)."""
    if not folder or not row_count(conn, "keyword_index", corpus):
        return None
    current = keywords.current_fingerprint(conn, corpus)
    built = set(read_table(conn, "keyword_index", corpus)["built_from"])
    if built != {current}:
        return None
    return KeywordIndex.open(keywords.index_path(folder, corpus, current), current)


@dataclass(frozen=True)
class Publication:
    """What a corpus's index is, in a few cheap figures: enough to list it, and to notice a newer one."""

    corpus: str
    version: str  # changes whenever anything of the corpus's index is written
    published_at: datetime
    index_method: str  # standard, fast, lazy or imported
    engine: str  # offline, or llm:<model>
    levels: list[int] = field(default_factory=list)
    has_reports: bool = True

    @property
    def methods(self) -> list[str]:
        """The methods that can answer from this index."""
        return [
            name
            for name in ("global", "local", "drift", "basic", "lazy", "text_summary")
            if self.has_reports or not METHODS[name].reads_reports
        ]

    def as_json(self) -> dict:
        return {
            "name": self.corpus,
            "methods": self.methods,
            "levels": self.levels,
            "published_at": self.published_at.isoformat() + "Z",
            "index_method": self.index_method,
            "engine": self.engine,
            "version": self.version,
        }


def versions(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Each corpus's index version, in one small query: what a server polls to notice a new publication.

    Publishing adds the run's lineage rows in the same transaction as its tables, so a version seen here is
    always that of a complete index."""
    if not table_exists(conn, "lineage"):
        return {}
    rows = conn.execute("SELECT corpus, max(materialized_at), count(*) FROM main.lineage GROUP BY corpus").fetchall()
    return {corpus: f"{latest.isoformat()}/{count}" for corpus, latest, count in rows}


def publication(conn: duckdb.DuckDBPyConnection, corpus: str, version: str) -> Publication | None:
    """The publication of a corpus's index, None when it holds no complete index."""
    if any(not row_count(conn, t, corpus) for t in INDEX_TABLES if t not in _OPTIONAL):
        return None
    latest, engine, settings = conn.execute(
        """SELECT max(materialized_at), arg_max(engine, materialized_at) FILTER (asset = 'entities'),
                  arg_max(settings, materialized_at) FILTER (asset = 'entities')
           FROM main.lineage WHERE corpus = ?""",
        [corpus],
    ).fetchone()
    method = json.loads(settings).get("method", "standard") if settings else "standard"
    if engine and engine.startswith("imported"):
        method = "imported"
    levels = [
        level
        for (level,) in conn.execute(
            "SELECT DISTINCT level FROM communities WHERE corpus = ? ORDER BY level", [corpus]
        ).fetchall()
    ]
    return Publication(
        corpus=corpus,
        version=version,
        published_at=latest,
        index_method=method,
        engine=engine or "unknown",
        levels=levels,
        has_reports=bool(row_count(conn, "community_reports", corpus)),
    )
