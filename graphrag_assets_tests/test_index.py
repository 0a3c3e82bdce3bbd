"""The first half of the index materialized with Dagster on the sample corpus, with the test model and offline."""

from collections import Counter

import pandas as pd
import pytest

from graphrag_assets.assets.common import METHOD_VERSION
from graphrag_assets_tests.model_server import FakeOpenAIServer, Faults

from .conftest import SAMPLE_CORPUS, Workspace, chat_resource, index, materialization_metadata, table

GRAPH_TABLES = ("entities", "relationships", "covariates")


@pytest.mark.parametrize("engine", ["llm_index", "offline_index"])
def test_every_row_traces_back_to_the_documents(engine, request):
    workspace, result, _ = request.getfixturevalue(engine)
    assert result.success
    documents, units = table(workspace, "documents"), table(workspace, "text_units")
    entities, relationships, claims = (table(workspace, name) for name in GRAPH_TABLES)
    assert len(documents) == 1 and len(units) > 80 and len(entities) > 50 and len(relationships) > 50
    unit_ids = set(units["id"])
    assert set(units["document_id"]) <= set(documents["id"])
    assert sorted(unit_ids) == sorted(documents["text_unit_ids"].iloc[0])
    titles = set(entities["title"])
    assert set(relationships["source"]) | set(relationships["target"]) <= titles
    for frame in (entities, relationships):
        assert all(0 < len(ids) and set(ids) <= unit_ids for ids in frame["text_unit_ids"])
    assert set(claims["text_unit_id"]) <= unit_ids
    # The back-links on text units agree with the forward links.
    by_unit = units.set_index("id")
    for row in entities.itertuples():
        assert all(row.id in by_unit.loc[u, "entity_ids"] for u in row.text_unit_ids)
    assert (entities["degree"] >= 0).all() and entities["description"].str.len().gt(0).all()
    assert relationships["weight"].gt(0).all()


def test_the_llm_engine_extracts_claims_and_summarizes(llm_index):
    workspace, result, server = llm_index
    claims = table(workspace, "covariates")
    assert len(claims) > 50 and set(claims["status"]) <= {"TRUE", "FALSE", "SUSPECTED"}
    kinds = {s.kind for s in server.served}
    assert {"extract", "gleaning", "claims", "claims_gleaning", "summarize"} <= kinds
    scrooge = table(workspace, "entities").set_index("title").loc["SCROOGE"]
    assert scrooge.frequency > 50 and scrooge.description.startswith("SCROOGE: ")  # the summary, not a list


def test_model_usage_is_in_the_metadata_and_the_lineage(llm_index):
    workspace, result, server = llm_index
    metadata = materialization_metadata(result, "entities")
    extraction_calls = sum(1 for s in server.served if s.kind in {"extract", "gleaning", "summarize"})
    # The endpoint is probed once for chat and once for embeddings, by whichever step asks first.
    assert server.count("probe") == 2
    assert metadata["model_calls"] - extraction_calls in (0, 1) and metadata["failed_calls"] == 0
    assert metadata["prompt_tokens"] > 0 and metadata["completion_tokens"] > 0
    embedded = materialization_metadata(result, "text_embeddings")  # embedding tokens are reported apart
    assert embedded["embedding_tokens"] > 0 and "prompt_tokens" not in embedded
    assert metadata["engine"] == "llm:gpt-4o-mini" and "SCROOGE" in metadata["top_entities_by_degree"]
    lineage = workspace.sql("SELECT * FROM lineage ORDER BY materialized_at")
    assert lineage["asset"].is_unique  # one row per materialization, and this was one run
    assert {
        "documents",
        "base_text_units",
        "entities",
        "relationships",
        "covariates",
        "text_units",
        "communities",
        "community_reports",
        "text_embeddings",
        "layouts",
    } <= set(lineage["asset"])
    entities_row = lineage.set_index("asset").loc["entities"]
    assert entities_row.engine == "llm:gpt-4o-mini" and '"calls"' in entities_row.model_usage
    assert "base_text_units" in entities_row.upstream_versions
    assert entities_row.code_version.startswith(f"{METHOD_VERSION}-")


