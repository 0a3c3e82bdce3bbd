"""The paper's two experiments as one group of assets: does GraphRAG answer global questions better than vector RAG
on this corpus and this endpoint? Questions, answers per condition, pairwise judgements, win rates, claim metrics.

Each asset that calls a model says first how many calls it will make, and fails before the first one when that
passes its `max_model_calls`. Calls go through the cached client, so an interrupted evaluation resumes without
paying twice.
"""

import asyncio
import hashlib
import json
import re

import dagster as dg
import pandas as pd
from pydantic import Field

from ..failures import step_failure
from ..method import evaluation as ev
from ..models import usage_scope
from ..resources import ChatModelResource, DuckDBStoreResource, EmbeddingModelResource, run_with_models
from ..store.tables import read_table
from .common import (
    MODEL_POOL,
    code_version,
    corpus_partitions,
    fail_if_too_many_failed,
    markdown_table,
    png,
    publish,
)
from .query import load_index, validate

GROUP = "evaluation"


class EvaluationQuestionsConfig(dg.Config):
    corpus_description: str = Field(
        "", description="What the corpus is about, for the personas; empty: the model writes it from the root reports."
    )
    personas: int = Field(5, ge=1, description="K: kinds of users of the corpus (the paper: 5).")
    tasks_per_persona: int = Field(5, ge=1, description="N: tasks per user (the paper: 5).")
    questions_per_task: int = Field(5, ge=1, description="M: questions per user and task (the paper: 5).")
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


def row_id(*parts: object) -> str:
    return hashlib.sha256("\n".join(map(str, parts)).encode()).hexdigest()[:24]


@dg.asset(
    deps=["community_reports"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version("evaluation_corpus", "evaluation_personas", "evaluation_tasks", "evaluation_questions"),
    kinds={"duckdb"},
    pool=MODEL_POOL,
)
def evaluation_questions(
    context: dg.AssetExecutionContext,
    config: EvaluationQuestionsConfig,
    chat: ChatModelResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """Questions that need the whole corpus, from K personas x N tasks x M questions (paper section 3.2)."""
    require_model(chat)
    with duckdb.get_connection() as conn:
        reports = read_table(conn, "community_reports", context.partition_key)
    root = reports[(reports["level"] == 0) & (reports["status"] == "ok")].sort_values("rank", ascending=False)
    if root.empty and not config.corpus_description:
        raise step_failure(
            "the corpus has no community reports to describe it from (a lazy index writes none): set "
            "corpus_description in this asset's config, in a sentence or two",
            retryable=False,
        )
    calls = ev.generation_calls(config.personas, config.tasks_per_persona, describe=not config.corpus_description)
    plan(context, calls, config.max_model_calls, "evaluation_questions")

    async def work(client):
        description = config.corpus_description or await ev.describe_corpus(client, list(root["summary"].head(30)))
        if not description:
            return None, None
        rows = await ev.sensemaking_questions(
            client, description, config.personas, config.tasks_per_persona, config.questions_per_task
        )
        return description, rows

    (description, rows), usage = chat.run(work)
    if not rows:
        raise step_failure(
            "the model gave no usable corpus description, personas or questions (see the run's log); its valid "
            "replies are cached, so launching again pays only for the rest",
            retryable=True,
        )
    questions = pd.DataFrame(rows).assign(corpus_description=description)
    questions["id"] = [row_id(r.persona, r.task, r.question) for r in questions.itertuples()]
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
                "corpus_description": dg.MetadataValue.md(description),
                "questions_table": markdown_table(questions, ["persona", "task", "question"], rows=25),
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
    unknown = [c for c in config.conditions if not re.fullmatch(r"C\d+|TS|SS|LGR[1-9]\d*", c)]
    if unknown:
        raise step_failure(
            f"unknown conditions {unknown}: use C<level>, TS, SS or LGR<relevance budget> (LGR100)", retryable=False
        )
    with duckdb.get_connection() as conn:
        questions = read_table(conn, "evaluation_questions", corpus)
        index = load_index(conn, corpus, duckdb.vector_index_dir)
    validate(None, None, index, embeddings)
    # Global search needs reports of its level: a level the corpus lacks, or a lazy index (no reports), skips it.
    no_reports = index.reports.empty
    skipped = [c for c in config.conditions if c.startswith("C") and (no_reports or int(c[1:]) not in index.levels)]
    conditions = [c for c in dict.fromkeys(config.conditions) if c not in skipped]
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
    corpus = context.partition_key
    with duckdb.get_connection() as conn:
        answers = read_table(conn, "evaluation_answers", corpus)
        questions = read_table(conn, "evaluation_questions", corpus)
    if config.conditions:
        answers = answers[answers["condition"].isin(config.conditions)]
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
    deps=["pairwise_judgements"],
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version(),
    kinds={"duckdb"},
)
def win_rates(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """Per criterion, how often the row condition beats the column condition (paper figure 4), with sign tests."""
    with duckdb.get_connection() as conn:
        judgements = read_table(conn, "pairwise_judgements", context.partition_key)
    table = ev.win_rate_table(ev.majority_labels(judgements))
    metadata = {}
    for criterion in sorted(table["criterion"].unique()):
        rows = table[table["criterion"] == criterion]
        matrix = rows.pivot(index="row_condition", columns="column_condition", values="win_rate") * 100
        metadata[f"{criterion}_heatmap"] = png(ev.heatmap(table, criterion), criterion)
        metadata[f"{criterion}_win_rates"] = dg.MetadataValue.md(
            matrix.round(0).to_markdown()
            + "\n\nRow beats column, % of questions (ties half). Sign test p (adjusted):\n\n"
            + rows[rows["row_condition"] < rows["column_condition"]][
                ["row_condition", "column_condition", "wins", "losses", "ties", "p_value", "p_adjusted"]
            ].to_markdown(index=False, floatfmt=".4f")
        )
    with duckdb.get_connection() as conn:
        return publish(context, conn, "win_rates", table, engine="scipy", metadata=metadata)


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
