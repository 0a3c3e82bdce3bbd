"""The second half of the index: communities, reports, embeddings, layouts, exports and their checks."""

import asyncio
import json
import shutil
from collections import Counter, defaultdict

import dagster as dg
import duckdb
import networkx as nx
import numpy as np
import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest

from graphrag_assets.assets.communities import every_community_reported, one_community_per_level
from graphrag_assets.assets.embeddings import vectors_check
from graphrag_assets.assets.index import entities_found, relationship_endpoints_are_entities
from graphrag_assets.method.communities.context import (
    CommunityContext,
    Element,
    GraphIndex,
    SubReport,
    build_context,
)
from graphrag_assets.method.communities.leiden import cluster_edges, cluster_graph, networkx_graph, weighted_edges
from graphrag_assets.method.communities.reports import (
    ReportSettings,
    generate_reports,
    parse_report,
    parse_report_batch,
)
from graphrag_assets.method.embeddings.text import document_embeddings
from graphrag_assets.method.graph.aliases import canonical_of
from graphrag_assets.method.model_interface import InvalidReply
from graphrag_assets.method.search.context import nearest
from graphrag_assets.models import ModelClient, ModelSettings

from .conftest import INDEX_ASSETS, SAMPLE_CORPUS, Workspace, chat_resource, materialization_metadata, stored, table
from .model_server import FakeOpenAIServer, Faults


@pytest.mark.parametrize("engine", ["llm_index", "offline_index"])
def test_every_asset_check_passes(engine, request):
    _, result, _ = request.getfixturevalue(engine)
    evaluations = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert evaluations == {
        name: True
        for name in (
            "relationship_endpoints_are_entities",
            "entities_found",
            "one_community_per_level",
            "every_community_reported",
            "text_embeddings_complete",
            "document_embeddings_valid",
            "graph_embeddings_valid",
            "one_row_per_node",
        )
    }


@pytest.mark.parametrize("engine", ["llm_index", "offline_index"])
def test_communities_form_a_hierarchy_with_provenance(engine, request):
    workspace, _, _ = request.getfixturevalue(engine)
    communities = table(workspace, "communities").set_index("community")
    entities = set(table(workspace, "entities")["id"])
    relationships = table(workspace, "relationships").set_index("id")
    title_of = table(workspace, "entities").set_index("id")["title"]
    # An alias's relationships belong to its canonical entity's community.
    canonical = {title_of[v]: title_of[c] for v, c in canonical_of(stored(workspace, "entity_aliases")).items()}
    assert communities["level"].min() == 0 and communities["level"].nunique() >= 2
    assert (communities.loc[communities["level"] == 0, "parent"] == -1).all()
    for number, row in communities.iterrows():
        assert set(row.entity_ids) <= entities and row["size"] == len(row.entity_ids)
        if row.parent >= 0:
            parent = communities.loc[row.parent]
            assert parent.level == row.level - 1 and number in parent.children
            assert set(row.entity_ids) <= set(parent.entity_ids)
        titles = set(table(workspace, "entities").set_index("id").loc[list(row.entity_ids), "title"])
        for rel in row.relationship_ids:  # relationships inside the community have both ends in it
            ends = {relationships.loc[rel, "source"], relationships.loc[rel, "target"]}
            assert {canonical.get(end, end) for end in ends} <= titles
    reports = table(workspace, "community_reports")
    assert sorted(reports["community"]) == sorted(communities.index) and (reports["status"] == "ok").all()
    assert reports["full_content"].str.startswith("# ").all()


def test_llm_reports_are_built_from_their_community(llm_index):
    workspace, _, server = llm_index
    reports = table(workspace, "community_reports")
    assert {"report", "report_batch"} <= {s.kind for s in server.served}  # large communities alone, small batched
    findings = [f for fs in reports["findings"] for f in json.loads(fs)]
    assert findings and all(set(f) == {"summary", "explanation"} for f in findings)
    assert reports["context_tokens"].between(1, 8000).all()


def test_offline_reports_are_extractive_and_say_so(offline_index):
    workspace, _, _ = offline_index
    reports = table(workspace, "community_reports")
    assert reports["rating_explanation"].str.contains("Extractive report").all()
    corpus_text = table(workspace, "documents")["text"].iloc[0]
    collapsed = " ".join(corpus_text.split())
    # Every summary sentence is quoted from the corpus, not generated.
    for summary in reports["summary"].head(10):
        assert summary.split(". ")[0][:60] in collapsed


def elements(prefix: str, count: int, words: int = 20) -> list[Element]:
    return [
        Element(
            "relationship",
            f"{prefix}{i}",
            f"{i},{prefix}{i},X," + "word " * words + ",3",
            frozenset([f"{prefix}{i}", "X" if prefix == "cross" else f"{prefix}{i}b"]),
        )
        for i in range(count)
    ]


