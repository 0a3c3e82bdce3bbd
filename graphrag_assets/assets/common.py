"""What every asset shares: the corpus partitions, the model pool and code versions. Publishing a table is in
publishing.py, what a person reads of a step in metadata.py, what a run decided in run_plan.py."""

from __future__ import annotations

import dagster as dg

from ..method.prompts import prompts_version

corpus_partitions = dg.DynamicPartitionsDefinition(name="corpus")

# Assets that call the model share this pool: dagster.yaml limits how many run at once across all runs.
MODEL_POOL = "model"

# Bump when a change to the method changes what an asset produces from the same inputs.
METHOD_VERSION = "3"  # 2: chunks start at paragraph and sentence boundaries; 3: particular noun phrases


def code_version(*prompt_names: str) -> str:
    return f"{METHOD_VERSION}-{prompts_version(*prompt_names)}" if prompt_names else METHOD_VERSION


def corpus_asset(
    group: str,
    *,
    prompts: tuple[str, ...] = (),
    kinds: set[str] | None = None,
    model: bool = False,
    revision: str = "",
    **asset,
):
    """`dg.asset` for one step of a corpus: partitioned by corpus, in `group`, versioned by the method, by the
    `prompts` it sends and by its own `revision` (bumped when a change to this step alone changes what it makes),
    stored in DuckDB unless `kinds` says otherwise, and in the model pool when it calls a `model` (dagster.yaml bounds
    how many such steps run at once). The rest (deps, checks, name) as dg.asset."""
    return dg.asset(
        partitions_def=corpus_partitions,
        group_name=group,
        code_version="-".join(filter(None, (code_version(*prompts), revision))),
        kinds=kinds or {"duckdb"},
        **({"pool": MODEL_POOL} if model else {}),
        **asset,
    )
