"""The evaluation's and prompt tuning's launch-time settings: the paper's question generation, answers by
condition, pairwise judgements, assertion scores and claim metrics; and the tuning of a corpus's prompts."""

from typing import Literal

import dagster as dg
from pydantic import Field

from ..method import evaluation as ev


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


class TuningConfig(dg.Config):
    sampled_text_units: int = Field(12, ge=2, description="Text units the model reads to describe the corpus.")
    sampling: Literal["random", "clusters"] = Field(
        "random",
        description="random: a random sample. clusters: one unit per cluster of text-unit embeddings, so that each "
        "kind of document in the corpus is read (costs embedding calls for up to 20 units per sampled unit).",
    )
    seed: int = Field(0, description="Which text units are sampled.")
    max_entity_types: int = Field(10, ge=2, description="Entity types the corpus may get at most.")
    examples: int = Field(
        2, ge=0, description="Extraction examples written from sampled units (one model call each) into the prompt."
    )
    excerpt_tokens: int = Field(
        200, ge=50, description="Tokens of each sampled unit shown to the model, and of each example's text."
    )