def test_sub_community_reports_replace_the_largest_sub_communities_first():
    big, small, cross = elements("big", 12), elements("small", 3), elements("cross", 2)
    titles = lambda group: {t for e in group for t in e.owners}
    subs = [
        SubReport(7, "c7", frozenset(titles(big)), "Big community", "A short report of the big one."),
        SubReport(8, "c8", frozenset(titles(small)), "Small community", "A short report of the small one."),
    ]
    everything = big + small + cross
    generous = build_context(everything, budget=5000, sub_communities=subs)
    assert generous.substituted == [] and "-----Reports-----" not in generous.text

    budget = build_context(everything, 5000).tokens - sum(e.tokens for e in big) + 60
    tight = build_context(everything, budget=budget, sub_communities=subs)
    # The big sub-community's 12 elements gave way to its report; the small one's stayed.
    assert tight.substituted == [7] and tight.replaced_elements == {7: 12}
    assert "A short report of the big one." in tight.text and "small0" in tight.text and "big0" not in tight.text
    assert tight.tokens <= budget and not tight.truncated

    tighter = build_context(everything, budget=budget - 60, sub_communities=subs)
    assert tighter.substituted == [7, 8] and "small0" not in tighter.text and tighter.tokens <= budget - 60


def test_a_leaf_context_is_cut_at_the_budget_in_order_of_prominence():
    leaf = build_context(elements("big", 12), budget=150)
    assert leaf.truncated and leaf.tokens <= 150 and "big0" in leaf.text and "big11" not in leaf.text


FINDING = '[{"summary": "a", "explanation": "b"}]'


@pytest.mark.parametrize(
    "reply,repaired",
    [
        ('{"title": "T", "summary": "S", "rating": 7, "rating_explanation": "R", "findings": ' + FINDING + "}", False),
        ('```json\n{"title": "T", "summary": "S", "rating": 7, "findings": ' + FINDING + "}\n```", False),
        ('```json\n{"title": "T", "summary": "S", "rating": "8.5", "findings": ' + FINDING + ",}", True),
    ],
)
def test_a_complete_report_is_accepted_and_repairs_are_counted(reply, repaired):
    report, was_repaired = parse_report(reply)
    assert report["title"] == "T" and report["findings"] == [{"summary": "a", "explanation": "b"}]
    assert was_repaired == repaired


@pytest.mark.parametrize(
    "reply,problem",
    [
        ('{"title": "T", "summary": "S", "rating": 7, "findings": [{"summary": "a", "explanation": "b"', "cut off"),
        ("Sorry, I cannot help with that.", "cut off or is not JSON"),
        ('{"title": "T"}', "not a number"),
        ('{"title": "T", "summary": "S", "rating": 7, "findings": []}', "no findings"),
        ('{"title": "T", "summary": "S", "rating": 12, "findings": ' + FINDING + "}", "outside 0-10"),
        ('{"title": "", "summary": "S", "rating": 1, "findings": ' + FINDING + "}", "no title"),
        ('{"title": "T", "summary": "S", "rating": 1, "findings": [{"summary": "a"}]}', "no explanation"),
    ],
)
def test_a_report_missing_what_the_prompt_asked_for_is_invalid(reply, problem):
    with pytest.raises(InvalidReply, match=problem):
        parse_report(reply)


def batch_reply(*reports: dict) -> str:
    return json.dumps({"reports": [{"title": "T", "summary": "S", "rating": 3, **r} for r in reports]})


CITES = lambda rows: [{"summary": "a", "explanation": f"b [Data: Relationships ({rows})]"}]  # noqa: E731


@pytest.mark.parametrize(
    "reply,problem",
    [
        ('{"report": []}', 'no "reports" list'),
        (batch_reply({"community": 1, "findings": CITES("aaaaaaaa")}), r"no report on communities \[2\]"),
        (batch_reply({"findings": CITES("aaaaaaaa")}), "names no community"),
        (batch_reply({"community": 3, "findings": CITES("aaaaaaaa")}), "3, which was not asked for"),
        (
            batch_reply({"community": 1, "findings": CITES("aaaaaaaa")}, {"community": 1, "findings": CITES("a")}),
            "community 1 has two reports",
        ),
        (batch_reply({"community": 1, "findings": []}), "no findings"),
        (
            batch_reply({"community": 1, "findings": CITES("bbbbbbbb")}, {"community": 2, "findings": CITES("x")}),
            "the report on community 1 cites rows of community 2",
        ),
    ],
)
def test_a_batch_reply_needs_one_report_on_each_community_from_its_own_rows(reply, problem):
    contexts = {
        1: CommunityContext("-----Entities-----\nid,entity,description,degree\naaaaaaaa,A,one,1", 10),
        2: CommunityContext("-----Entities-----\nid,entity,description,degree\nbbbbbbbb,B,two,1", 10),
    }
    with pytest.raises(InvalidReply, match=problem):
        parse_report_batch(reply, contexts)
    good = batch_reply({"community": 2, "findings": CITES("bbbbbbbb")}, {"community": 1, "findings": CITES("a")})
    assert set(parse_report_batch(good, contexts)) == {1, 2}


