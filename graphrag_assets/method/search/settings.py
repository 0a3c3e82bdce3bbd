"""What each query method is set to, one frozen object per method.

The launch-time configs (answers/options.py, the launchpad's, the CLI's and the server's defaults alike) hold the
defaults and the descriptions; they build these objects from their fields of the same names, so no default is
written here. The evaluation builds them with its own values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class MapReduceSettings:
    """Map-reduce over records: the paper's global search over reports, or its TS baseline over source text."""

    response_type: str
    map_window_tokens: int
    reduce_window_tokens: int
    seed: int  # of the shuffle that packs records into map windows


@dataclass(frozen=True)
class GlobalSearchSettings(MapReduceSettings):
    community_level: int
    dynamic_community_selection: bool
    dynamic_threshold: int  # minimum 0-5 rating to keep a report and descend into its children


@dataclass(frozen=True)
class LocalContextSettings:
    """How the local context is chosen and packed: nearest entities, then reports, tables and sources."""

    community_level: int
    top_k_entities: int
    max_context_tokens: int
    community_prop: float
    text_unit_prop: float
    keyword_weight: float  # a keyword rank's weight in the fusion with vectors (0: vectors alone)
    question_units: int  # text units that best match the question itself, packed before the entities' own
    question_passages: int  # units that match the question next, packed as their passages that best match it
    passage_tokens: int  # the longest such passage


@dataclass(frozen=True)
class LocalSearchSettings(LocalContextSettings):
    response_type: str


@dataclass(frozen=True)
class DriftSearchSettings(LocalSearchSettings):
    primer_reports: int
    follow_ups: int
    depth: int


@dataclass(frozen=True)
class BasicSearchSettings:
    response_type: str
    top_k: int
    max_context_tokens: int
    keyword_weight: float


@dataclass(frozen=True)
class LazySearchSettings:
    response_type: str
    relevance_budget: int
    max_sub_questions: int
    units_per_visit: int
    patience: int
    snippet_tokens: int
    claim_passage_tokens: int
    max_context_tokens: int
    keyword_weight: float


@dataclass(frozen=True)
class QuestionGenerationSettings(LocalContextSettings):
    question_count: int


def settings_from(settings_class: type, fields: dict, besides: tuple[str, ...] = ()):
    """A settings object from a config's fields of the same names. A field it has no place for, and that is not
    one of `besides` (what is asked rather than how: the question, the conversation), is refused: a launch-time
    option that silently did nothing would be worse than an error."""
    names = {f.name for f in dataclasses.fields(settings_class)}
    unplaced = sorted(set(fields) - names - set(besides))
    if unplaced:
        raise TypeError(f"{settings_class.__name__} has no field for {', '.join(unplaced)}")
    return settings_class(**{name: fields[name] for name in names})
