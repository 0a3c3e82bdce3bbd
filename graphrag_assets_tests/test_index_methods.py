"""The index methods a corpus can be built with: standard, fast (no extraction; reports from source text) and lazy
(no chat call at all)."""

import json
import re

import polars as pl
import pytest

from graphrag_assets.method.communities.reports import parse_report
from graphrag_assets.method.graph.aliases import resolve
from graphrag_assets.method.model_interface import InvalidReply
from graphrag_assets.method.offline.nlp_graph import extract_concept_graph, noun_phrases, prune_concept_graph

from .conftest import SAMPLE_CORPUS, chat_resource, embedding_resource, materialization_metadata, stored
from .model_server import FakeOpenAIServer

CHAT_KINDS_OF_EXTRACTION = {"extract", "gleaning", "loop", "claims", "claims_gleaning", "summarize"}


def index_with(workspace, server, method: str):
    workspace.add_sample_corpus()
    export = {"config": {"folder": str(workspace.root / "exports")}}
    return workspace.materialize(
        SAMPLE_CORPUS,
        chat=chat_resource(server.base_url, workspace.cache),
        embeddings=embedding_resource(server.base_url, workspace.cache),
        run_config={
            "ops": {
                "entity_graph": {"config": {"method": method}},
                "graphml_export": export,
                "parquet_export": export,
            }
        },
    )


@pytest.mark.slow
def test_a_fast_index_asks_the_model_for_reports_alone_and_they_cite_their_own_passages(workspace):
    with FakeOpenAIServer() as server:
        result = index_with(workspace, server, "fast")
        kinds = {s.kind for s in server.served}
    assert result.success and all(check.passed for check in result.get_asset_check_evaluations())
    assert not kinds & CHAT_KINDS_OF_EXTRACTION and {"report", "report_batch"} & kinds
    entities = materialization_metadata(result, "entities")
    assert entities["index_method"] == "fast" and entities["engine"] == "nlp (fast method)"
    plan = materialization_metadata(result, "documents")["index_plan"]  # what every step of the run was told
    assert "- covariates: none: a fast index extracts no claims" in plan and "from source text units" in plan
    assert workspace.sql("SELECT count(*) AS n FROM covariates")["n"][0] == 0
    settings = workspace.sql("SELECT settings FROM lineage WHERE asset = 'entities'")["settings"][0]
    assert json.loads(settings)["method"] == "fast"  # what makes a later run of another method rebuild
    reports = workspace.sql("SELECT * FROM community_reports WHERE corpus = ?", SAMPLE_CORPUS)
    assert len(reports) and (reports["status"] == "ok").all()
    communities = workspace.sql("SELECT community, id, children, entity_ids FROM communities").set_index("community")
    # Reports read the resolved graph, where an alias group is one entity holding its variants' text units.
    entities, _ = resolve(
        stored(workspace, "entities"), stored(workspace, "relationships"), stored(workspace, "entity_aliases")
    )
    units_of = dict(zip(entities["id"], entities["text_unit_ids"]))
    for report in reports.itertuples():
        # Its own passages, and the reports of communities below it that its context may hold in their place (a
        # community carried down unsplit shares its copy's report, which may cite the copy's sub-communities).
        own = {u[:8] for e in communities.loc[report.community, "entity_ids"] for u in units_of[e]}
        below = list(communities.loc[report.community, "children"])
        while below:
            child = below.pop()
            own.add(communities.loc[child, "id"][:8])
            below.extend(communities.loc[child, "children"])
        cited = set(re.findall(r"\b[0-9a-f]{8}\b", report.findings))
        assert cited and cited <= own, report.community


@pytest.mark.slow
def test_a_lazy_index_sends_no_chat_request_and_global_search_says_what_to_use(workspace):
    with FakeOpenAIServer() as server:
        result = index_with(workspace, server, "lazy")
        chat_requests = [s.kind for s in server.served if s.endpoint == "chat"]
        assert result.success and all(check.passed for check in result.get_asset_check_evaluations())
        assert chat_requests == []  # not one, not even a probe: text units and concepts are embedded, nothing more
        assert any(s.kind == "embed" for s in server.served)
        assert workspace.sql("SELECT count(*) AS n FROM community_reports")["n"][0] == 0
        assert workspace.sql("SELECT count(*) AS n FROM communities")["n"][0] > 0
        assert workspace.sql("SELECT count(*) AS n FROM text_embeddings")["n"][0] > 0
        models = {
            "chat": chat_resource(server.base_url, workspace.cache),
            "embeddings": embedding_resource(server.base_url, workspace.cache),
        }
        question = {"question": "Who is Bob Cratchit?"}
        assert workspace.ask(SAMPLE_CORPUS, "basic_search", question, **models).success
        refused = workspace.ask(SAMPLE_CORPUS, "global_search", question, raise_on_error=False, **models)
    failure = refused.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "global search reads community reports, and this corpus has none (a lazy index writes none)" in (
        failure.description
    )
    assert "ask with one of local, basic, text_summary, lazy" in failure.description  # what it can answer with


