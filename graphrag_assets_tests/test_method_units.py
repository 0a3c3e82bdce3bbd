"""The method's pure functions: chunking, record parsing, merging, offline extraction."""

import asyncio
import json
import re
from pathlib import Path

import duckdb
import networkx as nx
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from graphrag_assets.method.communities.leiden import build_communities
from graphrag_assets.method.communities.reports import generate_reports
from graphrag_assets.method.embeddings.node2vec import random_walks, walk_lengths
from graphrag_assets.method.graph.claims import check_claims_reply
from graphrag_assets.method.graph.extraction import merge_entities, merge_relationships, records_to_graph
from graphrag_assets.method.graph.records import parse_records
from graphrag_assets.method.graph.summaries import joined_descriptions
from graphrag_assets.method.graph.tables import LINKED_TEXT_UNITS, LINKED_TEXT_UNITS_BYTES, finalize_graph
from graphrag_assets.method.ingest import text_units
from graphrag_assets.method.ingest.text_units import chunk_documents
from graphrag_assets.method.ingest.tokens import chunk_text, count_tokens
from graphrag_assets.method.model_interface import InvalidReply
from graphrag_assets.method.offline.nlp_graph import extract_nlp_graph
from graphrag_assets.method.schema import frame

BOOK = Path(__file__).parents[1] / "data" / "a-christmas-carol" / "a-christmas-carol.txt"


def test_chunks_fit_the_size_start_at_sentences_and_overlap():
    text = BOOK.read_text()
    chunks = chunk_text(text, size=300, overlap=50)
    assert all(c.n_tokens == count_tokens(c.text) <= 300 for c in chunks)
    assert sum(c.n_tokens for c in chunks) / len(chunks) > 200  # packed, not one sentence a chunk
    # Each chunk after the first opens with the end of the one before, then text that starts a sentence.
    for before, after in zip(chunks[10:20], chunks[11:21]):
        overlap = next(k for k in range(len(after.text), 0, -1) if before.text.endswith(after.text[:k]))
        assert count_tokens(after.text[:overlap]) <= 50 and after.text[:overlap].strip()
        assert re.match(r"\s*$", before.text[-1]) or before.text.rstrip()[-1] in ".!?;:'\")"
    # Without overlap the chunks are the text, cut into pieces.
    assert "".join(c.text for c in chunk_text(text, size=300, overlap=0)) == text


