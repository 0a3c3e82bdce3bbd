"""GraphRAG as a dg component: a Dagster project adds it with `dg scaffold defs graphrag_assets.components.GraphRAG
<name>` and configures it in the defs.yaml that writes. Its Definitions are built by project.py, as this
repository's own are.

Instances sit side by side: each one's asset keys are under its `key_prefix` and its resources, jobs, sensors,
schedule and partitions are named from it (naming.py), so neither collides with the other or with the platform's own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field, field_validator

from .automation.corpora import NIGHTLY
from .configs.index import IngestConfig
from .instance_files import DEFAULT_STORE, local, state_paths
from .method.ingest.object_storage import is_object_storage
from .method.prompts import prompts_dir, use_prompts_dir
from .naming import InstanceNames
from .project import ProjectSettings, graphrag_definitions
from .store.document_query import DocumentQuery

DEFAULT_PROMPTS_DIR = prompts_dir()
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# What `dg scaffold defs` writes: every attribute, its default and what it means, so the file loads as it is
# (indexing the project's data/ folder offline) and each line says what to change.
DEFS_YAML = """\
type: {type_name}

attributes:
  # Where the documents are: a folder holding one folder per corpus (each is a partition of the index), or an
  # object-storage prefix of such folders: s3://bucket/corpora/, gs://bucket/corpora/, az://container/corpora/.
  # Object storage is read with the credentials its own tools read from the environment (AWS_*, GOOGLE_*, AZURE_*).
  # Text, Markdown, HTML, JSON/JSONL, CSV, PDF and Office files are read; a relative folder is the project's.
  documents: data
  # Or the rows of a query, one document each, from a DuckDB file or PostgreSQL (tables as pg.<schema>.<table>):
  # documents:
  #   sql: SELECT ticket_id, subject, body, team FROM tickets
  #   database: warehouse.duckdb          # or postgres_variable: HELPDESK_DSN (the variable, never the string)
  #   corpus: support                     # or corpus_column: team, a corpus per value
  # Which columns hold the text, title, id and metadata (a query's, or a CSV, JSON or parquet file's):
  # columns: {{text: body, title: subject, id: ticket_id, metadata: [team]}}
  # The assets of this project the documents come from: the index is downstream of them, and re-indexed
  # (within the budget) when they are materialized again.
  # upstream_assets: [tickets]

  # The index: a DuckDB file (relative to the project), or ducklake:<catalog> with the folder of its data files.
  store: .graphrag/{name}.duckdb
  # ducklake_data_path: s3://bucket/graphrag/{name}/
  # vector_index_dir: .graphrag/{name}-vectors   # HNSW and keyword index files (default: beside the store)

  # The model endpoint, by the names of the environment variables that hold it (never the key itself).
  # With neither variable set, the offline engine builds the whole index with no model.
  api_base_variable: GRAPHRAG_API_BASE
  api_key_variable: GRAPHRAG_API_KEY
  # chat_model: gpt-4o-mini
  # embedding_model: text-embedding-3-small

  # standard: the paper's (a model extracts the graph); fast: noun phrases make the graph, reports only;
  # lazy: no model call while indexing (LazyGraphRAG). A launch can still choose another.
  method: standard
  # prompts: prompts   # a folder of prompt files to use instead of the packaged ones

  # The instance's asset keys sit under this prefix ({prefix}/entities), and its resources, jobs, sensors and
  # schedule are named from it ({prefix}__duckdb, {prefix}__index_corpus): instances never collide.
  key_prefix: {prefix}

  # When every corpus is re-indexed (cron, UTC); unchanged documents cost no model call.
  schedule: "{schedule}"
  # Dollars each automatic run may spend on a paid model; a paid model gets no automatic run without it.
  # budget: 5.0
"""


class SqlDocuments(dg.Model):
    """Documents from a query, one row each, instead of files."""

    sql: str = Field(
        description="The query; with postgres_variable set, it reads PostgreSQL's tables as pg.<schema>.<table>."
    )
    database: str | None = Field(None, description="A DuckDB file to run it in (relative to the project).")
    postgres_variable: str | None = Field(
        None, description="The environment variable holding a PostgreSQL connection string (never the string)."
    )
    corpus: str = Field("documents", description="The corpus (partition) all rows are indexed as.")
    corpus_column: str | None = Field(None, description="Or a column whose values split the rows into corpora.")

    @field_validator("postgres_variable")
    @classmethod
    def _variable(cls, value: str | None) -> str | None:
        return _variable_name(value) if value else value


class DocumentColumns(dg.Model):
    """Which columns hold each document's text, title, id and metadata (a query's, or a CSV, JSON or parquet
    file's)."""

    text: str = "text"
    title: str | None = "title"
    id: str | None = None
    metadata: list[str] = []


# What corpus_documents reads from tabular files unless told otherwise: its own settings' defaults.
_FILE_COLUMN_DEFAULTS = {
    name: IngestConfig.model_fields[name].default for name in ("text_column", "title_column", "metadata_columns")
}


def _variable_name(value: str) -> str:
    if not _VARIABLE.fullmatch(value):
        raise ValueError(f"{value!r} is not an environment variable's name (name the variable, not its value)")
    return value