def test_pruning_drops_ubiquitous_phrases_and_edges_seen_once():
    entities = pl.DataFrame(
        {"title": ["SCROOGE", "MARLEY", "FRED", "CHRISTMAS"], "frequency": [4, 3, 2, 9], "text_unit_ids": [[]] * 4}
    )
    relationships = pl.DataFrame(
        {
            "source": ["MARLEY", "FRED", "CHRISTMAS"],
            "target": ["SCROOGE", "SCROOGE", "SCROOGE"],
            "weight": [3.0, 1.0, 5.0],
        }
    )
    kept, edges, pruned = prune_concept_graph(entities, relationships, 10, 0.5, 2.0)
    assert list(kept["title"]) == ["SCROOGE", "MARLEY", "FRED"]  # CHRISTMAS is in 9 of 10 units
    assert edges.select("source", "target").rows() == [("MARLEY", "SCROOGE")]
    assert pruned == {"ubiquitous_phrases_pruned": 1, "ubiquitous_examples": "CHRISTMAS", "weak_edges_pruned": 1}
    small, _, _ = prune_concept_graph(entities, relationships, 9, 0.5, 2.0)
    assert len(small) == 4  # under 10 units, nothing is ubiquitous


def test_the_noun_phrase_chunker_finds_common_concepts_and_leaves_generic_nouns_out():
    sentence = "The old miser Ebenezer Scrooge kept nothing in his counting-house, and the clerk warmed his hands."
    # "nothing" is left out; the tagger's lexicon does not know "counting-house" and takes it for an adjective.
    assert noun_phrases(sentence) == ["old miser Ebenezer Scrooge", "clerk", "hands"]
    # The concept graph's phrases name something particular: a lone common noun does not.
    assert noun_phrases(sentence, particular_only=True) == ["old miser Ebenezer Scrooge"]
    assert noun_phrases("Scrooge sat by a well-kept fire.", particular_only=True) == ["Scrooge", "well-kept fire"]
    units = pl.DataFrame(
        {
            "id": ["u1", "u2"],
            "text": [
                "The head clerk warmed his cold hands. The head clerk had a small fire. The fire crackled.",
                "Scrooge watched the head clerk and the small fire. The fire was out. Nothing was warm in the house.",
            ],
        }
    )
    entities, relationships = extract_concept_graph(units, min_mentions=2)
    # Mentioned twice: "fire" too, but alone it names no particular thing; "nothing" names nothing.
    assert set(entities["title"]) == {"HEAD CLERK", "SMALL FIRE"}
    assert relationships.select("source", "target").rows() == [("HEAD CLERK", "SMALL FIRE")]
    assert relationships["weight"].to_list() == [2.0]  # two sentences share them


def test_a_lazy_index_of_noun_phrases_is_chosen_at_launch(workspace):
    folder = workspace.data / "office"
    folder.mkdir()
    (folder / "a.txt").write_text(
        "The head clerk warmed his cold hands at the candle. The head clerk had a small fire."
    )
    (folder / "b.txt").write_text("Scrooge watched the head clerk and the small fire. The small fire went out.")
    graph = {"method": "lazy", "concept_phrases": "noun_phrases"}
    result = workspace.materialize(
        "office",
        selection=["documents", "base_text_units", "entities", "relationships"],
        run_config={"ops": {"entity_graph": {"config": graph}}},
    )
    assert materialization_metadata(result, "entities")["engine"] == "nlp (lazy method)"
    titles = set(workspace.sql("SELECT title FROM entities WHERE corpus = 'office'")["title"])
    assert {"HEAD CLERK", "SMALL FIRE"} <= titles  # common nouns, which the names rule never finds


def test_a_report_citing_a_passage_of_another_community_is_refused():
    report = {
        "title": "Marley",
        "summary": "Marley's ghost.",
        "rating": 5,
        "rating_explanation": "central",
        "findings": [{"summary": "Ghost", "explanation": "He visits [Data: Sources (0a1b2c3d, 99999999)]"}],
    }
    parse_report(json.dumps(report))  # without the rows to check against, any id passes
    with pytest.raises(InvalidReply, match=r"cites rows \['99999999'\]"):
        parse_report(json.dumps(report), rows={"0a1b2c3d"})
