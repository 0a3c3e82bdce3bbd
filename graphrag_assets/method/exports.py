"""Exports other tools read: GraphML for Gephi and networkx, and parquet in Microsoft GraphRAG 3.x's output schema."""

from __future__ import annotations

import json
import os
import re
from datetime import date
from pathlib import Path

import networkx as nx
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from .schema import records, vector_matrix

# A report's findings as GraphRAG stores them (DuckDB holds them as JSON text).
FINDINGS = pl.List(pl.Struct({"explanation": pl.String, "summary": pl.String}))
_ARROW_TYPES = {
    "str": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "ids": pa.list_(pa.string()),
    "ints": pa.list_(pa.int64()),
    "findings": pa.list_(pa.struct([("explanation", pa.string()), ("summary", pa.string())])),
}


def _schema(columns: str) -> pa.Schema:
    """An Arrow schema from words 'name:type' (types of _ARROW_TYPES)."""
    return pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in (word.split(":") for word in columns.split())])


_KEYS = "id:str human_readable_id:int"
_COMMUNITY = "community:int level:int parent:int children:ints title:str"
# Microsoft GraphRAG 3.x's output tables: its column names, order and types (graphrag/data_model/schemas.py).
# Columns of ours that it does not know follow these.
GRAPHRAG_SCHEMAS: dict[str, pa.Schema] = {
    "documents": _schema(f"{_KEYS} title:str text:str text_unit_ids:ids creation_date:str raw_data:str"),
    "text_units": _schema(
        f"{_KEYS} text:str n_tokens:int document_id:str entity_ids:ids relationship_ids:ids covariate_ids:ids"
    ),
    "entities": _schema(f"{_KEYS} title:str type:str description:str text_unit_ids:ids frequency:int degree:int"),
    "relationships": _schema(
        f"{_KEYS} source:str target:str description:str weight:float combined_degree:int text_unit_ids:ids"
    ),
    "covariates": _schema(
        f"{_KEYS} covariate_type:str type:str description:str subject_id:str object_id:str status:str "
        "start_date:str end_date:str source_text:str text_unit_id:str"
    ),
    "communities": _schema(
        f"{_KEYS} {_COMMUNITY} entity_ids:ids relationship_ids:ids text_unit_ids:ids period:str size:int"
    ),
    "community_reports": _schema(
        f"{_KEYS} {_COMMUNITY} summary:str full_content:str rank:float rating_explanation:str findings:findings "
        "full_content_json:str period:str size:int"
    ),
}


# What XML 1.0 cannot hold: C0 controls but tab, newline and carriage return; surrogates; U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


class XmlText:
    """Text made fit for XML, each character it cannot hold replaced by U+FFFD; counts what it replaced."""

    def __init__(self):
        self.replaced = 0

    def __call__(self, text: str | None) -> str:
        if not text:
            return ""
        clean, count = _NOT_XML.subn("\ufffd", text)
        self.replaced += count
        return clean