def test_document_embedding_is_the_token_weighted_mean():
    units = pl.DataFrame({"id": ["a", "b"], "document_id": ["d", "d"], "n_tokens": [300, 100]})
    vectors = pl.DataFrame({"id": ["a", "b"], "embedding": [[1.0, 0.0], [0.0, 1.0]]})
    row = document_embeddings(units, vectors).row(0, named=True)
    assert row["id"] == "d" and row["n_tokens"] == 400 and np.allclose(row["embedding"], [0.75, 0.25])


@pytest.mark.slow
def test_same_seed_gives_the_same_communities_and_layouts(offline_index, tmp_path):
    first, _, _ = offline_index
    second = Workspace(tmp_path)
    second.add_sample_corpus()
    second.materialize(SAMPLE_CORPUS)
    for name in ("communities", "community_reports", "graph_embeddings", "layouts"):
        pd.testing.assert_frame_equal(table(first, name), table(second, name))


@pytest.mark.slow
def test_an_unchanged_step_reuses_its_output_and_a_new_setting_recomputes_it(tmp_path):
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    slow_steps = ("communities", "text_embeddings", "graph_embeddings", "layouts")

    def run(**ops) -> dict[str, dict]:
        result = workspace.materialize(SAMPLE_CORPUS, selection=[*INDEX_ASSETS], run_config={"ops": ops})
        return {
            e.asset_key.path[-1]: e.materialization.metadata
            | {"version": e.materialization.tags["dagster/data_version"]}
            for e in result.get_asset_materialization_events()
        }

    first = run()
    layout = table(workspace, "layouts")
    again = run()
    for step in slow_steps:
        assert "reused" in again[step] and "reused" not in first[step], step
        assert again[step]["version"] == first[step]["version"]
    pd.testing.assert_frame_equal(table(workspace, "layouts"), layout)
    lineage = workspace.sql("SELECT data_version FROM lineage WHERE asset = 'layouts' ORDER BY materialized_at")
    assert lineage["data_version"].nunique() == 1 and len(lineage) == 2  # the reuse is in the lineage too

    reseeded = run(graph_embeddings={"config": {"seed": 7}})
    assert "reused" in reseeded["communities"] and "reused" not in reseeded["graph_embeddings"]
    assert reseeded["graph_embeddings"]["version"] != first["graph_embeddings"]["version"]
    assert "reused" not in reseeded["layouts"]  # its input changed


def test_vector_search_ranks_by_cosine_similarity(offline_index):
    """The search the query methods use (method/search/context.py), on the stored vectors."""
    workspace, _, _ = offline_index
    vectors = table(workspace, "text_embeddings")
    vectors = vectors[vectors["kind"] == "entity"]
    ids, matrix = vectors["id"].tolist(), np.stack(vectors["embedding"].map(np.asarray))
    scrooge = table(workspace, "entities").set_index("title").loc["SCROOGE", "id"]
    found = nearest(matrix[ids.index(scrooge)] * 3.0, ids, matrix, 5)  # scaled: only the direction counts
    assert [i for i, _ in found][0] == scrooge and found[0][1] == pytest.approx(1.0, abs=1e-5) and len(found) == 5
    assert [score for _, score in found] == sorted((score for _, score in found), reverse=True)
    assert found[1][1] < 1.0 - 1e-6 and nearest(matrix[0], [], np.zeros((0, 1)), 3) == []


def test_each_llm_report_names_entities_of_its_own_community(llm_index):
    """The test model titles a report after the first two entities of the context it was given."""
    workspace, _, _ = llm_index
    members = {
        row.community: {t.title() for t in row.titles}
        for row in workspace.sql("""SELECT c.community, list(e.title) AS titles FROM communities c,
                   unnest(c.entity_ids) AS u(entity_id) JOIN entities e ON e.id = u.entity_id GROUP BY c.community
               """).itertuples()
    }
    named = 0
    for report in table(workspace, "community_reports").itertuples():
        if report.title.startswith("Community of ") and "sub-communities" not in report.title:
            names = set(report.title.removeprefix("Community of ").split(" and "))
            assert names <= members[report.community], (report.community, names)
            named += 1
    assert named > 10


