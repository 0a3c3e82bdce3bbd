"""Column types of every table: the index's own (method/schema.py) and what the store adds (answers, the
evaluation, lineage)."""

from ..method.schema import OUTPUT_TABLES

TABLES: dict[str, dict[str, str]] = {
    **OUTPUT_TABLES,
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
        "run_id": "VARCHAR",  # the Dagster run that answered; none for the CLI and the server
        "created_at": "TIMESTAMP",
        "cost_usd": "DOUBLE",  # at the configured prices
        "asked_by": "VARCHAR",  # the server's key name, "local" (the server without keys), "cli" or "dagster"
        "sources": "JSON",  # [{kind, id, number, title, text, document, ...}]: what the answer shows as its sources
        "index_version": "VARCHAR",  # the publication of the corpus's index that answered
    },
    # Prompts: the ones tuning wrote for a corpus, and the ones its index was built with.
    "tuned_prompts": {
        "id": "VARCHAR",  # the prompt's name: extract_graph, community_report, ...
        "template": "VARCHAR",
        "sha": "VARCHAR",
        "default_sha": "VARCHAR",  # the file in prompts/ it was written from
        "domain": "VARCHAR",
        "persona": "VARCHAR",
        "language": "VARCHAR",
        "entity_types": "JSON",
        "examples": "JSON",  # [{text_unit_id, excerpt, records}]: the extraction examples written from the corpus
        "sampled_text_unit_ids": "JSON",
        "derived_by": "VARCHAR",  # "model", or how the offline rule found the types
    },
    "index_prompts": {
        "id": "VARCHAR",  # the prompt's name
        "template": "VARCHAR",
        "sha": "VARCHAR",
        "source": "VARCHAR",  # "default" (prompts/), "tuned" (tuned_prompts) or the corpus's own file
    },
    # The paper's evaluation: questions, answers per condition, pairwise judgements, and what follows from them.
    "evaluation_questions": {
        "id": "VARCHAR",
        "persona": "VARCHAR",
        "task": "VARCHAR",
        "question": "VARCHAR",
        "corpus_description": "VARCHAR",
        "question_class": "VARCHAR",  # data_local, data_global, activity_local, activity_global or unclassified
        "assertions": "JSON",  # [{statement, score, rank}]: what a good answer must support (from a question file)
        "metadata": "JSON",  # a question file's other fields; a data_local question's text unit
        "source": "VARCHAR",  # "generated" or the question file's name
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
        "question_class": "VARCHAR",  # "all", or the questions of one class
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
    "assertion_scores": {
        "id": "VARCHAR",  # the answer's: one row per answer
        "answer_id": "VARCHAR",
        "question_id": "VARCHAR",
        "condition": "VARCHAR",
        "question_class": "VARCHAR",
        "verdicts": "JSON",  # per assertion: statement, score, rank, supported, votes_supported, votes, reasoning
        "assertions": "INTEGER",
        "assertions_scored": "INTEGER",  # those with at least one valid verdict
        "assertions_supported": "INTEGER",
        "accuracy": "DOUBLE",  # supported share of the scored assertions, weighted by their scores
    },
    "assertion_accuracy": {
        "question_class": "VARCHAR",  # "all", or the questions of one class
        "condition": "VARCHAR",
        "questions": "INTEGER",
        "accuracy": "DOUBLE",  # mean over the questions
        "ci_low": "DOUBLE",
        "ci_high": "DOUBLE",
        "best_condition": "VARCHAR",
        "p_vs_best": "DOUBLE",  # paired Wilcoxon signed-rank test against best_condition
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
SELECT DISTINCT u.answer_id, u.corpus, u.via, u.element_id, u.text_unit_id, t.document_id, d.title AS document_title,
       d.source_path, t.location, t.pages
  FROM units u JOIN text_units t ON t.id = u.text_unit_id AND t.corpus = u.corpus
  JOIN documents d ON d.id = t.document_id AND d.corpus = t.corpus
"""

# What each run's model-calling steps spent, one row per step and corpus: a view over the lineage rows' usage.
# cost_usd is NULL where the model has no known price.
# A step that failed published nothing, so it has no lineage row; what it paid before failing is kept here.
FAILED_STEP_USAGE = {
    "asset": "VARCHAR",
    "corpus": "VARCHAR",
    "run_id": "VARCHAR",
    "model_usage": "JSON",
    "materialized_at": "TIMESTAMP",  # when it failed
}

MODEL_USAGE_VIEW = """
SELECT run_id, asset AS step, corpus, materialized_at, failed,
       model_usage->>'model' AS model,
       coalesce(model_usage->>'endpoint', 'chat') AS endpoint,
       (model_usage->>'calls')::BIGINT AS requests,
       (model_usage->>'cache_hits')::BIGINT AS cache_hits,
       (model_usage->>'prompt_tokens')::BIGINT AS prompt_tokens,
       (model_usage->>'completion_tokens')::BIGINT AS completion_tokens,
       coalesce((model_usage->>'batch_calls')::BIGINT, 0) AS batch_requests,
       (model_usage->>'retries')::BIGINT AS retries,
       (model_usage->>'failures')::BIGINT AS failed_calls,
       (model_usage->>'estimated_cost_usd')::DOUBLE AS cost_usd
FROM (
    SELECT run_id, asset, corpus, materialized_at, model_usage, false AS failed FROM {lineage}
    UNION ALL SELECT run_id, asset, corpus, materialized_at, model_usage, true FROM "main".failed_step_usage
) WHERE model_usage IS NOT NULL
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
