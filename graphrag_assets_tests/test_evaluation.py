"""The paper's evaluation: statistics checked by hand, and the whole group run against a scripted judge."""

import json

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from graphrag_assets.automation.jobs import evaluation_assets, index_assets
from graphrag_assets.method.evaluation import (
    claim_clusters,
    condition_calls,
    majority_labels,
    rouge_l_distances,
    win_rate_table,
)
from graphrag_assets_tests.model_server import FakeOpenAIServer, distinct_words

from .conftest import SAMPLE_CORPUS, chat_resource, embedding_resource

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


def labels_table(wins_a: int, wins_b: int, ties: int) -> pd.DataFrame:
    winners = ["C0"] * wins_a + ["SS"] * wins_b + [None] * ties
    return pd.DataFrame(
        {
            "question_id": [f"q{i}" for i in range(len(winners))],
            "criterion": "comprehensiveness",
            "condition_a": "C0",
            "condition_b": "SS",
            "winner": winners,
        }
    )


def test_win_rates_count_ties_half_and_the_sign_test_gives_the_known_p_value():
    table = win_rate_table(labels_table(8, 2, 1)).set_index("row_condition")
    assert table.loc["C0", "win_rate"] == pytest.approx(8.5 / 11) and table.loc["SS", "win_rate"] == pytest.approx(
        2.5 / 11
    )
    # Two-sided sign test of 8 wins against 2: P = 2 * (C(10,0) + C(10,1) + C(10,2)) / 2^10 = 112 / 1024.
    assert table.loc["C0", "p_value"] == pytest.approx(112 / 1024) and table.loc["C0", "p_adjusted"] == pytest.approx(
        112 / 1024
    )


def test_the_majority_is_taken_over_both_orders_and_every_repeat():
    rows = [("C0", "SS", "C0"), ("SS", "C0", "C0"), ("C0", "SS", "SS"), ("SS", "C0", None)]
    judgements = pd.DataFrame(
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
    assert majority_labels(judgements)["winner"].tolist() == ["C0"]  # 2 wins to 1
    assert majority_labels(judgements.iloc[1:])["winner"].tolist() == [None]  # 1 to 1: a tie


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