class GraphRAGScaffolder(dg.Scaffolder):
    """Writes a defs.yaml with every attribute commented."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        name = re.sub(r"[^a-z0-9_-]+", "-", request.target_path.name.lower()).strip("-") or "graphrag"
        prefix = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", name)).strip("_")
        prefix = prefix if prefix[:1].isalpha() else f"kb_{prefix}".rstrip("_")
        text = DEFS_YAML.format(type_name=request.type_name, name=name, schedule=NIGHTLY, prefix=prefix)
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(text, encoding="utf-8")


@dg.scaffold_with(GraphRAGScaffolder)
class GraphRAG(dg.Component, dg.Model, dg.Resolvable):
    """GraphRAG (Microsoft Research's "From Local to Global") over the documents of a folder or an object-storage
    prefix: the index's assets in DuckDB, the query jobs, a sensor for new corpora and a nightly re-index."""

    documents: str | SqlDocuments = Field(
        "data", description="A folder of corpus folders, an s3://, gs:// or az:// prefix of them, or a SQL query."
    )
    columns: DocumentColumns = Field(DocumentColumns(), description="The documents' columns (queries, tabular files).")
    upstream_assets: list[str] = Field(
        [], description="Keys of this project's assets the documents come from: the index is downstream of them."
    )
    store: str = Field(DEFAULT_STORE, description="The index's DuckDB file, or ducklake:<catalog>.")
    ducklake_data_path: str | None = Field(None, description="Where a DuckLake store keeps its data files.")
    vector_index_dir: str | None = Field(
        None, description="Where HNSW and keyword index files go (default: a folder beside the store)."
    )
    api_base_variable: str = Field("GRAPHRAG_API_BASE", description="The variable holding the endpoint's base URL.")
    api_key_variable: str = Field("GRAPHRAG_API_KEY", description="The variable holding the endpoint's key.")
    chat_model: str | None = Field(None, description="The chat model (default gpt-4o-mini).")
    embedding_model: str | None = Field(None, description="The embedding model (default text-embedding-3-small).")
    method: Literal["standard", "fast", "lazy"] = Field("standard", description="The index method runs use.")
    prompts: str | None = Field(None, description="A folder of prompt files to use instead of the packaged ones.")
    schedule: str = Field(NIGHTLY, description="Cron (UTC) of the re-index of every corpus.")
    budget: float | None = Field(None, gt=0, description="Dollars each automatic run may spend on a paid model.")
    key_prefix: str = Field(
        "", description="The instance's asset keys sit under it, and its other names start with it (none: bare)."
    )

    @field_validator("key_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        InstanceNames(value)  # a ValueError that says what a prefix may hold
        return value

    @field_validator("api_base_variable", "api_key_variable")
    @classmethod
    def _variable(cls, value: str) -> str:
        return _variable_name(value)

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        from dagster._utils.schedules import is_valid_cron_string

        if not is_valid_cron_string(value):
            raise ValueError(f"{value!r} is not a cron schedule: five fields, as in '0 2 * * *' (02:00 every day)")
        return value

    @field_validator("documents")
    @classmethod
    def _documents(cls, value: str | SqlDocuments) -> str | SqlDocuments:
        if isinstance(value, str) and "://" in value and not is_object_storage(value):
            raise ValueError(f"{value!r}: documents are a local folder or an s3://, gs:// or az:// prefix")
        return value

    def settings(self, project_root: Path) -> ProjectSettings:
        """The deployment's settings, with relative paths taken from the project's root."""

        documents, query = self.documents, None
        if isinstance(documents, SqlDocuments):
            query = DocumentQuery(
                sql=documents.sql,
                database=local(documents.database, project_root) if documents.database else None,
                text_column=self.columns.text,
                title_column=self.columns.title,
                id_column=self.columns.id,
                metadata_columns=tuple(self.columns.metadata),
                corpus_column=documents.corpus_column,
                corpus=documents.corpus,
            )
        paths = state_paths(self.store, self.vector_index_dir, project_root)
        return ProjectSettings(
            documents=local(documents, project_root) if query is None else "sql",
            documents_query=query,
            postgres_variable=documents.postgres_variable if query is not None else None,
            upstream_assets=tuple(self.upstream_assets),
            file_columns=self._file_columns() if query is None else {},
            mirror_dir=paths.mirror_dir,
            database=paths.store,
            ducklake_data_path=self.ducklake_data_path,
            vector_index_dir=paths.vector_index_dir,
            exports_dir=paths.exports_dir,
            api_base_variable=self.api_base_variable,
            api_key_variable=self.api_key_variable,
            chat_model=self.chat_model,
            embedding_model=self.embedding_model,
            method=self.method,
            schedule=self.schedule,
            run_budget_usd=self.budget,
            key_prefix=self.key_prefix,
        )

    def _file_columns(self) -> dict:
        """The ingest settings for CSV, JSON and parquet files that `columns` changes from their defaults."""
        chosen = {
            "text_column": self.columns.text,
            "title_column": self.columns.title,
            "metadata_columns": [c for c in (self.columns.id, *self.columns.metadata) if c],
        }
        return {name: value for name, value in chosen.items() if value != _FILE_COLUMN_DEFAULTS[name]}

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        if self.prompts:
            folder = (Path(context.project_root) / self.prompts).resolve()
            if not folder.is_dir():
                raise ValueError(f"prompts: {folder} is not a folder of prompt files")
            # The packaged prompts' folder is one per process: two instances of a code location cannot differ.
            if prompts_dir().resolve() not in (folder, DEFAULT_PROMPTS_DIR.resolve()):
                raise ValueError(
                    f"prompts: {folder} differs from another instance's {prompts_dir()}; instances of one code "
                    "location share one prompts folder (a corpus's own prompts/ folder still overrides it)"
                )
            use_prompts_dir(folder)
        return graphrag_definitions(self.settings(Path(context.project_root)))
