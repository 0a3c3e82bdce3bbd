"""Query assets against the test model server and offline, on the indexed sample corpus."""

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys

import duckdb
import polars as pl
import pytest

from graphrag_assets.answers.options import METHODS as QUERY_METHODS
from graphrag_assets.answers.published import load_index
from graphrag_assets.answers.sources import cited
from graphrag_assets.configs.queries import ASKED
from graphrag_assets.method.ingest.tokens import count_tokens
from graphrag_assets.method.schema import records
from graphrag_assets.method.search.global_search import reduce_points, select_communities
from graphrag_assets.method.search.settings import BasicSearchSettings, settings_from
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import SAMPLE_CORPUS, chat_resource, embedding_resource, materialization_metadata

QUESTION = "What does Scrooge learn from the ghosts about Christmas?"
METHODS = {
    "global_search": {"question": QUESTION, "community_level": 0},
    "local_search": {"question": QUESTION},
    "drift_search": {"question": QUESTION},
    "basic_search": {"question": QUESTION},
    "text_summary_search": {"question": QUESTION},
    "lazy_search": {"question": QUESTION},
    "question_generation": {"previous_questions": [QUESTION]},
}


@pytest.mark.parametrize("method", sorted(QUERY_METHODS))
def test_a_methods_launch_options_are_its_settings_and_what_is_asked(method):
    """Each launch-time option reaches the search: the config's fields are the settings' fields and the question."""
    spec = QUERY_METHODS[method]
    settings = {field.name for field in dataclasses.fields(spec.settings)}
    assert set(spec.options.model_fields) - set(ASKED) == settings


def test_an_option_with_no_place_in_the_settings_is_refused_not_dropped():
    with pytest.raises(TypeError, match="BasicSearchSettings has no field for top_n"):
        settings_from(BasicSearchSettings, {"top_k": 3, "max_context_tokens": 900, "keyword_weight": 1, "top_n": 2})
    asked = {"question": "Who?", "response_type": "a line", "top_k": 3, "max_context_tokens": 900, "keyword_weight": 1}
    assert settings_from(BasicSearchSettings, asked, besides=ASKED).top_k == 3


@pytest.fixture(scope="module")
def llm_server():
    with FakeOpenAIServer() as server:
        yield server


def ask(index_fixture, asset, config, server=None, **kwargs):
    workspace = index_fixture[0]
    models = {}
    if server is not None:
        models = {
            "chat": chat_resource(server.base_url, workspace.cache),
            "embeddings": embedding_resource(server.base_url, workspace.cache),
        }
    return workspace.ask(SAMPLE_CORPUS, asset, config, **models, **kwargs)


def answer_row(workspace, result):
    return workspace.sql("SELECT * FROM query_answers WHERE run_id = ?", result.run_id).iloc[0]


OFFLINE_METHODS = {asset: options for asset, options in METHODS.items() if asset != "text_summary_search"}


def test_text_summary_needs_a_model_and_says_so_in_a_line_naming_what_answers_offline(offline_index):
    refused = ask(offline_index, "text_summary_search", METHODS["text_summary_search"], raise_on_error=False)
    failure = refused.get_step_failure_events()[0].step_failure_data.user_failure_data.description
    assert failure.startswith("text_summary search has a model summarise the source text itself, and no model is set")
    assert "ask with basic" in failure and "GRAPHRAG_API_BASE" in failure and "\n" not in failure


@pytest.mark.parametrize("asset", OFFLINE_METHODS)
def test_every_method_answers_offline_with_traceable_sources(offline_index, asset):
    workspace = offline_index[0]
    result = ask(offline_index, asset, METHODS[asset])
    metadata = materialization_metadata(result, asset)
    row = answer_row(workspace, result)
    assert row.extractive and metadata["extractive"] and row.model_calls == 0
    assert ("Extractive answer" in row.answer) or ("Template questions" in row.answer)
    assert row.answer in metadata["answer"] and metadata["sources"] != ""
    # Every answer traces back, through its context, to the sample document.
    trace = workspace.sql(metadata["trace_sql"])
    assert set(trace["document_title"]) == {"a-christmas-carol.txt"}
    # A person can check each citation: every number cited is a row of the printed sources, with its text.
    for kind, header in (("Sources", "source"), ("Reports", "report")):
        assert set(cited(row.answer, kind)) <= set(numbered_rows(metadata["sources"], header)), kind


