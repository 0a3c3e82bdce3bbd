"""The one Definitions object: assets, jobs and resources, configured from the environment.

With no GRAPHRAG_API_BASE and no GRAPHRAG_API_KEY, the offline engine runs every step.
"""

from __future__ import annotations

import os

import dagster as dg

from .automation.corpora import new_corpus_sensor, nightly_reindex
from .automation.jobs import index_assets, index_corpus_job, query_assets, query_jobs
from .automation.runs import abandoned_runs_sensor
from .resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource

DATABASE = os.getenv("GRAPHRAG_DUCKDB", ".graphrag/graphrag.duckdb")
CACHE_DIR = os.getenv("GRAPHRAG_CACHE_DIR", ".graphrag/cache")


def _endpoint_settings(model_variable: str, default_model: str) -> dict:
    return dict(
        base_url=os.getenv("GRAPHRAG_API_BASE"),
        # EnvVar keeps the key out of the UI and the run config; it is read only where the run happens.
        api_key=dg.EnvVar("GRAPHRAG_API_KEY") if os.getenv("GRAPHRAG_API_KEY") else None,
        api_version=os.getenv("GRAPHRAG_API_VERSION"),
        model=os.getenv(model_variable, default_model),
        cache_dir=CACHE_DIR,
        max_concurrency=int(os.getenv("GRAPHRAG_MAX_CONCURRENCY", "8")),
        requests_per_minute=int(os.getenv("GRAPHRAG_RPM", "500")),
        tokens_per_minute=int(os.getenv("GRAPHRAG_TPM", "200000")),
        timeout_seconds=float(os.getenv("GRAPHRAG_TIMEOUT_SECONDS", "60")),
    )


defs = dg.Definitions(
    assets=[*index_assets, *query_assets],
    jobs=[index_corpus_job, *query_jobs],
    sensors=[new_corpus_sensor, abandoned_runs_sensor],
    schedules=[nightly_reindex],
    resources={
        "duckdb": DuckDBStoreResource(database=DATABASE),
        "corpora": CorporaResource(root=os.getenv("GRAPHRAG_DATA_DIR", "data")),
        "chat": ChatModelResource(**_endpoint_settings("GRAPHRAG_CHAT_MODEL", "gpt-4o-mini")),
        "embeddings": EmbeddingModelResource(**_endpoint_settings("GRAPHRAG_EMBEDDING_MODEL", "text-embedding-3-small")),
    },
)
