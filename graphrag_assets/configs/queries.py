"""The query methods' launch-time settings: the launchpad's config of each query job, and the options the CLI,
the HTTP API, MCP and the OpenAI shape pass by name. Each method's config holds exactly its settings object's fields
(`method/search/settings.py`) and what is asked (ASKED); a test holds the two lists together."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from ..method import defaults


def keyword_weight_field(against: str):
    """The hybrid methods' setting: how much a keyword (BM25) rank weighs in the fusion with another ranking."""
    return Field(
        defaults.KEYWORD_WEIGHT,
        ge=0,
        description=f"Weight of keyword (BM25) ranks against {against} (reciprocal rank fusion; 0: keywords unused).",
    )


class Turn(dg.Config):
    role: str = Field(description="'user' or 'assistant'.")
    content: str = Field(description="What was said.")


class QueryConfig(dg.Config):
    question: str = Field(description="What to ask of the corpus.")
    response_type: str = Field("multiple paragraphs", description="Length and format of the answer.")
    conversation: list[Turn] = Field(
        [],
        description="Earlier turns, oldest first: the answer reads the question in their light, and the user's "
        "last two turns help choose the context. `graphrag-assets ask --follow-up <answer id>` fills it in.",
    )


class LeveledQueryConfig(QueryConfig):
    community_level: int = Field(
        0, ge=0, description="Community level: 0 is the root (C0), deeper levels are finer (C1, C2, ...)."
    )


class MapReduceOptions(dg.Config):
    map_window_tokens: int = Field(
        8000, ge=500, description="Tokens of records one map call reads; more windows mean more calls."
    )
    reduce_window_tokens: int = Field(
        8000, ge=500, description="Tokens of the best-scored points the answer is written from."
    )
    seed: int = Field(42, description="Seed of the shuffle that packs records into map windows.")


class LocalContextOptions(dg.Config):
    top_k_entities: int = Field(10, ge=1, description="Entities nearest the question that seed the context.")
    max_context_tokens: int = Field(
        defaults.LOCAL_CONTEXT_TOKENS, ge=500, description="Tokens of context the answer is written from."
    )
    community_prop: float = Field(
        0.25, ge=0, le=1, description="Share of the context budget for community reports (with text_unit_prop <= 1)."
    )
    text_unit_prop: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the context budget for source text units; the rest is entities, "
        "relationships and claims.",
    )
    keyword_weight: float = keyword_weight_field("vector ranks when choosing entities and text units")
    question_units: int = Field(
        defaults.QUESTION_UNITS,
        ge=0,
        description="Text units that best match the question itself (vectors and keywords), packed whole before "
        "the units the chosen entities come from.",
    )
    question_passages: int = Field(
        defaults.QUESTION_PASSAGES,
        ge=0,
        description="Text units that match the question next, each packed as its run of sentences holding most of "
        "the question's words: a passage costs less than a unit, so more units are searched.",
    )
    passage_tokens: int = Field(defaults.PASSAGE_TOKENS, ge=20, description="Tokens of each such passage, at most.")


class GlobalSearchConfig(LeveledQueryConfig, MapReduceOptions):
    dynamic_community_selection: bool = Field(
        False, description="Rate reports from the root down to community_level and read only relevant branches."
    )
    dynamic_threshold: int = Field(
        1, ge=0, le=5, description="Minimum 0-5 relevance rating to keep a report and descend into its children."
    )


class LocalSearchConfig(LeveledQueryConfig, LocalContextOptions):
    pass


class DriftSearchConfig(LeveledQueryConfig, LocalContextOptions):
    primer_reports: int = Field(5, ge=1, description="Reports nearest the question that the primer reads.")
    follow_ups: int = Field(3, ge=0, description="Follow-up questions asked at each step.")
    depth: int = Field(1, ge=0, description="Rounds of follow-ups (0: the primer alone).")
    question_passages: int = Field(
        defaults.DRIFT_QUESTION_PASSAGES,
        ge=0,
        description="Text units that match the question next, each packed as its best passage by every follow-up.",
    )


class BasicSearchConfig(QueryConfig):
    top_k: int = Field(10, ge=1, description="Text units nearest the question, packed into the context.")
    max_context_tokens: int = Field(8000, ge=500, description="Tokens of source text the answer is written from.")
    keyword_weight: float = keyword_weight_field("vector ranks")


class TextSummaryConfig(QueryConfig, MapReduceOptions):
    pass


class LazySearchConfig(QueryConfig):
    relevance_budget: int = Field(
        defaults.LAZY_RELEVANCE_BUDGET,
        ge=1,
        description="Text units the model may test for relevance (one snippet each); LazyGraphRAG's published "
        "settings are 100, 500 and 1,500. The main cost of the search, and what buys its depth.",
    )
    max_sub_questions: int = Field(
        defaults.LAZY_MAX_SUB_QUESTIONS, ge=1, description="Sub-questions the question may be split into (1: never)."
    )
    units_per_visit: int = Field(
        defaults.LAZY_UNITS_PER_VISIT, ge=1, description="Untested text units tested at each community the walk visits."
    )
    patience: int = Field(
        defaults.LAZY_PATIENCE,
        ge=1,
        description="Communities in a row with nothing relevant before the walk goes one level deeper.",
    )
    snippet_tokens: int = Field(
        defaults.LAZY_SNIPPET_TOKENS,
        ge=20,
        description="Tokens of each unit a relevance test reads: its sentences nearest the question.",
    )
    claim_passage_tokens: int = Field(
        defaults.LAZY_CLAIM_PASSAGE_TOKENS,
        ge=20,
        description="Tokens of each relevant unit the claims are drawn from: its sentences nearest the question.",
    )
    max_context_tokens: int = Field(8000, ge=500, description="Tokens of claims the answer is written from.")
    keyword_weight: float = keyword_weight_field("similarity ranks when ordering the text units the walk tests")


class QuestionGenerationConfig(LocalContextOptions):
    previous_questions: list[str] = Field(description="Questions asked so far.")
    question_count: int = Field(5, ge=1, description="Questions to suggest.")
    community_level: int = Field(0, ge=0, description="Level of the community reports in the context.")


# The options that say what is asked, not how the method searches: no settings object holds them.
ASKED = ("question", "conversation", "previous_questions")