def numbered_rows(markdown: str, header: str) -> list[int]:
    """The numbers in the first column of each sources table whose first column is `header`."""
    numbers, in_table = [], False
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells and cells[0] == header:
            in_table = True
        elif not cells:
            in_table = False
        elif in_table and cells[0].isdigit():
            numbers.append(int(cells[0]))
    return numbers


def test_offline_drift_quotes_each_sentence_once_under_readable_headings(offline_index):
    answer = answer_row(offline_index[0], ask(offline_index, "drift_search", METHODS["drift_search"])).answer
    quoted = [re.sub(r"\s*\[Data:[^\]]*\]$", "", line[2:]) for line in answer.splitlines() if line.startswith("- ")]
    assert len(quoted) > 3 and len(quoted) == len(set(quoted))
    headings = re.findall(r"^\*\*(.+)\*\*$", answer, re.MULTILINE)
    assert all(QUESTION not in heading for heading in headings)  # no search strings dressed up as questions


def test_an_offline_follow_up_answers_from_the_conversation_it_continues(offline_index):
    first = answer_row(offline_index[0], ask(offline_index, "local_search", {"question": "Who is Bob Cratchit?"}))
    conversation = [{"role": "user", "content": first.question}, {"role": "assistant", "content": first.answer}]
    follow = ask(offline_index, "local_search", {"question": "What happens to him?", "conversation": conversation})
    answer = answer_row(offline_index[0], follow).answer
    assert "Extractive answer" in answer and "Sources (" in answer and "Cratchit" in answer


@pytest.mark.parametrize("asset", METHODS)
def test_every_method_answers_with_the_model(llm_index, llm_server, asset):
    workspace = llm_index[0]
    result = ask(llm_index, asset, METHODS[asset], server=llm_server)
    row = answer_row(workspace, result)
    assert not row.extractive and row.model_calls + row.cache_hits > 0 and row.context_tokens > 0
    assert row.answer.startswith("Answer to") or row.answer.startswith("- What happens")
    assert len(workspace.sql("SELECT * FROM answer_sources WHERE answer_id = ?", row.id)) > 0
    assert json.loads(row.config).get("question", QUESTION) == QUESTION


def test_global_search_at_every_level_records_context_tokens_against_ts(llm_index, llm_server):
    workspace = llm_index[0]
    levels = sorted(workspace.sql("SELECT DISTINCT level FROM communities")["level"])
    tokens = {}
    for level in levels:
        result = ask(llm_index, "global_search", {"question": QUESTION, "community_level": level}, server=llm_server)
        row = answer_row(workspace, result)
        assert row.community_level == level
        context = json.loads(row.context)
        reports = workspace.sql("SELECT id FROM community_reports WHERE level = ? AND status = 'ok'", level)
        assert sorted(context["reports"]) == sorted(reports["id"])  # the map step read exactly that level
        tokens[level] = row.context_tokens
    ts = answer_row(workspace, ask(llm_index, "text_summary_search", {"question": QUESTION}, server=llm_server))
    # The paper's Table 2: root-level reports are far cheaper to read than the source texts.
    assert tokens[0] * 5 < ts.context_tokens
    assert tokens[levels[0]] <= tokens[levels[-1]]


@pytest.mark.parametrize("level", [0, 1])
def test_dynamic_selection_rates_only_real_communities_down_to_the_level(llm_index, llm_server, level):
    result = ask(
        llm_index,
        "global_search",
        {"question": QUESTION, "community_level": level, "dynamic_community_selection": True},
        server=llm_server,
    )
    details = materialization_metadata(result, "global_search")["details"]
    communities = llm_index[0].sql("SELECT community, level, carried_from FROM communities").set_index("community")
    rated = communities.loc[details["rated_communities"]]
    walkable = communities[(communities["level"] <= level) & (communities["carried_from"] < 0)]
    # Only communities Leiden made, at the levels walked: no carried-down copy, nothing deeper than asked.
    assert (rated["carried_from"] < 0).all() and (rated["level"] <= level).all()
    assert set(rated.index) >= set(communities[communities["level"] == 0].index)  # the walk starts at the root
    assert 0 < details["reports_selected"] <= details["reports_rated"] <= len(walkable)
    if level == 1:
        assert (rated["level"] == 1).any()  # it did descend


