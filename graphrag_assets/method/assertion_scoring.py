"""Scoring answers against assertions (BenchmarkQED): statements a good answer to a question must support, each
checked against the answer by a judge, `repeats` times, with the majority kept.

An answer's accuracy is the share of its question's assertions it supports, weighted by their scores. A
condition's accuracy is the mean over its questions, with a t-interval; each condition is compared with the best
one of its question class by a paired Wilcoxon signed-rank test over the questions both answered.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import numpy as np
import polars as pl

from .graph.records import parse_json_reply
from .model_interface import ChatModel, InvalidReply
from .prompts import user_message

ALL_CLASSES = "all"


@dataclass(frozen=True)
class AssertionCheck:
    """One judge call: does this answer support this assertion of its question?"""

    answer_id: str
    question: str
    answer: str
    assertion: int  # its place in the question's list
    statement: str
    repeat: int


def parse_assertion_verdict(reply: str) -> dict:
    data, _ = parse_json_reply(reply)
    supported = data.get("supported") if isinstance(data, dict) else None
    if not isinstance(supported, bool):
        raise InvalidReply('the verdict has no "supported": true or false')
    return {"supported": supported, "reasoning": str(data.get("reasoning") or "")}


def assertion_checks(answers: pl.DataFrame, questions: pl.DataFrame, repeats: int) -> list[AssertionCheck]:
    """Every assertion of every answered question, against each answer to it, `repeats` times."""
    by_id = {question["id"]: question for question in questions.iter_rows(named=True)}
    planned = []
    for answer in answers.sort("id").iter_rows(named=True):
        question = by_id[answer["question_id"]]
        for place, assertion in enumerate(json.loads(question["assertions"] or "[]")):
            for repeat in range(repeats):
                planned.append(
                    AssertionCheck(
                        answer["id"], question["question"], answer["answer"], place, assertion["statement"], repeat
                    )
                )
    return planned


async def check_all(chat: ChatModel, planned: list[AssertionCheck]) -> list[dict | None]:
    """Every planned check, concurrently; None for one whose reply never parsed."""
    return await asyncio.gather(*(check_assertion(chat, c) for c in planned))


async def check_assertion(chat: ChatModel, check: AssertionCheck) -> dict | None:
    """The judge's verdict; `seed` carries the repeat, so each repeat is its own request (and cache entry)."""
    return await chat.complete(
        user_message("evaluation_assertion", question=check.question, statement=check.statement, answer=check.answer),
        parse=parse_assertion_verdict,
        response_format={"type": "json_object"},
        seed=check.repeat,
    )


