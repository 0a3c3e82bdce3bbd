"""What the tests and the benchmarks share: a workspace (a data folder, a DuckDB file and a response cache in a
temporary directory), the sample corpus indexed in one, the model resources pointed at the test model server, and
readers of what a run stored. The benchmarks import it rather than conftest.py, which is pytest's."""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import polars as pl
import yaml

from graphrag_assets.definitions import index_assets, query_assets
from graphrag_assets.resources import (
    ChatModelResource,
    CorporaResource,
    DuckDBStoreResource,
    EmbeddingModelResource,
)
from graphrag_assets.store.tables import read_table
from graphrag_assets_tests.model_server import FakeOpenAIServer, Faults

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# Programs some tests install once, each into a virtual environment of its own, never into the checkout.
TOOL_CACHE = Path(
    os.environ.get("GRAPHRAG_ASSETS_TEST_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphrag-assets"
)
# Headless Chromium on a machine with no network but the loopback: no background fetches, no sandbox as root.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


SAMPLE_CORPUS = "a-christmas-carol"
# Every asset of the index_corpus job, in pipeline order.
INDEX_ASSETS = (
    "documents",
    "base_text_units",
    "index_prompts",
    "entities",
    "relationships",
    "entity_aliases",
    "covariates",
    "text_units",
    "communities",
    "community_reports",
    "text_embeddings",
    "keyword_index",
    "document_embeddings",
    "graph_embeddings",
    "layouts",
    "graphml_export",
    "parquet_export",
    "published_index",
)


@contextmanager
def open_instance(home: Path) -> Iterator[dg.DagsterInstance]:
    """A Dagster instance from a home folder, disposed afterwards.

    Never `with instance:`: DagsterInstance.__exit__ leaves the instance's state storage in a context
    variable, and once the instance is collected every later Definitions load in this process fails
    on the dead weakref ("Attempted to resolve undefined DagsterInstance weakref").
    """
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        yield instance
    finally:
        instance.dispose()


def chat_resource(base_url: str | None, cache_dir: Path, **overrides) -> ChatModelResource:
    return ChatModelResource(
        base_url=base_url,
        cache_dir=str(cache_dir),
        rate_limits_file=str(cache_dir.parent / "rate-limits.sqlite"),
        **{"max_retries": 4, "timeout_seconds": 10, **overrides},
    )


def embedding_resource(base_url: str | None, cache_dir: Path, **overrides) -> EmbeddingModelResource:
    return EmbeddingModelResource(
        base_url=base_url,
        cache_dir=str(cache_dir),
        rate_limits_file=str(cache_dir.parent / "rate-limits.sqlite"),
        **overrides,
    )


# The model resources of a sensor or schedule context when no endpoint is configured (the offline engine)
OFFLINE_MODELS = {"chat": ChatModelResource(), "embeddings": EmbeddingModelResource()}


class Workspace:
    """A data folder, a DuckDB file and a response cache in a temporary directory."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        self.data.mkdir()
        self.database = root / "graphrag.duckdb"
        self.cache = root / "cache"

    def add_sample_corpus(self, name: str = SAMPLE_CORPUS) -> str:
        shutil.copytree(REPO / "data" / SAMPLE_CORPUS, self.data / name)
        return name

    def resources(
        self, chat: ChatModelResource | None = None, embeddings: EmbeddingModelResource | None = None
    ) -> dict:
        return {
            "duckdb": DuckDBStoreResource(
                database=str(self.database), vector_index_dir=str(self.root / "vector-index")
            ),
            "corpora": CorporaResource(root=str(self.data), conversion_cache_dir=str(self.root / "conversions")),
            "chat": chat or ChatModelResource(cache_dir=str(self.cache)),
            "embeddings": embeddings or EmbeddingModelResource(cache_dir=str(self.cache)),
            "judge": ChatModelResource(cache_dir=str(self.cache)),  # unset: the evaluation judges with `chat`
        }

    def materialize(
        self,
        corpus: str,
        chat: ChatModelResource | None = None,
        selection=None,
        embeddings: EmbeddingModelResource | None = None,
        run_config: dict | None = None,
        raise_on_error: bool = True,
        instance: dg.DagsterInstance | None = None,
        tags: dict[str, str] | None = None,
    ) -> dg.ExecuteInProcessResult:
        instance = instance or dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("corpus", [corpus])
        if selection is None and run_config is None:  # everything, exports included: keep them in the workspace
            export = {"config": {"folder": str(self.root / "exports")}}
            run_config = {"ops": {"graphml_export": export, "parquet_export": export}}
        return dg.materialize(
            index_assets,
            instance=instance,
            partition_key=corpus,
            resources=self.resources(chat, embeddings),
            selection=selection,
            run_config=run_config,
            raise_on_error=raise_on_error,
            tags=tags,
        )

    def ask(
        self,
        corpus: str,
        asset: str,
        config: dict,
        chat: ChatModelResource | None = None,
        embeddings: EmbeddingModelResource | None = None,
        raise_on_error: bool = True,
    ) -> dg.ExecuteInProcessResult:
        """Materialize one query asset, as a launchpad run would."""
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("corpus", [corpus])
        return dg.materialize(
            [*index_assets, *query_assets],
            selection=[asset],
            instance=instance,
            partition_key=corpus,
            resources=self.resources(chat, embeddings),
            run_config={"ops": {asset: {"config": config}}},
            raise_on_error=raise_on_error,
        )

    def environment(self, base_url: str | None, **more: str) -> dict[str, str]:
        """The variables that point a Dagster process (the CLI, a step) at this workspace and a model server."""
        return {
            "GRAPHRAG_DUCKDB": str(self.database),
            "GRAPHRAG_CACHE_DIR": str(self.cache),
            "GRAPHRAG_RATE_LIMITS_FILE": str(self.root / "rate-limits.sqlite"),
            "GRAPHRAG_DATA_DIR": str(self.data),
            **({"GRAPHRAG_API_BASE": base_url} if base_url else {}),
            **more,
        }

    def sql(self, query: str, *params):
        with duckdb.connect(str(self.database), read_only=True) as conn:
            return conn.execute(query, list(params)).df()


def index(root, faults: Faults | None = None, offline: bool = False, **chat_settings):
    """The sample corpus indexed in a new workspace; `chat_settings` override the chat resource's."""
    workspace = Workspace(root)
    workspace.add_sample_corpus()
    if offline:
        return workspace, workspace.materialize(SAMPLE_CORPUS), None
    with FakeOpenAIServer(faults) as server:
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache, **{"timeout_seconds": 30.0, **chat_settings}),
            embeddings=embedding_resource(server.base_url, workspace.cache),
        )
    return workspace, result, server


def table(workspace: Workspace, name: str) -> pd.DataFrame:
    return workspace.sql(f"SELECT * FROM {name} WHERE corpus = ? ORDER BY id", SAMPLE_CORPUS)


def stored(workspace: Workspace, name: str, corpus: str = SAMPLE_CORPUS) -> pl.DataFrame:
    """A table of a corpus (the sample's) as the index's own steps read it (to hand to the method's functions)."""
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        return read_table(conn, name, corpus)


def materialization_metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    for event in result.get_asset_materialization_events():
        if event.materialization.asset_key == dg.AssetKey(asset):
            return {k: v.value for k, v in event.materialization.metadata.items()}
    raise KeyError(asset)


def repository_concurrency() -> dict:
    """The repository's dagster.yaml concurrency settings (its storage paths are relative to the repo)."""
    settings = yaml.safe_load((REPO / "dagster.yaml").read_text())
    return {"concurrency": settings["concurrency"], "telemetry": {"enabled": False}}


def index_job() -> dg.JobDefinition:
    """The index job, for a run whose steps start in processes of their own (dg.reconstructable)."""
    from graphrag_assets.definitions import defs

    return defs.resolve_job_def("index_corpus")
