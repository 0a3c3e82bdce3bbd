"""The paper's evaluation: statistics checked by hand, and the whole group run against a scripted judge."""

import json
import shutil

import dagster as dg
import numpy as np
import pandas as pd
import polars as pl
import pytest

from graphrag_assets.automation.jobs import evaluation_assets, index_assets
from graphrag_assets.method.assertion_scoring import accuracy_table, answer_scores, assertion_checks
from graphrag_assets.method.evaluation import (
    claim_clusters,
    condition_calls,
    generation_calls,
    majority_labels,
    rouge_l_distances,
    win_rate_table,
)
from graphrag_assets.method.ingest.documents import read_corpus
from graphrag_assets.method.question_files import UNCLASSIFIED, QuestionFileError, read_question_files
from graphrag_assets_tests.model_server import FakeOpenAIServer, distinct_words, key_phrase

from .conftest import SAMPLE_CORPUS, Workspace, chat_resource, embedding_resource

CLAIMS = ["Scrooge is a miser", "Scrooge is a mean miser", "Tiny Tim is ill", "Bob Cratchit is a clerk"]
EVALUATION = {
    "evaluation_questions": {"personas": 2, "tasks_per_persona": 1, "questions_per_task": 2},
    "evaluation_answers": {"conditions": ["C0", "C1", "C9", "TS", "SS", "LGR20"], "context_window_tokens": 4000},
    "pairwise_judgements": {"repeats": 2},
    "claim_metrics": {"thresholds": [0.3, 0.8]},
}


def test_claim_clusters_are_the_ones_computed_by_hand():
    # The first two claims share 4 of their 4 and 5 words: ROUGE-L F = 2 * (4/5 * 4/4) / (4/5 + 4/4) = 8/9.
    distances = rouge_l_distances(CLAIMS)
    assert distances[0, 1] == pytest.approx(1 / 9)
    # Every other pair is further apart than 0.5 and closer than 0.8, so complete linkage merges only those two
    # at 0.3, and everything at 0.8.
    assert distances[np.triu_indices(4, 1)][1:].min() > 0.5 and distances.max() < 0.8
    assert [claim_clusters(CLAIMS, t) for t in (0.05, 0.3, 0.8)] == [4, 3, 1]
    assert claim_clusters([], 0.5) == 0 and claim_clusters(["one claim"], 0.5) == 1


def labels_table(wins_a: int, wins_b: int, ties: int) -> pl.DataFrame:
    winners = ["C0"] * wins_a + ["SS"] * wins_b + [None] * ties
    return pl.DataFrame(
        {
            "question_id": [f"q{i}" for i in range(len(winners))],
            "criterion": "comprehensiveness",
            "condition_a": "C0",
            "condition_b": "SS",
            "winner": winners,
        }
    )


def test_win_rates_count_ties_half_and_the_sign_test_gives_the_known_p_value():
    table = win_rate_table(labels_table(8, 2, 1)).to_pandas().set_index("row_condition")
    assert table.loc["C0", "win_rate"] == pytest.approx(8.5 / 11) and table.loc["SS", "win_rate"] == pytest.approx(
        2.5 / 11
    )
    # Two-sided sign test of 8 wins against 2: P = 2 * (C(10,0) + C(10,1) + C(10,2)) / 2^10 = 112 / 1024.
    assert table.loc["C0", "p_value"] == pytest.approx(112 / 1024) and table.loc["C0", "p_adjusted"] == pytest.approx(
        112 / 1024
    )


def test_the_majority_is_taken_over_both_orders_and_every_repeat():
    rows = [("C0", "SS", "C0"), ("SS", "C0", "C0"), ("C0", "SS", "SS"), ("SS", "C0", None)]
    judgements = pl.DataFrame(
        [
            {
                "question_id": "q",
                "criterion": "diversity",
                "first_condition": f,
                "second_condition": s,
                "winner_condition": w,
            }
            for f, s, w in rows
        ]
    )
    assert majority_labels(judgements)["winner"].to_list() == ["C0"]  # 2 wins to 1
    assert majority_labels(judgements[1:])["winner"].to_list() == [None]  # 1 to 1: a tie


def evaluate(workspace, chat, embeddings, config: dict, selection=None, raise_on_error=True):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [SAMPLE_CORPUS])
    return dg.materialize(
        [*index_assets, *evaluation_assets],
        selection=selection or evaluation_assets,
        instance=instance,
        partition_key=SAMPLE_CORPUS,
        resources=workspace.resources(chat, embeddings),
        run_config={"ops": {name: {"config": values} for name, values in config.items()}},
        raise_on_error=raise_on_error,
    )


