"""Column types of every table. Names follow the GraphRAG output tables so other tools read them."""

TABLES: dict[str, dict[str, str]] = {
    "documents": {
        "id": "VARCHAR",
        "title": "VARCHAR",
        "text": "VARCHAR",
        "source_path": "VARCHAR",
        "metadata": "JSON",
        "text_unit_ids": "VARCHAR[]",
    },
    "base_text_units": {
        "id": "VARCHAR",
        "text": "VARCHAR",
        "n_tokens": "INTEGER",
        "document_id": "VARCHAR",
        "chunk_index": "INTEGER",
    },
    "text_units": {
        "id": "VARCHAR",
        "text": "VARCHAR",
        "n_tokens": "INTEGER",
        "document_id": "VARCHAR",
        "chunk_index": "INTEGER",
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
        "id": "VARCHAR",
        "human_readable_id": "INTEGER",
        "community": "INTEGER",
        "level": "INTEGER",
        "parent": "INTEGER",
        "children": "INTEGER[]",
        "title": "VARCHAR",
        "entity_ids": "VARCHAR[]",
        "relationship_ids": "VARCHAR[]",
        "text_unit_ids": "VARCHAR[]",
        "size": "INTEGER",
        "carried_from": "INTEGER",
    },
    "community_reports": {
        "id": "VARCHAR",
        "human_readable_id": "INTEGER",
        "community": "INTEGER",
        "level": "INTEGER",
        "parent": "INTEGER",
        "children": "INTEGER[]",
        "title": "VARCHAR",
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
    # The offline embedding as plain arrays; never a pickle, so loading it cannot run code.
    "embedding_models": {
        "id": "VARCHAR",
        "dimensions": "INTEGER",
        "vocabulary": "VARCHAR[]",
        "idf": "DOUBLE[]",
        "components": "FLOAT[][]",
        "stop_words": "BOOLEAN",
    },
    "document_embeddings": {"id": "VARCHAR", "n_tokens": "INTEGER", "embedding": "FLOAT[]"},
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
    "query_answers": {
        "id": "VARCHAR",
        "question": "VARCHAR",
        "method": "VARCHAR",
        "community_level": "INTEGER",
        "config": "JSON",
        "conversation": "JSON",  # the earlier turns the question followed, oldest first
        "answer": "VARCHAR",
        "extractive": "BOOLEAN",
        "context": "JSON",
        "context_tokens": "INTEGER",
        "details": "JSON",
        "model_calls": "INTEGER",
        "cache_hits": "INTEGER",
        "prompt_tokens": "BIGINT",
        "completion_tokens": "BIGINT",
        "embedding_tokens": "BIGINT",
        "latency_seconds": "DOUBLE",
        "run_id": "VARCHAR",
        "created_at": "TIMESTAMP",
    },
    # The paper's evaluation: questions, answers per condition, pairwise judgements, and what follows from them.
    "evaluation_questions": {
        "id": "VARCHAR",
        "persona": "VARCHAR",
        "task": "VARCHAR",
        "question": "VARCHAR",
        "corpus_description": "VARCHAR",
    },
    "evaluation_answers": {
        "id": "VARCHAR",
        "question_id": "VARCHAR",
        "condition": "VARCHAR",
        "answer": "VARCHAR",
        "context_tokens": "INTEGER",
        "model_calls": "INTEGER",
        "cache_hits": "INTEGER",
        "prompt_tokens": "BIGINT",
        "completion_tokens": "BIGINT",
    },
    "pairwise_judgements": {
        "id": "VARCHAR",
        "question_id": "VARCHAR",
        "criterion": "VARCHAR",
        "repeat": "INTEGER",
        "first_condition": "VARCHAR",
        "first_answer_id": "VARCHAR",
        "second_condition": "VARCHAR",
        "second_answer_id": "VARCHAR",
        "winner_condition": "VARCHAR",
        "reasoning": "VARCHAR",
    },
    "win_rates": {
        "criterion": "VARCHAR",
        "row_condition": "VARCHAR",
        "column_condition": "VARCHAR",
        "questions": "INTEGER",
        "wins": "INTEGER",
        "losses": "INTEGER",
        "ties": "INTEGER",
        "win_rate": "DOUBLE",
        "p_value": "DOUBLE",
        "p_adjusted": "DOUBLE",
    },
    "claim_metrics": {
        "answer_id": "VARCHAR",
        "question_id": "VARCHAR",
        "condition": "VARCHAR",
        "claims": "JSON",
        "claim_count": "INTEGER",
        "clusters": "JSON",  # {distance threshold: clusters of the answer's claims}
    },
}

# Any answer traced to the documents behind it: answer -> reports/entities/relationships/claims/text units
# -> text units -> documents. Reports reach text units through their community's entities.
ANSWER_SOURCES_VIEW = """
CREATE OR REPLACE VIEW answer_sources AS
WITH ctx AS (SELECT id AS answer_id, corpus, context FROM query_answers),
cited AS (
    SELECT answer_id, corpus, 'report' AS via, unnest(from_json(context->'reports', '["VARCHAR"]')) AS element_id
    FROM ctx
    UNION ALL SELECT answer_id, corpus, 'entity', unnest(from_json(context->'entities', '["VARCHAR"]')) FROM ctx
    UNION ALL SELECT answer_id, corpus, 'relationship', unnest(from_json(context->'relationships', '["VARCHAR"]'))
    FROM ctx
    UNION ALL SELECT answer_id, corpus, 'claim', unnest(from_json(context->'claims', '["VARCHAR"]')) FROM ctx
    UNION ALL SELECT answer_id, corpus, 'text_unit', unnest(from_json(context->'text_units', '["VARCHAR"]')) FROM ctx
),
units AS (
    SELECT c.answer_id, c.corpus, c.via, c.element_id, unnest(e.text_unit_ids) AS text_unit_id
      FROM cited c JOIN community_reports r ON c.via = 'report' AND r.id = c.element_id AND r.corpus = c.corpus
      JOIN communities m ON m.community = r.community AND m.corpus = r.corpus
      JOIN entities e ON list_contains(m.entity_ids, e.id) AND e.corpus = m.corpus
    UNION ALL SELECT c.answer_id, c.corpus, c.via, c.element_id, unnest(e.text_unit_ids)
      FROM cited c JOIN entities e ON c.via = 'entity' AND e.id = c.element_id AND e.corpus = c.corpus
    UNION ALL SELECT c.answer_id, c.corpus, c.via, c.element_id, unnest(x.text_unit_ids)
      FROM cited c JOIN relationships x ON c.via = 'relationship' AND x.id = c.element_id AND x.corpus = c.corpus
    UNION ALL SELECT c.answer_id, c.corpus, c.via, c.element_id, v.text_unit_id
      FROM cited c JOIN covariates v ON c.via = 'claim' AND v.id = c.element_id AND v.corpus = c.corpus
    UNION ALL SELECT answer_id, corpus, via, element_id, element_id FROM cited WHERE via = 'text_unit'
)
SELECT DISTINCT u.answer_id, u.corpus, u.via, u.element_id, u.text_unit_id, t.document_id, d.title AS document_title
  FROM units u JOIN text_units t ON t.id = u.text_unit_id AND t.corpus = u.corpus
  JOIN documents d ON d.id = t.document_id AND d.corpus = t.corpus
"""

# One row per materialization of an asset for a corpus (the table has its own corpus column).
LINEAGE: dict[str, str] = {
    "asset": "VARCHAR",
    "corpus": "VARCHAR",
    "run_id": "VARCHAR",
    "code_version": "VARCHAR",
    "data_version": "VARCHAR",
    "upstream_versions": "JSON",
    "row_count": "BIGINT",
    "engine": "VARCHAR",
    "model_usage": "JSON",
    "materialized_at": "TIMESTAMP",
    "inputs": "VARCHAR",
    "settings": "JSON",  # the asset's launch-time config, as the run had it
}
