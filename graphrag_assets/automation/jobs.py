"""Jobs: index one corpus, one job per query method, the paper's evaluation of one corpus, and tuning its prompts."""

import dagster as dg

from ..assets import communities, embeddings, estimate, evaluation, exports, index, publication, query, tuning
from ..assets.common import corpus_partitions

index_assets = dg.load_assets_from_modules([index, communities, embeddings, exports, publication])
query_assets = dg.load_assets_from_modules([query])
evaluation_assets = dg.load_assets_from_modules([evaluation])
tuning_assets = dg.load_assets_from_modules([tuning])
estimate_assets = dg.load_assets_from_modules([estimate])

INDEX_JOB = "index_corpus"


def index_job(defaults: dict | None = None):
    """The job that indexes one corpus; `defaults` is its default run config (a dg component's method and export
    folder), which the launchpad shows and the sensors' and schedule's runs use."""
    return dg.define_asset_job(
        INDEX_JOB,
        selection=dg.AssetSelection.assets(*index_assets),
        partitions_def=corpus_partitions,
        description="Index one corpus: documents, entity graph, claims, communities, reports, embeddings, layouts, "
        "exports. Its tables are staged and published together at the end: a failed run leaves the last index.",
        # Run monitoring (dagster.yaml) fails a run that hangs past this many seconds.
        tags={"dagster/max_runtime": str(6 * 3600)},
        config=defaults,
    )


index_corpus_job = index_job()

# One job per query method, so the launchpad, the CLI and the GraphQL API can each launch a question.
query_jobs = [
    dg.define_asset_job(
        f"ask_{asset.key.path[-1]}",
        selection=[asset],
        partitions_def=corpus_partitions,
        description=asset.descriptions_by_key[asset.key],
        tags={"dagster/max_runtime": "1800"},
    )
    for asset in query_assets
]

evaluate_corpus_job = dg.define_asset_job(
    "evaluate_corpus",
    selection=dg.AssetSelection.groups("evaluation"),
    partitions_def=corpus_partitions,
    description="The paper's evaluation on one indexed corpus: questions (generated, or BenchmarkQED's from a file), "
    "answers under C0-C3, TS, SS and lazy search, pairwise judgements, win rates, claim metrics, and scores against "
    "the questions' assertions. Each step says its model calls before making them.",
    tags={"dagster/max_runtime": str(12 * 3600)},
)

tune_prompts_job = dg.define_asset_job(
    "tune_prompts",
    selection=dg.AssetSelection.groups(tuning.GROUP),
    partitions_def=corpus_partitions,
    description="Tune one corpus's extraction, claim, summary and report prompts from a sample of its text; an index "
    "uses them when index_prompts is set to prompts=tuned.",
    tags={"dagster/max_runtime": "1800"},
)