@pytest.mark.slow
def test_the_evaluation_group_follows_from_a_scripted_judge(llm_index):
    workspace = llm_index[0]
    with FakeOpenAIServer() as server:
        chat, embeddings = (
            chat_resource(server.base_url, workspace.cache),
            embedding_resource(server.base_url, workspace.cache),
        )
        result = evaluate(workspace, chat, embeddings, EVALUATION)
    levels = set(workspace.sql("SELECT DISTINCT level FROM communities")["level"])
    assert {0, 1} <= levels and 9 not in levels
    questions = workspace.sql("SELECT * FROM evaluation_questions")
    answers = workspace.sql("SELECT * FROM evaluation_answers")
    judgements = workspace.sql("SELECT * FROM pairwise_judgements")
    assert len(questions) == 4 and set(answers["condition"]) == {"C0", "C1", "TS", "SS", "LGR20"}  # C9 skipped
    lazy = answers[answers["condition"] == "LGR20"]
    assert (lazy["model_calls"] <= condition_calls(None, "LGR20", 4000)).all()  # within the calls planned for it
    assert set(answers["question_id"]) == set(questions["id"]) and (answers["model_calls"] > 0).all()

    # Every pair of conditions, both orders, 2 repeats, 4 criteria; each judgement points at its two answers.
    assert len(judgements) == len(questions) * 10 * 2 * 2 * 4
    assert set(judgements["first_answer_id"]) | set(judgements["second_answer_id"]) == set(answers["id"])
    pairs = judgements.groupby(["question_id", "criterion", "repeat"])[["first_condition", "second_condition"]]
    assert all(sorted(map(tuple, g.to_numpy())) == sorted((b, a) for a, b in g.to_numpy()) for _, g in pairs)

    # The judge prefers the answer with more distinct words: the win rates must be the ones that follows from it.
    words = {(r.question_id, r.condition): distinct_words(r.answer) for r in answers.itertuples()}
    rates = workspace.sql("SELECT * FROM win_rates")
    for rate in rates.itertuples():
        mine = [words[(q, rate.row_condition)] for q in questions["id"]]
        theirs = [words[(q, rate.column_condition)] for q in questions["id"]]
        expected = sum(1.0 if m > t else 0.5 if m == t else 0.0 for m, t in zip(mine, theirs)) / len(mine)
        assert rate.win_rate == pytest.approx(expected)
    assert set(rates["criterion"]) == {"comprehensiveness", "diversity", "empowerment", "directness"}

    claims = workspace.sql("SELECT * FROM claim_metrics")
    assert len(claims) == len(answers) and set(json.loads(claims["clusters"].iloc[0])) == {"0.3", "0.8"}
    assert (claims["claim_count"] == claims["claims"].map(lambda c: len(json.loads(c)))).all()
    lineage = workspace.sql("SELECT DISTINCT asset FROM lineage WHERE corpus = ?", SAMPLE_CORPUS)["asset"]
    assert set(EVALUATION) | {"win_rates"} <= set(lineage)
    metadata = {
        e.materialization.asset_key.path[-1]: e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    assert metadata["evaluation_answers"]["skipped_conditions"].value == ["C9"]
    assert "data:image/png;base64" in metadata["win_rates"]["comprehensiveness_heatmap"].value
    assert metadata["pairwise_judgements"]["planned_model_calls"].value == len(judgements)


def test_the_evaluation_refuses_to_spend_past_its_cap_and_to_run_offline(llm_index):
    workspace = llm_index[0]
    with FakeOpenAIServer() as server:
        chat = chat_resource(server.base_url, workspace.cache)
        capped = {"evaluation_questions": {**EVALUATION["evaluation_questions"], "max_model_calls": 2}}
        result = evaluate(workspace, chat, None, capped, selection=["evaluation_questions"], raise_on_error=False)
        assert not result.success and server.count() == 0
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data.description
    assert "needs 6 model calls, more than max_model_calls=2" in failure
    offline = evaluate(workspace, None, None, {}, selection=["evaluation_questions"], raise_on_error=False)
    assert "needs a chat model" in offline.get_step_failure_events()[0].step_failure_data.user_failure_data.description


BENCHMARKQED_QUESTIONS = [
    {
        "question_id": "q-1",
        "question_text": "Who visits Scrooge on Christmas Eve?",
        "references": ["stave one"],
        "assertions": [
            {"statement": "The answer names Marley", "score": 3, "rank": 1},
            {"statement": "The answer mentions the ghosts", "score": 1, "rank": 2},
        ],
    },
    {"question_id": "q-2", "question_text": "How does Scrooge change?", "assertions": [{"statement": "He softens"}]},
]


def test_question_files_load_in_benchmarkqed_json_jsonl_and_csv_with_a_byte_order_mark(tmp_path):
    json_file = tmp_path / "data_local_questions.json"
    json_file.write_text(json.dumps(BENCHMARKQED_QUESTIONS), encoding="utf-8-sig")
    lines = tmp_path / "more.jsonl"
    lines.write_text('{"question_id": 7, "question_text": "Why?", "question_class": "activity-global"}\n\n')
    table = tmp_path / "sheet.csv"
    table.write_text("question,notes\nWhat is Fezziwig's ball like?,from a spreadsheet\n", encoding="utf-8-sig")

    questions = read_question_files([json_file, lines, table]).to_pandas().set_index("id")
    assert list(questions.index) == ["q-1", "q-2", "7", questions.index[3]] and len(questions.index[3]) == 24
    assert questions.loc["q-1", "question_class"] == "data_local"  # from the file's name, as BenchmarkQED names them
    assert questions.loc["7", "question_class"] == "activity_global"
    assert questions.loc[questions.index[3], "question_class"] == UNCLASSIFIED
    assert json.loads(questions.loc["q-1", "assertions"]) == [
        {"statement": "The answer names Marley", "score": 3.0, "rank": 1},
        {"statement": "The answer mentions the ghosts", "score": 1.0, "rank": 2},
    ]
    assert json.loads(questions.loc["q-2", "assertions"])[0]["score"] == 1.0  # no score: every assertion counts one
    assert json.loads(questions.loc["q-1", "metadata"]) == {"references": ["stave one"]}  # unknown fields are kept
    assert json.loads(questions.loc[questions.index[3], "metadata"]) == {"notes": "from a spreadsheet"}
    assert set(questions["source"]) == {"data_local_questions.json", "more.jsonl", "sheet.csv"}


@pytest.mark.parametrize(
    "content, problem",
    [
        (
            [BENCHMARKQED_QUESTIONS[0], {"question_id": "q-2", "question_text": "Why?", "assertions": [{"score": 2}]}],
            "entry 2 (q-2): assertion 1 has no statement",
        ),
        ([{"question_id": "q-1"}], "entry 1 (q-1): no question_text"),
        ([BENCHMARKQED_QUESTIONS[0], BENCHMARKQED_QUESTIONS[0]], "entry 2: question_id 'q-1' is used twice"),
        ([{"question_text": "Why?", "question_class": "global"}], "entry 1: question_class 'global' is not one of"),
        ({"question_text": "Why?"}, "expected a list of question objects"),
        ("[{", "not valid JSON"),
    ],
)
def test_a_bad_question_file_is_one_error_naming_the_file_and_the_entry(tmp_path, content, problem):
    path = tmp_path / "questions.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(QuestionFileError) as raised:
        read_question_files([path])
    assert str(raised.value).startswith(f"{path}: ") and problem in str(raised.value)


def test_a_csv_question_file_with_a_row_longer_than_its_header_is_refused_and_a_short_row_is_read(tmp_path):
    path = tmp_path / "sheet.csv"
    path.write_text('question,assertions\nWhy?\n"How, then?","[""It says how""]",extra\n')
    with pytest.raises(QuestionFileError) as raised:
        read_question_files([path])
    assert str(raised.value) == f"{path}: row 2 has more fields than the header has columns"
    path.write_text("question,assertions\nWhy?\n")
    assert read_question_files([path]).select("question", "assertions").rows() == [("Why?", "[]")]


def test_assertion_accuracy_is_weighted_by_score_and_its_interval_and_test_are_the_known_ones():
    questions = pl.DataFrame(
        {
            "id": [f"q{i}" for i in range(4)],
            "question": "?",
            "question_class": "data_local",
            "assertions": json.dumps([{"statement": "a", "score": 3.0, "rank": 1}, {"statement": "b", "score": 1.0}]),
        }
    )
    answers = pl.DataFrame(
        [{"id": f"{c}{i}", "question_id": f"q{i}", "condition": c, "answer": "..."} for c in "AB" for i in range(4)]
    )
    # A supports both assertions of q0, q1 and q3 and only "a" of q2 (3 of 4 by weight); B supports only "b" of
    # q0 and q2 (1/4) and nothing of q1 and q3. Repeats: 3, with one split vote (2 of 3) and one failed call.
    support = {("A0", 0): 1, ("A0", 1): 1, ("A1", 0): 1, ("A1", 1): 1, ("A2", 0): 1, ("A3", 0): 1, ("A3", 1): 1}
    support |= {("B0", 1): 1, ("B2", 1): 1}
    checks = assertion_checks(answers, questions, repeats=3)
    verdicts = []
    for check in checks:
        yes = bool(support.get((check.answer_id, check.assertion)))
        if (check.answer_id, check.assertion, check.repeat) == ("A2", 1, 0):
            yes = True  # outvoted 2 to 1
        verdicts.append(None if (check.answer_id, check.repeat) == ("B1", 2) else {"supported": yes, "reasoning": ""})
    scored = answer_scores(answers, questions, checks, verdicts)
    scores = scored.to_pandas().set_index("answer_id")
    assert scores["accuracy"].to_dict() == {
        "A0": 1.0, "A1": 1.0, "A2": 0.75, "A3": 1.0, "B0": 0.25, "B1": 0.0, "B2": 0.25, "B3": 0.0
    }  # fmt: skip
    assert json.loads(scores.loc["A2", "verdicts"])[1]["votes_supported"] == 1 and scores.loc["B1", "assertions"] == 2

    table = accuracy_table(scored).to_pandas().set_index(["question_class", "condition"])
    a = table.loc[("data_local", "A")]
    # 1, 1, 0.75, 1: mean 0.9375, sd 0.125, so 0.9375 -/+ t(0.975, 3) * 0.125 / 2 = 0.9375 -/+ 3.1824 * 0.0625
    assert a["accuracy"] == pytest.approx(0.9375) and a["ci_low"] == pytest.approx(0.9375 - 3.18245 * 0.0625, abs=1e-4)
    assert a["ci_high"] == 1.0 and a["best_condition"] == "A" and pd.isna(a["p_vs_best"])
    # B is worse on all 4 questions: the exact two-sided signed-rank p is 2 / 2^4
    assert table.loc[("data_local", "B"), "p_vs_best"] == pytest.approx(2 / 16)
    assert table.loc[("all", "B"), "accuracy"] == pytest.approx(0.125)


def test_the_corpus_questions_folder_is_read_by_the_evaluation_not_indexed(tmp_path):
    workspace = Workspace(tmp_path)
    corpus = workspace.add_sample_corpus()
    folder = workspace.data / corpus / "questions"
    folder.mkdir()
    (folder / "activity_global.json").write_text(json.dumps(BENCHMARKQED_QUESTIONS))
    assert "questions/activity_global.json" not in set(read_corpus(workspace.data / corpus).documents["source_path"])

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [corpus])
    result = dg.materialize(  # no model: loading questions needs none
        [*index_assets, *evaluation_assets],
        selection=["evaluation_questions"],
        instance=instance,
        partition_key=corpus,
        resources=workspace.resources(),
    )
    stored = workspace.sql("SELECT * FROM evaluation_questions").set_index("id")
    assert list(stored.index) == ["q-1", "q-2"] and set(stored["question_class"]) == {"activity_global"}
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    assert metadata["assertions"].value == 3 and metadata["questions_with_assertions"].value == 2


