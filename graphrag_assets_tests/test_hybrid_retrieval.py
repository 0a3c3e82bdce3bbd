"""Hybrid retrieval: BM25 keyword search (DuckDB's full-text search) fused with vectors by reciprocal rank.

How often each method's context holds the answer passage is measured in `scripts/benchmark.py retrieval`; these
tests hold the parts: the fusion's order, the keyword index, and each method holding the keyword-best passage on a
question whose vectors miss it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import polars as pl
import pytest

from graphrag_assets.answers.asking import Question, answer, options_for
from graphrag_assets.answers.published import load_index
from graphrag_assets.answers.records import AnswerJournal
from graphrag_assets.answers.service import AnswerService
from graphrag_assets.method.ingest.tokens import count_tokens
from graphrag_assets.method.offline.answers import best_sentences
from graphrag_assets.method.search.context import RRF_K, embed_query, reciprocal_rank_fusion
from graphrag_assets.method.search.lazy_search import rank_units
from graphrag_assets.method.search.passages import passage
from graphrag_assets.store.keyword_index import KeywordIndex, index_path

from .conftest import SAMPLE_CORPUS, stored

# The saucepan is said once, in the passage where Marley's ghost comes in; the offline vectors rank ten other
# passages about Scrooge and Marley above it.
QUESTION = "What was Scrooge eating from a saucepan by the fire when Marley came?"
ANSWER = "saucepan of gruel"


def test_reciprocal_rank_fusion_orders_by_weighted_reciprocal_ranks():
    rankings = {"vector": ["a", "b", "c"], "keyword": ["c", "d", "a"]}
    even = reciprocal_rank_fusion(rankings, {"vector": 1.0, "keyword": 1.0})
    # a and c tie (ranks 1 and 3 against 3 and 1): the first ranking's order holds, as it does for b and d
    assert even == [("a", ["vector", "keyword"]), ("c", ["vector", "keyword"]), ("b", ["vector"]), ("d", ["keyword"])]
    keywords_first = reciprocal_rank_fusion(rankings, {"vector": 1.0, "keyword": 2.0})
    assert [record for record, _ in keywords_first] == ["c", "a", "d", "b"]
    # the score is the weighted sum of 1 / (k + rank): c at 2/61 + 1/63 beats a at 1/61 + 2/63
    assert 2 / (RRF_K + 1) + 1 / (RRF_K + 3) > 1 / (RRF_K + 1) + 2 / (RRF_K + 3)
    assert reciprocal_rank_fusion({"vector": ["x", "x", "y"]}, {}) == [("x", ["vector"]), ("y", ["vector"])]


def test_the_keyword_index_ranks_by_bm25_and_takes_any_text():
    units = pl.DataFrame(
        {
            "id": ["u1", "u2", "u3"],
            "text": [
                "Scrooge sat by the fire with a little saucepan of gruel.",
                "The clerk went down a slide on Cornhill twenty times.",
                "Scrooge and Marley, the firm was known as; Scrooge answered to both names.",
            ],
        }
    )
    index = KeywordIndex({"text_unit": units})
    assert [u for u, _ in index.search("text_unit", "a saucepan of GRUEL", 3)] == ["u1"]
    assert index.search("text_unit", "sliding", 3)[0][0] == "u2"  # stemmed: sliding ~ slide
    ranked = index.search("text_unit", "Scrooge", 3)
    assert ranked[0][0] == "u3" and ranked[0][1] > ranked[1][1]  # said three times in a short unit
    assert index.search("text_unit", "", 3) == [] and index.search("entity", "Scrooge", 3) == []
    assert index.search("text_unit", "'; DROP TABLE text_unit; -- \x00 \ud800 é", 3) == []
    index.close()


@pytest.fixture(scope="module")
def index(offline_index):
    with duckdb.connect(str(offline_index[0].database), read_only=True) as conn:
        loaded = load_index(conn, SAMPLE_CORPUS)
    yield loaded
    loaded.close()


def holds_answer(index, unit_ids: list[str]) -> bool:
    return any(ANSWER in text for text in index.texts(unit_ids).values())


def test_the_vectors_alone_miss_the_passage_that_keywords_find(index):
    query = asyncio.run(embed_query(None, index, QUESTION))
    assert not holds_answer(index, [u for u, _ in index.nearest("text_unit", query, 10)])
    assert holds_answer(index, [u for u, _ in index.keyword_search("text_unit", QUESTION, 1)])


@pytest.mark.parametrize("method", ["basic", "local"])
def test_each_method_holds_the_keyword_best_passage_and_says_who_found_it(index, method):
    vectors_alone = answer(SAMPLE_CORPUS, index, method, options_for(method, QUESTION, keyword_weight=0.0), None, None)
    assert not holds_answer(index, vectors_alone.result.context["text_units"])
    hybrid = answer(SAMPLE_CORPUS, index, method, options_for(method, QUESTION), None, None)
    units = hybrid.result.context["text_units"]
    assert holds_answer(index, units)
    found_by = hybrid.result.context["retrieved_by"]
    answering = next(u for u in units if ANSWER in index.texts([u])[u])
    assert "keyword" in found_by[answering]
    assert hybrid.result.context_tokens <= options_for(method, QUESTION).max_context_tokens
    assert ANSWER in hybrid.result.answer  # the offline answer quotes the sentence that holds it
    source = next(s for s in hybrid.sources if s["id"] == answering)  # as the API and the record give it
    assert "keyword" in source["retrieved_by"]


def test_a_passage_is_the_run_of_sentences_that_holds_most_of_the_question_words():
    text = (
        "Scrooge kept his office cold. "
        "The clerk had a very small fire. "
        "Scrooge asked the clerk what he wanted for Christmas Day. "
        "A whole day off, said Bob, once a year. "
        "Scrooge grumbled about the coal. "
        "Nobody ever stopped him in the street."
    )
    found = passage(text, "What did the clerk want for Christmas?", 30)
    # the run starts where the question's words are and goes on to the reply, which shares none of them
    assert "what he wanted for Christmas Day" in found and "A whole day off" in found
    assert found.startswith("… ") and found.endswith(" …") and count_tokens(found) <= 30 + 2
    assert passage(text, "What did the clerk want for Christmas?", 1000) == text  # a short unit is its own passage
    assert passage(text, "zebra", 12).startswith("Scrooge kept")  # no word of the question: the unit's beginning


def test_local_search_packs_units_further_down_the_ranking_as_passages(index):
    question, key = "What did Scrooge promise Bob Cratchit the day after Christmas?", "raise your salary"
    whole_only = answer(SAMPLE_CORPUS, index, "local", options_for("local", question, question_passages=0), None, None)
    assert not any(key in text for text in index.texts(whole_only.result.context["text_units"]).values())
    found = answer(SAMPLE_CORPUS, index, "local", options_for("local", question), None, None)
    context = found.result.context
    answering = next(u for u, text in context["passages"].items() if key in text)
    assert answering in context["text_units"] and "keyword" in context["retrieved_by"][answering]
    assert count_tokens(context["passages"][answering]) < count_tokens(index.texts([answering])[answering])
    source = next(s for s in found.sources if s["id"] == answering)  # the API and the record say what was read
    assert source["passage"] == context["passages"][answering]
    assert found.result.context_tokens <= options_for("local", question).max_context_tokens


def test_drift_and_lazy_rank_with_keywords_too(index):
    drift = answer(SAMPLE_CORPUS, index, "drift", options_for("drift", QUESTION), None, None)
    assert any("keyword" in by for by in drift.result.context["retrieved_by"].values())
    # lazy search walks the communities in the order of their best units: the answer's unit moves well forward
    query = asyncio.run(embed_query(None, index, QUESTION))
    by_vectors = rank_units(index, [query], [QUESTION], keyword_weight=0.0)
    fused = rank_units(index, [query], [QUESTION], keyword_weight=1.0)
    answering = next(u for u in fused if holds_answer(index, [u]))
    assert by_vectors.index(answering) > 10 and fused.index(answering) < by_vectors.index(answering) / 2
    assert sorted(fused) == sorted(by_vectors)  # every unit is still ranked


def test_offline_lazy_search_counts_the_best_ranked_passage_relevant_though_it_shares_few_question_words(index):
    from graphrag_assets.method.offline.answers import overlap_score
    from graphrag_assets.method.search.lazy_search import OFFLINE_RELEVANT_OVERLAP

    question = "What came from the crown of the first spirit's head?"
    query = asyncio.run(embed_query(None, index, question))
    best = rank_units(index, [query], [question], keyword_weight=2.0)[0]
    assert "crown of its head" in index.texts([best])[best]
    assert overlap_score(question, index.texts([best])[best]) < OFFLINE_RELEVANT_OVERLAP  # the word test alone misses
    found = answer(SAMPLE_CORPUS, index, "lazy", options_for("lazy", question), None, None)
    assert best in found.result.context["text_units"]


def test_the_keyword_index_is_an_asset_whose_file_the_warm_index_opens(offline_index):
    workspace = offline_index[0]
    rows = stored(workspace, "keyword_index").sort("id")
    assert rows["id"].to_list() == ["community_report", "entity", "text_unit"]
    assert dict(zip(rows["id"], rows["records"]))["text_unit"] == len(stored(workspace, "text_units"))
    assert rows["terms"].min() > 0 and rows["built_from"].n_unique() == 1
    built_from = rows["built_from"][0]
    assert index_path(workspace.root / "vector-index", SAMPLE_CORPUS, built_from).exists()
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        from_file = load_index(conn, SAMPLE_CORPUS, str(workspace.root / "vector-index"))
        in_memory = load_index(conn, SAMPLE_CORPUS)  # no folder to find the file in: built from the tables
    try:
        assert from_file.keywords.built_from == built_from and in_memory.keywords.built_from is None
        for kind in ("text_unit", "entity", "community_report"):
            # the same scores; DuckDB sums them in parallel, so the last digits (and the order of ties) may differ
            found, built = from_file.keyword_search(kind, QUESTION, 5), in_memory.keyword_search(kind, QUESTION, 5)
            assert sorted(s for _, s in found) == pytest.approx(sorted(s for _, s in built))
            assert found[0] == (built[0][0], pytest.approx(built[0][1]))
        assert holds_answer(from_file, [u for u, _ in from_file.keyword_search("text_unit", QUESTION, 1)])
    finally:
        from_file.close()
        in_memory.close()


@pytest.mark.slow
def test_an_incremental_run_keeps_the_keyword_index_current(workspace):
    corpus = workspace.add_sample_corpus()
    workspace.materialize(corpus)
    folder = workspace.root / "vector-index"

    def published_file() -> Path:
        return index_path(folder, corpus, stored(workspace, "keyword_index")["built_from"][0])

    first = published_file()
    built = first.stat().st_mtime_ns
    workspace.materialize(corpus, selection=["keyword_index"])  # nothing changed: the same file, not rebuilt
    assert published_file() == first and first.stat().st_mtime_ns == built
    (workspace.data / corpus / "ledger.txt").write_text(
        "The counting-house ledger of 1843 records a payment to the Quillinghast Bellows Company for coal.\n"
    )
    workspace.materialize(corpus)
    second = published_file()
    assert second != first and second.exists() and not first.exists()  # the published file is the only one left
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        index = load_index(conn, corpus, str(folder))
    try:
        assert index.keywords.built_from in second.name
        found = index.keyword_search("text_unit", "Who sold coal to the counting-house? Quillinghast", 1)
        assert "Quillinghast" in index.texts([found[0][0]])[found[0][0]]
    finally:
        index.close()


def test_the_server_holds_the_published_keyword_index_with_a_model_index_too(offline_index, llm_index):
    for workspace in (offline_index[0], llm_index[0]):
        keywords = service_for(workspace).loaded(SAMPLE_CORPUS).index.keywords
        assert keywords.built_from == stored(workspace, "keyword_index")["built_from"][0]  # its file, not memory
        assert keywords.search("text_unit", QUESTION, 1)
    given = service_for(offline_index[0]).ask(Question(corpus=SAMPLE_CORPUS, text=QUESTION, method="basic"))
    assert any("keyword" in source.get("retrieved_by", []) for source in given.sources)


def service_for(workspace) -> AnswerService:
    return AnswerService(
        str(workspace.database),
        data_path=None,
        vector_index_dir=str(workspace.root / "vector-index"),
        journal=AnswerJournal(workspace.root / "keyword-answers.sqlite"),
    )


def test_offline_quoting_matches_stems_weighs_rare_words_and_keeps_a_reply_with_its_line():
    dialogue = (
        "The fire burned low in the grate of the room. 'How many brothers have you had?' "
        "'More than eighteen hundred,' said the Ghost. Scrooge walked home alone through the streets that night."
    )
    best = best_sentences("How many brothers did the Ghost have?", [("u1", dialogue)], limit=3)
    # the reply holds a word of the question too, so the line and its reply are quoted together, and once
    assert best[0][1] == "'How many brothers have you had? 'More than eighteen hundred,' said the Ghost."
    assert len(best) == 1
    names = "Scrooge spoke with Belle. Scrooge and Belle walked. Scrooge saw Belle and the idol that displaced her."
    assert "displaced" in best_sentences("What displaced Belle for Scrooge?", [("u1", names)], limit=1)[0][1]
    haunted = best_sentences("Who haunts Scrooge?", [("u1", "Marley's ghost haunted the house for seven years.")])
    assert haunted and "haunted" in haunted[0][1]  # haunts ~ haunted


def test_offline_quoting_goes_on_into_the_sentences_that_follow_up_to_a_length():
    scene = (
        "The chain he drew was clasped about his middle. It was long, and wound about him like a tail. "
        "It was made of cash-boxes, keys, padlocks, ledgers and deeds. Scrooge took his dinner at the tavern alone. "
        "The chain of the pump in the yard was frozen."
    )
    question = "What was the chain made of?"
    alone = best_sentences(question, [("u1", scene)], limit=1)
    assert alone[0][1] == "It was made of cash-boxes, keys, padlocks, ledgers and deeds."  # "made" and "chain"
    drawn = best_sentences("What was the chain he drew?", [("u1", scene)], limit=2, continued=100)
    # what follows the best sentence is quoted with it, as far as 100 characters go, and is not quoted again
    expected = "The chain he drew was clasped about his middle. It was long, and wound about him like a tail."
    assert drawn[0][1] == expected
    assert all("It was long" not in text for _, text, _ in drawn[1:])
    licence = "The clerk read the notice. See https://example.org for the licence. The fire went out."
    quoted = best_sentences("What did the clerk read?", [("u1", licence)], limit=1, continued=200)
    assert quoted[0][1] == "The clerk read the notice."  # a link is no continuation, nor is what comes after it


def test_offline_quoting_keeps_a_title_and_a_said_line_in_their_sentence_and_ranks_by_what_follows_too():
    office = (
        "'At this season, Mr. Scrooge,' said the gentleman, 'we make some provision for the poor.' "
        "'Are there no prisons?' asked Scrooge. The fog came pouring in at every chink."
    )
    quoted = [text for _, text, _ in best_sentences("What provision for the poor?", [("u1", office)], limit=3)]
    # "Mr." ends no sentence, and a quoted question goes on into the words that say who asked it
    assert quoted[0].startswith("'At this season, Mr. Scrooge,' said the gentleman")
    prisons = best_sentences("Who asked about prisons?", [("u1", office)], limit=1)
    assert prisons[0][1] == "'Are there no prisons?' asked Scrooge."
    # The question's rarer word ("party") is held by the last sentence alone. The sentence before it holds the
    # other ("Fred"), and with what follows it, quoted too, it holds both: so it ranks first when it is so quoted.
    games = "The party played blind man's-buff, forfeits, How, When and Where, and Yes and No till midnight, "
    games += "and nobody thought of going home."  # too long to be a reply quoted with the line before it
    snow = "The snow lay thick on the roofs, the gutters froze, and the lamps of the shops burned red in the fog "
    snow += "from three in the afternoon until nine at night."
    story = f"Fred waited by the window. {snow} Fred laughed at his uncle. {games} The bells rang across the city."
    question = "What happened at Fred's party?"
    assert best_sentences(question, [("u1", story)], limit=1, continued=0)[0][1] == games
    followed = best_sentences(question, [("u1", story)], limit=1, continued=150)
    assert followed[0][1] == f"Fred laughed at his uncle. {games}"


def test_offline_quoting_gives_the_same_answer_from_many_threads():
    said = "The clerk number {} was considering his salary and the holidays. Bob sighed."
    texts = [(f"u{i}", said.format(i)) for i in range(9)]
    questions = [f"What was clerk {i} considering about salaries and holidays?" for i in range(200)]
    alone = [best_sentences(q, texts, limit=3) for q in questions]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda q: best_sentences(q, texts, limit=3), questions)) == alone


@pytest.mark.slow
def test_offline_passages_and_quotes_do_not_depend_on_the_process_string_hashing():
    # Python orders a set of words by their hashes, which each process seeds anew: a score summed in that order
    # differed in its last bits, and two equal runs or sentences swapped places from one run to the next.
    printed = {
        subprocess.run(
            [sys.executable, "-m", "graphrag_assets_tests.hash_order"],
            env=os.environ | {"PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(4)
    }
    assert len(printed) == 1 and printed.pop().strip()
