"""Lazy search (LazyGraphRAG): the walk's order and budget, the checks on every reply, and the query asset."""

import asyncio
import json

import pytest

from graphrag_assets.method.model_interface import InvalidReply
from graphrag_assets.method.search.lazy_search import (
    Community,
    _trim,
    parse_claims,
    parse_relevant,
    parse_sub_questions,
    walk_communities,
)

from .conftest import SAMPLE_CORPUS, chat_resource, embedding_resource, materialization_metadata
from .model_server import FakeOpenAIServer
from .test_evaluation import evaluate
from .test_index_methods import index_with

# A hierarchy where the one relevant unit, T, sits deep: in A, its child A2 and A2's child A2b. Units by rank:
# b1 (0), ax (1), c1 (2), d1 (3), T (4), y (5), e1 (6); a community ranks by its best unit.
UNITS = {"A": ["ax", "T", "y"], "A1": ["ax"], "A2": ["T", "y"], "A2a": ["y"], "A2b": ["T"]}
UNITS.update({"B": ["b1"], "C": ["c1"], "D": ["d1"], "E": ["e1"]})
RANK = {"b1": 0, "ax": 1, "c1": 2, "d1": 3, "T": 4, "y": 5, "e1": 6}
NAMES = ["A", "B", "C", "D", "E", "A1", "A2", "A2a", "A2b"]
CHILDREN = {"A": ["A1", "A2"], "A2": ["A2a", "A2b"]}


def tree() -> dict[int, Community]:
    number = {name: i for i, name in enumerate(NAMES)}
    return {
        number[name]: Community(
            number[name],
            0 if len(name) == 1 else len(name) - 1,
            [number[c] for c in CHILDREN.get(name, [])],
            UNITS[name],
            min(RANK[u] for u in UNITS[name]),
        )
        for name in NAMES
    }


def walk(budget=100, units_per_visit=2, patience=2):
    asked: list[list[str]] = []

    async def test(units):
        assert len(units) <= units_per_visit
        asked.append(units)
        return {"T"} & set(units)

    top = [NAMES.index(n) for n in "ABCDE"]
    result = asyncio.run(walk_communities(tree(), top, test, budget, units_per_visit, patience))
    visits = [(NAMES[v["community"]], v["tested"], v["relevant"]) for v in result.visits]
    return result, visits, asked


def test_the_walk_finds_the_deep_community_and_goes_deeper_after_patience_empty_visits():
    result, visits, _ = walk(patience=2)
    # A holds T (found at its second-best unit); C and D then yield nothing: two empty visits, so the walk goes down
    # into A's sub-communities and E is never visited. A2 is relevant through T, A2b holds it, A2a does not.
    assert visits == [
        ("B", 1, False),
        ("A", 2, True),
        ("C", 1, False),
        ("D", 1, False),
        ("A1", 0, False),
        ("A2", 1, True),
        ("A2b", 0, True),
        ("A2a", 0, False),
    ]
    assert result.relevant == {"T": NAMES.index("A")} and result.tests == 6
    assert result.per_level() == {0: 4, 1: 2, 2: 2}


def test_more_patience_visits_more_of_a_level_before_going_deeper():
    _, visits, _ = walk(patience=3)
    assert [name for name, _, _ in visits][:6] == ["B", "A", "C", "D", "E", "A1"]


def test_the_walk_never_spends_more_tests_than_its_budget():
    for budget in (1, 2, 3, 5):
        result, _, asked = walk(budget=budget)
        assert result.tests == sum(map(len, asked)) <= budget
    result, visits, asked = walk(budget=2)
    assert asked == [["b1"], ["ax"]] and not result.relevant  # T would have been the third test


def test_sub_questions_relevance_and_claims_replies_are_checked():
    assert parse_sub_questions('{"sub_questions": ["Who is Scrooge?", " What  is  Marley? "]}', 3) == [
        "Who is Scrooge?",
        "What is Marley?",
    ]
    for reply, problem in [
        ('{"sub_questions": []}', "no"),
        ('{"sub_questions": ["a", "b", "c", "d"]}', "more than the 3"),
        ('{"sub_questions": ["a", 5]}', "not a non-empty string"),
    ]:
        with pytest.raises(InvalidReply, match=problem):
            parse_sub_questions(reply, 3)
    assert parse_relevant('{"relevant": [3, "7"]}', {3, 7, 9}) == {3, 7}
    with pytest.raises(InvalidReply, match=r"passages \[12\] were not among those given"):
        parse_relevant('{"relevant": [3, 12]}', {3, 7})
    claim = {"claim": "Scrooge sells the warehouse.", "sources": [3], "score": 70}
    assert parse_claims(json.dumps({"claims": [claim]}), {3}) == [claim]
    with pytest.raises(InvalidReply, match="outside those given"):
        parse_claims(json.dumps({"claims": [{**claim, "sources": [4]}]}), {3})
    with pytest.raises(InvalidReply, match="outside 0-100"):
        parse_claims(json.dumps({"claims": [{**claim, "score": 170}]}), {3})


