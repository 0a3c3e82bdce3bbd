"""The index's launch-time settings, one `dg.Config` a step: what the launchpad shows and a run config's
`ops.<step>.config` sets. Grouped as the pipeline runs: documents and prompts, the graph, communities and reports,
embeddings and layouts, exports. Their defaults are in `method/defaults.py`; `step_config` reads one from a run
config."""

from typing import Literal

import dagster as dg
from pydantic import Field

from ..method import defaults
from ..method.embeddings.text import MAX_TERMS
from ..method.graph.claims import DEFAULT_CLAIM_DESCRIPTION
from ..method.graph.extraction import DEFAULT_ENTITY_TYPES
from ..method.ingest.conversion import ARCHIVE_EXPANSION, MB, Limits
from ..settings import STATE_DIR


class IngestConfig(dg.Config):
    chunk_size: int = Field(defaults.CHUNK_SIZE, ge=1, description="Tokens a text unit may have, its overlap included.")
    chunk_overlap: int = Field(
        defaults.CHUNK_OVERLAP,
        ge=0,
        description="Tokens of the previous text unit that open the next one (less than chunk_size).",
    )
    text_column: str = Field("text", description="CSV, JSON, JSONL and parquet files: the column that holds the text.")
    title_column: str = Field(
        "title", description="CSV, JSON, JSONL and parquet files: the column that holds the title, if any."
    )
    metadata_columns: list[str] = Field(
        [], description="CSV, JSON, JSONL and parquet files: columns kept as document metadata."
    )
    max_file_mb: float = Field(
        Limits.max_file_bytes / MB,
        gt=0,
        description="Files larger than this are skipped with a warning; Office files and EPUBs may also unpack to "
        f"at most {ARCHIVE_EXPANSION} times it.",
    )
    max_document_chars: int = Field(
        Limits.max_document_chars,
        ge=1,
        description="Text one converted file (PDF, Office, HTML, EPUB) may give; the rest is left out, with a warning.",
    )
    keep_boilerplate: bool = Field(
        False,
        description="Keep Project Gutenberg's licence header and footer, found by its '*** START/END OF THE PROJECT "
        "GUTENBERG EBOOK' markers; left out by default so they do not become entities and communities.",
    )


class IndexPromptsConfig(dg.Config):
    prompts: Literal["last", "default", "tuned"] = Field(
        "last",
        description="default: the files in prompts/. tuned: the corpus's tuned_prompts (materialize them first: "
        "graphrag-assets tune --corpus <name>). last: what the corpus's last index used (default on its first), so "
        "a nightly re-index keeps the corpus's choice. Either way, a file data/<corpus>/prompts/<name>.txt replaces "
        "that prompt.",
    )


class GraphConfig(dg.Config):
    method: Literal["standard", "fast", "lazy"] = Field(
        "standard",
        description="How the index is built. standard: the model extracts entities, relationships and claims (the "
        "paper's method). fast: noun phrases and their co-occurrence make the graph with no model call, and the "
        "model writes each community's report from its text units. lazy: no chat call at all; questions go to "
        "search methods that read text units (basic, local).",
    )
    entity_types: list[str] = Field(list(DEFAULT_ENTITY_TYPES), description="The kinds of entity to extract.")
    max_gleanings: int = Field(
        defaults.MAX_GLEANINGS,
        ge=0,
        description="Times the model is asked for what it missed in a text unit (0: never).",
    )
    summary_max_input_tokens: int = Field(
        defaults.SUMMARY_MAX_INPUT_TOKENS,
        ge=1,
        description="Tokens of descriptions one summary call reads; longer lists go in batches.",
    )
    summary_max_tokens: int = Field(
        defaults.SUMMARY_MAX_TOKENS, ge=20, description="Tokens a description summary may have."
    )
    summarize_above_tokens: int = Field(
        defaults.SUMMARIZE_ABOVE_TOKENS,
        ge=0,
        description="Descriptions of one element that together fit this are joined, not summarized.",
    )
    offline_min_mentions: int = Field(
        defaults.OFFLINE_MIN_MENTIONS,
        ge=1,
        description="Noun-phrase graph (offline engine, fast and lazy methods): mentions a phrase needs to become an "
        "entity.",
    )
    concept_max_unit_fraction: float = Field(
        defaults.CONCEPT_MAX_UNIT_FRACTION,
        gt=0,
        le=1,
        description="fast and lazy methods: a phrase found in more than this share of the text units is left out "
        "(it says nothing about where a topic is).",
    )
    concept_phrases: Literal["names", "noun_phrases"] = Field(
        "names",
        description="fast and lazy methods: which phrases become concepts. names: capitalised names (people, places, "
        "titles). noun_phrases: the noun phrases (found by TextBlob's part-of-speech chunker) that name something "
        "particular: a proper noun, two words or more, or a hyphenated compound. A richer graph, with more "
        "communities (and, for fast, reports: about half the standard index's chat tokens on the sample).",
    )
    concept_min_edge_weight: float = Field(
        defaults.CONCEPT_MIN_EDGE_WEIGHT,
        ge=1,
        description="fast and lazy methods: sentences two phrases must share before they are related.",
    )
    max_failed_unit_fraction: float = Field(
        0.05, ge=0, le=1, description="Share of text units whose extraction may fail before the step fails."
    )