def test_map_scores_of_zero_are_dropped_and_the_reduce_window_is_packed_by_score():
    points = [
        {"description": f"point {i} " + "word " * 30, "score": score} for i, score in enumerate([0, 40, 90, 0, 70, 10])
    ]
    one = count_tokens(f"----Analyst 1----\nImportance Score: 90\n{points[2]['description']}") + 1
    text, kept, tokens = reduce_points(points, budget=2 * one + 2)
    assert [p["score"] for p in kept] == [90, 70]  # room for two: the highest scores, in order
    assert "Importance Score: 90" in text and "point 0" not in text and tokens <= 2 * one + 2
    _, everything, _ = reduce_points(points, budget=10_000)
    assert [p["score"] for p in everything] == [90, 70, 40, 10]


@pytest.mark.parametrize(
    "config,message",
    [
        ({"question": QUESTION, "community_level": 99}, "community level 99 does not exist"),
        ({"question": "   ", "community_level": 0}, "the question is empty"),
    ],
)
def test_bad_config_fails_before_any_model_call(llm_index, config, message):
    with FakeOpenAIServer() as server:
        result = ask(llm_index, "global_search", config, server=server, raise_on_error=False)
        assert not server.served
    assert not result.success
    assert message in result.get_step_failure_events()[0].step_failure_data.user_failure_data.description


def test_a_corpus_never_indexed_is_refused(workspace):
    (workspace.data / "unindexed").mkdir()
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    result = workspace.ask("unindexed", "local_search", {"question": QUESTION}, raise_on_error=False)
    description = result.get_step_failure_events()[0].step_failure_data.user_failure_data.description
    assert "corpus 'unindexed' is not indexed" in description


def test_chat_and_embedding_tokens_are_reported_apart(llm_index, llm_server):
    """Their prices differ by an order of magnitude: a question that is new here is embedded and answered."""
    workspace = llm_index[0]
    result = ask(
        llm_index, "local_search", {"question": "Which bells ring on Christmas morning, and why?"}, server=llm_server
    )
    row, metadata = answer_row(workspace, result), materialization_metadata(result, "local_search")
    assert row.embedding_tokens > 0 and row.prompt_tokens > 0 and row.completion_tokens > 0
    assert metadata["embedding_tokens"] == row.embedding_tokens and metadata["prompt_tokens"] == row.prompt_tokens


def test_a_follow_up_reads_the_conversation_and_its_context_follows_the_earlier_turns(llm_index, llm_server):
    workspace = llm_index[0]
    follow_up = "What happens to him at the end?"
    conversation = [
        {"role": "user", "content": "Who is Tiny Tim?"},
        {"role": "assistant", "content": "Bob Cratchit's youngest son, who is ill."},
    ]
    titles = workspace.sql("SELECT id, title FROM entities").set_index("id")["title"]

    def local(config):
        before = len(llm_server.served)
        row = answer_row(workspace, ask(llm_index, "local_search", config, server=llm_server))
        prompts = [s.prompt for s in llm_server.served[before:] if s.kind == "answer"]
        return row, {titles[e] for e in json.loads(row.context)["entities"]}, prompts

    alone, alone_entities, _ = local({"question": follow_up})
    row, entities, prompts = local({"question": follow_up, "conversation": conversation})
    # "him" is Tiny Tim only in the light of the earlier turns: they choose the entities, and the prompt carries them.
    assert "TINY" in entities and not {"TINY", "TIM"} & alone_entities
    assert "<conversation>\nuser: Who is Tiny Tim?\nassistant: Bob Cratchit's youngest son" in prompts[0]
    assert json.loads(row.conversation) == conversation and json.loads(alone.conversation) == []
    bad = ask(
        llm_index,
        "global_search",
        {"question": follow_up, "conversation": [{"role": "narrator", "content": "x"}]},
        server=llm_server,
        raise_on_error=False,
    )
    assert "roles ['narrator']" in bad.get_step_failure_events()[0].step_failure_data.user_failure_data.description


def cited_reports(workspace, result) -> list[set[str]]:
    """The entity titles of each community the answer cites, in the answer's order."""
    row = answer_row(workspace, result)
    numbers = [int(n) for n in re.findall(r"\[Data: Reports \((\d+)\)\]", row.answer)]
    communities = workspace.sql("SELECT community, entity_ids FROM communities").set_index("community")["entity_ids"]
    titles = workspace.sql("SELECT id, title FROM entities").set_index("id")["title"]
    return [{titles[e] for e in communities[n]} for n in numbers]


