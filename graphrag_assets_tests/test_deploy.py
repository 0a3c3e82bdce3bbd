"""deploy/ is loaded as production would load it, so a typo there fails here and not in a cluster."""

import json
import os
import re
import subprocess
import sys

import yaml
from dagster._config import process_config
from dagster._core.instance.ref import InstanceRef
from dagster._serdes.config_class import class_from_code_pointer

from .conftest import REPO

DEPLOY = REPO / "deploy"
# Placeholders for what production takes from Secrets; the values only have to be of the right shape.
SECRETS = {
    "DAGSTER_PG_HOST": "catalog.internal",
    "DAGSTER_PG_USERNAME": "dagster",
    "DAGSTER_PG_PASSWORD": "not-a-real-password",
    "DAGSTER_PG_DB": "dagster",
}


def test_the_production_instance_config_is_valid(tmp_path, monkeypatch):
    """Dagster's schema for dagster.yaml, then each pluggable class's own, without starting any of them."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "dagster.yaml").write_text((DEPLOY / "dagster.k8s.yaml").read_text())
    ref = InstanceRef.from_dir(str(tmp_path))
    parts = {
        "storage": ref.storage_data,
        "run_launcher": ref.run_launcher_data,
        "run_coordinator": ref.run_coordinator_data,
    }
    assert parts["storage"].class_name == "DagsterPostgresStorage"
    assert parts["run_launcher"].class_name == "K8sRunLauncher"
    for section, data in parts.items():
        pluggable = class_from_code_pointer(data.module_name, data.class_name)
        checked = process_config(pluggable.config_type(), data.config_dict)
        assert checked.success, f"{section}: {[e.message for e in checked.errors]}"


def test_the_store_config_map_names_only_settings_the_project_reads():
    config_map = yaml.safe_load((DEPLOY / "graphrag-store.yaml").read_text())
    assert config_map["kind"] == "ConfigMap"
    source = "\n".join(path.read_text() for path in (REPO / "graphrag_assets").rglob("*.py"))
    read = set(re.findall(r'"(GRAPHRAG_[A-Z_]+)"', source)) | {"AWS_REGION"}
    assert set(config_map["data"]) <= read, set(config_map["data"]) - read
    assert not any("password" in str(value).lower() for value in config_map["data"].values())


def test_the_project_loads_with_the_store_config_map():
    """Definitions load with the ConfigMap's environment, and the store resource is the DuckLake catalog."""
    settings = yaml.safe_load((DEPLOY / "graphrag-store.yaml").read_text())["data"]
    probe = (
        "import json; from graphrag_assets.definitions import defs; "
        "store = defs.resources['duckdb']; "
        "print(json.dumps({'database': store.database, 'data_path': store.ducklake_data_path}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHRAG_")}
    loaded = subprocess.run(
        [sys.executable, "-c", probe], env={**env, **settings}, capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    store = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert store == {"database": settings["GRAPHRAG_DUCKDB"], "data_path": settings["GRAPHRAG_DUCKLAKE_DATA_PATH"]}
    assert store["database"].startswith("ducklake:postgres:")
