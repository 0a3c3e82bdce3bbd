"""The paper's two experiments as one group of assets: does GraphRAG answer global questions better than vector RAG
on this corpus and this endpoint? Questions, answers per condition, pairwise judgements, win rates, claim metrics.

Each asset that calls a model says first how many calls it will make, and fails before the first one when that
passes its `max_model_calls`. Calls go through the cached client, so an interrupted evaluation resumes without
paying twice.
"""

import asyncio
import dataclasses
import hashlib
import json
from collections import Counter
from pathlib import Path

import dagster as dg
import polars as pl

from ..answers.asking import QuestionRefused, check_embeddings
from ..answers.published import NotIndexed, load_index
from ..configs.evaluation import (
    AssertionScoresConfig,
    ClaimMetricsConfig,
    EvaluationAnswersConfig,
    EvaluationQuestionsConfig,
    PairwiseJudgementsConfig,
)
from ..failures import step_failure
from ..method import assertion_scoring as scoring
from ..method import evaluation as ev
from ..method.corpus_folder import QUESTIONS_FOLDER
from ..method.question_files import (
    QUESTION_CLASSES,
    UNCLASSIFIED,
    QuestionFileError,
    question_files,
    read_question_files,
)
from ..method.schema import seeded_sample
from ..models import Usage, usage_scope
from ..naming import bare
from ..resources import (
    ChatModelResource,
    CorporaResource,
    DuckDBStoreResource,
    EmbeddingModelResource,
    run_with_models,
)
from ..store.schema import TABLES
from .common import corpus_asset
from .metadata import markdown, markdown_table, percent_table, png
from .publishing import Step

GROUP = "evaluation"


NO_ASSERTIONS = (
    "no question has assertions, so nothing was scored: load questions with assertions (BenchmarkQED's format) into "
    "evaluation_questions, from its questions_file or data/<corpus>/questions/"
)
QUESTION_SETTINGS = {f.name for f in dataclasses.fields(ev.QuestionSettings)} - {"classes"}


def require_model(chat: ChatModelResource) -> None:
    if not chat.configured:
        raise step_failure(
            "the evaluation needs a chat model to write questions, answer them and judge the answers; the offline "
            "engine cannot. Set GRAPHRAG_API_BASE (and GRAPHRAG_API_KEY) and launch it again.",
            retryable=False,
        )


def plan(context: dg.AssetExecutionContext, calls: int, cap: int, what: str) -> None:
    """Say what the step will cost before it spends anything, and refuse when it is over the cap."""
    context.log.info(f"{what}: {calls} model calls planned (max_model_calls {cap})")
    if calls > cap:
        raise step_failure(
            f"{what} needs {calls} model calls, more than max_model_calls={cap}: raise the cap in the launchpad "
            "config, or ask for fewer questions, conditions, criteria or repeats",
            retryable=False,
        )


def judged(step: Step, model: ChatModelResource, planned: list, judge_all, what: str, config):
    """A verdict of the judge model for every planned comparison or check (None where none parsed), said and capped
    before the first call (`config.max_model_calls`); more failures than `config.max_failed_fraction` fail the
    step. Returns (verdicts, usage, failures)."""
    plan(step.context, len(planned), config.max_model_calls, bare(step.context.op_handle.name))
    verdicts, usage = step.run_model(model, lambda client: judge_all(client, planned), batches=False)
    failed = sum(v is None for v in verdicts)
    step.fail_if_too_many_failed(what, failed, len(planned), (model, usage), config.max_failed_fraction)
    return verdicts, usage, failed


def publish_paid(
    step: Step, table: str, rows: pl.DataFrame, paid: tuple[ChatModelResource, Usage | None], calls: int, **metadata
) -> dg.MaterializeResult:
    """An evaluation table a model was paid for, with the model calls it planned beside what it used."""
    model, _ = paid
    return step.publish(
        table, rows, engine=model.engine, paid=paid, metadata={"planned_model_calls": calls, **metadata}
    )


