"""Operating the index: the new-corpus sensor, the nightly schedule, incremental re-indexing."""

import datetime

import dagster as dg
import pytest

from graphrag_assets.automation.corpora import alias_overrides_sensor, new_corpus_sensor, nightly_reindex
from graphrag_assets.resources import MAX_COST_TAG, CorporaResource, EmbeddingModelResource
from graphrag_assets_tests.corpora import short_notes, split_sample
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import (
    OFFLINE_MODELS,
    SAMPLE_CORPUS,
    chat_resource,
    embedding_resource,
    materialization_metadata,
    open_instance,
)


def test_the_sensor_registers_new_corpora_and_refuses_unsafe_folders(workspace, tmp_path):
    (workspace.data / "reports-2024").mkdir()
    (workspace.data / "reports-2024" / "q1.md").write_text("# Q1\nAda Lovelace joined the board.")
    (workspace.data / "nothing-yet").mkdir()  # an empty folder waits for its files: no run, no red asset
    (workspace.data / "Not Safe").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (workspace.data / "escape").symlink_to(tmp_path / "elsewhere")
    workspace.add_sample_corpus()
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_sensor_context(
        instance=instance, resources={"corpora": CorporaResource(root=str(workspace.data)), **OFFLINE_MODELS}
    )
    result = new_corpus_sensor(context)
    assert sorted(r.partition_key for r in result.run_requests) == [SAMPLE_CORPUS, "reports-2024"]
    assert sorted(result.dynamic_partitions_requests[0].partition_keys) == [SAMPLE_CORPUS, "reports-2024"]

    instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS, "reports-2024"])
    again = new_corpus_sensor(
        dg.build_sensor_context(
            instance=instance, resources={"corpora": CorporaResource(root=str(workspace.data)), **OFFLINE_MODELS}
        )
    )
    assert isinstance(again, dg.SkipReason) and "refused: Not Safe, escape, nothing-yet" in again.skip_message
    names, refused = CorporaResource(root=str(workspace.data)).scan()
    assert "not a safe identifier" in refused["Not Safe"] and "outside" in refused["escape"]
    assert refused["nothing-yet"].startswith("it holds no documents yet")


def test_an_edited_aliases_file_reruns_the_resolved_graph_of_its_corpus(workspace):
    workspace.add_sample_corpus()
    (workspace.data / "other").mkdir()
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS, "other"])
    corpora = {"corpora": CorporaResource(root=str(workspace.data)), **OFFLINE_MODELS}

    def tick(cursor):
        context = dg.build_sensor_context(instance=instance, resources=corpora, cursor=cursor)
        return alias_overrides_sensor(context), context.cursor

    result, cursor = tick(None)
    assert isinstance(result, dg.SkipReason)  # no corpus has the file
    overrides = workspace.data / SAMPLE_CORPUS / "aliases.csv"
    overrides.write_text("entity,canonical,action\nMERRY CHRISTMAS,CHRISTMAS,reject\n")
    requests, cursor = tick(cursor)
    assert [r.partition_key for r in requests] == [SAMPLE_CORPUS]
    selected = {k.to_user_string() for k in requests[0].asset_selection}
    assert {"entity_aliases", "communities", "community_reports", "layouts"} <= selected and "entities" not in selected
    assert isinstance(tick(cursor)[0], dg.SkipReason)  # unchanged: nothing to do
    overrides.unlink()
    assert [r.partition_key for r in tick(cursor)[0]] == [SAMPLE_CORPUS]  # removing it is a change too


def test_the_nightly_schedule_reindexes_every_corpus_that_still_has_a_folder(workspace):
    for name in ("a", "b"):
        (workspace.data / name).mkdir()
        (workspace.data / name / "notes.txt").write_text(f"Notes of corpus {name}.")
    corpora = {"corpora": CorporaResource(root=str(workspace.data)), **OFFLINE_MODELS}
    tick = datetime.datetime(2026, 11, 30, 2, tzinfo=datetime.UTC)
    (workspace.root / "home").mkdir()
    # Schedule contexts are closed with `with`: one left open keeps a reloaded instance's storage in a context
    # variable, and every later Definitions load in this process fails once that instance is collected.
    with open_instance(workspace.root / "home") as instance:
        with dg.build_schedule_context(instance=instance, resources=corpora, scheduled_execution_time=tick) as context:
            assert isinstance(nightly_reindex(context), dg.SkipReason)
        instance.add_dynamic_partitions("corpus", ["a", "b", "deleted"])
        with dg.build_schedule_context(instance=instance, resources=corpora, scheduled_execution_time=tick) as context:
            requests = nightly_reindex(context)
    assert sorted(r.partition_key for r in requests) == ["a", "b"]
    assert requests[0].run_key == "nightly-a-2026-11-30"
    assert nightly_reindex.default_status == dg.DefaultScheduleStatus.RUNNING


