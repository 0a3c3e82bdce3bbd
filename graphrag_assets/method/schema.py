"""The index's output tables: columns in order, with their DuckDB types. Names and order follow the tables the
GraphRAG field writes, so other tools read them. The method builds its frames with these columns and the store
creates its tables from them: one declaration for both."""

from collections import namedtuple
from collections.abc import Iterable, Iterator

import numpy as np
import polars as pl
import pyarrow as pa

# A community's columns that its report repeats, as Microsoft GraphRAG's tables have them.
_COMMUNITY_KEYS = {
    "id": "VARCHAR",
    "human_readable_id": "INTEGER",
    "community": "INTEGER",
    "level": "INTEGER",
    "parent": "INTEGER",
    "children": "INTEGER[]",
    "title": "VARCHAR",
}
OUTPUT_TABLES: dict[str, dict[str, str]] = {
    "documents": {
        "id": "VARCHAR",
        "title": "VARCHAR",
        "text": "VARCHAR",
        "source_path": "VARCHAR",
        "metadata": "JSON",
        "text_unit_ids": "VARCHAR[]",
        "outline": "JSON",  # where its pages, slides, sheets and headings start: [[offset, kind, label], ...]
    },
    "base_text_units": {
        "id": "VARCHAR",
        "text": "VARCHAR",
        "n_tokens": "INTEGER",
        "document_id": "VARCHAR",
        "chunk_index": "INTEGER",
        "pages": "INTEGER[]",  # the PDF pages or PowerPoint slides it spans
        "location": "VARCHAR",  # what a person opens to find it: 'pages 3-4 · Policy › Clerks', 'sheet Wages'
    },
    "text_units": {
        "id": "VARCHAR",
        "text": "VARCHAR",
        "n_tokens": "INTEGER",
        "document_id": "VARCHAR",
        "chunk_index": "INTEGER",
        "pages": "INTEGER[]",
        "location": "VARCHAR",
        "entity_ids": "VARCHAR[]",
        "relationship_ids": "VARCHAR[]",
        "covariate_ids": "VARCHAR[]",
    },
    "entities": {
        "id": "VARCHAR",
        "human_readable_id": "INTEGER",
        "title": "VARCHAR",
        "type": "VARCHAR",
        "description": "VARCHAR",
        "text_unit_ids": "VARCHAR[]",
        "frequency": "INTEGER",
        "degree": "INTEGER",
    },
    "relationships": {
        "id": "VARCHAR",
        "human_readable_id": "INTEGER",
        "source": "VARCHAR",
        "target": "VARCHAR",
        "description": "VARCHAR",
        "weight": "DOUBLE",
        "combined_degree": "INTEGER",
        "text_unit_ids": "VARCHAR[]",
    },
    # Pairs resolved as one entity; the entities table keeps every row, the graph folds accepted variants in.
    "entity_aliases": {
        "id": "VARCHAR",  # <entity_id>-><canonical_id>
        "entity_id": "VARCHAR",
        "entity": "VARCHAR",
        "canonical_id": "VARCHAR",
        "canonical": "VARCHAR",
        "method": "VARCHAR",
        "score": "DOUBLE",
        "confirmed_by": "VARCHAR",  # model, rule, user, or unconfirmed (the model's reply never parsed)
        "accepted": "BOOLEAN",
    },
    "covariates": {
        "id": "VARCHAR",
        "human_readable_id": "INTEGER",
        "covariate_type": "VARCHAR",
        "type": "VARCHAR",
        "description": "VARCHAR",
        "subject_id": "VARCHAR",
        "object_id": "VARCHAR",
        "status": "VARCHAR",
        "start_date": "VARCHAR",
        "end_date": "VARCHAR",
        "source_text": "VARCHAR",
        "text_unit_id": "VARCHAR",
    },
    "communities": {
        **_COMMUNITY_KEYS,
        "entity_ids": "VARCHAR[]",
        "relationship_ids": "VARCHAR[]",
        "text_unit_ids": "VARCHAR[]",
        "size": "INTEGER",
        "carried_from": "INTEGER",
    },
    "community_reports": {
        **_COMMUNITY_KEYS,
        "summary": "VARCHAR",
        "full_content": "VARCHAR",
        "rank": "DOUBLE",
        "rating_explanation": "VARCHAR",
        "findings": "JSON",
        "full_content_json": "JSON",
        "size": "INTEGER",
        "status": "VARCHAR",
        "error": "VARCHAR",
        "context_tokens": "INTEGER",
        "substituted_communities": "INTEGER[]",
    },
    "text_embeddings": {"id": "VARCHAR", "kind": "VARCHAR", "embedding": "FLOAT[]"},
    # The offline embedding as plain numbers, never a pickle, so loading it cannot run code: one row for the model,
    # one per term of its vocabulary (a term's idf and its weight in each SVD dimension), so no value grows with the
    # vocabulary (one value of the whole model passed 256 MiB on a real corpus's half a million terms).
    "embedding_models": {"id": "VARCHAR", "dimensions": "INTEGER", "stop_words": "BOOLEAN", "terms": "INTEGER"},
    "embedding_model_terms": {"id": "VARCHAR", "position": "INTEGER", "idf": "DOUBLE", "components": "FLOAT[]"},
    "document_embeddings": {"id": "VARCHAR", "n_tokens": "INTEGER", "embedding": "FLOAT[]"},
    # One row per kind of record searched by keyword. The BM25 index itself is a file of its own, named by
    # `built_from` (store/keyword_index.py), in the store resource's vector_index_dir: no machine's path in the store.
    "keyword_index": {"id": "VARCHAR", "records": "INTEGER", "terms": "INTEGER", "built_from": "VARCHAR"},
    "graph_embeddings": {"id": "VARCHAR", "title": "VARCHAR", "embedding": "FLOAT[]"},
    "layouts": {
        "id": "VARCHAR",
        "kind": "VARCHAR",
        "title": "VARCHAR",
        "x": "DOUBLE",
        "y": "DOUBLE",
        "community": "INTEGER",
        "degree": "INTEGER",
    },
}


