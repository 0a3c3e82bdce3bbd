"""Files other tools read: GraphML (Gephi, networkx) and parquet that Microsoft GraphRAG 3.x's query engine loads."""

import dagster as dg
import polars as pl

from ..configs.index import ExportConfig
from ..method import exports
from ..resources import DuckDBStoreResource
from .common import corpus_asset
from .publishing import Step

PARQUET_TABLES = (
    "documents",
    "text_units",
    "entities",
    "relationships",
    "covariates",
    "communities",
    "community_reports",
)


@corpus_asset("exports", deps=["entities", "relationships", "communities", "layouts"], kinds={"graphml"})
def graphml_export(context: dg.AssetExecutionContext, config: ExportConfig, duckdb: DuckDBStoreResource):
    """The entity graph as GraphML, with community ids per level and layout positions as node attributes."""
    step, corpus = Step(context, duckdb), context.partition_key
    tables = step.inputs("graphml_export")
    path = exports.export_folder(config.folder, corpus, duckdb.stage) / "graph.graphml"
    graph, replaced = exports.graphml(
        tables["entities"], tables["relationships"], tables["communities"], tables["layouts"], path
    )
    if replaced:
        context.log.warning(f"{replaced} characters that XML cannot hold were written as U+FFFD in {path.name}")
    step.record_files("graphml_export", "networkx", config, graph.number_of_nodes())
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(exports.export_folder(config.folder, corpus, None) / path.name)),
            "staged_until_published": duckdb.stage is not None,
            "nodes": graph.number_of_nodes(),
            "edges": graph.number_of_edges(),
            "characters_replaced": replaced,  # control characters XML 1.0 cannot hold, as U+FFFD (the store keeps them)
        }
    )


@corpus_asset("exports", deps=[*PARQUET_TABLES, "text_embeddings"], kinds={"parquet"})
def parquet_export(context: dg.AssetExecutionContext, config: ExportConfig, duckdb: DuckDBStoreResource):
    """Every index table as a parquet file in Microsoft GraphRAG 3.x's output schema: `graphrag query --data <folder>`
    answers from it. The text embeddings go to `text_embeddings.parquet` and, with the `lancedb` extra installed,
    to the LanceDB tables its local, DRIFT and basic search read (`<folder>/lancedb`)."""
    step, corpus = Step(context, duckdb), context.partition_key
    tables = step.inputs("parquet_export")
    vectors = tables.pop("text_embeddings")
    findings = pl.col("findings").str.json_decode(exports.FINDINGS)
    tables["community_reports"] = tables["community_reports"].with_columns(findings)
    folder = exports.export_folder(config.folder, corpus, duckdb.stage) / "parquet"
    written = exports.parquet({**tables, "text_embeddings": vectors}, folder)
    vector_tables = exports.lancedb_tables(vectors, folder / "lancedb")
    if vector_tables is None:
        context.log.info("lancedb is not installed (pip install 'graphrag-assets[lancedb]'): no LanceDB tables")
    step.record_files("parquet_export", "pyarrow", config, len(written))
    return dg.MaterializeResult(
        metadata={
            "folder": dg.MetadataValue.path(str(exports.export_folder(config.folder, corpus, None) / "parquet")),
            "staged_until_published": duckdb.stage is not None,
            "rows": dg.MetadataValue.json({name: len(df) for name, df in tables.items()}),
            "lancedb_tables": dg.MetadataValue.json(vector_tables or "lancedb not installed"),
        }
    )
