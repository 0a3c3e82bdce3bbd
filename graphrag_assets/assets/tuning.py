"""Prompts tuned to a corpus, in a group of their own: materialized on request (`graphrag-assets tune`), never by an
index run. An index uses them when its index_prompts step is set to prompts=tuned."""

import dagster as dg
import polars as pl

from ..configs.evaluation import TuningConfig
from ..failures import step_failure
from ..method import defaults
from ..method.ingest.documents import read_corpus
from ..method.ingest.text_units import chunk_documents
from ..method.tuning import (
    TUNED_PROMPTS,
    TUNING_PROMPTS,
    CorpusProfile,
    SampleNotEmbedded,
    TuningSettings,
    profile_sample,
    prompt_diff,
    tuned_prompt_rows,
    tuned_templates,
)
from ..resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource, run_with_models
from .common import corpus_asset
from .publishing import Step

GROUP = "prompt_tuning"


def corpus_text_units(corpora: CorporaResource, corpus: str) -> pl.DataFrame:
    """The corpus's text units as a default index cuts them (same ids), read from its folder: tuning needs no index."""
    if corpora.graphrag_output(corpus):
        raise step_failure(
            f"corpus {corpus!r} is an imported Microsoft GraphRAG index: its graph was extracted with that tool's "
            "prompts, and no prompt of this project reads it",
            retryable=False,
        )
    with corpora.conversion_cache() as conversions:
        read = read_corpus(corpora.folder(corpus), conversions=conversions)
    if read.documents.is_empty():
        raise step_failure(f"corpus folder {corpora.folder(corpus)} has no readable documents", retryable=False)
    units, _ = chunk_documents(read.documents, defaults.CHUNK_SIZE, defaults.CHUNK_OVERLAP)
    return units


@corpus_asset(GROUP, prompts=(*TUNING_PROMPTS, *TUNED_PROMPTS), model=True)
def tuned_prompts(
    context: dg.AssetExecutionContext,
    config: TuningConfig,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """The corpus's own extraction, claim, summary and report prompts: the model reads a sample of its text units
    and names the domain, a persona, the language and the entity types, and writes extraction examples from the
    sample. Offline, the entity types come from the sample's most frequent noun phrases, with no examples."""
    corpus = context.partition_key
    units = corpus_text_units(corpora, corpus)
    settings = TuningSettings(**config.model_dump(), embedding_batch=(embeddings.batch_size, embeddings.batch_tokens))
    endpoints = [chat, embeddings] if config.sampling == "clusters" else [chat]
    try:
        profile, usages = run_with_models(
            endpoints, lambda client, embedder=None: profile_sample(client, embedder, units, settings)
        )
    except SampleNotEmbedded as problem:
        raise step_failure(str(problem), retryable=True) from None
    if profile is None:
        raise step_failure(
            "the model gave no valid description or entity types of the corpus after its retries (see the run's "
            "log for the replies' problems); valid replies are cached, so a re-run pays only for the rest",
            retryable=True,
        )
    templates = tuned_templates(profile)
    context.log.info(f"entity types of {corpus}: {', '.join(profile.entity_types)} ({profile.derived_by})")
    embedding_tokens = usages[1].prompt_tokens if len(usages) > 1 and usages[1] is not None else 0
    return Step(context, duckdb).publish(
        "tuned_prompts",
        tuned_prompt_rows(profile, templates),
        engine=chat.engine,
        paid=(chat, usages[0]),
        settings=config,
        metadata=tuning_metadata(profile, templates) | {"embedding_tokens": embedding_tokens},
    )


def tuning_metadata(profile: CorpusProfile, templates: dict[str, str]) -> dict:
    diffs = "\n\n".join(f"**{name}**\n\n```diff\n{prompt_diff(name, t)}```" for name, t in templates.items())
    return {
        "derived_by": profile.derived_by,
        "domain": profile.domain or "(needs a model)",
        "persona": profile.persona or "(needs a model)",
        "language": profile.language,
        "entity_types": ", ".join(profile.entity_types),
        "examples": len(profile.examples),
        "sampled_text_unit_ids": dg.MetadataValue.json(profile.sampled_text_unit_ids),
        "extraction_prompt": dg.MetadataValue.md(f"```\n{templates['extract_graph']}\n```"),
        "diff_against_defaults": dg.MetadataValue.md(diffs),
    }
