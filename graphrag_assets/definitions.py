"""The one Definitions object: assets, jobs and resources, configured from the environment.

With no GRAPHRAG_API_BASE and no GRAPHRAG_API_KEY, the offline engine runs every step.
"""

from __future__ import annotations

import os

import dagster as dg

from .automation.corpora import alias_overrides_sensor, new_corpus_sensor, nightly_reindex, prompt_files_sensor
from .automation.jobs import (
    evaluate_corpus_job,
    evaluation_assets,
    index_assets,
    index_corpus_job,
    query_assets,
    query_jobs,
    tune_prompts_job,
    tuning_assets,
)
from .automation.runs import abandoned_runs_sensor
from .resources import STATE_DIR, ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource

DATABASE = os.getenv("GRAPHRAG_DUCKDB", f"{STATE_DIR}/graphrag.duckdb")  # or ducklake:<catalog>: store/connection.py
DUCKLAKE_DATA_PATH = os.getenv("GRAPHRAG_DUCKLAKE_DATA_PATH")
CACHE_DIR = os.getenv("GRAPHRAG_CACHE_DIR", f"{STATE_DIR}/cache")


# Optional settings from the environment; what is unset keeps the resource's default.
_OPTIONAL_SETTINGS = {
    "api_version": ("GRAPHRAG_API_VERSION", str),
    "max_concurrency": ("GRAPHRAG_MAX_CONCURRENCY", int),
    "requests_per_minute": ("GRAPHRAG_RPM", int),
    "tokens_per_minute": ("GRAPHRAG_TPM", int),
    "rate_limits_file": ("GRAPHRAG_RATE_LIMITS_FILE", str),
    "timeout_seconds": ("GRAPHRAG_TIMEOUT_SECONDS", float),
    "batch_api": ("GRAPHRAG_BATCH_API", lambda value: value.strip().lower() in ("1", "true", "yes", "on")),
}


def _endpoint_settings(model_variable: str, default_model: str, base_variable: str = "GRAPHRAG_API_BASE") -> dict:
    return dict(
        base_url=os.getenv(base_variable) or os.getenv("GRAPHRAG_API_BASE"),
        # EnvVar keeps the key out of the UI and the run config; it is read only where the run happens.
        api_key=dg.EnvVar("GRAPHRAG_API_KEY") if os.getenv("GRAPHRAG_API_KEY") else None,
        model=os.getenv(model_variable, default_model),
        cache_dir=CACHE_DIR,
        **{
            field: kind(os.environ[variable])
            for field, (variable, kind) in _OPTIONAL_SETTINGS.items()
            if os.getenv(variable)
        },
    )


defs = dg.Definitions(
    assets=[*index_assets, *query_assets, *evaluation_assets, *tuning_assets],
    jobs=[index_corpus_job, *query_jobs, evaluate_corpus_job, tune_prompts_job],
    sensors=[new_corpus_sensor, alias_overrides_sensor, prompt_files_sensor, abandoned_runs_sensor],
    schedules=[nightly_reindex],
    resources={
        "duckdb": DuckDBStoreResource(
            database=DATABASE,
            ducklake_data_path=DUCKLAKE_DATA_PATH,
            vector_index_dir=os.getenv("GRAPHRAG_VECTOR_INDEX_DIR", f"{STATE_DIR}/vector-index"),
        ),
        "corpora": CorporaResource(root=os.getenv("GRAPHRAG_DATA_DIR", "data")),
        "chat": ChatModelResource(**_endpoint_settings("GRAPHRAG_CHAT_MODEL", "gpt-4o-mini")),
        # The evaluation's judge: the chat model unless GRAPHRAG_JUDGE_MODEL names another on the same endpoint.
        "judge": ChatModelResource(**_endpoint_settings("GRAPHRAG_JUDGE_MODEL", "gpt-4o-mini"))
        if os.getenv("GRAPHRAG_JUDGE_MODEL")
        else ChatModelResource(),
        # A server of its own for embeddings where one server serves one model (vLLM, llama.cpp's server).
        "embeddings": EmbeddingModelResource(
            **_endpoint_settings("GRAPHRAG_EMBEDDING_MODEL", "text-embedding-3-small", "GRAPHRAG_EMBEDDING_API_BASE")
        ),
    },
)
