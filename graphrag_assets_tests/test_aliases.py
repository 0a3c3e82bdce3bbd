"""Entity resolution that can be undone: aliases link names of one entity; rejecting them restores the graph."""

import asyncio

import duckdb
import polars as pl

from graphrag_assets.answers.published import load_index
from graphrag_assets.method.graph import aliases
from graphrag_assets.method.search.context import embed_query, nearest
from graphrag_assets.method.search.local_search import local_context_for
from graphrag_assets.method.search.settings import LocalContextSettings
from graphrag_assets.models import ModelClient
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import REPO, SAMPLE_CORPUS, Workspace, chat_resource, table

NAMES = {
    "SCROOGE": (30, "Scrooge is a miser who keeps his counting-house"),
    "EBENEZER SCROOGE": (5, "Ebenezer Scrooge, a miser, keeps the counting-house"),
    "MASTER SCROOGE": (2, "Master Scrooge, a miser as a boy at school"),
    "CRATCHIT": (9, "Cratchit is a clerk with a large family"),
    "BOB CRATCHIT": (8, "Bob Cratchit is a clerk in Scrooge's counting-house"),
    "TIM CRATCHIT": (3, "Tim Cratchit is the youngest child of the clerk's family"),
    "CHRISTMAS": (12, "Christmas is a feast kept with goodwill"),
    "CHRISTMAS DAY": (4, "Christmas Day is the day of the feast"),
    "GHOST OF JACOB MARLEY": (2, "The ghost of Marley visits in chains"),
    "JACOB MARLEY": (6, "Jacob Marley was Scrooge's partner, dead in chains"),
}


def entities() -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"id": f"e{i}", "title": t, "type": "PERSON", "description": d, "degree": g, "text_unit_ids": [f"u{i}"]}
            for i, (t, (g, d)) in enumerate(NAMES.items())
        ]
    )


def accepted_pairs(table: pl.DataFrame) -> set[tuple[str, str]]:
    return {(r["entity"], r["canonical"]) for r in table.iter_rows(named=True) if r["accepted"]}


def test_offline_rules_link_short_forms_and_leave_ambiguous_or_descriptive_names_apart():
    candidates = aliases.candidate_pairs(entities())
    ruled = candidates.with_columns(accepted=pl.Series(aliases.confirm_by_rule(candidates)))
    assert accepted_pairs(ruled) == {("EBENEZER SCROOGE", "SCROOGE"), ("MASTER SCROOGE", "SCROOGE")}
    # Not linked: "Cratchit" has two first names (Bob, Tim); "Christmas Day" is not Christmas; "Ghost of Jacob
    # Marley" is a phrase about him.
    assert {("BOB CRATCHIT", "CRATCHIT"), ("CHRISTMAS DAY", "CHRISTMAS")} & accepted_pairs(ruled) == set()
    assert ("GHOST OF JACOB MARLEY", "JACOB MARLEY") in set(zip(ruled["entity"], ruled["canonical"]))
    spelled = aliases.candidate_pairs(
        pl.DataFrame(
            [
                {"id": "a", "title": "FEZZIWIG", "type": "PERSON", "description": "a merchant", "degree": 5},
                {"id": "b", "title": "FEZIWIG", "type": "PERSON", "description": "a merchant", "degree": 1},
            ]
        )
    )
    assert spelled.select("entity", "canonical", "method").rows() == [("FEZIWIG", "FEZZIWIG", "similar spelling")]


def test_the_spelling_search_compares_each_name_with_a_bounded_number_of_others_and_finds_planted_variants():
    """Names spelled alike among 20,000 made-up ones: each name meets at most a fixed number of others (so the search
    grows as n log n, not with the square of the names), and a typo, a plural, a joined name and a reordered one are
    still found."""
    import random

    pick = random.Random(7)
    syllables = ["al", "ber", "cor", "dan", "el", "fen", "gar", "hal", "ith", "jor", "kel", "lam", "mor", "nis", "ost"]
    crowd = sorted({"".join(pick.choice(syllables) for _ in range(4)).upper() for _ in range(25_000)})[:20_000]
    planted = [
        ("FEZZIWIG", "FEZIWIG"),
        ("CRATCHIT", "CRATCHITS"),
        ("BOB CRATCHIT", "BOBCRATCHIT"),
        ("MARLEY JACOB", "JACOB MARLEY"),
    ]
    titles = crowd + [name for pair in planted for name in pair]
    candidates = aliases._spelling_candidates(titles)
    window_pairs = 3 * aliases.SPELLING_WINDOW * len(titles)
    stem_pairs = len(titles) * aliases.MAX_NAMES_PER_WORD  # a name is in one block per word, each of 50 at most
    assert len(candidates) <= window_pairs + stem_pairs
    found = {(titles[i], titles[j]) for i, j, _ in aliases._similar_spellings(titles, 0.7)}
    assert all(pair in found or pair[::-1] in found for pair in planted)