def test_offline_engine_records_itself_and_extracts_no_claims(offline_index):
    workspace, result, _ = offline_index
    assert materialization_metadata(result, "covariates")["skipped_because"] == "the offline engine extracts no claims"
    assert set(
        workspace.sql("SELECT engine FROM lineage WHERE asset = 'entities' AND corpus = ?", SAMPLE_CORPUS)["engine"]
    ) == {"offline"}
    assert {"SCROOGE", "TINY TIM", "BOB CRATCHIT", "MARLEY"} <= set(table(workspace, "entities")["title"])


@pytest.mark.slow
def test_transient_faults_give_the_fault_free_result(llm_index, tmp_path):
    clean, _, _ = llm_index
    faulty, result, server = index(
        tmp_path,
        Faults(transient_every=4, retry_after_seconds=0.01, slow_every=25, slow_seconds=2.0),
        timeout_seconds=1.0,
        # Slow replies are scattered, not an outage; the breaker has tests of its own (test_resume.py).
        circuit_breaker_failures=50,
    )
    assert {s.kind for s in server.served} >= {"fault"}
    assert materialization_metadata(result, "entities")["retries"] > 0
    for name in GRAPH_TABLES + ("text_units", "communities", "community_reports", "text_embeddings"):
        pd.testing.assert_frame_equal(table(faulty, name), table(clean, name))


@pytest.mark.slow
def test_an_endpoint_that_misbehaves_gives_the_fault_free_index(llm_index, tmp_path):
    """Every everyday fault (Faults.misbehaving: transient 5xx/429, replies cut off or garbled, in prose, of the
    wrong record kind, or refused): every one is asked again, and the index equals the clean one."""
    clean, _, clean_server = llm_index
    faults = Faults.misbehaving()
    faulty, result, server = index(tmp_path, faults)
    assert result.success
    seen = {s.kind for s in server.served}
    assert {"fault", "garbled", "extract_corrected", "report_corrected"} <= seen, Counter(s.kind for s in server.served)
    for name in GRAPH_TABLES + ("text_units", "communities", "community_reports", "text_embeddings"):
        pd.testing.assert_frame_equal(table(faulty, name), table(clean, name))
    # Every valid reply was asked for exactly once in each run; the faulty run paid more only for re-asks.
    assert set(server.successes()) >= set(clean_server.successes())
    entities, reports = (materialization_metadata(result, a) for a in ("entities", "community_reports"))
    assert entities["invalid_replies"] > 10 and entities["reasked"] >= entities["invalid_replies"]
    assert entities["failed_calls"] == 0 and entities["failed_text_units"] == 0
    assert reports["invalid_replies"] > 0 and reports["failed"] == 0
    lineage = faulty.sql("SELECT model_usage FROM lineage WHERE asset = 'community_reports'")["model_usage"][0]
    assert '"invalid_replies"' in lineage and '"repaired_json"' in lineage and '"reasked"' in lineage


def test_a_healthy_rerun_after_a_failing_one_pays_for_what_failed_and_keeps_nothing_invalid(tmp_path):
    """An endpoint that refuses everything fails the step loudly; once it is fixed the index is complete."""
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    with FakeOpenAIServer(Faults(refusal_every=1, heeds_corrections=False)) as refusing:
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(refusing.base_url, workspace.cache),
            selection=["entities", "relationships"],
            raise_on_error=False,
        )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "text units got no valid model reply" in failure.description
    with FakeOpenAIServer() as healthy:
        workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(healthy.base_url, workspace.cache),
            selection=["entities", "relationships"],
        )
        assert healthy.count("extract") == len(table(workspace, "base_text_units"))  # no refusal was cached
    assert len(table(workspace, "entities")) > 50


def test_the_api_key_never_reaches_duckdb_logs_or_metadata(tmp_path, caplog):
    secret = "sk-test-DO-NOT-LEAK-0123456789"
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    with FakeOpenAIServer(Faults(broken_every=3)) as server:  # failures echo the Authorization header
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache, api_key=secret, max_retries=0),
            selection=["covariates"],
            run_config={"ops": {"covariates": {"config": {"max_failed_unit_fraction": 1.0}}}},
        )
    metadata = materialization_metadata(result, "covariates")
    assert metadata["failed_calls"] > 0  # the leaky errors happened...
    assert secret not in repr(metadata) and secret not in caplog.text  # ...and were redacted everywhere
    assert secret.encode() not in workspace.database.read_bytes()
    usage = workspace.sql("SELECT model_usage FROM lineage WHERE asset = 'covariates'")["model_usage"][0]
    assert "***" in usage and secret not in usage