class ClaimsConfig(dg.Config):
    enabled: bool = Field(True, description="Extract claims (one more model pass over every text unit).")
    claim_description: str = Field(DEFAULT_CLAIM_DESCRIPTION, description="What counts as a claim.")
    entity_specs: list[str] = Field(list(DEFAULT_ENTITY_TYPES), description="The kinds of entity claims are about.")
    max_gleanings: int = Field(
        defaults.MAX_GLEANINGS, ge=0, description="Times the model is asked for claims it missed (0: never)."
    )
    max_failed_unit_fraction: float = Field(
        0.05, ge=0, le=1, description="Share of text units whose claim extraction may fail before the step fails."
    )


class AliasConfig(dg.Config):
    enabled: bool = Field(True, description="Look for names of one entity (off: no aliases, the graph as extracted).")
    on_imported_graphs: bool = Field(
        False,
        description="Also look for aliases in a graph imported from Microsoft GraphRAG: with a model configured "
        "that costs model calls, and an import otherwise makes none.",
    )
    min_name_overlap: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of name words two names must share to be a candidate pair, when neither "
        "name holds the other.",
    )
    batch_size: int = Field(20, ge=1, description="Candidate pairs the model judges in one call.")


class CommunityConfig(dg.Config):
    max_cluster_size: int = Field(
        defaults.MAX_CLUSTER_SIZE,
        ge=2,
        description="A community larger than this is split again at the next level (Leiden).",
    )
    seed: int = Field(
        defaults.COMMUNITY_SEED, description="Leiden's random seed: the same seed gives the same communities."
    )
    use_lcc: bool = Field(
        False,
        description="Cluster only the largest connected component, as GraphRAG does by default; off here so that "
        "no entity is left out of the communities.",
    )
    start_from_previous: bool = Field(
        True,
        description="Start Leiden from the communities stored by the last run with the same settings, so that an "
        "edit moves only the communities it touches and the rest keep their reports. Off: cluster from scratch, "
        "as a new index of the same entities would.",
    )


class ReportConfig(dg.Config):
    max_context_tokens: int = Field(
        defaults.REPORT_MAX_CONTEXT_TOKENS,
        ge=500,
        description="Tokens of entities, relationships, claims and sub-reports a report is written from.",
    )
    max_report_length: int = Field(defaults.REPORT_MAX_LENGTH, ge=100, description="Words a report may have.")
    batch_below_tokens: int = Field(
        defaults.REPORT_BATCH_BELOW_TOKENS,
        ge=0,
        description="Communities whose context has at most this many tokens (two or three entities) are reported "
        "several to a request, each report short; each is still cached as its own, so an edit re-asks only its own.",
    )
    batch_size: int = Field(
        defaults.REPORT_BATCH_SIZE,
        ge=1,
        description="Small communities reported in one request at most (1: each alone).",
    )
    max_failed_fraction: float = Field(
        0.05, ge=0, le=1, description="Share of reports that may fail (and stay unwritten) before the step fails."
    )


class TextEmbeddingConfig(dg.Config):
    offline_dimensions: int = Field(
        128, ge=2, description="Offline engine only: dimensions of its TF-IDF + SVD vectors (fewer on a tiny corpus)."
    )
    seed: int = Field(42, description="Offline engine only: the SVD's random seed.")
    offline_max_terms: int = Field(
        MAX_TERMS,
        ge=2,
        description="Offline engine only: the most frequent terms its TF-IDF keeps (a real corpus's vocabulary grows "
        "with its size; the model's memory and storage grow with this).",
    )
    max_failed_fraction: float = Field(
        0.05, ge=0, le=1, description="Share of texts whose embedding may fail before the step fails."
    )
    approximate_search_above: int = Field(
        100_000,
        ge=0,
        description="A kind of vector (entity, text_unit, community_report) with more rows than this gets an HNSW "
        "index for nearest-neighbour search; with fewer, queries scan them exactly.",
    )


class Node2VecConfig(dg.Config):
    dimensions: int = Field(128, ge=2, description="Size of each entity's graph embedding.")
    num_walks: int = Field(10, ge=1, description="Random walks started from every entity.")
    walk_length: int = Field(40, ge=2, description="Steps of a walk (scaled by degree, as graspologic does).")
    window_size: int = Field(2, ge=1, description="Word2Vec context window over a walk.")
    iterations: int = Field(3, ge=1, description="Word2Vec training epochs.")
    seed: int = Field(86, description="Seed of the walks and of Word2Vec: the same seed gives the same vectors.")


class LayoutConfig(dg.Config):
    n_neighbors: int = Field(15, ge=2, description="UMAP neighbours: larger keeps more of the global structure.")
    min_dist: float = Field(0.75, ge=0, le=1, description="UMAP's minimum distance between points in the plot.")
    seed: int = Field(42, description="UMAP's random seed: the same seed gives the same layout.")


class ExportConfig(dg.Config):
    folder: str = Field(f"{STATE_DIR}/exports", description="Where the files go: <folder>/<corpus>/...")


def step_config(run_config: dict, config: type[dg.Config], step: str) -> dg.Config:
    """A step's settings as a run config sets them (the defaults for what it leaves out)."""
    return config(**run_config.get("ops", {}).get(step, {}).get("config", {}))
