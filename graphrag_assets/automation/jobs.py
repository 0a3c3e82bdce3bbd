"""Jobs: index one corpus, one job per query method, the paper's evaluation of one corpus, and tuning its prompts."""

import dagster as dg

from ..assets import communities, embeddings, estimate, evaluation, exports, index, publication, query, tuning
from ..naming import DEFAULT, InstanceNames

index_assets = dg.load_assets_from_modules([index, communities, embeddings, exports, publication])
query_assets = dg.load_assets_from_modules([query])
evaluation_assets = dg.load_assets_from_modules([evaluation])
tuning_assets = dg.load_assets_from_modules([tuning])
estimate_assets = dg.load_assets_from_modules([estimate])

INDEX_JOB = "index_corpus"


def instance_jobs(
    index: list[dg.AssetsDefinition],
    queries: list[dg.AssetsDefinition],
    names: InstanceNames = DEFAULT,
    index_defaults: dict | None = None,
) -> list:
    """The jobs of one instance, over its own (renamed) index and query assets. `index_defaults` is the index job's
    default run config (a dg component's method and export folder), which the launchpad shows and the sensors' and
    schedule's runs use."""
    partitions = dg.DynamicPartitionsDefinition(name=names.name("corpus"))
    index_corpus = dg.define_asset_job(
        names.name(INDEX_JOB),
        selection=dg.AssetSelection.assets(*index),
        partitions_def=partitions,
        description="Index one corpus: documents, entity graph, claims, communities, reports, embeddings, layouts, "
        "exports. Its tables are staged and published together at the end: a failed run leaves the last index.",
        # Run monitoring (dagster.yaml) fails a run that hangs past this many seconds.
        tags={"dagster/max_runtime": str(6 * 3600)},
        config=index_defaults,
    )
    # One job per query method, so the launchpad, the CLI and the GraphQL API can each launch a question.
    ask = [
        dg.define_asset_job(
            names.name(f"ask_{asset.key.path[-1]}"),
            selection=[asset],
            partitions_def=partitions,
            description=asset.descriptions_by_key[asset.key],
            tags={"dagster/max_runtime": "1800"},
        )
        for asset in queries
    ]
    evaluate_corpus = dg.define_asset_job(
        names.name("evaluate_corpus"),
        selection=dg.AssetSelection.groups(names.group("evaluation")),
        partitions_def=partitions,
        description="The paper's evaluation on one indexed corpus: questions (generated, or BenchmarkQED's from a "
        "file), answers under C0-C3, TS, SS and lazy search, pairwise judgements, win rates, claim metrics, and "
        "scores against the questions' assertions. Each step says its model calls before making them.",
        tags={"dagster/max_runtime": str(12 * 3600)},
    )
    tune_prompts = dg.define_asset_job(
        names.name("tune_prompts"),
        selection=dg.AssetSelection.groups(names.group(tuning.GROUP)),
        partitions_def=partitions,
        description="Tune one corpus's extraction, claim, summary and report prompts from a sample of its text; an "
        "index uses them when index_prompts is set to prompts=tuned.",
        tags={"dagster/max_runtime": "1800"},
    )
    return [index_corpus, *ask, evaluate_corpus, tune_prompts]
