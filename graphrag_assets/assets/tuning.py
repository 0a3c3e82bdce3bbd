"""Prompts tuned to a corpus, in a group of their own: materialized on request (`graphrag-assets tune`), never by an
index run. An index uses them when its index_prompts step is set to prompts=tuned."""

import json
from typing import Literal

import dagster as dg
import pandas as pd
from pydantic import Field

from ..failures import step_failure
from ..method import defaults
from ..method.embeddings.text import LocalEmbedder, embed_with_model
from ..method.ingest.documents import read_corpus
from ..method.ingest.text_units import chunk_documents
from ..method.prompts import Prompt, load_prompt
from ..method.tuning import (
    TUNED_PROMPTS,
    TUNING_PROMPTS,
    offline_profile,
    profile_corpus,
    prompt_diff,
    sample_text_units,
    tuned_templates,
)
from ..resources import ChatModelResource, CorporaResource, DuckDBStoreResource, EmbeddingModelResource, run_with_models
from .common import MODEL_POOL, code_version, corpus_partitions
from .publishing import publish

GROUP = "prompt_tuning"


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


def corpus_text_units(corpora: CorporaResource, corpus: str) -> pd.DataFrame:
    """The corpus's text units as a default index cuts them (same ids), read from its folder: tuning needs no index."""
    with corpora.conversion_cache() as conversions:
        read = read_corpus(corpora.folder(corpus), conversions=conversions)
    if read.documents.empty:
        raise step_failure(f"corpus folder {corpora.folder(corpus)} has no readable documents", retryable=False)
    units, _ = chunk_documents(read.documents, defaults.CHUNK_SIZE, defaults.CHUNK_OVERLAP)
    return units


@dg.asset(
    partitions_def=corpus_partitions,
    group_name=GROUP,
    code_version=code_version(*TUNING_PROMPTS, *TUNED_PROMPTS),
    kinds={"duckdb"},
    pool=MODEL_POOL,
)
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
    if corpora.graphrag_output(corpus):
        raise step_failure(
            f"corpus {corpus!r} is an imported Microsoft GraphRAG index: its graph was extracted with that tool's "
            "prompts, and no prompt of this project reads it",
            retryable=False,
        )
    units = corpus_text_units(corpora, corpus)

    async def work(client, embedder):
        async def embed(texts: list[str]):
            if embedder is None:
                return LocalEmbedder.fit(texts).embed(texts)
            vectors, failed = await embed_with_model(embedder, texts, embeddings.batch_size, embeddings.batch_tokens)
            if failed:
                raise step_failure(f"{failed} of {len(texts)} sampled text units got no embedding", retryable=True)
            return vectors

        samples = await sample_text_units(units, config.sampled_text_units, config.sampling, config.seed, embed)
        if client is None:
            return offline_profile(samples, config.max_entity_types)
        return await profile_corpus(client, samples, config.max_entity_types, config.examples, config.excerpt_tokens)

    endpoints = [chat, embeddings] if config.sampling == "clusters" else [chat]
    profile, usages = run_with_models(endpoints, lambda client, embedder=None: work(client, embedder))
    embedding_tokens = usages[1].prompt_tokens if len(usages) > 1 and usages[1] is not None else 0
    if profile is None:
        raise step_failure(
            "the model gave no valid description or entity types of the corpus after its retries (see the run's "
            "log for the replies' problems); valid replies are cached, so a re-run pays only for the rest",
            retryable=True,
        )
    templates = tuned_templates(profile)
    basis = {
        "domain": profile.domain,
        "persona": profile.persona,
        "language": profile.language,
        "entity_types": json.dumps(profile.entity_types),
        "examples": json.dumps([vars(e) for e in profile.examples]),
        "sampled_text_unit_ids": json.dumps(profile.sampled_text_unit_ids),
        "derived_by": profile.derived_by,
    }
    rows = pd.DataFrame(
        [
            {
                "id": name,
                "template": template,
                "sha": Prompt(name, template).sha,
                "default_sha": load_prompt(name).sha,
                **basis,
            }
            for name, template in templates.items()
        ]
    )
    context.log.info(f"entity types of {corpus}: {', '.join(profile.entity_types)} ({profile.derived_by})")
    diffs = "\n\n".join(f"**{name}**\n\n```diff\n{prompt_diff(name, t)}```" for name, t in templates.items())
    with duckdb.get_connection() as conn:
        return publish(
            context,
            conn,
            "tuned_prompts",
            rows,
            engine=chat.engine,
            model=chat if chat.configured else None,
            usage=usages[0],
            settings=config,
            metadata={
                "derived_by": profile.derived_by,
                "domain": profile.domain or "(needs a model)",
                "persona": profile.persona or "(needs a model)",
                "language": profile.language,
                "entity_types": ", ".join(profile.entity_types),
                "examples": len(profile.examples),
                "sampled_text_unit_ids": dg.MetadataValue.json(profile.sampled_text_unit_ids),
                "extraction_prompt": dg.MetadataValue.md(f"```\n{templates['extract_graph']}\n```"),
                "diff_against_defaults": dg.MetadataValue.md(diffs),
                "embedding_tokens": embedding_tokens,
            },
        )
