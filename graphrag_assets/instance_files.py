"""A dg project's GraphRAG instances as its defs.yaml files declare them, read without Dagster and before anything
reads the GRAPHRAG_ variables (settings.py): `graphrag-assets --instance NAME` points the store, the corpora and the
endpoint at one instance's first. The component (components.py) takes its paths from here too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from .method.ingest.object_storage import is_object_storage

COMPONENT_TYPE = "graphrag_assets.components.GraphRAG"
DEFAULT_STORE = ".graphrag/graphrag.duckdb"


def local(path: str, project_root: Path) -> str:
    """A path of the defs.yaml as the processes use it: relative ones are the project's."""
    if is_object_storage(path) or path.startswith("ducklake:") or Path(path).is_absolute():
        return path
    return str(project_root / path)


@dataclass(frozen=True)
class StatePaths:
    store: str
    vector_index_dir: str
    mirror_dir: str
    exports_dir: str


def state_paths(store: str, vector_index_dir: str | None, project_root: Path) -> StatePaths:
    """Where an instance keeps its store and what derives from it: beside a store file, or in the project's
    .graphrag/ for a DuckLake store."""
    store = local(store, project_root)
    state = str(Path(store).parent) if not store.startswith("ducklake:") else str(project_root / ".graphrag")
    vectors = local(vector_index_dir, project_root) if vector_index_dir else f"{state}/vector-index"
    return StatePaths(store, vectors, f"{state}/mirrors", f"{state}/exports")


def dg_project_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` whose pyproject.toml makes it a dg project."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "[tool.dg" in pyproject.read_text(encoding="utf-8", errors="replace"):
            return folder
    return None


def instances(project_root: Path) -> dict[str, tuple[Path, dict]]:
    """Each GraphRAG instance of the project by name (its key_prefix, else its folder's name): its defs.yaml and
    attributes as written."""
    found = {}
    for path in sorted(project_root.rglob("defs.yaml")):
        if any(part.startswith(".") or part in ("node_modules", "__pycache__") for part in path.parts):
            continue
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("type") == COMPONENT_TYPE:
                attributes = document.get("attributes") or {}
                found[attributes.get("key_prefix") or path.parent.name] = (path, attributes)
    return found


def instance_environment(attributes: dict, project_root: Path) -> dict[str, str]:
    """The GRAPHRAG_ variables that point this repository's commands at the instance: its store and derived
    files, its documents' folder, its endpoint (copied from the variables it names) and its models."""
    paths = state_paths(
        attributes.get("store", ".graphrag/graphrag.duckdb"), attributes.get("vector_index_dir"), project_root
    )
    environment = {"GRAPHRAG_DUCKDB": paths.store, "GRAPHRAG_VECTOR_INDEX_DIR": paths.vector_index_dir}
    if attributes.get("ducklake_data_path"):
        environment["GRAPHRAG_DUCKLAKE_DATA_PATH"] = attributes["ducklake_data_path"]
    documents = attributes.get("documents", "data")
    if isinstance(documents, str):
        environment["GRAPHRAG_DATA_DIR"] = local(documents, project_root)
    for ours, theirs in (
        ("GRAPHRAG_API_BASE", attributes.get("api_base_variable", "GRAPHRAG_API_BASE")),
        ("GRAPHRAG_API_KEY", attributes.get("api_key_variable", "GRAPHRAG_API_KEY")),
    ):
        if os.getenv(theirs):
            environment[ours] = os.environ[theirs]
    for ours, attribute in (("GRAPHRAG_CHAT_MODEL", "chat_model"), ("GRAPHRAG_EMBEDDING_MODEL", "embedding_model")):
        if attributes.get(attribute):
            environment[ours] = attributes[attribute]
    return environment
