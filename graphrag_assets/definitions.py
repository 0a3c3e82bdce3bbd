"""The one Definitions object: assets, jobs and resources, configured from the environment.

With no GRAPHRAG_API_BASE and no GRAPHRAG_API_KEY, the offline engine runs every step.
"""

from __future__ import annotations

import os

import dagster as dg

from .automation.corpora import alias_overrides_sensor, new_corpus_sensor, nightly_reindex, prompt_files_sensor
from .automation.jobs import (
    estimate_assets,
    evaluate_corpus_job,
    evaluation_assets,
    index_assets,
    index_corpus_job,
    query_assets,
    query_jobs,
    tune_prompts_job,
    tuning_assets,
)
from .automation.runs import abandoned_runs_sensor, failed_stages_sensor
from .resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource
from .settings import API_KEY_VARIABLE, DATA_DIR, DATABASE, DUCKLAKE_DATA_PATH, VECTOR_INDEX_DIR, endpoint_settings

# EnvVar keeps the key out of the UI and the run config; it is read only where the run happens.
_KEY = dg.EnvVar(API_KEY_VARIABLE)


def _forked_steps(config: dict) -> dict:
    """Dagster's default executor, each step in a process of its own, but forked from a server that imported this
    project once unless the run chooses another start method: a spawned step spends seconds importing it again
    (the index of a tenth of the sample on 2 busy cores: 176 s spawned, 53 s forked, 28 s in one process)."""
    steps = config.get("multiprocess")
    if steps is None or "start_method" in steps:
        return config
    return {"multiprocess": {**steps, "start_method": {"forkserver": {}}}}


step_executor = dg.multi_or_in_process_executor.configured(
    _forked_steps, name="steps", config_schema=dg.multi_or_in_process_executor.config_schema.as_field()
)


defs = dg.Definitions(
    assets=[*index_assets, *query_assets, *evaluation_assets, *tuning_assets, *estimate_assets],
    jobs=[index_corpus_job, *query_jobs, evaluate_corpus_job, tune_prompts_job],
    sensors=[
        new_corpus_sensor,
        alias_overrides_sensor,
        prompt_files_sensor,
        abandoned_runs_sensor,
        failed_stages_sensor,
    ],
    schedules=[nightly_reindex],
    executor=step_executor,
    resources={
        "duckdb": DuckDBStoreResource(
            database=DATABASE,
            ducklake_data_path=DUCKLAKE_DATA_PATH,
            vector_index_dir=VECTOR_INDEX_DIR,
        ),
        "corpora": CorporaResource(root=DATA_DIR),
        "chat": ChatModelResource(**endpoint_settings("chat", _KEY)),
        # The evaluation's judge: the chat model unless GRAPHRAG_JUDGE_MODEL names another on the same endpoint.
        "judge": ChatModelResource(**endpoint_settings("judge", _KEY))
        if os.getenv("GRAPHRAG_JUDGE_MODEL")
        else ChatModelResource(),
        "embeddings": EmbeddingModelResource(**endpoint_settings("embeddings", _KEY)),
    },
)