def copy_of(llm_index, root) -> Workspace:
    """The LLM index's store and cache in a workspace of its own: other tests read the shared one's lineage."""
    original = llm_index[0]
    root.mkdir(exist_ok=True)
    workspace = Workspace(root)
    workspace.add_sample_corpus()
    shutil.copy(original.database, workspace.database)
    shutil.copytree(original.cache, workspace.cache)
    return workspace


def test_assertion_scores_follow_from_a_scripted_judge_that_looks_for_each_key_phrase(llm_index, tmp_path):
    workspace = copy_of(llm_index, tmp_path / "workspace")
    file = tmp_path / "questions.json"
    # The scripted judge supports a statement when the answer holds its last word: "to" and "answer" are in every
    # scripted answer ("Answer to ..."), "scrooge" in some, "zebra" in none.
    file.write_text(
        json.dumps(
            [
                {
                    "question_id": f"q{i}",
                    "question_text": question,
                    "question_class": question_class,
                    "assertions": [
                        {"statement": "It is an answer", "score": 2},
                        {"statement": "It names Scrooge", "score": 1},
                        {"statement": "It mentions a zebra", "score": 1},
                    ],
                }
                for i, (question, question_class) in enumerate(
                    [
                        ("What is Scrooge like?", "data_local"),
                        ("What are the themes of the story?", "data_global"),
                        ("How does Scrooge treat Bob Cratchit?", "data_local"),
                    ]
                )
            ]
        )
    )
    config = {
        "evaluation_questions": {"questions_file": str(file)},
        "evaluation_answers": {"conditions": ["C0", "SS"], "context_window_tokens": 4000},
        "assertion_scores": {"repeats": 3},
    }
    selection = ["evaluation_questions", "evaluation_answers", "assertion_scores", "assertion_accuracy"]
    with FakeOpenAIServer() as server:
        chat = chat_resource(server.base_url, workspace.cache)
        result = evaluate(workspace, chat, embedding_resource(server.base_url, workspace.cache), config, selection)
        assertion_calls = server.count("assertion")
    answers = workspace.sql("SELECT * FROM evaluation_answers").set_index("id")
    scores = workspace.sql("SELECT * FROM assertion_scores").set_index("answer_id")
    assert len(scores) == len(answers) == 6 and assertion_calls <= 6 * 3 * 3
    for answer_id, row in scores.iterrows():
        text = answers.loc[answer_id, "answer"].lower()
        weights = {key_phrase(s): w for s, w in (("It is an answer", 2), ("It names Scrooge", 1), ("zebra", 1))}
        expected = sum(w for phrase, w in weights.items() if phrase in text) / 4
        assert row["accuracy"] == pytest.approx(expected), answer_id
        assert [v["supported"] for v in json.loads(row["verdicts"])] == [p in text for p in weights]
    assert scores["accuracy"].nunique() > 1  # the rule tells the answers apart: some name Scrooge, some do not

    accuracy = workspace.sql("SELECT * FROM assertion_accuracy").set_index(["question_class", "condition"])
    assert set(accuracy.index.get_level_values(0)) == {"data_local", "data_global", "all"}
    for (question_class, condition), row in accuracy.iterrows():
        mine = scores[(scores["condition"] == condition)]
        mine = mine if question_class == "all" else mine[mine["question_class"] == question_class]
        assert row["accuracy"] == pytest.approx(mine["accuracy"].mean()) and row["questions"] == len(mine)
        assert row["ci_low"] <= row["accuracy"] <= row["ci_high"]
    metadata = {
        e.materialization.asset_key.path[-1]: e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    assert metadata["assertion_scores"]["planned_model_calls"].value == 6 * 3 * 3
    assert "data:image/png;base64" in metadata["assertion_accuracy"]["data_local_chart"].value


def test_the_four_question_classes_are_generated_and_win_rates_add_up_per_class(llm_index, tmp_path):
    workspace = copy_of(llm_index, tmp_path)
    config = {
        "evaluation_questions": {
            "question_classes": ["activity_global", "activity_local", "data_local", "data_global"],
            "personas": 2,
            "tasks_per_persona": 1,
            "questions_per_task": 1,
            "sampled_text_units": 3,
            "data_global_questions": 2,
        },
        "evaluation_answers": {"conditions": ["C0", "SS"], "context_window_tokens": 4000},
        "pairwise_judgements": {"repeats": 1, "criteria": ["comprehensiveness"]},
    }
    selection = ["evaluation_questions", "evaluation_answers", "pairwise_judgements", "win_rates"]
    with FakeOpenAIServer() as server:
        chat = chat_resource(server.base_url, workspace.cache)
        result = evaluate(workspace, chat, embedding_resource(server.base_url, workspace.cache), config, selection)
    questions = workspace.sql("SELECT * FROM evaluation_questions")
    counts = questions["question_class"].value_counts().to_dict()
    assert counts == {"activity_global": 2, "activity_local": 2, "data_local": 3, "data_global": 2}
    units = set(workspace.sql("SELECT id FROM text_units")["id"])
    local = questions[questions["question_class"] == "data_local"]
    assert all(json.loads(m)["text_unit_id"] in units for m in local["metadata"])
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    assert metadata["planned_model_calls"].value == generation_calls(2, 1, True, list(counts), units=3) == 12

    rates = workspace.sql("SELECT * FROM win_rates")
    assert set(rates["question_class"]) == {*counts, "all"}
    for question_class, group in rates.groupby("question_class"):
        pairs = group.set_index(["row_condition", "column_condition"])
        assert pairs.loc[("C0", "SS"), "win_rate"] + pairs.loc[("SS", "C0"), "win_rate"] == pytest.approx(1.0)
        assert pairs.loc[("C0", "SS"), "wins"] == pairs.loc[("SS", "C0"), "losses"]
        assert pairs.loc[("C0", "SS"), "questions"] == (counts.get(question_class) or len(questions))
    per_class = rates[rates["question_class"] != "all"].groupby(["row_condition", "column_condition"])
    overall = rates[rates["question_class"] == "all"].set_index(["row_condition", "column_condition"])
    for column in ("wins", "losses", "ties", "questions"):
        assert per_class[column].sum().to_dict() == overall[column].to_dict()