def test_the_model_confirms_candidates_in_batches(tmp_path):
    candidates = aliases.candidate_pairs(entities())
    with FakeOpenAIServer() as server:
        client_settings = chat_resource(server.base_url, tmp_path).settings()

        async def confirm():
            client = ModelClient(client_settings)
            try:
                return await aliases.confirm_by_model(client, candidates, entities(), batch=4)
            finally:
                await client.close()

        verdicts = asyncio.run(confirm())
        assert server.count("resolve") == -(-len(candidates) // 4)
    # The scripted model says "same" when both names end with the same word.
    expected = [a.split()[-1] == b.split()[-1] for a, b in zip(candidates["entity"], candidates["canonical"])]
    assert verdicts == expected


def test_resolving_folds_variants_in_and_no_alias_gives_the_graph_back():
    nodes = entities()
    edges = pl.DataFrame(
        [
            {"id": "r1", "source": "EBENEZER SCROOGE", "target": "BOB CRATCHIT", "weight": 1.0, "description": "x"},
            {"id": "r2", "source": "SCROOGE", "target": "BOB CRATCHIT", "weight": 2.0, "description": "y"},
            {"id": "r3", "source": "SCROOGE", "target": "EBENEZER SCROOGE", "weight": 1.0, "description": "z"},
        ]
    )
    links = pl.DataFrame(
        [
            {
                "entity_id": "e1",
                "entity": "EBENEZER SCROOGE",
                "canonical_id": "e0",
                "canonical": "SCROOGE",
                "accepted": True,
            }
        ]
    )
    merged_nodes, merged_edges = aliases.resolve(nodes, edges, links)
    scrooge = merged_nodes.filter(pl.col("title") == "SCROOGE").row(0, named=True)
    assert "EBENEZER SCROOGE" not in set(merged_nodes["title"]) and sorted(scrooge["text_unit_ids"]) == ["u0", "u1"]
    assert set(zip(merged_edges["source"], merged_edges["target"])) == {("SCROOGE", "BOB CRATCHIT")}
    assert scrooge["degree"] == 1  # one neighbour, reached by two relationships
    rejected = links.with_columns(accepted=False)
    assert aliases.resolve(nodes, edges, rejected) == (nodes, edges)


def test_the_users_lines_replace_the_pairs_they_name_in_either_order_and_a_later_line_wins():
    found = aliases.aliases_by_rule(aliases.candidate_pairs(entities()))
    scrooge = found.filter(pl.col("canonical") == "SCROOGE").row(0, named=True)
    overrides = [
        ("SCROOGE", scrooge["entity"], False),  # the pair named the other way round
        ("CHRISTMAS", "JACOB MARLEY", True),
        ("CRATCHIT", "CHRISTMAS DAY", True),
        ("CRATCHIT", "CHRISTMAS DAY", False),
        ("NOBODY", "SCROOGE", True),
    ]
    table, problems = aliases.apply_overrides(found, overrides, entities())
    assert problems == [f"{aliases.ALIASES_FILE}: no entity named NOBODY"]
    assert table.height == found.height + 2  # one pair replaced, two added, the repeated one once
    user = table.filter(pl.col("method") == "user").select("entity", "canonical", "accepted").rows()
    assert user == [
        ("SCROOGE", scrooge["entity"], False),
        ("CHRISTMAS", "JACOB MARLEY", True),
        ("CRATCHIT", "CHRISTMAS DAY", False),
    ]
    assert table.filter(pl.col("method") != "user").equals(found.filter(pl.col("id") != scrooge["id"]))
    assert aliases.apply_overrides(found, [], entities())[0] is found


def test_rejecting_every_alias_in_aliases_csv_gives_back_the_communities_without_resolution(tmp_path):
    def communities(name: str, overrides: str | None, enabled: bool = True):
        (tmp_path / name).mkdir()
        workspace = Workspace(tmp_path / name)
        workspace.add_sample_corpus()
        if overrides is not None:
            (workspace.data / SAMPLE_CORPUS / aliases.ALIASES_FILE).write_text(overrides)
        workspace.materialize(
            SAMPLE_CORPUS,
            selection=["documents", "base_text_units", "entities", "relationships", "entity_aliases", "communities"],
            run_config={"ops": {"entity_aliases": {"config": {"enabled": enabled}}}},
        )
        return workspace, table(workspace, "communities")

    resolved_workspace, resolved = communities("resolved", None)
    links = table(resolved_workspace, "entity_aliases")
    accepted = links[links["accepted"]]
    assert len(aliases.alias_groups(pl.from_pandas(links))) >= 2 and (accepted["confirmed_by"] == "rule").all()
    # Every original entity row is kept; the communities see one node per alias group.
    members = {e for ids in resolved["entity_ids"] for e in ids}
    canonical = aliases.canonical_of(pl.from_pandas(links))  # chains followed: Old Marley -> Marley -> Jacob Marley
    assert not set(canonical) & members and set(canonical.values()) <= members

    rejections = "entity,canonical,action\n" + "".join(
        f"{r.entity},{r.canonical},reject\n" for r in accepted.itertuples()
    )
    undone_workspace, undone = communities("undone", rejections)
    _, unresolved = communities("unresolved", None, enabled=False)
    columns = ["id", "community", "level", "parent", "entity_ids", "relationship_ids"]
    assert undone[columns].to_json() == unresolved[columns].to_json()
    assert not table(undone_workspace, "entity_aliases")["accepted"].any()
    assert (table(undone_workspace, "entity_aliases")["confirmed_by"] == "user").sum() == len(accepted)


def test_search_reads_the_resolved_graph_and_a_variant_found_stands_for_its_canonical_entity(offline_index):
    workspace = offline_index[0]
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        index = load_index(conn, SAMPLE_CORPUS)
    assert index.aliases and not set(index.aliases) & set(index.entities["id"])  # variants are folded in
    original = table(workspace, "entities").set_index("id")
    variant, canonical = next(iter(sorted(index.aliases.items())))
    # Asked with exactly the text its vector was made from, the search finds the variant first; the context
    # then holds its canonical entity, never the variant.
    question = f"{original.loc[variant, 'title']}: {original.loc[variant, 'description']}"
    ids, matrix = index.vectors("entity")
    assert nearest(asyncio.run(embed_query(None, index, question)), ids, matrix, 1)[0][0] == variant
    context = asyncio.run(
        local_context_for(
            None,
            index,
            question,
            LocalContextSettings(
                0, 1, 4000, 0.25, 0.5, keyword_weight=0.0, question_units=0, question_passages=0, passage_tokens=200
            ),
        )
    )
    assert context.ids["entities"] == [canonical]


def test_the_offline_sample_figures_in_the_docs(offline_index):
    """docs/internals.md quotes these figures of the sample corpus indexed offline: a change to the method that
    moves them fails here, so the page is updated with it."""
    workspace = offline_index[0]
    aliases = workspace.sql("SELECT entity, canonical, accepted FROM entity_aliases WHERE corpus = ?", SAMPLE_CORPUS)
    accepted = set(zip(aliases.loc[aliases["accepted"], "entity"], aliases.loc[aliases["accepted"], "canonical"]))
    assert (len(aliases), len(accepted)) == (57, 8)
    assert {("MARLEY", "JACOB MARLEY"), ("OLD MARLEY", "MARLEY"), ("TIM", "TINY TIM")} <= accepted
    assert {("MERRY CHRISTMAS", "CHRISTMAS"), ("MARLEY GHOST", "GHOST")} <= accepted
    levels = workspace.sql("SELECT level, count(*) AS n FROM communities WHERE corpus = ? GROUP BY 1", SAMPLE_CORPUS)
    assert dict(zip(levels["level"], levels["n"])) == {0: 8, 1: 11}
    assert "8 of 57 candidate pairs" in (REPO / "docs" / "internals.md").read_text()
