"""What each query method takes: its launch-time options (the launchpad's config, the CLI's and the server's
defaults alike) and what it needs of an index."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..configs.queries import (
    ASKED,
    BasicSearchConfig,
    DriftSearchConfig,
    GlobalSearchConfig,
    LazySearchConfig,
    LocalSearchConfig,
    QueryConfig,
    QuestionGenerationConfig,
    TextSummaryConfig,
)
from ..method.search.drift_search import drift_search
from ..method.search.global_search import global_search, text_summary_search
from ..method.search.lazy_search import lazy_search
from ..method.search.local_search import basic_search, local_search
from ..method.search.questions import generate_questions
from ..method.search.settings import (
    BasicSearchSettings,
    DriftSearchSettings,
    GlobalSearchSettings,
    LazySearchSettings,
    LocalSearchSettings,
    MapReduceSettings,
    QuestionGenerationSettings,
    settings_from,
)


@dataclass(frozen=True)
class Method:
    """A query method: its search function, its launch-time options (which build its settings object) and what it
    needs."""

    name: str  # as query_answers stores it
    asset: str  # its query asset and job (ask_<asset>)
    search: Callable
    options: type[QueryConfig] | type[QuestionGenerationConfig]
    settings: type
    prompts: tuple[str, ...]
    reads_reports: bool = False  # global and DRIFT answer from community reports: a lazy index has none
    leveled: bool = False  # takes a community level
    description: str = ""
    needs_model: bool = False  # answers nothing worth asking with the offline engine

    def run(self, chat, embedder, index, options: QueryConfig | QuestionGenerationConfig):
        """The search with these options: a coroutine."""
        fields = options.model_dump()
        settings = settings_from(self.settings, fields, besides=ASKED)
        if isinstance(options, QuestionGenerationConfig):
            return self.search(chat, embedder, index, fields["previous_questions"], settings)
        return self.search(chat, embedder, index, fields["question"], settings, fields["conversation"])


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "global",
            "global_search",
            global_search,
            GlobalSearchConfig,
            GlobalSearchSettings,
            ("global_search_map", "global_search_reduce", "rate_community"),
            reads_reports=True,
            leveled=True,
            description="Map-reduce over the community reports of one level; or dynamic community selection.",
        ),
        Method(
            "local",
            "local_search",
            local_search,
            LocalSearchConfig,
            LocalSearchSettings,
            ("local_search",),
            leveled=True,
            description="Nearest entities and one context of reports, tables and sources.",
        ),
        Method(
            "drift",
            "drift_search",
            drift_search,
            DriftSearchConfig,
            DriftSearchSettings,
            ("drift_primer", "drift_local", "drift_reduce", "local_search"),
            reads_reports=True,
            leveled=True,
            description="A primer from the nearest reports, follow-ups answered by local search, a reduce.",
        ),
        Method(
            "basic",
            "basic_search",
            basic_search,
            BasicSearchConfig,
            BasicSearchSettings,
            ("basic_search",),
            description="The paper's SS baseline: vector search over text units.",
        ),
        Method(
            "text_summary",
            "text_summary_search",
            text_summary_search,
            TextSummaryConfig,
            MapReduceSettings,
            ("global_search_map", "global_search_reduce"),
            description="The paper's TS baseline: global map-reduce over shuffled source text units.",
            # Offline, a map-reduce of quoted sentences over random text units: basic search, worse.
            needs_model=True,
        ),
        Method(
            "lazy",
            "lazy_search",
            lazy_search,
            LazySearchConfig,
            LazySearchSettings,
            ("lazy_refine", "lazy_relevance", "lazy_claims", "lazy_answer", "lazy_reduce"),
            description="LazyGraphRAG: a best-first walk down the communities under a budget of relevance tests; "
            "works on any index.",
        ),
        Method(
            "question_generation",
            "question_generation",
            generate_questions,
            QuestionGenerationConfig,
            QuestionGenerationSettings,
            ("question_generation",),
            leveled=True,
            description="Candidate next questions from the local context.",
        ),
    )
}
# The methods that answer a question as a conversation can continue it (question generation suggests questions).
CONVERSATIONAL = ("global", "local", "drift", "basic", "text_summary", "lazy")