@pytest.mark.slow
def test_reindexing_pays_only_for_what_changed(workspace):
    names = split_sample(workspace.data / "parts", 6)
    held_out = workspace.data / "parts" / names[-1]
    held_text = held_out.read_text()
    held_out.unlink()

    def reindex():
        with FakeOpenAIServer() as server:
            result = workspace.materialize(
                "parts",
                chat=chat_resource(server.base_url, workspace.cache),
                embeddings=embedding_resource(server.base_url, workspace.cache),
            )
            return result, server.successes("extract"), server.successes("report") + server.successes("report_batch")

    first, first_extracts, first_reports = reindex()
    assert first.success and len(first_extracts) > 0

    unchanged, extracts, reports = reindex()
    assert not extracts and not reports  # nothing changed: every call is answered by the cache
    assert materialization_metadata(unchanged, "entities")["model_calls"] == 0

    held_out.write_text(held_text)  # a new document arrives
    added, extracts, reports = reindex()
    new_units = workspace.sql(
        """SELECT t.id FROM text_units t JOIN documents d ON d.id = t.document_id
                                 WHERE d.title = ? AND t.corpus = 'parts'""",
        names[-1],
    )
    assert len(extracts) == len(new_units) and all(n == 1 for n in extracts.values())
    # Only communities whose context changed were written again: every report asked for is one the first run never
    # asked for (an unchanged context is answered by the cache), and fewer than the first run's report calls.
    assert reports and not set(reports) & set(first_reports)
    assert len(reports) < len(first_reports)
    assert materialization_metadata(added, "communities")["started_from"] == "the last run's communities"
    # Plus the probe, when this step is the first of the run to call the endpoint.
    assert materialization_metadata(added, "community_reports")["model_calls"] - sum(reports.values()) in (0, 1)

    gone = workspace.data / "parts" / names[0]
    gone_id = workspace.sql("SELECT id FROM documents WHERE title = ?", names[0])["id"][0]
    gone.unlink()  # a document is deleted
    reindex()
    assert workspace.sql("SELECT count(*) AS n FROM text_units WHERE document_id = ?", gone_id)["n"][0] == 0
    units = set(workspace.sql("SELECT id FROM text_units WHERE corpus = 'parts'")["id"])
    for table in ("entities", "relationships"):
        referenced = {
            u
            for ids in workspace.sql(f"SELECT text_unit_ids FROM {table} WHERE corpus = 'parts'")["text_unit_ids"]
            for u in ids
        }
        assert referenced <= units
    assert set(workspace.sql("SELECT text_unit_id FROM covariates WHERE corpus = 'parts'")["text_unit_id"]) <= units


def test_automatic_runs_against_a_paid_model_need_a_budget_and_carry_it(workspace, monkeypatch):
    (workspace.data / "a").mkdir()
    (workspace.data / "a" / "notes.txt").write_text("Notes of corpus a.")
    paid = {"chat": chat_resource("http://127.0.0.1:9/v1", workspace.cache), "embeddings": EmbeddingModelResource()}
    resources = {"corpora": CorporaResource(root=str(workspace.data)), **paid}
    (workspace.root / "home").mkdir()
    with open_instance(workspace.root / "home") as instance:
        paid_runs_need_a_budget(instance, resources, monkeypatch)


def paid_runs_need_a_budget(instance, resources, monkeypatch):
    monkeypatch.delenv("GRAPHRAG_RUN_BUDGET_USD", raising=False)
    monkeypatch.delenv("GRAPHRAG_PRICES", raising=False)

    skipped = new_corpus_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(skipped, dg.SkipReason)
    assert "'gpt-4o-mini' cost money" in skipped.skip_message and "GRAPHRAG_RUN_BUDGET_USD" in skipped.skip_message
    assert instance.get_dynamic_partitions("corpus") == []  # still new, for when there is a budget

    monkeypatch.setenv("GRAPHRAG_RUN_BUDGET_USD", "0")
    refused = new_corpus_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert "GRAPHRAG_RUN_BUDGET_USD='0' cannot be used: it must be more than 0" in refused.skip_message

    monkeypatch.setenv("GRAPHRAG_RUN_BUDGET_USD", "2.5")
    launched = new_corpus_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert [r.tags[MAX_COST_TAG] for r in launched.run_requests] == ["2.5"]
    instance.add_dynamic_partitions("corpus", ["a"])
    tick = datetime.datetime(2026, 11, 30, 2, tzinfo=datetime.UTC)
    with dg.build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=tick) as context:
        assert [r.tags[MAX_COST_TAG] for r in nightly_reindex(context)] == ["2.5"]

    # A free model (Ollama on this machine, say) needs no budget.
    monkeypatch.delenv("GRAPHRAG_RUN_BUDGET_USD")
    monkeypatch.setenv("GRAPHRAG_PRICES", '{"gpt-4o-mini": 0}')
    with dg.build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=tick) as context:
        assert [r.tags for r in nightly_reindex(context)] == [{}]


def test_the_sensor_estimates_a_new_corpus_and_leaves_one_above_the_budget_waiting(workspace, monkeypatch):
    short_notes(workspace.data / "small", 3)
    short_notes(workspace.data / "large", 80)
    paid = {"chat": chat_resource("http://127.0.0.1:9/v1", workspace.cache), "embeddings": EmbeddingModelResource()}
    resources = {"corpora": CorporaResource(root=str(workspace.data)), **paid}
    monkeypatch.setenv("GRAPHRAG_PRICES", '{"gpt-4o-mini": [100, 100]}')  # a token: a hundredth of a cent
    monkeypatch.setenv("GRAPHRAG_RUN_BUDGET_USD", "5")
    result = new_corpus_sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources=resources))
    assert [r.partition_key for r in result.run_requests] == ["small"]
    assert result.dynamic_partitions_requests[0].partition_keys == ["small"]  # the other is still new, and waits