def answers_to_judge(step: Step, conditions: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The corpus's evaluation answers (of `conditions` only, when any are named) and its questions."""
    answers, questions = step.read("evaluation_answers"), step.read("evaluation_questions")
    if conditions:
        answers = answers.filter(pl.col("condition").is_in(conditions))
    return answers, questions


def per_class(questions: pl.DataFrame) -> dict[str, int]:
    """How many questions of each class, classes in order of name."""
    return dict(sorted(Counter(questions["question_class"]).items()))


def row_id(*parts: object) -> str:
    return hashlib.sha256("\n".join(map(str, parts)).encode()).hexdigest()[:24]


@corpus_asset(
    GROUP,
    deps=["community_reports", "text_units"],
    prompts=(
        "evaluation_corpus",
        "evaluation_personas",
        "evaluation_tasks",
        "evaluation_questions",
        "evaluation_questions_local",
        "evaluation_data_local",
        "evaluation_data_global",
    ),
    model=True,
)
def evaluation_questions(
    context: dg.AssetExecutionContext,
    config: EvaluationQuestionsConfig,
    chat: ChatModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """The questions to answer: loaded from a question file (BenchmarkQED's format, with assertions), or generated
    in BenchmarkQED's four classes, the paper's sensemaking questions (activity_global) among them."""
    corpus = context.partition_key
    if config.questions_file:
        files = [Path(config.questions_file)]
        if not files[0].is_file():
            raise step_failure(f"questions_file {config.questions_file} does not exist", retryable=False)
    else:
        folder = corpora.folder(corpus) / QUESTIONS_FOLDER
        files = question_files(folder)
    if files:
        return loaded_questions(context, duckdb, files)
    return generated_questions(context, config, chat, duckdb)


def loaded_questions(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource, files: list[Path]):
    try:
        questions = read_question_files(files)
    except QuestionFileError as error:
        raise step_failure(f"{error}; fix the file and launch again", retryable=False) from None
    context.log.info(f"{len(questions)} questions loaded from {', '.join(map(str, files))}: none generated")
    questions = questions.with_columns(persona=pl.lit(""), task=pl.lit(""), corpus_description=pl.lit(""))
    assertions = [len(json.loads(a)) for a in questions["assertions"]]
    return Step(context, duckdb).publish(
        "evaluation_questions",
        questions,
        engine="file",
        metadata={
            "loaded_from": [str(f) for f in files],
            "questions_per_class": per_class(questions),
            "questions_with_assertions": sum(n > 0 for n in assertions),
            "assertions": sum(assertions),
            "questions_table": markdown_table(questions, ["id", "question_class", "question"], rows=25),
        },
    )


def generated_questions(
    context: dg.AssetExecutionContext,
    config: EvaluationQuestionsConfig,
    chat: ChatModelResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    require_model(chat)
    classes = list(dict.fromkeys(config.question_classes))
    unknown = [c for c in classes if c not in QUESTION_CLASSES]
    if unknown or not classes:
        raise step_failure(
            f"unknown question classes {unknown}: use any of {', '.join(QUESTION_CLASSES)}", retryable=False
        )
    step = Step(context, duckdb)
    reports = step.read("community_reports")
    units = step.read("text_units").select("id", "text") if {"data_local", "data_global"} & set(classes) else None
    root = reports.filter((pl.col("level") == 0) & (pl.col("status") == "ok")).sort(
        "rank", descending=True, nulls_last=True, maintain_order=True
    )
    if any(c != "data_local" for c in classes) and root.is_empty() and not config.corpus_description:
        raise step_failure(
            "the corpus has no community reports to describe it from (a lazy index writes none): set "
            "corpus_description in this asset's config, in a sentence or two",
            retryable=False,
        )
    sampled = []
    if units is not None:
        drawn = seeded_sample(units, min(config.sampled_text_units, len(units)), config.seed)
        sampled = list(zip(drawn["id"], drawn["text"]))
    settings = ev.QuestionSettings(
        classes,
        **config.model_dump(
            exclude={"question_classes", "questions_file", "sampled_text_units", "seed", "max_model_calls"}
        ),
    )
    calls = settings.calls(len(sampled))
    plan(context, calls, config.max_model_calls, "evaluation_questions")
    root_notes = root["summary"].head(30).to_list()
    (description, rows), usage = step.run_model(
        chat, lambda client: ev.generate_questions(client, settings, root_notes, sampled), batches=False
    )
    if not rows:
        raise step_failure(
            "the model gave no usable corpus description, personas or questions (see the run's log); its valid "
            "replies are cached, so launching again pays only for the rest",
            retryable=True,
        )
    questions = question_table(rows, description)
    return publish_paid(
        step,
        "evaluation_questions",
        questions,
        (chat, usage),
        calls,
        questions_per_class=per_class(questions),
        corpus_description=dg.MetadataValue.md(description or "_(not needed)_"),
        questions_table=markdown_table(questions, ["question_class", "persona", "task", "question"], rows=25),
    )


def question_table(rows: list[dict], description: str | None) -> pl.DataFrame:
    """The generated questions as evaluation_questions holds them, one row per distinct question (the first)."""
    questions = {}
    for row in rows:
        persona, task = row.get("persona") or "", row.get("task") or ""
        question_id = row_id(row["question_class"], persona, task, row["question"])
        questions.setdefault(
            question_id,
            {
                "id": question_id,
                "persona": persona,
                "task": task,
                "question": row["question"],
                "question_class": row["question_class"],
                "metadata": row.get("metadata") or "{}",
                "corpus_description": description or "",
                "assertions": "[]",
                "source": "generated",
            },
        )
    return pl.DataFrame(list(questions.values()))


@corpus_asset(
    GROUP,
    deps=["evaluation_questions", "community_reports", "text_units", "text_embeddings"],
    prompts=("global_search_map", "global_search_reduce", "basic_search"),
    model=True,
)
def evaluation_answers(
    context: dg.AssetExecutionContext,
    config: EvaluationAnswersConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """Every question answered under every condition: C0-C3 (global search), TS and SS (paper section 3.3)."""
    require_model(chat)
    step = Step(context, duckdb)
    parsed, questions, index = evaluation_inputs(step, config.conditions, embeddings.configured)
    conditions, skipped = answerable(context, parsed, index)
    calls = len(questions) * sum(ev.condition_calls(index, c, config.context_window_tokens) for c in conditions)
    plan(context, calls, config.max_model_calls, "evaluation_answers")
    rows, (chat_usage, _) = run_with_models(
        [chat, embeddings],
        lambda chat_client, embed_client: answer_rows(chat_client, embed_client, index, questions, conditions, config),
        on_failure=step.keep_spent,
    )
    index.close()
    answers = pl.DataFrame(rows)
    summary = answers.group_by("condition").agg(pl.col("context_tokens", "model_calls", "prompt_tokens").mean())
    return publish_paid(
        step,
        "evaluation_answers",
        answers,
        (chat, chat_usage),
        calls,  # at most: a map window with no relevant point skips the reduce
        conditions=conditions,
        skipped_conditions=skipped,
        mean_per_answer=dg.MetadataValue.md(
            markdown(summary.sort("condition").with_columns(pl.exclude("condition").round(0)))
        ),
    )


def evaluation_inputs(step: Step, conditions: list[str], embeddings_configured: bool):
    """The conditions parsed, the questions, and the corpus's index to answer them from; a bad condition or an index
    that cannot answer stops the step in one line."""
    try:
        parsed = [ev.Condition.parse(c) for c in dict.fromkeys(conditions)]
        questions = step.read("evaluation_questions")
        with step.duckdb.get_connection() as conn:
            index = load_index(conn, step.corpus, step.duckdb.vector_index_dir)
        check_embeddings(index, embeddings_configured)
    except (ValueError, NotIndexed, QuestionRefused) as problem:
        raise step_failure(str(problem), retryable=False) from None
    return parsed, questions, index


def answerable(context: dg.AssetExecutionContext, parsed: list[ev.Condition], index) -> tuple[list[str], list[str]]:
    """The conditions the index can answer, and those skipped: global search needs reports of its level, so a level
    the corpus lacks, or a lazy index (no reports), skips it."""
    no_reports = index.reports.is_empty()
    skipped = [c.name for c in parsed if c.level is not None and (no_reports or c.level not in index.levels)]
    if skipped:
        why = "a lazy index has no community reports" if no_reports else f"this corpus has levels {index.levels}"
        context.log.warning(f"conditions {skipped} skipped: {why}")
    return [c.name for c in parsed if c.name not in skipped], skipped


async def answer_rows(chat, embedder, index, questions: pl.DataFrame, conditions: list[str], config) -> list[dict]:
    """Every question answered under every condition, concurrently, each with the chat usage it took."""

    async def one(question, condition):
        with usage_scope(chat) as used:  # chat calls only: embedding tokens are priced apart
            result = await ev.answer_under(
                chat,
                embedder,
                index,
                condition,
                question["question"],
                config.context_window_tokens,
                config.response_type,
            )
        return {
            "id": row_id(question["id"], condition),
            "question_id": question["id"],
            "condition": condition,
            "answer": result.answer,
            "context_tokens": result.context_tokens,
            "model_calls": used.calls,
            "cache_hits": used.cache_hits,
            "prompt_tokens": used.prompt_tokens,
            "completion_tokens": used.completion_tokens,
        }

    return await asyncio.gather(*(one(q, c) for q in questions.iter_rows(named=True) for c in conditions))


@corpus_asset(GROUP, deps=["evaluation_answers", "evaluation_questions"], prompts=("evaluation_judge",), model=True)
def pairwise_judgements(
    context: dg.AssetExecutionContext,
    config: PairwiseJudgementsConfig,
    chat: ChatModelResource,
    judge: ChatModelResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """An LLM judge compares two answers to one question on one criterion, in both orders, `repeats` times."""
    model = judge if judge.configured else chat
    require_model(model)
    unknown = [c for c in config.criteria if c not in ev.CRITERIA]
    if unknown:
        raise step_failure(f"unknown criteria {unknown}: use {', '.join(ev.CRITERIA)}", retryable=False)
    step = Step(context, duckdb)
    answers, questions = answers_to_judge(step, config.conditions)
    planned = ev.comparisons(answers, questions, config.criteria, config.repeats)
    verdicts, usage, failed = judged(step, model, planned, ev.judge_all, "judgements", config)
    judgements = judgement_table(planned, verdicts)
    shown = ["criterion", "first_condition", "second_condition", "winner_condition", "reasoning"]
    return publish_paid(
        step,
        "pairwise_judgements",
        judgements,
        (model, usage),
        len(planned),
        failed_judgements=failed,
        sample=markdown_table(judgements, shown),
    )


def judgement_table(planned: list[ev.Comparison], verdicts: list[dict | None]) -> pl.DataFrame:
    """The pairwise_judgements rows: each comparison with its verdict (one that failed is left out)."""
    return pl.DataFrame(
        [
            {
                "id": row_id(c.question_id, c.criterion, c.repeat, c.first[0], c.second[0]),
                "question_id": c.question_id,
                "criterion": c.criterion,
                "repeat": c.repeat,
                "first_condition": c.first[0],
                "first_answer_id": c.first[1],
                "second_condition": c.second[0],
                "second_answer_id": c.second[1],
                **verdict,
            }
            for c, verdict in zip(planned, verdicts)
            if verdict is not None
        ],
        schema=list(TABLES["pairwise_judgements"]),
        infer_schema_length=None,
    )


@corpus_asset(GROUP, deps=["pairwise_judgements", "evaluation_questions"])
def win_rates(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """Per criterion, how often the row condition beats the column condition (paper figure 4), with sign tests:
    over all questions (question_class "all") and per question class."""
    step = Step(context, duckdb)
    judgements, questions = step.read("pairwise_judgements"), step.read("evaluation_questions")
    class_of = dict(zip(questions["id"], questions["question_class"]))
    labels = ev.majority_labels(judgements).with_columns(
        question_class=pl.col("question_id").replace_strict(class_of, default=UNCLASSIFIED, return_dtype=pl.String)
    )
    classes = sorted(labels["question_class"].unique())
    table = pl.concat(
        [ev.win_rate_table(labels).with_columns(question_class=pl.lit(scoring.ALL_CLASSES))]
        + [
            ev.win_rate_table(labels.filter(pl.col("question_class") == c)).with_columns(question_class=pl.lit(c))
            for c in classes
        ]
    )
    overall = table.filter(pl.col("question_class") == scoring.ALL_CLASSES)
    metadata = {}
    for criterion in sorted(overall["criterion"].unique()):
        rows = overall.filter(pl.col("criterion") == criterion)
        metadata[f"{criterion}_heatmap"] = png(ev.heatmap(overall, criterion), criterion)
        tests = rows.filter(pl.col("row_condition") < pl.col("column_condition")).select(
            "row_condition", "column_condition", "wins", "losses", "ties", "p_value", "p_adjusted"
        )
        metadata[f"{criterion}_win_rates"] = dg.MetadataValue.md(
            percent_table(rows, ["row_condition"], "column_condition", "win_rate")
            + "\n\nRow beats column, % of questions (ties half). Sign test p (adjusted):\n\n"
            + markdown(tests, floatfmt=".4f")
        )
    if len(classes) > 1:
        by_class = table.filter(pl.col("question_class") != scoring.ALL_CLASSES)
        metadata["mean_win_rate_per_class"] = dg.MetadataValue.md(
            percent_table(by_class, ["question_class", "row_condition"], "criterion", "win_rate")
            + "\n\nMean % of questions the condition wins, per class."
        )
    return step.publish("win_rates", table, engine="scipy", metadata=metadata)


@corpus_asset(GROUP, deps=["evaluation_answers", "evaluation_questions"], prompts=("evaluation_assertion",), model=True)
def assertion_scores(
    context: dg.AssetExecutionContext,
    config: AssertionScoresConfig,
    chat: ChatModelResource,
    judge: ChatModelResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """Each answer checked against each assertion of its question (BenchmarkQED): supported or not, with the
    judge's reason, `repeats` times with the majority kept; and the answer's accuracy, weighted by the
    assertions' scores."""
    model = judge if judge.configured else chat
    require_model(model)
    step = Step(context, duckdb)
    answers, questions = answers_to_judge(step, config.conditions)
    planned = scoring.assertion_checks(answers, questions, config.repeats)
    if not planned:  # generated questions have none: the evaluation job still runs the rest of the group
        context.log.warning(NO_ASSERTIONS)
        return step.publish_skipped("assertion_scores", list(TABLES["assertion_scores"]), "none", NO_ASSERTIONS)
    verdicts, usage, failed = judged(step, model, planned, scoring.check_all, "assertion checks", config)
    scores = scoring.answer_scores(answers, questions, planned, verdicts)
    shown = ["condition", "question_class", "assertions_supported", "assertions", "accuracy"]
    return publish_paid(
        step,
        "assertion_scores",
        scores,
        (model, usage),
        len(planned),
        failed_checks=failed,
        mean_accuracy=dg.MetadataValue.md(percent_table(scores, ["condition"], "question_class", "accuracy", 1)),
        sample=markdown_table(scores, shown),
    )


@corpus_asset(GROUP, deps=["assertion_scores"])
def assertion_accuracy(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """Per question class and condition, the mean assertion accuracy with a 95% interval, and a paired test
    against the class's best condition; a chart per class."""
    step = Step(context, duckdb)
    scores = step.read("assertion_scores")
    if scores["accuracy"].drop_nulls().drop_nans().is_empty():
        why = "no answer was scored against assertions (see assertion_scores)"
        return step.publish_skipped("assertion_accuracy", list(TABLES["assertion_accuracy"]), "none", why)
    table = scoring.accuracy_table(scores)
    metadata = {}
    for question_class in table["question_class"].unique(maintain_order=True):
        rows = table.filter(pl.col("question_class") == question_class)
        metadata[f"{question_class}_chart"] = png(
            scoring.accuracy_chart(table, question_class, ev.condition_order), question_class
        )
        shown = rows.select("condition", "questions", "accuracy", "ci_low", "ci_high", "p_vs_best", "p_adjusted")
        metadata[f"{question_class}_accuracy"] = dg.MetadataValue.md(
            markdown(shown, floatfmt=".3f")
            + f"\n\nWilcoxon signed-rank test against the best condition, {rows['best_condition'][0]}."
        )
    return step.publish("assertion_accuracy", table, engine="scipy", metadata=metadata)


@corpus_asset(GROUP, deps=["evaluation_answers", "pairwise_judgements"], prompts=("evaluation_claims",), model=True)
def claim_metrics(
    context: dg.AssetExecutionContext, config: ClaimMetricsConfig, chat: ChatModelResource, duckdb: DuckDBStoreResource
) -> dg.MaterializeResult:
    """The paper's claim-based metrics: claims per answer (comprehensiveness) and clusters of them (diversity)."""
    require_model(chat)
    step = Step(context, duckdb)
    answers, judgements = step.read("evaluation_answers"), step.read("pairwise_judgements")
    plan(context, len(answers), config.max_model_calls, "claim_metrics")
    found, usage = step.run_model(
        chat, lambda client: ev.claims_of_answers(client, answers["answer"].to_list()), batches=False
    )
    step.fail_if_too_many_failed("claim extractions", sum(f is None for f in found), len(found), (chat, usage), 0.05)
    table = ev.claim_table(answers, found, config.thresholds)
    clusters = pl.DataFrame([json.loads(c) for c in table["clusters"]]).select(pl.all().name.prefix("clusters at "))
    counts = pl.concat([table.select("condition", "claim_count"), clusters], how="horizontal")
    per_condition = counts.group_by("condition").mean().sort("condition").with_columns(pl.exclude("condition").round(2))
    agreed = ev.claim_agreement(table, judgements, config.thresholds)
    return publish_paid(
        step,
        "claim_metrics",
        table,
        (chat, usage),
        len(answers),
        mean_per_answer=dg.MetadataValue.md(markdown(per_condition)),
        agreement_with_judges=dg.MetadataValue.md(markdown(agreed, floatfmt=".2f")),
    )