def test_claims_are_trimmed_to_the_window_best_scored_first():
    claims = [{"claim": f"Claim number {i} about the ledger.", "sources": [i], "score": float(i)} for i in range(50)]
    kept, table, tokens = _trim(claims, 80)
    assert tokens <= 80 and 0 < len(kept) < 50
    assert [c["score"] for c in kept] == sorted((c["score"] for c in claims), reverse=True)[: len(kept)]
    assert table.splitlines()[0] == "id|claim|sources" and len(table.splitlines()) == len(kept) + 1


@pytest.mark.slow
def test_lazy_search_answers_on_a_lazy_index_within_its_budget_and_records_what_it_spent(workspace):
    question = "What does Scrooge see with the Ghost of Christmas Past and what happens to Tiny Tim?"
    with FakeOpenAIServer() as server:
        assert index_with(workspace, server, "lazy").success
        models = {
            "chat": chat_resource(server.base_url, workspace.cache),
            "embeddings": embedding_resource(server.base_url, workspace.cache),
        }
        before = len(server.served)
        result = workspace.ask(SAMPLE_CORPUS, "lazy_search", {"question": question, "relevance_budget": 30}, **models)
        kinds = [s.kind for s in server.served[before:] if s.endpoint == "chat"]
        # The evaluation on a lazy index: no reports to describe the corpus from, and no global search conditions.
        asked = {"personas": 1, "tasks_per_persona": 1, "questions_per_task": 1}
        refused = evaluate(
            workspace, *models.values(), {"evaluation_questions": asked}, ["evaluation_questions"], raise_on_error=False
        )
        failure = refused.get_step_failure_events()[0].step_failure_data.user_failure_data.description
        assert "no community reports to describe it from (a lazy index writes none): set corpus_description" in failure
        config = {
            "evaluation_questions": {**asked, "corpus_description": "A ghost story about a miser at Christmas."},
            "evaluation_answers": {"conditions": ["C0", "SS", "LGR20"]},
        }
        evaluated = evaluate(workspace, *models.values(), config, ["evaluation_questions", "evaluation_answers"])
    answers = materialization_metadata(evaluated, "evaluation_answers")
    assert answers["conditions"] == ["SS", "LGR20"] and answers["skipped_conditions"] == ["C0"]
    metadata = materialization_metadata(result, "lazy_search")
    details = metadata["details"]
    assert details["sub_questions"][1].startswith("what happens to Tiny Tim?")  # split at "and", concepts added
    assert 0 < details["relevance_tests"] <= 30 and details["relevant_units"] > 0 and details["claims_kept"] > 0
    assert kinds.count("lazy_refine") == 1 and kinds.count("lazy_reduce") == 1 and kinds.count("lazy_answer") == 2
    assert "combined from 2 sub-answers" in metadata["answer"]
    assert "Communities where relevant text was found" in metadata["sources"]
    stored = workspace.sql("SELECT * FROM query_answers WHERE run_id = ?", result.run_id).iloc[0]
    chat_calls = len([kind for kind in kinds if kind != "probe"])  # model_calls adds the sub-questions' embeddings
    assert stored["method"] == "lazy" and stored["model_calls"] >= chat_calls and stored["prompt_tokens"] > 0
    assert json.loads(stored["details"])["relevance_tests"] == details["relevance_tests"]


def test_offline_lazy_search_quotes_the_text_its_walk_found(offline_index):
    workspace = offline_index[0]
    result = workspace.ask(SAMPLE_CORPUS, "lazy_search", {"question": "Who is Bob Cratchit's youngest son?"})
    metadata = materialization_metadata(result, "lazy_search")
    assert metadata["extractive"] and "Extractive answer" in metadata["answer"]
    assert metadata["details"]["relevance_tests"] <= 100 and metadata["details"]["relevant_units"] > 0
