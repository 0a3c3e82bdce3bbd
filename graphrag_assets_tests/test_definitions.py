"""The project's Definitions and instance files: a typo or an asset renamed by accident fails here."""

import re
import shutil

import dagster as dg
import pytest
from dagster._core.instance.config import dagster_instance_config

from graphrag_assets.definitions import defs

from .conftest import INDEX_ASSETS, REPO, SAMPLE_CORPUS, Workspace, chat_resource, open_instance
from .model_server import FakeOpenAIServer, Faults

QUERY = [
    "global_search",
    "local_search",
    "drift_search",
    "lazy_search",
    "basic_search",
    "text_summary_search",
    "question_generation",
]


EVALUATION_ASSETS = (
    "evaluation_questions",
    "evaluation_answers",
    "pairwise_judgements",
    "win_rates",
    "claim_metrics",
    "assertion_scores",
    "assertion_accuracy",
)


def test_the_asset_graph_is_what_the_readme_describes():
    repository = defs.get_repository_def()
    assert sorted(k.to_user_string() for k in repository.asset_graph.get_all_asset_keys()) == sorted(
        INDEX_ASSETS + tuple(QUERY) + EVALUATION_ASSETS + ("tuned_prompts", "index_estimate")
    )
    assert sorted((c.asset_key.to_user_string(), c.name) for c in repository.asset_graph.asset_check_keys) == [
        ("communities", "one_community_per_level"),
        ("community_reports", "every_community_reported"),
        ("document_embeddings", "document_embeddings_valid"),
        ("entities", "entities_found"),
        ("graph_embeddings", "graph_embeddings_valid"),
        ("layouts", "one_row_per_node"),
        ("relationships", "relationship_endpoints_are_entities"),
        ("text_embeddings", "text_embeddings_complete"),
    ]
    jobs = {j.name for j in repository.get_all_jobs()} - {"__ASSET_JOB"}
    assert jobs == {"index_corpus", "evaluate_corpus", "tune_prompts", *(f"ask_{q}" for q in QUERY)}
    assert {s.name for s in repository.sensor_defs} == {
        "new_corpus_sensor",
        "alias_overrides_sensor",
        "prompt_files_sensor",
        "abandoned_runs_sensor",
        "failed_stages_sensor",
    }
    assert {s.name for s in repository.schedule_defs} == {"nightly_reindex"}
    assert set(defs.resources) == {"duckdb", "corpora", "chat", "embeddings", "judge"}


@pytest.mark.parametrize("folder,name", [(".", "dagster.yaml"), ("deploy", "dagster.k8s.yaml")])
def test_the_instance_files_are_valid_dagster_config(folder, name):
    config, _ = dagster_instance_config(str(REPO / folder), name)
    assert {"storage", "run_monitoring", "run_retries", "concurrency"} <= set(config)


def test_the_repo_instance_file_loads_as_an_instance(tmp_path):
    shutil.copy(REPO / "dagster.yaml", tmp_path / "dagster.yaml")
    with open_instance(tmp_path) as instance:
        assert instance.run_monitoring_enabled and instance.run_retries_enabled
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 2


def test_importing_the_definitions_creates_nothing(tmp_path):
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-c", "import graphrag_assets.definitions"],
        cwd=tmp_path,
        check=True,
        env={"PATH": "", "GRAPHRAG_DUCKDB": str(tmp_path / "store" / "g.duckdb")},
    )
    assert list(tmp_path.iterdir()) == []