@pytest.mark.parametrize("level", [0, 1])
def test_offline_global_search_answers_the_questions_graphrag_exists_for(offline_index, level):
    workspace = offline_index[0]
    themes = ask(
        offline_index, "global_search", {"question": "What are the main themes of the story?", "community_level": level}
    )
    cited = cited_reports(workspace, themes)
    # A broad question reads the central communities: Scrooge's, and the spirits'.
    assert any("SCROOGE" in c for c in cited[:3]) and any({"GHOST", "SPIRIT", "SPIRITS"} & c for c in cited[:3])
    tim = ask(offline_index, "global_search", {"question": "Who is Tiny Tim?", "community_level": level})
    assert "TINY TIM" in cited_reports(workspace, tim)[0]
    dynamic = ask(
        offline_index,
        "global_search",
        {
            "question": "What are the main themes of the story?",
            "community_level": level,
            "dynamic_community_selection": True,
        },
    )
    assert cited_reports(workspace, dynamic) and "I do not know" not in answer_row(workspace, dynamic).answer
    answer = answer_row(workspace, themes).answer
    quoted = [line for line in answer.splitlines() if line.startswith("- ")]
    assert len(quoted) == len(set(quoted)) and not re.search(
        r"[a-z] \d{1,3} [A-Z]", answer
    )  # no repeats, no page numbers


def test_the_licence_and_the_books_headings_stay_out_of_the_offline_graph(offline_index):
    workspace = offline_index[0]
    titles = workspace.sql("SELECT title FROM entities")["title"].str.upper()
    assert not titles.str.contains("GUTENBERG|STAVE|ILLUSTRATION").any()
    document = workspace.sql("SELECT text, metadata FROM documents").iloc[0]
    assert "*** START OF" not in document.text and json.loads(document.metadata)["boilerplate_chars_removed"] > 10_000


def test_dynamic_selection_never_walks_into_a_carried_down_copy(offline_index):
    """A root community that Leiden did not split is carried down as a copy with the same report. When the root is
    relevant, the walk keeps the root and neither rates nor selects its copy (that would read one report twice
    and cite a number no export has)."""
    workspace = offline_index[0]
    with duckdb.connect(str(workspace.database), read_only=True) as conn:
        index = load_index(conn, SAMPLE_CORPUS)
    copies = set(index.communities.filter(pl.col("carried_from") >= 0)["community"])
    roots = set(index.communities.filter(pl.col("level") == 0)["community"])
    carried_roots = sorted(set(index.communities.filter(pl.col("community").is_in(copies))["carried_from"]) & roots)
    assert carried_roots
    reports = {report.community: report for report in records(index.reports)}
    for root in carried_roots:
        question = reports[root].title + ": " + reports[root].summary  # the root's own words
        selected, rated = asyncio.run(select_communities(None, None, index, question, max_level=1))
        assert reports[root].id in selected
        assert not set(rated) & copies and not set(selected) & {reports[c].id for c in copies}


def test_a_cache_key_is_the_same_in_another_process():
    """The response cache outlives processes: a key that changed with the process (a set's order, hash
    randomization) would pay again for every call of a resumed run."""
    probe = (
        "from graphrag_assets.models.endpoint import ModelSettings, chat_request, embedding_key\n"
        "settings = ModelSettings(model='m', base_url='http://127.0.0.1:9', cache_dir=None)\n"
        "print(chat_request(settings, [{'role': 'user', 'content': 'Who?'}], {'temperature': 0.0, 'seed': 7})[1])\n"
        "print(embedding_key(settings, 'Who?'))"
    )
    keys = [
        subprocess.run(
            [sys.executable, "-c", probe], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True
        ).stdout.split()
        for seed in ("1", "2")
    ]
    assert len(keys[0]) == 2 and keys[0] == keys[1]


@pytest.mark.parametrize(
    "reply,accepted",
    [
        ("I'm sorry, I can't help with that.", False),
        ("I cannot assist with that request.", False),
        ('{"points": [{"description": "Scrooge changes", "score": 80}]}', False),  # the map step's format
        ('```json\n["Scrooge changes"]\n```', False),
        ("I'm sorry, but the data does not say what happens to Fred.", True),  # an answer that it does not know
        ("I do not know: no relevant information was found.", True),
        ("Scrooge changes {utterly} by the end [Data: Reports (1)].", True),
    ],
)
def test_a_written_answer_is_prose_that_answers(reply, accepted):
    from graphrag_assets.method.graph.records import check_answer_text
    from graphrag_assets.method.model_interface import InvalidReply

    if accepted:
        assert check_answer_text(reply) == reply
    else:
        with pytest.raises(InvalidReply):
            check_answer_text(reply)