def test_exports_open_in_networkx_and_pyarrow(offline_index):
    workspace, _, _ = offline_index
    folder = workspace.root / "exports" / SAMPLE_CORPUS
    graph = nx.read_graphml(folder / "graph.graphml")
    scrooge = graph.nodes["SCROOGE"]
    assert {"community", "community_level_0", "x", "y", "degree", "type"} <= set(scrooge)
    assert graph.number_of_nodes() == len(table(workspace, "entities"))
    reports = pq.read_table(folder / "parquet" / "community_reports.parquet")
    assert {"community", "level", "title", "summary", "full_content", "rank", "findings"} <= set(reports.column_names)
    assert reports.schema.field("findings").type.value_type.num_fields == 2  # list<struct<summary, explanation>>
    assert {"id", "text", "n_tokens", "document_id", "entity_ids", "relationship_ids", "covariate_ids"} <= set(
        pq.read_schema(folder / "parquet" / "text_units.parquet").names
    )


@pytest.mark.slow
def test_exports_change_only_when_the_index_is_published(workspace):
    """A run that wrote its exports but failed before publishing leaves the last index's exports as they were; the
    next run that publishes puts its own in place and forgets the failed run's."""
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS)
    exports = workspace.root / "exports"
    folder = exports / SAMPLE_CORPUS
    graph = (folder / "graph.graphml").read_bytes()
    assert pq.read_table(folder / "parquet" / "documents.parquet").num_rows == 1
    (workspace.data / SAMPLE_CORPUS / "letter.txt").write_text(
        "Ada Lovelace wrote to Charles Babbage about the Analytical Engine. Charles Babbage answered Ada Lovelace."
    )
    export = {"config": {"folder": str(exports)}}
    broken_layouts = {"layouts": {"config": {"n_neighbors": 1}}}  # fails; the parquet export does not wait on it
    failed = workspace.materialize(
        SAMPLE_CORPUS,
        run_config={"ops": {"graphml_export": export, "parquet_export": export, **broken_layouts}},
        raise_on_error=False,
    )
    assert not failed.success
    assert "parquet_export" in {e.step_key for e in failed.get_step_success_events()}  # written, not published
    assert pq.read_table(folder / "parquet" / "documents.parquet").num_rows == 1
    assert (folder / "graph.graphml").read_bytes() == graph
    (staged,) = (exports / ".staged").iterdir()
    assert pq.read_table(staged / SAMPLE_CORPUS / "parquet" / "documents.parquet").num_rows == 2

    published = workspace.materialize(SAMPLE_CORPUS)
    assert published.success
    assert pq.read_table(folder / "parquet" / "documents.parquet").num_rows == 2
    assert (folder / "graph.graphml").read_bytes() != graph
    assert not list((exports / ".staged").iterdir())  # the failed run's staged exports are gone too
    assert workspace.sql("SELECT count(DISTINCT id) AS n FROM documents")["n"][0] == 2


def test_failing_checks_say_what_is_wrong():
    entities = pl.DataFrame({"title": ["A", "B"]})
    relationships = pl.DataFrame({"source": ["A", "A"], "target": ["B", "GHOST"]})
    endpoints = relationship_endpoints_are_entities(entities, relationships)
    assert not endpoints.passed and endpoints.metadata["examples"].value == "GHOST"
    communities = pl.DataFrame({"level": [0, 0, 1], "entity_ids": [["a", "b"], ["b"], ["a"]]})
    partition = one_community_per_level(communities)
    assert not partition.passed
    assert "level 0: 1 entities in two communities" in partition.metadata["problems"].value
    vectors = pl.DataFrame({"id": ["x", "y"], "embedding": [[0.1, float("nan")], [0.2, 0.3, 0.4]]})
    check = vectors_check("text_embeddings_complete", "text_embeddings", vectors, 2, {"x", "y", "z"})
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert {k: check.metadata[k].value for k in ("wrong_dimension", "rows_with_nan", "missing_rows")} == {
        "wrong_dimension": 1,
        "rows_with_nan": 1,
        "missing_rows": 1,
    }
    no_entities = pl.DataFrame(schema={"title": pl.String})
    empty = entities_found(680, no_entities)
    assert not empty.passed and empty.metadata["input_tokens"].value == 680
    assert entities_found(0, no_entities).passed  # nothing to find
    reports = pl.DataFrame({"community": [0, 1], "status": ["ok", "failed"]})
    unreported = every_community_reported(pl.DataFrame({"community": [0, 1, 2]}), reports)
    assert not unreported.passed and unreported.severity == dg.AssetCheckSeverity.ERROR
    assert unreported.metadata["communities_without_report"].value == 2  # the failed one and the missing one
    assert unreported.metadata["examples"].value == "[1, 2]"