def test_the_api_key_from_the_environment_never_reaches_run_or_event_storage(tmp_path, monkeypatch):
    """Through EnvVar and a persistent instance, as a deployment runs it, with a proxy that echoes the key."""
    secret = "sk-env-DO-NOT-STORE-0123456789"
    monkeypatch.setenv("GRAPHRAG_API_KEY", secret)
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    home = tmp_path / "home"
    home.mkdir()
    with FakeOpenAIServer(Faults(broken_every=3)) as server, open_instance(home) as instance:
        instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS])
        chat = chat_resource(server.base_url, workspace.cache, max_retries=0, api_key=dg.EnvVar("GRAPHRAG_API_KEY"))
        resources = {**workspace.resources(chat), "chat": chat}
        dg.materialize(
            defs.assets,
            selection=["documents", "base_text_units", "covariates"],
            instance=instance,
            partition_key=SAMPLE_CORPUS,
            resources=resources,
            raise_on_error=False,
            run_config={"ops": {"covariates": {"config": {"max_failed_unit_fraction": 1.0}}}},
        )
        assert server.count("broken") > 0  # the proxy echoed the key in its errors...
    stored = b"".join(path.read_bytes() for path in home.rglob("*") if path.is_file())
    assert secret.encode() not in stored and secret.encode() not in workspace.database.read_bytes()


def test_the_method_imports_no_dagster():
    """The method stays plain Python, testable and reusable without Dagster."""
    sources = (REPO / "graphrag_assets" / "method").rglob("*.py")
    offenders = [p.name for p in sources if re.search(r"^\s*(from|import) dagster", p.read_text(), re.M)]
    assert offenders == []


def test_the_package_holds_its_frames_in_polars_not_pandas():
    """Tables travel as polars frames; a pandas frame (or a DuckDB fetchdf) in the package would convert them back."""
    sources = (REPO / "graphrag_assets").rglob("*.py")
    pattern = r"^\s*(from|import) pandas|\.(fetchdf|df|to_pandas)\(\)|from_pandas\("
    offenders = [p.name for p in sources if re.search(pattern, p.read_text(), re.M)]
    assert offenders == []


def test_every_launchpad_setting_says_what_it_does():
    """Every field of every asset's config has a description, which the launchpad shows next to it."""
    from graphrag_assets.configs import evaluation, index, queries

    configs = {
        value
        for module in (evaluation, index, queries)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, dg.Config) and value.__module__ == module.__name__
    }
    assert len(configs) > 15
    undescribed = [f"{c.__name__}.{name}" for c in configs for name, f in c.model_fields.items() if not f.description]
    assert undescribed == []


def test_launch_time_settings_live_in_configs_and_docs_settings_md_lists_them_all():
    """One home: no dg.Config outside graphrag_assets/configs/, and the reference is what the configs say now
    (after a change to a setting: python -m graphrag_assets.settings_reference)."""
    from graphrag_assets.settings_reference import DOCUMENT, reference, steps_by_config

    elsewhere = [c.__qualname__ for c in steps_by_config() if not c.__module__.startswith("graphrag_assets.configs.")]
    assert elsewhere == []
    defined = re.compile(r"^class \w+\((?:dg\.Config|\w+Config|\w+Options)[,)]", re.M)
    outside = [
        p.name
        for p in (REPO / "graphrag_assets").rglob("*.py")
        if "configs" not in p.parts and defined.search(p.read_text())
    ]
    assert outside == []
    assert DOCUMENT.read_text() == reference(), (
        "docs/settings.md is stale: python -m graphrag_assets.settings_reference"
    )


def test_every_variable_the_docs_name_is_one_the_code_reads():
    """The README's copy-paste blocks and the reference name GRAPHRAG_* variables: each must be read somewhere,
    so a renamed setting cannot leave a block that silently does nothing."""
    code = [*(REPO / "graphrag_assets").rglob("*.py"), *(REPO / "graphrag_assets_tests").rglob("*.py")]
    source = "\n".join(path.read_text() for path in code if path.name != "test_definitions.py")
    scripts = "\n".join(path.read_text() for path in (REPO / "bin").iterdir() if path.is_file())
    for page in (REPO / "README.md", REPO / "docs" / "internals.md"):
        named = set(re.findall(r"\b(GRAPHRAG_[A-Z_]+)\b", page.read_text()))
        unread = {v for v in named if f'"{v}"' not in source and "${" + v not in scripts}
        assert named and not unread, (page.name, unread)
