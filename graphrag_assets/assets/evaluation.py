"""The paper's two experiments as one group of assets: does GraphRAG answer global questions better than vector RAG
on this corpus and this endpoint? Questions, answers per condition, pairwise judgements, win rates, claim metrics.

Each asset that calls a model says first how many calls it will make, and fails before the first one when that
passes its `max_model_calls`. Calls go through the cached client, so an interrupted evaluation resumes without
paying twice.
"""

import asyncio
import hashlib
import json
from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field

from ..answers.asking import QuestionRefused, check_embeddings
from ..answers.published import NotIndexed, load_index
from ..failures import step_failure
from ..method import assertions as scoring
from ..method import evaluation as ev
from ..method.question_files import (
    QUESTION_CLASSES,
    QUESTIONS_FOLDER,
    UNCLASSIFIED,
    QuestionFileError,
    question_files,
    read_question_files,
)
from ..models import usage_scope
from ..resources import (
    ChatModelResource,
    CorporaResource,
    DuckDBStoreResource,
    EmbeddingModelResource,
    run_with_models,
)
from ..store.schema import TABLES
from ..store.tables import read_table
from .common import MODEL_POOL, code_version, corpus_partitions
from .metadata import markdown_table, png
from .publishing import fail_if_too_many_failed, publish

GROUP = "evaluation"


class EvaluationQuestionsConfig(dg.Config):
    questions_file: str = Field(
        "",
        description="Load the questions from this file instead of generating them: BenchmarkQED's JSON format "
        "(question_id, question_text, assertions), JSON Lines, or CSV with a question column. Empty: the files in "
        "data/<corpus>/questions/ if there are any, else generate.",
    )
    question_classes: list[str] = Field(
        ["activity_global"],
        description="Classes to generate (BenchmarkQED's): activity_global (the paper's sensemaking questions), "
        "activity_local, data_global, data_local.",
    )
    corpus_description: str = Field(
        "", description="What the corpus is about, for the personas; empty: the model writes it from the root reports."
    )
    personas: int = Field(5, ge=1, description="K: kinds of users of the corpus (the paper: 5).")
    tasks_per_persona: int = Field(5, ge=1, description="N: tasks per user (the paper: 5).")
    questions_per_task: int = Field(
        5, ge=1, description="M: questions per user, task and activity class (the paper: 5)."
    )
    sampled_text_units: int = Field(10, ge=1, description="data_local: text units sampled, one call each.")
    questions_per_text_unit: int = Field(1, ge=1, description="data_local: questions per sampled text unit.")
    data_global_questions: int = Field(10, ge=1, description="data_global: questions about the corpus as a whole.")
    seed: int = Field(0, description="Which text units are sampled.")
    max_model_calls: int = Field(1000, ge=0, description="Fail before any call when more would be needed.")


class EvaluationAnswersConfig(dg.Config):
    conditions: list[str] = Field(
        ["C0", "C1", "C2", "C3", "TS", "SS"],
        description="C<level>: global search over that level's reports; TS: map-reduce over the source texts; "
        "SS: vector search over the source texts; LGR<budget>: lazy search with that relevance budget (LGR100, "
        "LGR500, LGR1500). A level the corpus lacks is skipped.",
    )
    context_window_tokens: int = Field(8000, ge=500, description="The same context window for every condition.")
    response_type: str = Field("multiple paragraphs", description="Length and format of every answer.")
    max_model_calls: int = Field(10_000, ge=0, description="Fail before any call when more would be needed.")


class PairwiseJudgementsConfig(dg.Config):
    criteria: list[str] = Field(list(ev.CRITERIA), description=f"Any of {', '.join(ev.CRITERIA)}.")
    conditions: list[str] = Field([], description="Conditions to compare; empty: every condition answered.")
    repeats: int = Field(5, ge=1, description="Judgements per pair, order and criterion (the paper: 5).")
    max_model_calls: int = Field(50_000, ge=0, description="Fail before any call when more would be needed.")
    max_failed_fraction: float = Field(0.05, ge=0, le=1, description="Judgements that may fail before the step does.")


class AssertionScoresConfig(dg.Config):
    conditions: list[str] = Field([], description="Conditions to score; empty: every condition answered.")
    repeats: int = Field(3, ge=1, description="Judgements per answer and assertion; the majority is kept.")
    max_model_calls: int = Field(50_000, ge=0, description="Fail before any call when more would be needed.")
    max_failed_fraction: float = Field(0.05, ge=0, le=1, description="Judgements that may fail before the step does.")