def test_editing_a_paragraph_changes_only_the_chunks_around_it():
    text = BOOK.read_text()
    before = {c.text for c in chunk_text(text, size=1200, overlap=100)}
    paragraphs = text.split("\n\n")
    for position in (len(paragraphs) // 4, len(paragraphs) // 2, 3 * len(paragraphs) // 4):
        edited = paragraphs[:position] + [paragraphs[position] + " One more sentence."] + paragraphs[position + 1 :]
        after = chunk_text("\n\n".join(edited), size=1200, overlap=100)
        assert 1 <= len([c for c in after if c.text not in before]) <= 2, position
    inserted = chunk_text("A new opening paragraph.\n\n" + text, size=1200, overlap=100)
    assert len([c for c in inserted if c.text not in before]) <= 2


def test_an_edited_document_keeps_the_ids_of_its_unchanged_chunks():
    text = BOOK.read_text()
    paragraphs = text.split("\n\n")
    middle = len(paragraphs) // 2
    edited = "\n\n".join(
        paragraphs[:middle] + [paragraphs[middle].replace(" the ", " that ", 1)] + paragraphs[middle + 1 :]
    )
    ids = []
    for version in (text, edited):  # the document's own id is its content hash, so it changes
        document = pl.DataFrame(
            [{"id": str(hash(version)), "title": "book", "text": version, "source_path": "book.txt"}]
        )
        ids.append(set(chunk_documents(document, size=1200, overlap=100)[0]["id"]))
    assert 1 <= len(ids[1] - ids[0]) <= 2
    # Identical chunks of one source still get ids of their own.
    twice = pl.DataFrame([{"id": "d", "title": "t", "text": "Same words.\n\n" * 40, "source_path": "t.txt"}])
    units = chunk_documents(twice, size=8, overlap=0)[0]
    assert units["id"].is_unique().all() and len(units) > 1
    # Rows of one JSONL file that share a title are one source, even with another row between them.
    rows = [
        {"id": f"d{n}", "title": title, "text": "Same words.", "source_path": "f.jsonl"}
        for n, title in enumerate("ABA")
    ]
    assert chunk_documents(pl.DataFrame(rows))[0]["id"].is_unique().all()


def test_the_ingest_spools_documents_and_units_a_batch_at_a_time_as_the_frames_would_hold_them(tmp_path, monkeypatch):
    """The index writes what it reads and chunks to parquet files a few documents at a time (so no corpus is held
    whole); the files hold exactly the rows chunk_documents gives for the same documents."""
    monkeypatch.setattr(text_units, "_SPOOLED_TEXT", 50_000)  # several batches from one book
    text = BOOK.read_text()
    records = [
        {"id": f"d{n}", "title": f"part {n}", "text": text[n * 30_000 : (n + 1) * 30_000], "source_path": "book.txt"}
        for n in range(5)
    ]
    written = text_units.chunk_to_files(iter(records), tmp_path / "d.parquet", tmp_path / "u.parquet", 600, 50)
    units, documents = chunk_documents(frame("documents", records, without=("text_unit_ids",)), 600, 50)
    assert written == 5 and pq.ParquetFile(tmp_path / "d.parquet").num_row_groups == 3
    assert pl.read_parquet(tmp_path / "u.parquet").equals(units)
    spooled = pl.read_parquet(tmp_path / "d.parquet")
    assert spooled.equals(documents.select(spooled.columns))  # the store writes them by name


def test_a_sentence_longer_than_a_chunk_is_cut_at_words():
    text = " ".join(f"word{i}" for i in range(3000))
    chunks = chunk_text(text, size=200, overlap=0)
    assert all(c.n_tokens <= 200 for c in chunks) and "".join(c.text for c in chunks) == text
    assert all(c.text.endswith(" ") for c in chunks[:-1])


@pytest.mark.parametrize("size,overlap", [(0, 0), (100, 100), (100, -1)])
def test_bad_chunk_settings_are_refused(size, overlap):
    with pytest.raises(ValueError):
        chunk_text("some text", size=size, overlap=overlap)


def test_tokenizer_works_offline():
    assert count_tokens("A Christmas Carol") == 3


def test_parsing_is_lenient_and_counts_what_it_drops():
    reply = (
        '("entity"<|>Scrooge<|>person<|>A miser)\n##\n'
        '("entity"<|>MARLEY<|>PERSON<|>His dead partner)\n##\n'
        "garbage that is not a record\n##\n"
        '("relationship"<|>SCROOGE<|>MARLEY<|>Partners in business<|>not-a-number)\n##\n'
        '("relationship"<|>SCROOGE<|>MARLEY<|>Partners in business<|>8)\n##\n'
        '("entity"<|>ONLY TWO FIELDS)\n<|COMPLETE|>'
    )
    entities, relationships, dropped = records_to_graph([reply])
    assert [e["title"] for e in entities] == ["SCROOGE", "MARLEY"]
    assert relationships == [
        {"source": "SCROOGE", "target": "MARLEY", "description": "Partners in business", "strength": 8.0}
    ]
    assert dropped == 3


def test_a_truncated_reply_keeps_its_complete_records():
    parsed = parse_records('("entity"<|>A<|>PERSON<|>first)\n##\n("entity"<|>B<|>PERS')
    assert parsed.records == [["entity", "A", "PERSON", "first"]] and parsed.dropped == 1


def test_merge_by_name_and_pair():
    entities = merge_entities(
        [
            ("u1", [{"title": "A", "type": "PERSON", "description": "one"}]),
            (
                "u2",
                [
                    {"title": "A", "type": "PERSON", "description": "two"},
                    {"title": "B", "type": "GEO", "description": "b"},
                ],
            ),
        ]
    )
    a = entities.filter(pl.col("title") == "A").row(0, named=True)
    assert a["descriptions"] == ["one", "two"] and a["text_unit_ids"] == ["u1", "u2"] and a["frequency"] == 2
    relationships = merge_relationships(
        [
            ("u1", [{"source": "A", "target": "B", "description": "x", "strength": 2.0}]),
            (
                "u2",
                [
                    {"source": "A", "target": "B", "description": "y", "strength": 3.0},
                    {"source": "A", "target": "C", "description": "z", "strength": 1.0},
                ],
            ),
        ]
    )
    ab = relationships.filter((pl.col("source") == "A") & (pl.col("target") == "B")).row(0, named=True)
    assert ab["weight"] == 5.0 and ab["descriptions"] == ["x", "y"]
    joined = pl.col("descriptions").list.join(" ").alias("description")
    entities, relationships, orphans = finalize_graph(
        entities.with_columns(joined).drop("descriptions"), relationships.with_columns(joined).drop("descriptions")
    )
    assert orphans == 1  # A -> C: C was never extracted as an entity
    assert dict(zip(entities["title"], entities["degree"])) == {"A": 1, "B": 1}
    assert relationships["combined_degree"].to_list() == [2]


def test_offline_extraction_finds_names_and_cooccurrences():
    units = pl.DataFrame(
        {
            "id": ["u1", "u2"],
            "text": [
                "Old Fezziwig laughed and Scrooge watched Fezziwig dance with Mrs. Fezziwig. The night was long.",
                "Later Scrooge and Fezziwig spoke. Nothing more was said.",
            ],
        }
    )
    entities, relationships = extract_nlp_graph(units)
    assert set(entities["title"]) == {"SCROOGE", "FEZZIWIG"}  # "Nothing" and "The" start sentences only
    pair = relationships.filter((pl.col("source") == "FEZZIWIG") & (pl.col("target") == "SCROOGE")).row(0, named=True)
    assert pair["weight"] == 2.0 and sorted(pair["text_unit_ids"]) == ["u1", "u2"]


def test_offline_extraction_describes_by_distinct_sentences_and_lists_each_unit_once_in_order():
    """An entity takes the distinct sentences among its first three mentions, a pair its first three distinct
    sentences, wherever they are; a sentence said twice describes once."""
    said = "Marley met Scrooge."
    units = pl.DataFrame(
        {
            "id": ["u2", "u1", "u3"],  # text units in the order given, not by id
            "text": [
                f"{said} {said} Bob saw Marley.",
                f"{said} Marley and Scrooge dined.",
                "Scrooge and Marley slept. Marley woke Scrooge. Scrooge left.",
            ],
        }
    )
    entities, relationships = extract_nlp_graph(units)
    marley = entities.filter(pl.col("title") == "MARLEY").row(0, named=True)
    # Its first three mentions: the first two are one sentence said twice, the third names Bob.
    assert marley["descriptions"] == [said, "Bob saw Marley."]
    assert marley["text_unit_ids"] == ["u2", "u1", "u3"] and marley["frequency"] == 3
    pair = relationships.filter((pl.col("source") == "MARLEY") & (pl.col("target") == "SCROOGE")).row(0, named=True)
    assert pair["descriptions"] == [said, "Marley and Scrooge dined.", "Scrooge and Marley slept."]
    assert pair["weight"] == 6.0 and pair["text_unit_ids"] == ["u2", "u1", "u3"]
    assert entities["title"].to_list()[:2] == ["MARLEY", "SCROOGE"]  # in order of first mention


def test_offline_extraction_of_a_corpus_with_no_capitalised_word_takes_its_frequent_words():
    units = pl.DataFrame(
        {"id": ["u1", "u2"], "text": ["the river floods the mill. the mill stops.", "a river runs past a mill."]}
    )
    entities, relationships = extract_nlp_graph(units)
    assert {"RIVER", "MILL"} <= set(entities["title"])
    mill = entities.filter(pl.col("title") == "MILL").row(0, named=True)
    assert mill["descriptions"] == ["the river floods the mill.", "the mill stops.", "a river runs past a mill."]
    assert mill["text_unit_ids"] == ["u1", "u2"] and mill["frequency"] == 2
    pair = relationships.filter((pl.col("source") == "MILL") & (pl.col("target") == "RIVER")).row(0, named=True)
    assert pair["weight"] == 2.0


def test_offline_descriptions_are_joined_in_order_without_a_model():
    table = pl.DataFrame({"title": ["A", "B", "C"], "descriptions": [["one.", "two."], ["only."], []]})
    joined, stats = joined_descriptions(table)
    assert joined["description"].to_list() == ["one. two.", "only.", ""]
    assert "descriptions" not in joined.columns and stats.single_description == 2


def test_text_units_know_what_was_extracted_from_them():
    """The linking query over a corpus's tables, beside another corpus's rows that it must not read."""
    tables = {
        "base_text_units": pl.DataFrame(
            {
                "id": ["u1", "u2", "u1"],
                "text": ["a", "b", "other"],
                "pages": [None, [3], None],
                "corpus": ["c", "c", "d"],
            }
        ),
        "entities": pl.DataFrame(
            {"id": ["e2", "e1", "x"], "text_unit_ids": [["u1"], ["u1", "u2"], ["u2"]], "corpus": ["c", "c", "d"]}
        ),
        "relationships": pl.DataFrame({"id": ["r1"], "text_unit_ids": [["u2"]], "corpus": ["c"]}),
        "covariates": pl.DataFrame({"id": ["c1"], "text_unit_id": ["u1"], "corpus": ["c"]}),
    }
    conn = duckdb.connect()
    for name, rows in tables.items():
        conn.register("rows", rows)
        conn.execute(f"CREATE TABLE {name} AS SELECT * FROM rows")
    linked = conn.execute(
        f"SELECT * FROM ({LINKED_TEXT_UNITS}) ORDER BY id", {"corpus": "c", "part": 0, "parts": 1}
    ).pl()
    assert linked["text"].to_list() == ["a", "b"]
    assert linked["entity_ids"].to_list() == [["e1", "e2"], ["e1"]]  # in id order, as the lists were always kept
    assert linked["relationship_ids"].to_list() == [[], ["r1"]]
    assert linked["covariate_ids"].to_list() == [["c1"], []]
    assert linked["pages"].to_list() == [[], [3]]
    in_parts = [
        conn.execute(f"SELECT * FROM ({LINKED_TEXT_UNITS})", {"corpus": "c", "part": part, "parts": 3}).pl()
        for part in range(3)
    ]
    assert sum(len(part) > 0 for part in in_parts) > 1  # the two units fell in different parts
    assert pl.concat(in_parts).sort("id").equals(linked)
    assert conn.execute(LINKED_TEXT_UNITS_BYTES, {"corpus": "c"}).fetchone()[0] == 512 * (3 + 1 + 1)


def deep_graph(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two dense blocks of 80 and a clique of 5: with clusters of at most 4, Leiden needs four levels or more."""
    import networkx as nx

    graph = nx.stochastic_block_model(
        [80, 80, 5], [[0.15, 0.005, 0.01], [0.005, 0.15, 0.01], [0.01, 0.01, 1.0]], seed=seed
    )
    titles = {n: f"E{n:03d}" for n in graph}
    entities = pl.DataFrame(
        {
            "title": sorted(titles.values()),
            "type": "X",
            "description": "an entity",
            "text_unit_ids": [["u"]] * len(titles),
            "frequency": 1,
        }
    )
    relationships = pl.DataFrame(
        {
            "source": [titles[a] for a, b in graph.edges],
            "target": [titles[b] for a, b in graph.edges],
            "description": "linked",
            "weight": 1.0,
            "text_unit_ids": [["u"]] * graph.number_of_edges(),
        }
    )
    entities, relationships, _ = finalize_graph(entities, relationships)
    return entities, relationships


@pytest.mark.parametrize("seed", [0, 1])
def test_communities_carried_down_many_levels_stay_carried_and_reuse_their_report(seed):
    entities, relationships = deep_graph(seed)
    communities = build_communities(entities, relationships, max_cluster_size=4, seed=1)
    assert communities["level"].max() >= 3
    by_number = {row["community"]: row for row in communities.iter_rows(named=True)}
    clustered = None
    for _level, group in communities.group_by("level"):
        members = [e for ids in group["entity_ids"] for e in ids]
        assert len(members) == len(set(members))  # a partition of the clustered entities...
        assert clustered is None or set(members) == clustered  # ...the same ones at every level
        clustered = set(members)
        assert group["id"].is_unique().all()
    assert communities["community"].is_unique().all()
    carried = communities.filter(pl.col("carried_from") >= 0)
    deep_copies = carried.filter(pl.col("level") >= 2)
    assert len(deep_copies) and all(
        by_number[row["carried_from"]]["level"] == row["level"] - 1 for row in deep_copies.iter_rows(named=True)
    )
    for row in communities.iter_rows(named=True):
        parent = by_number[row["parent"]] if row["parent"] >= 0 else None
        copies_parent = parent is not None and sorted(parent["entity_ids"]) == sorted(row["entity_ids"])
        assert (row["carried_from"] >= 0 and row["carried_from"] == row["parent"]) == copies_parent  # every copy says

    units = pl.DataFrame({"id": ["u"], "text": ["E001 met E002."]})
    covariates = frame("covariates")
    reports, stats = asyncio.run(generate_reports(None, communities, entities, relationships, covariates, units))
    assert stats.reused == len(carried) and stats.generated == len(communities) - len(carried)
    report_of = {row["community"]: row for row in reports.iter_rows(named=True)}
    for row in carried.iter_rows(named=True):  # a copy's report is its original's
        copy, original = report_of[row["community"]], report_of[row["carried_from"]]
        assert copy["title"] == original["title"] and copy["summary"] == original["summary"]


def test_node2vec_reads_the_tables_adjacency_as_networkx_would_give_it():
    from graphrag_assets.method.communities.leiden import networkx_graph
    from graphrag_assets.method.embeddings.node2vec import entity_adjacency

    entities = pl.DataFrame(
        {"id": ["e1", "e2", "e3", "e4"], "title": ["BOB", "ADA", "CY", "LONE"], "type": "X", "degree": [2, 2, 1, 0]}
    )
    relationships = pl.DataFrame(
        {
            "source": ["BOB", "ADA", "CY", "CY", "ADA"],
            "target": ["ADA", "BOB", "CY", "ADA", "NOBODY"],  # both ways, a self-loop, a name that is no entity
            "weight": [1.5, 2.0, 4.0, 1.0, 7.0],
        }
    )
    graph = networkx_graph(entities, relationships)
    connected = graph.subgraph([n for n, d in graph.degree() if d > 0])
    titles, ids, adjacency = entity_adjacency(entities, relationships)
    assert titles == sorted(connected.nodes) == ["ADA", "BOB", "CY"] and ids == ["e2", "e1", "e3"]
    expected = nx.to_scipy_sparse_array(connected, nodelist=titles, weight="weight", format="csr")
    for part in ("indptr", "indices", "data"):
        assert getattr(adjacency, part).tolist() == getattr(expected, part).tolist(), part


def test_walks_follow_edges_in_proportion_to_their_weight_and_repeat_with_the_seed():
    graph = nx.Graph()
    graph.add_edge("hub", "heavy", weight=9.0)
    graph.add_edge("hub", "light", weight=1.0)
    nodes = sorted(graph.nodes)  # heavy, hub, light
    adjacency = nx.to_scipy_sparse_array(graph, nodelist=nodes, weight="weight", format="csr")
    walks = random_walks(adjacency, num_walks=2000, walk_length=3, seed=1)
    edges = {(nodes.index(a), nodes.index(b)) for a, b in graph.edges} | {
        (nodes.index(b), nodes.index(a)) for a, b in graph.edges
    }
    assert all((int(a), int(b)) in edges for walk in walks for a, b in zip(walk, walk[1:]))
    from_hub = walks[walks[:, 0] == nodes.index("hub"), 1]
    assert 0.85 < (from_hub == nodes.index("heavy")).mean() < 0.95
    assert (random_walks(adjacency, 2000, 3, seed=1) == walks).all()
    # Walk lengths by start-node degree, as graspologic (GraphRAG's node2vec) computes them.
    from graspologic.embed.n2v import _Node2VecGraph

    degrees = np.array([1] * 20 + [2, 3, 4] * 20 + [5] * 10 + [9] * 10)
    percentiles = np.percentile(degrees, range(20, 90, 10))
    expected = [_Node2VecGraph._get_walk_length_interpolated(d, percentiles, 40) for d in degrees]
    assert walk_lengths(degrees, 40).tolist() == expected and len(set(expected)) > 3


def test_progress_says_what_is_done_and_left_at_intervals_and_at_the_end():
    from types import SimpleNamespace

    from graphrag_assets.method.progress import Progress

    now, lines = [0.0], []
    usage = SimpleNamespace(calls=0, prompt_tokens=0, completion_tokens=0)
    progress = Progress("text units extracted", 6, lines.append, usage, every_seconds=10, clock=lambda: now[0])
    for moment, failed in ((11.0, False), (12.0, True), (22.0, False), (24.0, False), (28.0, False), (30.0, False)):
        now[0] = moment
        usage.calls += 2
        usage.prompt_tokens += 1000
        progress.advance(failed)
    assert lines == [  # no time left is guessed from one reply that waited for the step's start
        "text units extracted: 1/6, 0 failed, 2 model calls, 1,000 tokens",
        "text units extracted: 3/6, 1 failed, 6 model calls, 3,000 tokens, about 22 s left",
        "text units extracted: 6/6, 1 failed, 12 model calls, 6,000 tokens, done in 30 s",
    ]


def test_gutenberg_boilerplate_is_cut_at_its_markers_and_other_text_is_whole():
    from graphrag_assets.method.ingest.documents import strip_boilerplate

    book = (
        "The Project Gutenberg eBook\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\nStory.\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK X ***\nLicence"
    )
    assert strip_boilerplate(book) == ("Story.", len(book) - len("Story."))
    assert strip_boilerplate("A plain text.") == ("A plain text.", 0)


def test_offline_phrases_skip_headings_and_quotes_are_cleaned():
    from graphrag_assets.method.offline.answers import best_sentences, clean_sentence, reads_as_prose
    from graphrag_assets.method.offline.nlp_graph import candidate_phrases

    found = [
        p for p, _ in candidate_phrases("In Stave One and Chapter XII, beside the Illustration, Jacob Marley waits.")
    ]
    assert found == ["Jacob Marley"]
    assert clean_sentence("It was Christmas Eve 16 Bob _Cratchit_ went [Illustration: a ghost] home.") == (
        "It was Christmas Eve Bob Cratchit went home."
    )
    assert not reads_as_prose("Tailpiece vi Tailpiece to List of Coloured Illustrations x Heading to Stave One")
    twice = [("a", "Scrooge was a miser, as everyone knew."), ("b", "Scrooge  was a miser, as everyone knew.")]
    assert len(best_sentences("Who was Scrooge?", twice)) == 1  # overlapping text units repeat sentences
    for not_the_text in (
        "# Stave One: Marley's Ghost",  # a heading
        "| Scrooge | miser |",  # a table row
        "Produced by the Online Distributed Proofreading Team at http://www.pgdp.net",  # a credit and a link
        "This eBook is for the use of anyone anywhere at no cost.",  # a licence
        "was what the knowing ones call 'nuts' to Scrooge.",  # a fragment where a text unit was cut
    ):
        assert not reads_as_prose(not_the_text), not_the_text
    assert reads_as_prose("'Bah,' said Scrooge, 'Humbug!'") and reads_as_prose("Copyright law protects authors.")


def test_offline_communities_are_named_by_their_central_names_and_tuning_takes_kinds_not_names():
    from types import SimpleNamespace

    from graphrag_assets.method.offline.extractive import WordCases, extractive_report

    texts = {
        "u1": "Come here, said Scrooge to Bob. Scrooge paid Bob. The poor clerk will come home, and Bob too.",
        "u2": "Come in, said Fred. Bob and Scrooge and Fred met; the poor were fed. Come back, Scrooge.",
        "u3": "The Supplier ships to the Buyer. The Buyer pays the Supplier. A supplier may refuse.",
    }
    cases = WordCases(texts.values())
    assert cases.ordinary("COME") and cases.ordinary("POOR") and not cases.ordinary("SCROOGE")
    assert cases.kind("supplier") and cases.kind("buyer") and cases.kind("clerk") and not cases.kind("scrooge")

    def entity(title, degree):
        return SimpleNamespace(title=title, degree=degree, description=f"{title.title()} of the story.")

    entities = {e.title: e for e in (entity("COME", 40), entity("SCROOGE", 5), entity("BOB", 9), entity("FRED", 2))}
    relationships = {
        "r1": SimpleNamespace(
            id="r1", source="SCROOGE", target="BOB", combined_degree=3, description="Scrooge pays Bob."
        ),
        "r2": SimpleNamespace(id="r2", source="SCROOGE", target="FRED", combined_degree=2, description="Uncle."),
        "r3": SimpleNamespace(id="r3", source="COME", target="BOB", combined_degree=9, description="Come, Bob."),
    }
    report = extractive_report(list(entities.values()), list(relationships.values()), [texts["u1"]], cases)
    # The most connected inside the community (Scrooge: two relationships; Bob: two), not the most connected
    # overall (Come, a word that opened sentences), which a title never shows while a name is left.
    assert report["title"] == "Community of Bob, Scrooge and Fred"


def test_a_claims_source_quote_must_come_from_its_text_unit():
    unit = "Scrooge signed the register of his partner's burial.\nMarley was dead:   to begin with."
    claim = "(MARLEY<|>NONE<|>DEATH<|>TRUE<|>NONE<|>NONE<|>Marley died<|>{quote})\n<|COMPLETE|>"
    for quote in ("Marley was dead: to begin with.", '"marley WAS DEAD:\nto begin with."'):  # case, spaces, quotes
        assert check_claims_reply(claim.format(quote=quote), unit)
    for quote in ("Marley was alive", "Your last reply was cut off; answer again"):  # invented, or the re-ask's note
        with pytest.raises(InvalidReply, match="quotes text that is not in the input"):
            check_claims_reply(claim.format(quote=quote), unit)


def test_a_tied_vote_on_an_assertion_counts_as_not_supported():
    """Two repeats of the judge, one for and one against: no majority, so the assertion is not supported; the
    answer's accuracy is weighted by the assertions' scores."""
    from graphrag_assets.method.assertion_scoring import answer_scores, assertion_checks

    assertions = [{"statement": "Scrooge is mean", "score": 3}, {"statement": "Marley is dead", "score": 1}]
    questions = pl.DataFrame(
        [{"id": "q", "question": "Who?", "assertions": json.dumps(assertions), "question_class": "local"}]
    )
    answers = pl.DataFrame([{"id": "a", "question_id": "q", "condition": "C0", "answer": "text"}])
    checks = assertion_checks(answers, questions, repeats=2)
    votes = {(0, 0): True, (0, 1): False, (1, 0): True, (1, 1): True}  # (assertion, repeat): supported
    verdicts = [{"supported": votes[(c.assertion, c.repeat)], "reasoning": ""} for c in checks]
    row = answer_scores(answers, questions, checks, verdicts).row(0, named=True)
    tied, held = json.loads(row["verdicts"])
    assert (tied["supported"], tied["votes_supported"], tied["votes"]) == (False, 1, 2)
    assert held["supported"] is True
    assert row["assertions_supported"] == 1 and row["accuracy"] == pytest.approx(1 / 4)


def test_after_a_small_edit_a_warm_start_moves_few_communities():
    """The sample's offline graph clustered under seed 2, then one new entity tied to one old one: started from
    seed 2's communities, Leiden under seed 1 keeps nearly all of them; from scratch, seed 1 gives a partition
    of its own. What a warm start saves is those communities' reports."""
    sample = Path(__file__).parents[1] / "data" / "a-christmas-carol" / "a-christmas-carol.txt"
    documents = pl.DataFrame([{"id": "d", "title": "carol", "source_path": "carol.txt", "text": sample.read_text()}])
    units, _ = chunk_documents(documents, 600, 100)
    from graphrag_assets.method.entity_graph import build_entity_graph

    graph = asyncio.run(build_entity_graph(None, units))
    entities, relationships = graph.entities, graph.relationships
    before = build_communities(entities, relationships, seed=2)
    new = entities.head(1).with_columns(id=pl.lit("new"), title=pl.lit("NEW ENTITY"), degree=pl.lit(1, pl.Int32))
    edited_entities = pl.concat([entities, new])
    edge = relationships.head(1).with_columns(
        id=pl.lit("new-edge"), source=pl.lit("NEW ENTITY"), target=pl.lit(entities["title"][0])
    )
    edited_relationships = pl.concat([relationships, edge])

    def moved(after: pl.DataFrame) -> int:
        old = {(r["level"], frozenset(r["entity_ids"]) - {"new"}) for r in after.iter_rows(named=True)}
        return sum((r["level"], frozenset(r["entity_ids"])) not in old for r in before.iter_rows(named=True))

    warm = build_communities(edited_entities, edited_relationships, seed=1, previous=before)
    cold = build_communities(edited_entities, edited_relationships, seed=1)
    assert moved(warm) <= 1 and moved(warm) < moved(cold), (moved(warm), moved(cold), len(before))


def test_the_index_plan_says_what_each_step_does_for_each_source_method_and_engine():
    from graphrag_assets.method.plan import IndexPlan

    standard = IndexPlan("c", None, "standard", "gpt-4o-mini")
    assert standard.claims_skipped_because is None and standard.aliases_by_model and standard.writes_reports
    assert standard.steps()["covariates"] == "extracted by the chat model gpt-4o-mini"
    offline = IndexPlan("c", None, "standard", None)
    assert offline.builds_concept_graph and not offline.aliases_by_model
    assert offline.claims_skipped_because == "the offline engine extracts no claims"
    lazy = IndexPlan("c", None, "lazy", "gpt-4o-mini", claims_enabled=False)
    assert not lazy.writes_reports and lazy.claims_skipped_because == "claims are switched off"
    assert lazy.steps()["community_reports"] == "none: a lazy index writes no reports"
    imported = IndexPlan("c", Path("data/c/output"), "standard", "gpt-4o-mini")
    assert imported.writes_reports and imported.claims_skipped_because is None and not imported.looks_for_aliases
    assert set(imported.steps().values()) == {"imported from data/c/output", "none: an imported graph is kept as it is"}
    assert list(imported.steps()) == list(standard.steps())  # the same steps, in the order they run


def test_central_sentences_count_each_title_once_per_sentence_wherever_its_words_stand():
    from graphrag_assets.method.offline.extractive import central_sentences

    texts = [
        "Bob Cratchit met Scrooge. 'Tis old Fezziwig's ball, said Bob. Nobody came. "
        "Scrooge's nephew, Bob Cratchit and Old Fezziwig dined. Bobby is not Bob."
    ]
    titles = {"Bob Cratchit", "Bob", "Scrooge", "'Tis", "Old Fezziwig", "...", "İstanbul"}
    # Four titles in the fourth sentence (Scrooge, Bob Cratchit, Bob, Old Fezziwig); three in the first and the second;
    # "Bobby" is not "Bob", and a sentence with none is left out.
    assert central_sentences(texts, titles, limit=10) == [
        "Scrooge's nephew, Bob Cratchit and Old Fezziwig dined.",
        "Bob Cratchit met Scrooge.",
        "'Tis old Fezziwig's ball, said Bob.",
        "Bobby is not Bob.",
    ]