# The columns of text_units that link a unit to the graph: a step that reads only the text leaves them out.
UNIT_LINKS = ("entity_ids", "relationship_ids", "covariate_ids")


def columns(table: str) -> list[str]:
    """The columns of an output table, in order."""
    return list(OUTPUT_TABLES[table])


_POLARS_TYPES = {
    "VARCHAR": pl.String,
    "JSON": pl.String,  # kept as the text DuckDB stores
    "INTEGER": pl.Int32,
    "BIGINT": pl.Int64,
    "DOUBLE": pl.Float64,
    "FLOAT": pl.Float32,
    "BOOLEAN": pl.Boolean,
    "TIMESTAMP": pl.Datetime("us"),
}


def polars_type(sql_type: str) -> pl.DataType:
    """The polars type of a DuckDB column type of these tables ("FLOAT[][]" is a list of lists of Float32)."""
    if sql_type.endswith("[]"):
        return pl.List(polars_type(sql_type[:-2]))
    return _POLARS_TYPES[sql_type]


def frame(table: str, rows: Iterable[dict] = (), without: tuple[str, ...] = ()) -> pl.DataFrame:
    """Rows (dicts by column) as a frame of an output table's columns and types, in order, but those `without`;
    a column a row lacks is null. Declared types keep an empty table's columns typed, and a value of the wrong
    kind fails here rather than in the store."""
    return typed_frame({name: kind for name, kind in OUTPUT_TABLES[table].items() if name not in without}, rows)


def typed_frame(columns: dict[str, str], rows: Iterable[dict] = ()) -> pl.DataFrame:
    """Rows as a frame of these columns and DuckDB types (see frame).

    Through pyarrow, which converts Python lists of strings in a fraction of the memory polars' own constructor
    takes (1.2 GB against 0.2 GB for 200,000 rows of two short lists of strings)."""
    empty = pl.DataFrame(schema={name: polars_type(kind) for name, kind in columns.items()})
    rows = rows if isinstance(rows, list) else list(rows)
    if not rows:
        return empty
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=empty.to_arrow().schema))


def records(df: pl.DataFrame) -> Iterator[tuple]:
    """A frame's rows as named tuples (row.title, row.entity_ids), for the code that walks a table row by row."""
    row = namedtuple("Row", df.columns, rename=True)
    return map(row._make, df.iter_rows())


def vector_column(vectors) -> pl.Series:
    """Vectors (a 2-D array, or a list of lists with None for a missing one) as a FLOAT[] column: an array is handed
    over whole, never as a Python float per number."""
    if hasattr(vectors, "ndim"):
        return pl.Series("embedding", vectors).cast(pl.List(pl.Float32))
    return pl.Series("embedding", vectors, dtype=pl.List(pl.Float32))


def vector_matrix(vectors: pl.Series) -> np.ndarray:
    """A column of vectors of one length (FLOAT[] or DOUBLE[]) as one 2-D float32 array, the reverse of
    vector_column; no Python float per number on the way."""
    return vectors.list.to_array(vectors.list.len().max()).to_numpy().astype(np.float32, copy=False)


def seeded_sample(df: pl.DataFrame, count: int, seed: int) -> pl.DataFrame:
    """`count` rows drawn without replacement by numpy's seeded generator: the draw pandas' `sample` makes for a
    seed, so tuned prompts and generated evaluation questions stay those of versions that sampled with pandas."""
    return df[np.random.RandomState(seed).choice(len(df), size=count, replace=False)]
