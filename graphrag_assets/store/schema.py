"""Column types of every table. Names follow the GraphRAG output tables so other tools read them."""

TABLES: dict[str, dict[str, str]] = {
    "documents": {
        "id": "VARCHAR", "title": "VARCHAR", "text": "VARCHAR", "source_path": "VARCHAR",
        "metadata": "JSON", "text_unit_ids": "VARCHAR[]",
    },
    "base_text_units": {
        "id": "VARCHAR", "text": "VARCHAR", "n_tokens": "INTEGER", "document_id": "VARCHAR", "chunk_index": "INTEGER",
    },
    "text_units": {
        "id": "VARCHAR", "text": "VARCHAR", "n_tokens": "INTEGER", "document_id": "VARCHAR", "chunk_index": "INTEGER",
        "entity_ids": "VARCHAR[]", "relationship_ids": "VARCHAR[]", "covariate_ids": "VARCHAR[]",
    },
    "entities": {
        "id": "VARCHAR", "human_readable_id": "INTEGER", "title": "VARCHAR", "type": "VARCHAR",
        "description": "VARCHAR", "text_unit_ids": "VARCHAR[]", "frequency": "INTEGER", "degree": "INTEGER",
    },
    "relationships": {
        "id": "VARCHAR", "human_readable_id": "INTEGER", "source": "VARCHAR", "target": "VARCHAR",
        "description": "VARCHAR", "weight": "DOUBLE", "combined_degree": "INTEGER", "text_unit_ids": "VARCHAR[]",
    },
    "covariates": {
        "id": "VARCHAR", "human_readable_id": "INTEGER", "covariate_type": "VARCHAR", "type": "VARCHAR",
        "description": "VARCHAR", "subject_id": "VARCHAR", "object_id": "VARCHAR", "status": "VARCHAR",
        "start_date": "VARCHAR", "end_date": "VARCHAR", "source_text": "VARCHAR", "text_unit_id": "VARCHAR",
    },
    "communities": {
        "id": "VARCHAR", "human_readable_id": "INTEGER", "community": "INTEGER", "level": "INTEGER",
        "parent": "INTEGER", "children": "INTEGER[]", "title": "VARCHAR", "entity_ids": "VARCHAR[]",
        "relationship_ids": "VARCHAR[]", "text_unit_ids": "VARCHAR[]", "size": "INTEGER", "carried_from": "INTEGER",
    },
    "community_reports": {
        "id": "VARCHAR", "human_readable_id": "INTEGER", "community": "INTEGER", "level": "INTEGER",
        "parent": "INTEGER", "children": "INTEGER[]", "title": "VARCHAR", "summary": "VARCHAR",
        "full_content": "VARCHAR", "rank": "DOUBLE", "rating_explanation": "VARCHAR", "findings": "JSON",
        "full_content_json": "JSON", "size": "INTEGER", "status": "VARCHAR", "error": "VARCHAR",
        "context_tokens": "INTEGER", "substituted_communities": "INTEGER[]",
    },
    "text_embeddings": {"id": "VARCHAR", "kind": "VARCHAR", "embedding": "FLOAT[]"},
    "embedding_models": {"id": "VARCHAR", "dimensions": "INTEGER", "model": "BLOB"},
    "document_embeddings": {"id": "VARCHAR", "n_tokens": "INTEGER", "embedding": "FLOAT[]"},
    "graph_embeddings": {"id": "VARCHAR", "title": "VARCHAR", "embedding": "FLOAT[]"},
    "layouts": {
        "id": "VARCHAR", "kind": "VARCHAR", "title": "VARCHAR", "x": "DOUBLE", "y": "DOUBLE",
        "community": "INTEGER", "degree": "INTEGER",
    },
}

LINEAGE_DDL = """
CREATE TABLE IF NOT EXISTS lineage (
    asset VARCHAR, corpus VARCHAR, run_id VARCHAR, code_version VARCHAR, data_version VARCHAR,
    upstream_versions JSON, row_count BIGINT, engine VARCHAR, model_usage JSON, materialized_at TIMESTAMP
)
"""