def graphml(
    entities: pl.DataFrame, relationships: pl.DataFrame, communities: pl.DataFrame, nodes: pl.DataFrame, path: Path
) -> tuple[nx.Graph, int]:
    """Write the entity graph with type, description, degree, community per level and x, y; returns it and how many
    characters XML cannot hold were replaced by U+FFFD in the file (the store keeps the text as it was)."""
    graph, xml = nx.Graph(), XmlText()
    placed = nodes.filter(pl.col("kind") == "entity")
    position = {entity: (float(x), float(y)) for entity, x, y in placed.select("id", "x", "y").iter_rows()}
    levels: dict[str, dict[str, int]] = {}
    for row in records(communities):
        for entity in row.entity_ids:
            levels.setdefault(entity, {})[f"community_level_{row.level}"] = int(row.community)
    for row in records(entities):
        attributes = {
            "id": row.id,
            "type": xml(row.type),
            "description": xml(row.description),
            "degree": int(row.degree),
            "frequency": int(row.frequency),
            "community": levels.get(row.id, {}).get("community_level_0", -1),
            **levels.get(row.id, {}),
        }
        if row.id in position:
            attributes["x"], attributes["y"] = position[row.id]
        graph.add_node(xml(row.title), **attributes)
    for row in records(relationships):
        graph.add_edge(
            xml(row.source), xml(row.target), id=row.id, weight=float(row.weight), description=xml(row.description)
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    nx.write_graphml(graph, path)
    return graph, xml.replaced


def graphrag_tables(tables: dict[str, pl.DataFrame], period: str | None = None) -> dict[str, pl.DataFrame]:
    """Our index tables as Microsoft GraphRAG 3.x lays out its outputs.

    Its hierarchy stops where Leiden stops splitting, so the carried-down copies of ours are left out
    (a query at a deeper level reads the deepest community at or above it). Reports that failed are
    left out too: it has no status column. `period`, the date the communities stand for, defaults to today.
    """
    out = dict(tables)
    period = period or date.today().isoformat()
    numbered = pl.int_range(pl.len(), dtype=pl.Int64).alias("human_readable_id")
    if "documents" in out:
        docs = out["documents"].sort("title", maintain_order=True)
        created = [str(json.loads(m or "{}").get("creation_date", "")) for m in docs["metadata"]]
        out["documents"] = docs.with_columns(
            numbered, creation_date=pl.Series(created, dtype=pl.String), raw_data=pl.lit(None, dtype=pl.String)
        )
    if "text_units" in out:
        out["text_units"] = (
            out["text_units"].sort(["document_id", "chunk_index"], maintain_order=True).with_columns(numbered)
        )
    if "communities" in out:
        made = out["communities"].filter(pl.col("carried_from") < 0)
        kept = made["community"].implode()
        only_kept = pl.col("children").list.eval(pl.element().filter(pl.element().is_in(kept)))
        out["communities"] = made.with_columns(only_kept, period=pl.lit(period))
        if "community_reports" in out:
            reports = out["community_reports"].filter((pl.col("status") == "ok") & pl.col("community").is_in(kept))
            out["community_reports"] = reports.with_columns(only_kept, period=pl.lit(period))
    return out


def to_arrow(name: str, df: pl.DataFrame) -> pa.Table:
    """GraphRAG's columns first, in its order and types; then our own columns (text as plain strings)."""
    table = df.to_arrow(compat_level=pl.CompatLevel.oldest())
    theirs = GRAPHRAG_SCHEMAS.get(name, pa.schema([]))
    ours = [pa.field(c, _plain(table.schema.field(c).type)) for c in table.column_names if c not in theirs.names]
    schema = pa.schema([*theirs, *(field for field in ours if field.name != "corpus")])
    return table.select(schema.names).cast(schema)


def _plain(kind: pa.DataType) -> pa.DataType:
    """The type pandas and most readers expect: string rather than large_string, list rather than large_list; text
    for a column with no values at all."""
    if kind == pa.null() or pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_list(kind) or pa.types.is_list(kind):
        return pa.list_(_plain(kind.value_type))
    return kind


def parquet(tables: dict[str, pl.DataFrame], folder: Path) -> dict[str, Path]:
    """One parquet file per table, named and typed as Microsoft GraphRAG writes its outputs."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, df in graphrag_tables(tables).items():
        path = folder / f"{name}.parquet"
        pq.write_table(to_arrow(name, df), path)
        written[name] = path
    return written


# Where Microsoft GraphRAG's query engine looks for each kind of our text embeddings.
LANCEDB_TABLES = {
    "entity": "entity_description",
    "text_unit": "text_unit_text",
    "community_report": "community_full_content",
}


def lancedb_tables(text_embeddings: pl.DataFrame, folder: Path) -> dict[str, int] | None:
    """The text embeddings as the LanceDB tables Microsoft GraphRAG's local, DRIFT and basic search read (id,
    vector, create_date, update_date); {table: rows}, or None without the `lancedb` extra installed."""
    # lance's Rust core warns on stderr about every new table; lancedb's logger reads LANCEDB_LOG, lance's LANCE_LOG
    for variable in ("LANCEDB_LOG", "LANCE_LOG"):
        os.environ.setdefault(variable, "error")
    try:
        import lancedb
    except ImportError:
        return None
    database = lancedb.connect(str(folder))
    written = {}
    for kind, name in LANCEDB_TABLES.items():
        rows = text_embeddings.filter(pl.col("kind") == kind)
        if rows.is_empty():
            continue
        vectors = vector_matrix(rows["embedding"])
        empty_dates = pa.array([None] * len(rows), pa.string())
        table = pa.table(
            {
                "id": pa.array(rows["id"].to_list(), pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1]),
                "create_date": empty_dates,
                "update_date": empty_dates,
            }
        )
        database.create_table(name, data=table, mode="overwrite")
        written[name] = len(rows)
    return written


# An index run writes its exports beside the published ones, and its publication moves them into place: until then
# the files under <folder>/<corpus> stay those of the last complete index, whatever becomes of the run.
_STAGED = ".staged"


def export_folder(folder: str | Path, corpus: str, stage: str | None) -> Path:
    """Where a run writes a corpus's exports: staged when the run will publish its index, else in place."""
    return Path(folder) / _STAGED / stage / corpus if stage else Path(folder) / corpus


def publish_exports(folder: str | Path, corpus: str, stage: str) -> list[str]:
    """Move a run's staged exports into place; returns what was published. A file is replaced by one rename; a
    folder (the parquet tables) is kept under a name of its run and reached through a link, which one rename
    points at the new folder: a reader sees the old export or the new one, never a mix."""
    staged, final = Path(folder) / _STAGED / stage / corpus, Path(folder) / corpus
    if not staged.is_dir():
        return []
    final.mkdir(parents=True, exist_ok=True)
    published = []
    for entry in sorted(staged.iterdir()):
        target = final / entry.name
        if entry.is_dir():
            versioned = final / f".{entry.name}.{stage}"
            entry.rename(versioned)
            if target.is_dir() and not target.is_symlink():  # an export from before links were used
                target.rename(final / f".{entry.name}.previous")
            link = final / f".{entry.name}.link"
            link.unlink(missing_ok=True)
            link.symlink_to(versioned.name)
            os.replace(link, target)
            for old in final.glob(f".{entry.name}.*"):
                if old.name not in (versioned.name, link.name):
                    _remove(old)
        else:
            os.replace(entry, target)
        published.append(entry.name)
    discard_staged_exports(folder, [stage])
    return published


def discard_staged_exports(folder: str | Path, stages: list[str]) -> None:
    """Forget the staged exports of runs (ended without publishing, or published)."""
    for stage in stages:
        _remove(Path(folder) / _STAGED / stage)


def _remove(path: Path) -> None:
    import shutil

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
