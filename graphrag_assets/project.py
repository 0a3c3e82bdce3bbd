"""One GraphRAG deployment's Definitions from its settings. This repository's definitions.py and the dg component
(component.py) both build theirs here, so the ready-to-run project and a platform's instance cannot drift apart."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import dagster as dg

from .automation.corpora import (
    NIGHTLY,
    changed_files_sensor,
    new_corpus_sensor_for,
    reindex_schedule,
    upstream_changes_sensor,
)
from .automation.jobs import (
    estimate_assets,
    evaluation_assets,
    index_assets,
    instance_jobs,
    query_assets,
    tuning_assets,
)
from .automation.runs import abandoned_runs_sensor, failed_stages_sensor_for
from .instance import renamed_assets
from .naming import InstanceNames
from .resources import (
    ChatModelResource,
    CorporaResource,
    DuckDBStoreResource,
    EmbeddingModelResource,
    QueryCorporaResource,
)
from .settings import (
    API_KEY_VARIABLE,
    DATA_DIR,
    DATABASE,
    DUCKLAKE_DATA_PATH,
    VECTOR_INDEX_DIR,
    endpoint_settings,
)
from .store.document_query import DocumentQuery


@dataclass(frozen=True, kw_only=True)
class ProjectSettings:
    """Where the documents come from, where the index is kept, which models answer, and when it is rebuilt. The
    defaults are this repository's (from the GRAPHRAG_ variables, settings.py)."""

    documents: str = DATA_DIR  # a folder of corpus folders, or an s3://, gs://, az:// prefix of them
    mirror_dir: str | None = None  # None: the corpora resource's own default
    database: str = DATABASE  # a DuckDB file, or ducklake:<catalog>
    ducklake_data_path: str | None = DUCKLAKE_DATA_PATH
    vector_index_dir: str = VECTOR_INDEX_DIR
    exports_dir: str | None = None  # None: the export steps' own default (.graphrag/exports)
    api_base_variable: str | None = None  # None: GRAPHRAG_API_BASE (and GRAPHRAG_EMBEDDING_API_BASE)
    api_key_variable: str = API_KEY_VARIABLE
    chat_model: str | None = None  # None: GRAPHRAG_CHAT_MODEL, else gpt-4o-mini
    embedding_model: str | None = None  # None: GRAPHRAG_EMBEDDING_MODEL, else text-embedding-3-small
    method: str = "standard"  # the index method the job runs unless a launch sets another
    schedule: str = NIGHTLY  # cron (UTC) of the re-index of every corpus
    run_budget_usd: float | None = None  # None: GRAPHRAG_RUN_BUDGET_USD
    key_prefix: str = ""  # a dg component instance's (naming.py); this repository's project has none
    documents_query: DocumentQuery | None = None  # documents from SQL instead of `documents`' folders
    postgres_variable: str | None = None  # the variable holding the connection string the query's `pg` attaches
    upstream_assets: tuple[str, ...] = ()  # keys ("a/b") of the user's assets the documents come from
    file_columns: dict = field(default_factory=dict)  # corpus_documents settings for CSV, JSON and parquet files


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


def corpora_for(settings: ProjectSettings) -> CorporaResource:
    common = dict(run_budget_usd=settings.run_budget_usd)
    if settings.mirror_dir:
        common["mirror_dir"] = settings.mirror_dir
    query = settings.documents_query
    if query is None:
        return CorporaResource(root=settings.documents, **common)
    return QueryCorporaResource(
        query=query.sql,
        query_database=query.database,
        postgres=dg.EnvVar(settings.postgres_variable) if settings.postgres_variable else None,
        text_column=query.text_column,
        title_column=query.title_column,
        id_column=query.id_column,
        metadata_columns=list(query.metadata_columns),
        corpus_column=query.corpus_column,
        corpus=query.corpus,
        **common,
    )


def resources_for(settings: ProjectSettings) -> dict[str, dg.ConfigurableResource]:
    # EnvVar keeps the key out of the UI and the run config; it is read only where the run happens.
    key = dg.EnvVar(settings.api_key_variable)
    endpoint = dict(api_base_variable=settings.api_base_variable, api_key_variable=settings.api_key_variable)
    return {
        "duckdb": DuckDBStoreResource(
            database=settings.database,
            ducklake_data_path=settings.ducklake_data_path,
            vector_index_dir=settings.vector_index_dir,
        ),
        "corpora": corpora_for(settings),
        "chat": ChatModelResource(**endpoint_settings("chat", key, model=settings.chat_model, **endpoint)),
        # The evaluation's judge: the chat model unless GRAPHRAG_JUDGE_MODEL names another on the same endpoint.
        "judge": ChatModelResource(**endpoint_settings("judge", key, **endpoint))
        if os.getenv("GRAPHRAG_JUDGE_MODEL")
        else ChatModelResource(),
        "embeddings": EmbeddingModelResource(
            **endpoint_settings("embeddings", key, model=settings.embedding_model, **endpoint)
        ),
    }


def index_defaults(settings: ProjectSettings) -> dict | None:
    """The index job's default run config: what the settings choose that the steps' own defaults do not."""
    ops, names = {}, InstanceNames(settings.key_prefix)
    if settings.method != "standard":
        ops[names.name("entity_graph")] = {"config": {"method": settings.method}}
    if settings.exports_dir:
        exports = {"config": {"folder": settings.exports_dir}}
        ops |= {names.name(step): exports for step in ("graphml_export", "parquet_export")}
    query = settings.documents_query
    ingest = {"metadata_columns": query.metadata()} if query is not None and query.metadata() else settings.file_columns
    if ingest:
        ops[names.name("corpus_documents")] = {"config": ingest}
    return {"ops": ops} if ops else None


def graphrag_definitions(settings: ProjectSettings) -> dg.Definitions:
    """Assets, jobs, sensors, the schedule and resources of one GraphRAG deployment, under its names."""
    names = InstanceNames(settings.key_prefix)
    upstream = [dg.AssetKey.from_user_string(key) for key in settings.upstream_assets]
    index = renamed_assets(index_assets, names, {"documents": upstream} if upstream else None)
    queries = renamed_assets(query_assets, names)
    others = renamed_assets([*evaluation_assets, *tuning_assets, *estimate_assets], names)
    # The CLI's runs of this host are this project's own: one sensor looks after them, not one per instance.
    host_runs = [] if names.prefix else [abandoned_runs_sensor]
    return dg.Definitions(
        assets=[*index, *queries, *others],
        jobs=instance_jobs(index, queries, names, index_defaults(settings)),
        sensors=[
            new_corpus_sensor_for(names),
            changed_files_sensor("alias_overrides_sensor", names),
            changed_files_sensor("prompt_files_sensor", names),
            failed_stages_sensor_for(names),
            *([upstream_changes_sensor(upstream, names)] if upstream else []),
            *host_runs,
        ],
        schedules=[reindex_schedule(settings.schedule, names)],
        executor=step_executor,
        resources={names.name(key): resource for key, resource in resources_for(settings).items()},
    )