class ClaimMetricsConfig(dg.Config):
    thresholds: list[float] = Field(
        [0.5, 0.6, 0.7, 0.8], description="Distance thresholds (1 - ROUGE-L) at which claims are clustered."
    )
    max_model_calls: int = Field(10_000, ge=0, description="Fail before any call when more would be needed.")


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


def answers_to_judge(
    context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource, conditions: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The corpus's evaluation answers (of `conditions` only, when any are named) and its questions."""
    with duckdb.get_connection() as conn:
        answers = read_table(conn, "evaluation_answers", context.partition_key)
        questions = read_table(conn, "evaluation_questions", context.partition_key)
    if conditions:
        answers = answers[answers["condition"].isin(conditions)]
    return answers, questions


def row_id(*parts: object) -> str:
    return hashlib.sha256("\n".join(map(str, parts)).encode()).hexdigest()[:24]


@dg.asset(
    deps=["community_reports", "text_units"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version(
        "evaluation_corpus",
        "evaluation_personas",
        "evaluation_tasks",
        "evaluation_questions",
        "evaluation_questions_local",
        "evaluation_data_local",
        "evaluation_data_global",
    ),
    kinds={"duckdb"},
    pool=MODEL_POOL,
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
        folder = Path(corpora.root) / corpus / QUESTIONS_FOLDER
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
    questions = questions.assign(persona="", task="", corpus_description="")
    with_assertions = questions["assertions"].map(lambda a: len(json.loads(a)))
    with duckdb.get_connection() as conn:
        return publish(
            context,
            conn,
            "evaluation_questions",
            questions,
            engine="file",
            metadata={
                "loaded_from": [str(f) for f in files],
                "questions_per_class": questions["question_class"].value_counts().sort_index().to_dict(),
                "questions_with_assertions": int((with_assertions > 0).sum()),
                "assertions": int(with_assertions.sum()),
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
    corpus = context.partition_key
    with duckdb.get_connection() as conn:
        reports = read_table(conn, "community_reports", corpus)
        data = {"data_local", "data_global"} & set(classes)
        units = read_table(conn, "text_units", corpus)[["id", "text"]] if data else None
    root = reports[(reports["level"] == 0) & (reports["status"] == "ok")].sort_values("rank", ascending=False)
    needs_description = any(c != "data_local" for c in classes)
    if needs_description and root.empty and not config.corpus_description:
        raise step_failure(
            "the corpus has no community reports to describe it from (a lazy index writes none): set "
            "corpus_description in this asset's config, in a sentence or two",
            retryable=False,
        )
    sampled = []
    if units is not None:
        sampled = list(units.sample(min(config.sampled_text_units, len(units)), random_state=config.seed).itertuples())
    local = sampled if "data_local" in classes else []
    calls = ev.generation_calls(
        config.personas, config.tasks_per_persona, not config.corpus_description, classes, len(local)
    )
    plan(context, calls, config.max_model_calls, "evaluation_questions")
    activity = [c for c in classes if c in ev.ACTIVITY_PROMPTS]

    async def work(client):
        description = ""
        if needs_description:
            description = config.corpus_description or await ev.describe_corpus(client, list(root["summary"].head(30)))
            if not description:
                return None, None
        parts = []
        if activity:
            parts.append(
                ev.activity_questions(
                    client,
                    description,
                    config.personas,
                    config.tasks_per_persona,
                    config.questions_per_task,
                    activity,
                )
            )
        if local:
            parts.append(
                ev.data_local_questions(client, [(u.id, u.text) for u in local], config.questions_per_text_unit)
            )
        if "data_global" in classes:  # the root reports, or for an index without reports, sampled text
            notes = list(root["summary"].head(30)) or [u.text[:500] for u in sampled]
            parts.append(ev.data_global_questions(client, description, notes, config.data_global_questions))
        found = await asyncio.gather(*parts)
        return description, [row for rows in found for row in rows or []]

    (description, rows), usage = chat.run(work)
    if not rows:
        raise step_failure(
            "the model gave no usable corpus description, personas or questions (see the run's log); its valid "
            "replies are cached, so launching again pays only for the rest",
            retryable=True,
        )
    questions = (
        pd.DataFrame(rows)
        .reindex(columns=["persona", "task", "question", "question_class", "metadata"])
        .fillna({"persona": "", "task": "", "metadata": "{}"})
        .assign(corpus_description=description or "", assertions="[]", source="generated")
    )
    questions["id"] = [row_id(r.question_class, r.persona, r.task, r.question) for r in questions.itertuples()]
    questions = questions.drop_duplicates("id")
    with duckdb.get_connection() as conn:
        return publish(
            context,
            conn,
            "evaluation_questions",
            questions,
            engine=chat.engine,
            model=chat,
            usage=usage,
            metadata={
                "planned_model_calls": calls,
                "questions_per_class": questions["question_class"].value_counts().sort_index().to_dict(),
                "corpus_description": dg.MetadataValue.md(description or "_(not needed)_"),
                "questions_table": markdown_table(
                    questions, ["question_class", "persona", "task", "question"], rows=25
                ),
            },
        )


@dg.asset(
    deps=["evaluation_questions", "community_reports", "text_units", "text_embeddings"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version("global_search_map", "global_search_reduce", "basic_search"),
    kinds={"duckdb"},
    pool=MODEL_POOL,
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
    corpus = context.partition_key
    try:
        parsed = [ev.Condition.parse(c) for c in dict.fromkeys(config.conditions)]
    except ValueError as unknown:
        raise step_failure(str(unknown), retryable=False) from None
    try:
        with duckdb.get_connection() as conn:
            questions = read_table(conn, "evaluation_questions", corpus)
            index = load_index(conn, corpus, duckdb.vector_index_dir)
        check_embeddings(index, embeddings.configured)
    except (NotIndexed, QuestionRefused) as problem:
        raise step_failure(str(problem), retryable=False) from None
    # Global search needs reports of its level: a level the corpus lacks, or a lazy index (no reports), skips it.
    no_reports = index.reports.empty
    skipped = [c.name for c in parsed if c.level is not None and (no_reports or c.level not in index.levels)]
    conditions = [c.name for c in parsed if c.name not in skipped]
    if skipped:
        why = "a lazy index has no community reports" if no_reports else f"this corpus has levels {index.levels}"
        context.log.warning(f"conditions {skipped} skipped: {why}")
    per_question = {c: ev.condition_calls(index, c, config.context_window_tokens) for c in conditions}
    calls = len(questions) * sum(per_question.values())
    plan(context, calls, config.max_model_calls, "evaluation_answers")

    async def work(chat_client, embed_client):
        async def one(question, condition):
            with usage_scope(chat_client) as used:  # chat calls only: embedding tokens are priced apart
                result = await ev.answer_under(
                    chat_client,
                    embed_client,
                    index,
                    condition,
                    question.question,
                    config.context_window_tokens,
                    config.response_type,
                )
            return {
                "id": row_id(question.id, condition),
                "question_id": question.id,
                "condition": condition,
                "answer": result.answer,
                "context_tokens": result.context_tokens,
                "model_calls": used.calls,
                "cache_hits": used.cache_hits,
                "prompt_tokens": used.prompt_tokens,
                "completion_tokens": used.completion_tokens,
            }

        return await asyncio.gather(*(one(q, c) for q in questions.itertuples() for c in conditions))

    rows, (chat_usage, _) = run_with_models([chat, embeddings], work)
    index.close()
    answers = pd.DataFrame(rows)
    summary = answers.groupby("condition")[["context_tokens", "model_calls", "prompt_tokens"]].mean().round(0)
    with duckdb.get_connection() as conn:
        return publish(
            context,
            conn,
            "evaluation_answers",
            answers,
            engine=chat.engine,
            model=chat,
            usage=chat_usage,
            metadata={
                "planned_model_calls": calls,  # at most: a map window with no relevant point skips the reduce
                "conditions": conditions,
                "skipped_conditions": skipped,
                "mean_per_answer": dg.MetadataValue.md(summary.reset_index().to_markdown(index=False)),
            },
        )


@dg.asset(
    deps=["evaluation_answers", "evaluation_questions"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version("evaluation_judge"),
    kinds={"duckdb"},
    pool=MODEL_POOL,
)
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
    answers, questions = answers_to_judge(context, duckdb, config.conditions)
    planned = ev.comparisons(answers, questions, config.criteria, config.repeats)
    plan(context, len(planned), config.max_model_calls, "pairwise_judgements")

    async def work(client):
        return await asyncio.gather(*(ev.judge(client, c) for c in planned))

    verdicts, usage = model.run(work)
    failed = sum(v is None for v in verdicts)
    fail_if_too_many_failed(context, "judgements", failed, len(planned), usage, config.max_failed_fraction)
    judgements = pd.DataFrame(
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
        ]
    )
    with duckdb.get_connection() as conn:
        return publish(
            context,
            conn,
            "pairwise_judgements",
            judgements,
            engine=model.engine,
            model=model,
            usage=usage,
            metadata={
                "planned_model_calls": len(planned),
                "failed_judgements": failed,
                "sample": markdown_table(
                    judgements, ["criterion", "first_condition", "second_condition", "winner_condition", "reasoning"]
                ),
            },
        )


@dg.asset(
    deps=["pairwise_judgements", "evaluation_questions"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version(),
    kinds={"duckdb"},
)
def win_rates(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """Per criterion, how often the row condition beats the column condition (paper figure 4), with sign tests:
    over all questions (question_class "all") and per question class."""
    with duckdb.get_connection() as conn:
        judgements = read_table(conn, "pairwise_judgements", context.partition_key)
        questions = read_table(conn, "evaluation_questions", context.partition_key)
    labels = ev.majority_labels(judgements)
    class_of = questions.set_index("id")["question_class"]
    labels["question_class"] = labels["question_id"].map(class_of).fillna(UNCLASSIFIED)
    classes = sorted(labels["question_class"].unique())
    table = pd.concat(
        [ev.win_rate_table(labels).assign(question_class=scoring.ALL_CLASSES)]
        + [ev.win_rate_table(labels[labels["question_class"] == c]).assign(question_class=c) for c in classes],
        ignore_index=True,
    )
    overall = table[table["question_class"] == scoring.ALL_CLASSES]
    metadata = {}
    for criterion in sorted(overall["criterion"].unique()):
        rows = overall[overall["criterion"] == criterion]
        matrix = rows.pivot(index="row_condition", columns="column_condition", values="win_rate") * 100
        metadata[f"{criterion}_heatmap"] = png(ev.heatmap(overall, criterion), criterion)
        metadata[f"{criterion}_win_rates"] = dg.MetadataValue.md(
            matrix.round(0).to_markdown()
            + "\n\nRow beats column, % of questions (ties half). Sign test p (adjusted):\n\n"
            + rows[rows["row_condition"] < rows["column_condition"]][
                ["row_condition", "column_condition", "wins", "losses", "ties", "p_value", "p_adjusted"]
            ].to_markdown(index=False, floatfmt=".4f")
        )
    if len(classes) > 1:
        by_class = table[table["question_class"] != scoring.ALL_CLASSES].pivot_table(
            index=["question_class", "row_condition"], columns=["criterion"], values="win_rate", aggfunc="mean"
        )
        metadata["mean_win_rate_per_class"] = dg.MetadataValue.md(
            (by_class * 100).round(0).to_markdown() + "\n\nMean % of questions the condition wins, per class."
        )
    with duckdb.get_connection() as conn:
        return publish(context, conn, "win_rates", table, engine="scipy", metadata=metadata)


@dg.asset(
    deps=["evaluation_answers", "evaluation_questions"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version("evaluation_assertion"),
    kinds={"duckdb"},
    pool=MODEL_POOL,
)
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
    answers, questions = answers_to_judge(context, duckdb, config.conditions)
    planned = scoring.assertion_checks(answers, questions, config.repeats)
    if not planned:  # generated questions have none: the evaluation job still runs the rest of the group
        note = (
            "no question has assertions, so nothing was scored: load questions with assertions (BenchmarkQED's "
            "format) into evaluation_questions, from its questions_file or data/<corpus>/questions/"
        )
        context.log.warning(note)
        with duckdb.get_connection() as conn:
            empty = pd.DataFrame(columns=list(TABLES["assertion_scores"]))
            return publish(context, conn, "assertion_scores", empty, engine="none", metadata={"note": note})
    plan(context, len(planned), config.max_model_calls, "assertion_scores")

    async def work(client):
        return await asyncio.gather(*(scoring.check_assertion(client, c) for c in planned))

    verdicts, usage = model.run(work)
    failed = sum(v is None for v in verdicts)
    fail_if_too_many_failed(context, "assertion checks", failed, len(planned), usage, config.max_failed_fraction)
    scores = scoring.answer_scores(answers, questions, planned, verdicts)
    per_condition = scores.groupby(["question_class", "condition"])["accuracy"].mean().unstack("question_class")
    with duckdb.get_connection() as conn:
        return publish(
            context,
            conn,
            "assertion_scores",
            scores,
            engine=model.engine,
            model=model,
            usage=usage,
            metadata={
                "planned_model_calls": len(planned),
                "failed_checks": failed,
                "mean_accuracy": dg.MetadataValue.md((per_condition * 100).round(1).to_markdown()),
                "sample": markdown_table(
                    scores, ["condition", "question_class", "assertions_supported", "assertions", "accuracy"]
                ),
            },
        )


@dg.asset(
    deps=["assertion_scores"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version(),
    kinds={"duckdb"},
)
def assertion_accuracy(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """Per question class and condition, the mean assertion accuracy with a 95% interval, and a paired test
    against the class's best condition; a chart per class."""
    with duckdb.get_connection() as conn:
        scores = read_table(conn, "assertion_scores", context.partition_key)
    if scores["accuracy"].notna().sum() == 0:
        with duckdb.get_connection() as conn:
            empty = pd.DataFrame(columns=list(TABLES["assertion_accuracy"]))
            note = "no answer was scored against assertions (see assertion_scores)"
            return publish(context, conn, "assertion_accuracy", empty, engine="none", metadata={"note": note})
    table = scoring.accuracy_table(scores)
    metadata = {}
    for question_class in table["question_class"].unique():
        rows = table[table["question_class"] == question_class]
        metadata[f"{question_class}_chart"] = png(
            scoring.accuracy_chart(table, question_class, ev.condition_order), question_class
        )
        metadata[f"{question_class}_accuracy"] = dg.MetadataValue.md(
            rows[["condition", "questions", "accuracy", "ci_low", "ci_high", "p_vs_best", "p_adjusted"]].to_markdown(
                index=False, floatfmt=".3f"
            )
            + f"\n\nWilcoxon signed-rank test against the best condition, {rows['best_condition'].iloc[0]}."
        )
    with duckdb.get_connection() as conn:
        return publish(context, conn, "assertion_accuracy", table, engine="scipy", metadata=metadata)


@dg.asset(
    deps=["evaluation_answers", "pairwise_judgements"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version("evaluation_claims"),
    kinds={"duckdb"},
    pool=MODEL_POOL,
)
def claim_metrics(
    context: dg.AssetExecutionContext, config: ClaimMetricsConfig, chat: ChatModelResource, duckdb: DuckDBStoreResource
) -> dg.MaterializeResult:
    """The paper's claim-based metrics: claims per answer (comprehensiveness) and clusters of them (diversity)."""
    require_model(chat)
    corpus = context.partition_key
    with duckdb.get_connection() as conn:
        answers = read_table(conn, "evaluation_answers", corpus)
        judgements = read_table(conn, "pairwise_judgements", corpus)
    plan(context, len(answers), config.max_model_calls, "claim_metrics")

    async def work(client):
        return await asyncio.gather(*(ev.answer_claims(client, a) for a in answers["answer"]))

    found, usage = chat.run(work)
    fail_if_too_many_failed(context, "claim extractions", sum(f is None for f in found), len(found), usage, 0.05)
    rows = []
    for answer, claims in zip(answers.itertuples(), found):
        if claims is None:
            continue
        clusters = {f"{t:g}": ev.claim_clusters(claims, t) for t in config.thresholds}
        rows.append(
            {
                "answer_id": answer.id,
                "question_id": answer.question_id,
                "condition": answer.condition,
                "claims": json.dumps(claims),
                "claim_count": len(claims),
                "clusters": json.dumps(clusters),
            }
        )
    table = pd.DataFrame(rows)
    clusters = pd.DataFrame([json.loads(c) for c in table["clusters"]], index=table.index).add_prefix("clusters at ")
    per_condition = pd.concat([table[["condition", "claim_count"]], clusters], axis=1).groupby("condition").mean()
    agreed = ev.claim_agreement(table, judgements, config.thresholds)
    with duckdb.get_connection() as conn:
        return publish(
            context,
            conn,
            "claim_metrics",
            table,
            engine=chat.engine,
            model=chat,
            usage=usage,
            metadata={
                "planned_model_calls": len(answers),
                "mean_per_answer": dg.MetadataValue.md(per_condition.round(2).to_markdown()),
                "agreement_with_judges": dg.MetadataValue.md(agreed.to_markdown(index=False, floatfmt=".2f")),
            },
        )