def _weighted_test_graph() -> nx.Graph:
    graph = nx.powerlaw_cluster_graph(300, 3, 0.3, seed=7)
    graph = nx.relabel_nodes(graph, {n: f"ENTITY {n}" for n in graph})
    nx.set_edge_attributes(graph, {e: 1.0 + i % 5 for i, e in enumerate(graph.edges)}, "weight")
    return graph


def _communities(levels: dict) -> set:
    members = defaultdict(set)
    for level, partition in levels.items():
        for node, key in partition.items():
            members[(level, key)].add(node)
    return {(level, frozenset(nodes)) for (level, _), nodes in members.items()}


def test_leiden_reads_the_tables_edges_as_networkx_would_hold_them_and_clusters_them_alike():
    entities = pl.DataFrame(
        {
            "id": ["e1", "e2", "e3", "e4", "e5"],
            "title": ["ÉMILE", "BOB", "ADA", "CAROL", "ZED"],
            "type": ["PERSON"] * 5,
            "degree": [2, 2, 3, 1, 0],
        }
    )
    relationships = pl.DataFrame(
        {
            "source": ["BOB", "ADA", "ADA", "CAROL", "ÉMILE", "BOB", "ADA"],
            "target": ["ADA", "BOB", "ÉMILE", "ADA", "BOB", "BOB", "NOBODY"],  # both ways, a loop, a non-entity
            "weight": [1.5, 2.25, 1.0, 3.0, 0.5, 9.0, 4.0],
        }
    )
    graph = networkx_graph(entities, relationships)
    nodes, edges = weighted_edges(entities, relationships)
    assert nodes == list(graph.nodes) == sorted(graph.nodes)
    assert edges == sorted((a, b, d["weight"]) for a, b, d in graph.edges(data=True) if a != b)
    assert ("ADA", "BOB", 3.75) in edges and not any("NOBODY" in edge for edge in edges)
    big = _weighted_test_graph()
    big.add_edge("ISLAND 1", "ISLAND 2", weight=1.0)  # left out by use_lcc
    for lcc in (False, True):
        assert cluster_edges(*weighted_edges(*_as_tables(big)), 10, 4, lcc) == cluster_graph(
            networkx_graph(*_as_tables(big)), 10, 4, lcc
        )


def _as_tables(graph: nx.Graph) -> tuple[pl.DataFrame, pl.DataFrame]:
    nodes = sorted(graph.nodes)
    entities = pl.DataFrame({"id": nodes, "title": nodes, "type": "X", "degree": [graph.degree(n) for n in nodes]})
    ends = [(a, b, d["weight"]) for a, b, d in graph.edges(data=True)]
    return entities, pl.DataFrame(ends, schema=["source", "target", "weight"], orient="row")