def answer_scores(
    answers: pl.DataFrame, questions: pl.DataFrame, checks: list[AssertionCheck], verdicts: list[dict | None]
) -> pl.DataFrame:
    """One row per answer with assertions: each assertion's majority verdict (ties and unanswered checks: not
    supported, counted as unscored when no repeat came back), and the answer's weighted accuracy."""
    votes: dict[tuple[str, int], list[dict]] = {}
    for check, verdict in zip(checks, verdicts):
        if verdict is not None:
            votes.setdefault((check.answer_id, check.assertion), []).append(verdict)
    by_id = {question["id"]: question for question in questions.iter_rows(named=True)}
    rows = []
    for answer in answers.sort("id").iter_rows(named=True):
        question = by_id[answer["question_id"]]
        assertions = json.loads(question["assertions"] or "[]")
        if not assertions:
            continue
        verdicts_of_answer, weight, supported_weight = [], 0.0, 0.0
        for place, assertion in enumerate(assertions):
            cast = votes.get((answer["id"], place), [])
            yes = sum(v["supported"] for v in cast)
            supported = yes > len(cast) / 2
            majority = [v for v in cast if v["supported"] == supported]
            verdicts_of_answer.append(
                {
                    **assertion,
                    "supported": supported if cast else None,
                    "votes_supported": yes,
                    "votes": len(cast),
                    "reasoning": majority[0]["reasoning"] if majority else "",
                }
            )
            if cast:
                weight += assertion["score"]
                supported_weight += assertion["score"] * supported
        scored = [v for v in verdicts_of_answer if v["supported"] is not None]
        rows.append(
            {
                "id": answer["id"],  # one row per answer
                "answer_id": answer["id"],
                "question_id": answer["question_id"],
                "condition": answer["condition"],
                "question_class": question["question_class"],
                "verdicts": json.dumps(verdicts_of_answer),
                "assertions": len(assertions),
                "assertions_scored": len(scored),
                "assertions_supported": sum(bool(v["supported"]) for v in scored),
                # all weights zero: every assertion counts the same
                "accuracy": (supported_weight / weight if weight else float(np.mean([v["supported"] for v in scored])))
                if scored
                else None,
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def accuracy_table(scores: pl.DataFrame, confidence: float = 0.95) -> pl.DataFrame:
    """Per question class (and all classes together) and condition: the mean accuracy over questions with a
    t-interval, and a paired Wilcoxon signed-rank test against the class's best condition, its p-values adjusted
    for the number of conditions (Benjamini-Hochberg)."""
    from scipy import stats

    scored = scores.filter(pl.col("accuracy").is_not_null() & pl.col("accuracy").is_not_nan())
    rows = []
    classes = sorted(scored["question_class"].unique())
    for question_class in [*classes, ALL_CLASSES]:
        group = scored if question_class == ALL_CLASSES else scored.filter(pl.col("question_class") == question_class)
        by_condition = _accuracy_by_question(group)
        means = {condition: float(np.mean(list(values.values()))) for condition, values in by_condition.items()}
        ranked = sorted(means, key=lambda condition: -means[condition])  # stable: a tie goes to the first by name
        best = ranked[0]
        tests = {}
        for condition in ranked[1:]:
            both = sorted(by_condition[best].keys() & by_condition[condition].keys())
            differences = np.array([by_condition[best][q] - by_condition[condition][q] for q in both])
            tests[condition] = float(stats.wilcoxon(differences).pvalue) if np.count_nonzero(differences) else 1.0
        adjusted = dict(zip(tests, stats.false_discovery_control(list(tests.values())))) if tests else {}
        for condition in sorted(means):
            values = np.array(list(by_condition[condition].values()))
            mean, n = float(values.mean()), len(values)
            low, high = (
                stats.t.interval(confidence, n - 1, loc=mean, scale=stats.sem(values))
                if n > 1 and values.std() > 0
                else (mean, mean)
            )
            rows.append(
                {
                    "question_class": question_class,
                    "condition": condition,
                    "questions": n,
                    "accuracy": mean,
                    "ci_low": max(0.0, float(low)),
                    "ci_high": min(1.0, float(high)),
                    "best_condition": best,
                    "p_vs_best": tests.get(condition),
                    "p_adjusted": float(adjusted[condition]) if condition in adjusted else None,
                }
            )
    return pl.DataFrame(rows, infer_schema_length=None)


def _accuracy_by_question(scores: pl.DataFrame) -> dict[str, dict[str, float]]:
    """condition -> question id -> accuracy (the mean, should a question be scored twice), question ids sorted."""
    by_condition: dict[str, dict[str, float]] = {}
    means = scores.group_by("condition", "question_id").agg(pl.col("accuracy").mean()).sort("condition", "question_id")
    for condition, question_id, accuracy in means.iter_rows():
        by_condition.setdefault(condition, {})[question_id] = accuracy
    return by_condition


def accuracy_chart(table: pl.DataFrame, question_class: str, order) -> bytes:
    """A PNG of one question class's accuracy per condition, with its confidence intervals."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(
        table.filter(pl.col("question_class") == question_class).iter_rows(named=True),
        key=lambda row: order(row["condition"]),
    )
    conditions = [row["condition"] for row in rows]
    accuracy = np.array([row["accuracy"] for row in rows])
    errors = np.array([accuracy - [row["ci_low"] for row in rows], [row["ci_high"] for row in rows] - accuracy])
    figure, axes = plt.subplots(figsize=(0.9 * len(conditions) + 2.5, 3.2), dpi=90)
    axes.bar(conditions, accuracy, yerr=errors, capsize=4, color="#4c78a8")
    axes.set_ylim(0, 1)
    axes.set_ylabel("assertions supported")
    axes.set_title(f"{question_class}: assertion accuracy (95% interval)")
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
