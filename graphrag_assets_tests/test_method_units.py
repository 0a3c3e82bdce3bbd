"""The method's pure functions: chunking, record parsing, merging, offline extraction."""

import pandas as pd
import pytest

from graphrag_assets.method.extract_graph import merge_entities, merge_relationships, records_to_graph
from graphrag_assets.method.graph import finalize_graph, link_text_units
from graphrag_assets.method.offline.nlp_graph import extract_nlp_graph
from graphrag_assets.method.records import parse_records
from graphrag_assets.method.tokens import chunk_by_tokens, count_tokens, get_encoding


def test_chunks_have_the_configured_size_and_overlap():
    text = " ".join(f"word{i}" for i in range(3000))
    chunks = chunk_by_tokens(text, size=200, overlap=50)
    tokens = get_encoding().encode(text)
    assert all(c.n_tokens == 200 for c in chunks[:-1]) and 0 < chunks[-1].n_tokens <= 200
    # Each chunk starts 150 tokens after the previous one, and together they cover the text.
    assert get_encoding().encode(chunks[1].text)[:50] == tokens[150:200]
    assert (len(chunks) - 1) * 150 + chunks[-1].n_tokens == len(tokens)


@pytest.mark.parametrize("size,overlap", [(0, 0), (100, 100), (100, -1)])
def test_bad_chunk_settings_are_refused(size, overlap):
    with pytest.raises(ValueError):
        chunk_by_tokens("some text", size=size, overlap=overlap)


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
    assert relationships == [{"source": "SCROOGE", "target": "MARLEY", "description": "Partners in business", "strength": 8.0}]
    assert dropped == 3


def test_a_truncated_reply_keeps_its_complete_records():
    parsed = parse_records('("entity"<|>A<|>PERSON<|>first)\n##\n("entity"<|>B<|>PERS')
    assert parsed.records == [["entity", "A", "PERSON", "first"]] and parsed.dropped == 1


def test_merge_by_name_and_pair():
    entities = merge_entities([
        ("u1", [{"title": "A", "type": "PERSON", "description": "one"}]),
        ("u2", [{"title": "A", "type": "PERSON", "description": "two"}, {"title": "B", "type": "GEO", "description": "b"}]),
    ])
    a = entities.set_index("title").loc["A"]
    assert a.descriptions == ["one", "two"] and a.text_unit_ids == ["u1", "u2"] and a.frequency == 2
    relationships = merge_relationships([
        ("u1", [{"source": "A", "target": "B", "description": "x", "strength": 2.0}]),
        ("u2", [{"source": "A", "target": "B", "description": "y", "strength": 3.0},
                {"source": "A", "target": "C", "description": "z", "strength": 1.0}]),
    ])
    ab = relationships.set_index(["source", "target"]).loc[("A", "B")]
    assert ab.weight == 5.0 and ab.descriptions == ["x", "y"]
    entities["description"] = entities["descriptions"].map(" ".join)
    relationships["description"] = relationships["descriptions"].map(" ".join)
    entities, relationships, orphans = finalize_graph(entities.drop(columns="descriptions"),
                                                      relationships.drop(columns="descriptions"))
    assert orphans == 1  # A -> C: C was never extracted as an entity
    assert entities.set_index("title")["degree"].to_dict() == {"A": 1, "B": 1}
    assert relationships["combined_degree"].tolist() == [2]


def test_offline_extraction_finds_names_and_cooccurrences():
    units = pd.DataFrame({"id": ["u1", "u2"], "text": [
        "Old Fezziwig laughed and Scrooge watched Fezziwig dance with Mrs. Fezziwig. The night was long.",
        "Later Scrooge and Fezziwig spoke. Nothing more was said.",
    ]})
    entities, relationships = extract_nlp_graph(units)
    assert set(entities["title"]) == {"SCROOGE", "FEZZIWIG"}  # "Nothing" and "The" start sentences only
    pair = relationships.set_index(["source", "target"]).loc[("FEZZIWIG", "SCROOGE")]
    assert pair.weight == 2.0 and sorted(pair.text_unit_ids) == ["u1", "u2"]


def test_text_units_know_what_was_extracted_from_them():
    units = pd.DataFrame({"id": ["u1", "u2"], "text": ["a", "b"]})
    linked = link_text_units(
        units,
        pd.DataFrame({"id": ["e1"], "text_unit_ids": [["u1", "u2"]]}),
        pd.DataFrame({"id": ["r1"], "text_unit_ids": [["u2"]]}),
        pd.DataFrame({"id": ["c1"], "text_unit_id": ["u1"]}),
    )
    assert linked["entity_ids"].tolist() == [["e1"], ["e1"]]
    assert linked["relationship_ids"].tolist() == [[], ["r1"]]
    assert linked["covariate_ids"].tolist() == [["c1"], []]