def test_a_community_s_rows_are_found_in_the_graph_s_columns_in_the_order_of_its_ids():
    entities = pl.DataFrame({"id": ["a", "b", "c"], "title": ["A", "B", "C"], "description": "", "degree": 1})
    relationships = pl.DataFrame(
        {"id": ["r1", "r2"], "source": ["A", "B"], "target": ["B", "C"], "description": "", "combined_degree": 2}
    )
    covariates = pl.DataFrame(schema={"id": pl.String, "subject_id": pl.String})
    graph = GraphIndex(entities, relationships, covariates)
    communities = pl.DataFrame(
        {"community": [0, 1], "entity_ids": [["c", "gone", "a"], []], "relationship_ids": [["r2"], ["r1", "gone"]]}
    )
    located = graph.locate(communities)
    assert located.columns == ["community", "entity_rows", "relationship_rows"]
    assert located["entity_rows"].to_list() == [[2, 0], []]
    assert located["relationship_rows"].to_list() == [[1], [0]]
    assert [m.title for m in graph.members([2, 0])] == ["C", "A"] and graph.titles([2, 0]) == {"A", "C"}
    assert [e.id for e in graph.edges([1])] == ["r2"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_leiden_converges_to_communities_at_least_as_modular_as_graspologics_single_pass(seed):
    import graspologic_native
    from graspologic.partition import hierarchical_leiden

    graph = _weighted_test_graph()
    ours = cluster_graph(graph, max_cluster_size=10, seed=seed)
    edges = [(a, b, d["weight"]) for a, b, d in sorted(graph.edges(data=True))]
    theirs = {
        c.node: c.cluster for c in hierarchical_leiden(edges, max_cluster_size=10, random_seed=seed) if c.level == 0
    }
    modularity = {
        name: graspologic_native.modularity(edges, partition, 1.0)
        for name, partition in (("ours", {node: key[1] for node, key in ours[0].items()}), ("theirs", theirs))
    }
    assert modularity["ours"] >= modularity["theirs"]
    assert len(ours) > 1
    assert all(set(partition) == set(graph.nodes) for partition in ours.values())  # every level, every entity
    sizes = Counter(ours[max(ours)].values())
    assert max(sizes.values()) <= 10


def test_clustering_started_from_its_own_communities_keeps_them_and_an_edit_moves_only_what_it_touches():
    graph = _weighted_test_graph()
    seed = 6  # a seed under which the edit below, clustered from scratch, moves a third of the communities
    first = cluster_graph(graph, max_cluster_size=10, seed=seed)
    as_stored = {level: {node: level * 1000 + key[1] for node, key in p.items()} for level, p in first.items()}
    assert _communities(cluster_graph(graph, 10, seed, previous=as_stored)) == _communities(first)

    edited = graph.copy()
    edited.add_edge("ENTITY 5", "ENTITY 250", weight=2.0)
    edited.add_edge("ENTITY 17", "ENTITY 180", weight=1.0)
    edited.add_edge("ENTITY 300", "ENTITY 17", weight=1.0)  # a new entity
    from_scratch = _communities(cluster_graph(edited, 10, seed)) - _communities(first)
    from_previous = _communities(cluster_graph(edited, 10, seed, previous=as_stored)) - _communities(first)
    assert len(from_scratch) > 30
    # The new entity joins a community (which is therefore new at every level it reaches), nothing else moves.
    assert from_previous and all("ENTITY 300" in members for _, members in from_previous)


def test_communities_start_from_the_last_run_only_when_its_settings_were_the_same(tmp_path):
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()

    def cluster(selection, **config) -> tuple[str, pd.DataFrame]:
        result = workspace.materialize(
            SAMPLE_CORPUS, selection=selection, run_config={"ops": {"communities": {"config": config}}}
        )
        return materialization_metadata(result, "communities")["started_from"], table(workspace, "communities")

    started, first = cluster(dg.AssetSelection.assets("communities").upstream())
    assert started == "scratch"
    started, again = cluster(["communities"], start_from_previous=False)
    assert started == "scratch"
    pd.testing.assert_frame_equal(again, first)
    started, warm = cluster(["communities"])  # the same settings as the run before
    assert started == "the last run's communities"
    pd.testing.assert_frame_equal(warm, first)  # a converged partition started from is kept
    started, _ = cluster(["communities"], seed=7)
    assert started == "scratch"


@pytest.mark.slow  # pynndescent compiles for 20-30 s in every process
def test_a_large_layout_searches_neighbours_approximately_and_keeps_clusters_apart(monkeypatch):
    from graphrag_assets.method.embeddings import layouts

    centres = np.random.default_rng(3).normal(scale=10, size=(3, 16))
    points = np.repeat(centres, 200, axis=0) + np.random.default_rng(4).normal(size=(600, 16))
    cluster = np.repeat(np.arange(3), 200)

    def neighbours_in_cluster(xy: np.ndarray) -> float:
        distances = ((xy[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2)
        np.fill_diagonal(distances, np.inf)
        return float((cluster[distances.argmin(axis=1)] == cluster).mean())

    exact = layouts.umap_2d(points.astype(np.float32))
    monkeypatch.setattr(layouts, "EXACT_NEIGHBOURS_UP_TO", 100)  # 600 points count as a large layout
    approximate = layouts.umap_2d(points.astype(np.float32))
    assert approximate.shape == exact.shape == (600, 2)
    assert neighbours_in_cluster(exact) == neighbours_in_cluster(approximate) == 1.0
    assert not np.array_equal(exact, approximate)  # started from PCA, not from the spectral embedding
    np.testing.assert_array_equal(approximate, layouts.umap_2d(points.astype(np.float32)))  # seeded


def test_the_layout_plot_names_the_largest_communities_by_their_best_connected_entities():
    from graphrag_assets.method.embeddings.layouts import community_labels, plot_layout

    nodes = pl.DataFrame(
        [
            {"id": f"e{i}", "kind": "entity", "title": t, "x": i, "y": -i, "community": c, "degree": d}
            for i, (t, c, d) in enumerate(
                [("SCROOGE", 4, 90), ("MARLEY", 4, 30), ("FRED", 4, 10), ("BELLE", 4, 2), ("BOB", 9, 15), ("X", -1, 0)]
            )
        ]
    )
    assert community_labels(nodes) == {4: "4: Scrooge, Marley, Fred", 9: "9: Bob"}
    assert plot_layout(nodes, "entity", "test").startswith(b"\x89PNG")


def reports_again(llm_index, root, faults: Faults | None = None, keep_cache: bool = True, **config):
    """community_reports materialized again on a copy of the LLM index: (reports, metadata, server)."""
    original, _, _ = llm_index
    workspace = Workspace(root)
    workspace.add_sample_corpus()
    shutil.copy(original.database, workspace.database)
    if keep_cache:
        shutil.copytree(original.cache, workspace.cache)
    with FakeOpenAIServer(faults) as server:
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache),
            selection=["community_reports"],
            run_config={"ops": {"community_reports": {"config": config}}},
        )
    return table(workspace, "community_reports"), materialization_metadata(result, "community_reports"), server


def test_small_communities_share_a_request_and_each_report_is_cached_as_its_own(llm_index, tmp_path):
    workspace, result, server = llm_index
    metadata = materialization_metadata(result, "community_reports")
    batched, requests = metadata["written_in_batches"], metadata["batch_requests"]
    assert batched > 2 * requests and requests == server.count("report_batch")
    small = table(workspace, "community_reports").query("context_tokens <= 500")
    assert len(small) >= batched  # carried-down copies share their report

    # Each batched report was kept as the answer to its community's own request: reporting every community
    # alone now costs no model call.
    reports, _, again = reports_again(llm_index, tmp_path, batch_size=1)
    assert again.count() == 0 and (reports["status"] == "ok").all()
    assert reports.set_index("community")["title"].equals(
        table(workspace, "community_reports").set_index("community")["title"]
    )


def test_batched_reports_put_on_the_wrong_communities_are_rejected_and_asked_alone(llm_index, tmp_path):
    faults = Faults(mixed_up_batches=True, heeds_corrections=False)
    reports, metadata, server = reports_again(llm_index, tmp_path, faults, keep_cache=False)
    # Each mixed-up reply cites another community's rows: asked again twice, then each community alone.
    asked = server.count("report_batch", "report_batch_corrected")
    assert asked == 3 * metadata["batch_requests"] > 0
    assert metadata["written_in_batches"] == 0 and (reports["status"] == "ok").all()
    original, _, _ = llm_index
    assert reports.set_index("community")["title"].equals(
        table(original, "community_reports").set_index("community")["title"]
    )


def test_a_community_whose_elements_overflow_its_budget_is_written_from_its_sub_communities_reports(llm_index):
    """The paper's section 3.1.5: above the leaves, when a community's own entities, relationships and claims do
    not fit the budget, its largest sub-communities' elements are replaced by their (shorter) reports."""
    workspace = llm_index[0]
    tables = {name: stored(workspace, name) for name in ("communities", "entities", "relationships", "covariates")}
    units = stored(workspace, "text_units")

    with FakeOpenAIServer() as server:
        settings = ModelSettings(model="test-model", base_url=server.base_url, cache_dir=str(workspace.root / "sub"))

        async def main():
            client = ModelClient(settings)
            try:
                graph = (tables["communities"], tables["entities"], tables["relationships"], tables["covariates"])
                # every context that fits may be asked with others
                small = ReportSettings(max_context_tokens=600, batch_below_tokens=600)
                return await generate_reports(client, *graph, units, small)
            finally:
                await client.close()

        reports, stats = asyncio.run(main())
        prompts = [s.prompt for s in server.served if s.kind.startswith("report")]
        batched = [s.prompt for s in server.served if s.kind == "report_batch"]
    reports = reports.to_pandas()
    substituted = reports[reports["substituted_communities"].map(len) > 0]
    assert len(substituted) and stats.substitutions
    titles = reports.set_index("community")["title"]
    for row in substituted.itertuples():  # the parent's request carried each substituted child's report
        assert any(all(titles[child] in p for child in row.substituted_communities) for p in prompts), row.community
    # A report its parent waits for is asked alone: a request for several answers only when its longest reply is
    # done. Other small communities are still asked several to a request.
    awaited = {child for row in substituted.itertuples() for child in row.substituted_communities}
    assert batched and not [c for c in awaited if any(f'<community id="{c}">' in p for p in batched)]


def test_a_community_written_from_its_sub_communities_reports_waits_for_those_alone_not_their_level(llm_index):
    """A parent over budget waits for its own children's reports. When a community of the level below that is not
    its child answers slowly, the parent's report is written before that one is."""
    workspace = llm_index[0]
    graph = tuple(stored(workspace, name) for name in ("communities", "entities", "relationships", "covariates"))
    units = stored(workspace, "text_units")

    def run(cache: str, slow_words: dict[str, float]):
        with FakeOpenAIServer(slow_words=slow_words) as server:
            cache_dir = str(workspace.root / cache)
            settings = ModelSettings(model="test-model", base_url=server.base_url, cache_dir=cache_dir)

            async def main():
                client = ModelClient(settings)
                try:
                    # one community to a request: a request for several would tie a community to the others
                    alone = ReportSettings(max_context_tokens=600, batch_size=1)
                    return await generate_reports(client, *graph, units, alone)
                finally:
                    await client.close()

            reports, _ = asyncio.run(main())
            return reports.to_pandas().set_index("community"), [s for s in server.served if s.kind.startswith("report")]

    reports, served = run("fast", {})
    communities = graph[0].to_pandas().set_index("community")
    titles = graph[1].to_pandas().set_index("id")["title"]
    parent = next(c for c, row in reports.iterrows() if len(row.substituted_communities))
    level, children = communities.loc[parent, "level"], set(communities.loc[parent, "children"])

    def asked_by_parent(prompt: str) -> bool:  # its request carries its substituted children's reports
        return all(reports.loc[c, "title"] in prompt for c in reports.loc[parent, "substituted_communities"])

    by_parent = [s.prompt for s in served if asked_by_parent(s.prompt)]
    assert len(by_parent) == 1
    slow = next(  # an entity of a community of the level below, not the parent's child, named nowhere in its requests
        titles[e]
        for c, row in communities[communities["level"] == level + 1].iterrows()
        if c not in children
        for e in row.entity_ids
        if not any(titles[e] in prompt for prompt in by_parent)
    )
    _, served = run("slow", {slow: 3.0})
    [parent_answered] = [s.at for s in served if asked_by_parent(s.prompt)]
    assert parent_answered < min(s.at for s in served if slow in s.prompt)


def test_communities_that_fit_their_budget_are_all_written_at_once_whatever_their_level(llm_index):
    """A community's report waits for its sub-communities' only when it uses them (a context over budget, or a
    community carried down unchanged): with a budget every community fits, no level waits for the one below."""
    workspace = llm_index[0]
    tables = {name: stored(workspace, name) for name in ("communities", "entities", "relationships", "covariates")}
    units = stored(workspace, "text_units")

    with FakeOpenAIServer(latency_seconds=0.5) as server:
        settings = ModelSettings(
            model="test-model",
            base_url=server.base_url,
            cache_dir=str(workspace.root / "at_once"),
            max_concurrency=1000,
            adaptive_concurrency=False,
        )

        async def main():
            client = ModelClient(settings)
            try:
                graph = (tables["communities"], tables["entities"], tables["relationships"], tables["covariates"])
                return await generate_reports(client, *graph, units, ReportSettings(max_context_tokens=100_000))
            finally:
                await client.close()

        reports, stats = asyncio.run(main())
        requests = sum(s.kind.startswith("report") for s in server.served)
        in_flight = server.max_in_flight
    communities = tables["communities"].to_pandas().set_index("community")
    reports = reports.to_pandas()

    def carried_down(row) -> bool:
        return len(row.children) == 1 and communities.loc[row.children[0], "carried_from"] == row.community

    written_by_the_model = {row.level for row in communities.reset_index().itertuples() if not carried_down(row)}
    assert len(written_by_the_model) >= 2 and stats.reused > 0
    assert (reports["status"] == "ok").all() and not stats.substitutions
    assert in_flight == requests > 0  # every request was in flight at once


def test_a_warm_start_clusters_from_the_stored_communities_not_from_scratch(tmp_path):
    """Seeds 1 and 2 partition the sample differently. With the communities of seed 2 stored as the last run's
    (seed 1's settings on record), a warm start under seed 1 keeps them (a converged partition is a fixed point),
    where clustering from scratch gives seed 1's own: the result shows which one the step really started from."""
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    graph = ["documents", "base_text_units", "entities", "relationships", "entity_aliases"]
    workspace.materialize(SAMPLE_CORPUS, selection=graph)

    def cluster(seed: int, warm: bool) -> pd.DataFrame:
        config = {"seed": seed, "start_from_previous": warm}
        workspace.materialize(
            SAMPLE_CORPUS, selection=["communities"], run_config={"ops": {"communities": {"config": config}}}
        )
        return table(workspace, "communities")

    def partition(communities: pd.DataFrame) -> set:
        return {(row.level, frozenset(row.entity_ids)) for row in communities.itertuples()}

    seed_two = cluster(2, warm=False)
    seed_one = cluster(1, warm=False)
    assert partition(seed_one) != partition(seed_two)
    with duckdb.connect(str(workspace.database)) as conn:  # seed 2's communities, as if the last run had made them
        conn.execute("DELETE FROM communities WHERE corpus = ?", [SAMPLE_CORPUS])
        conn.register("stored", seed_two.assign(corpus=SAMPLE_CORPUS))
        conn.execute("INSERT INTO communities BY NAME SELECT * FROM stored")
    assert partition(cluster(1, warm=True)) == partition(seed_two)
