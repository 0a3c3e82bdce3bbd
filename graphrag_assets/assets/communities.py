"""Communities of the entity graph and their reports."""

from functools import partial

import dagster as dg
import pandas as pd

from ..method import imports
from ..method.communities.leiden import build_communities
from ..method.communities.reports import (
    REPORT_COLUMNS,
    REPORT_PROMPTS,
    SOURCE_REPORT_PROMPTS,
    ReportSettings,
    generate_reports,
)
from ..method.graph.aliases import resolve
from ..method.prompts import DEFAULT_PROMPTS
from ..resources import ChatModelResource, CorporaResource, DuckDBStoreResource
from ..store.tables import read_table
from .common import MODEL_POOL, code_version, corpus_partitions
from .index_configs import CommunityConfig, ReportConfig
from .metadata import markdown_table, step_progress
from .publishing import (
    fail_if_too_many_failed,
    from_graphrag,
    previous_output,
    publish,
    publish_imported,
    read_inputs,
    reuse_previous,
    spent_on_failure,
)
from .run_plan import batch_ledger, index_plan, index_prompt_set


def per_level(df: pd.DataFrame, **aggregations) -> dg.MetadataValue:
    return dg.MetadataValue.md(df.groupby("level").agg(**aggregations).reset_index().to_markdown(index=False))


@dg.asset(
    deps=["entities", "relationships", "entity_aliases"],
    partitions_def=corpus_partitions,
    group_name="communities",
    code_version=code_version(),
    kinds={"duckdb", "graspologic"},
    check_specs=[
        dg.AssetCheckSpec(
            "one_community_per_level",
            asset="communities",
            description="Every clustered entity is in exactly one community at every level.",
        )
    ],
)
def communities(
    context: dg.AssetExecutionContext,
    config: CommunityConfig,
    chat: ChatModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
):
    """Hierarchical Leiden communities; level 0 is the coarsest, unsplit communities are carried down."""
    corpus = context.partition_key
    with duckdb.get_connection() as conn:
        imported = index_plan(context, corpora, chat, conn).imported
    if imported:
        table = from_graphrag(imported, imports.communities)
        with duckdb.get_connection() as conn:
            yield publish_imported(context, conn, "communities", table, imported)
        yield one_community_per_level(table)
        return
    with duckdb.get_connection() as conn:
        reused = reuse_previous(context, conn, "communities", engine="graspologic", settings=config)
        if reused:
            yield reused
            yield one_community_per_level(read_table(conn, "communities", corpus))
            return
        entities, relationships = resolve(
            read_table(conn, "entities", corpus),
            read_table(conn, "relationships", corpus),
            read_table(conn, "entity_aliases", corpus),
        )
        previous = (
            previous_output(conn, "communities", corpus, config, ignoring={"start_from_previous"})
            if config.start_from_previous
            else None
        )
    table = build_communities(
        entities, relationships, config.max_cluster_size, config.seed, config.use_lcc, previous=previous
    )
    with duckdb.get_connection() as conn:
        yield publish(
            context,
            conn,
            "communities",
            table,
            engine="graspologic",
            settings=config,
            metadata={
                "levels": int(table["level"].nunique()),
                "communities_per_level": per_level(
                    table, communities=("community", "count"), entities=("size", "sum"), largest=("size", "max")
                ),
                "started_from": "the last run's communities" if previous is not None else "scratch",
            },
        )
    yield one_community_per_level(table)


def one_community_per_level(table: pd.DataFrame) -> dg.AssetCheckResult:
    problems = []
    clustered = None
    for level, group in table.groupby("level"):
        members = [e for ids in group["entity_ids"] for e in ids]
        if len(members) != len(set(members)):
            problems.append(f"level {level}: {len(members) - len(set(members))} entities in two communities")
        if clustered is not None and set(members) != clustered:
            problems.append(f"level {level}: {len(clustered ^ set(members))} entities missing or extra")
        clustered = set(members) if clustered is None else clustered
    return dg.AssetCheckResult(
        check_name="one_community_per_level",
        passed=not problems,
        metadata={"problems": "; ".join(problems) or "none", "clustered_entities": len(clustered or ())},
    )


@dg.asset(
    deps=["communities", "entities", "relationships", "covariates", "text_units", "entity_aliases", "index_prompts"],
    partitions_def=corpus_partitions,
    group_name="communities",
    code_version=code_version(*REPORT_PROMPTS, *SOURCE_REPORT_PROMPTS),
    kinds={"duckdb"},
    pool=MODEL_POOL,
    check_specs=[
        dg.AssetCheckSpec(
            "every_community_reported",
            asset="community_reports",
            description="Every community has a report that the model wrote and that parsed.",
        )
    ],
)
def community_reports(
    context: dg.AssetExecutionContext,
    config: ReportConfig,
    chat: ChatModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
):
    """One report per community, written bottom-up (paper section 3.1.5); extractive offline."""
    with duckdb.get_connection() as conn:
        inputs = read_inputs(context, conn, "community_reports")
    # Reports read the graph the communities were made from: alias groups as one entity.
    inputs["entities"], inputs["relationships"] = resolve(
        inputs["entities"], inputs["relationships"], inputs.pop("entity_aliases")
    )
    inputs.pop("index_prompts")
    with duckdb.get_connection() as conn:
        prompts = index_prompt_set(conn, context.partition_key)
        plan = index_plan(context, corpora, chat, conn)
    if plan.imported:
        reports = from_graphrag(plan.imported, imports.community_reports, inputs["communities"])
        with duckdb.get_connection() as conn:
            yield publish_imported(context, conn, "community_reports", reports, plan.imported)
        yield every_community_reported(inputs["communities"], reports)
        return

    method = plan.method
    if not plan.writes_reports:
        context.log.info("community_reports left empty: a lazy index writes no reports")
        with duckdb.get_connection() as conn:
            yield publish(
                context,
                conn,
                "community_reports",
                pd.DataFrame(columns=REPORT_COLUMNS),
                engine="none (lazy method)",
                metadata={"skipped_because": "a lazy index writes no reports; basic and local search read it"},
            )
        yield every_community_reported(inputs["communities"], None)
        return

    def work(client):
        return generate_reports(
            client,
            **inputs,
            settings=report_settings(config, method == "fast", prompts),
            progress=step_progress(context, "community reports written", len(inputs["communities"]), client),
        )

    spent = spent_on_failure(context, duckdb)
    (reports, stats), usage = chat.run(work, batch_ledger(context, duckdb, chat), spent)
    keep = partial(spent, chat, usage)
    fail_if_too_many_failed(
        context, "community reports", stats.failed, len(reports), usage, config.max_failed_fraction, keep
    )
    top = reports[reports["status"] == "ok"].sort_values(["level", "rank"], ascending=[True, False])
    quality = {
        "index_method": method,
        "written_from": "source text units" if method == "fast" else "entity and relationship descriptions",
        "generated": stats.generated,
        "reused_for_carried_down": stats.reused,
        "written_in_batches": stats.batched,
        "batch_requests": stats.batch_requests,
        "repaired_json": stats.repaired_json,
        "failed": stats.failed,
    }
    with duckdb.get_connection() as conn:
        yield publish(
            context,
            conn,
            "community_reports",
            reports,
            engine=chat.engine,
            model=chat,
            usage=usage,
            quality=quality,
            metadata={
                "communities_with_substituted_sub_reports": len(stats.substitutions),
                "reports_per_level": per_level(
                    reports, reports=("community", "count"), mean_context_tokens=("context_tokens", "mean")
                ),
                "top_reports": markdown_table(top, ["community", "level", "rank", "title"]),
                "sample_report": dg.MetadataValue.md(top["full_content"].iloc[0] if len(top) else "_none_"),
            },
        )
    yield every_community_reported(inputs["communities"], reports)


def report_settings(config: ReportConfig, from_sources: bool = False, templates=DEFAULT_PROMPTS) -> ReportSettings:
    """How reports are written, from the step's config."""
    return ReportSettings(
        config.max_context_tokens,
        config.max_report_length,
        config.batch_below_tokens,
        config.batch_size,
        from_sources,
        templates,
    )


def every_community_reported(communities: pd.DataFrame, reports: pd.DataFrame | None) -> dg.AssetCheckResult:
    """A community without a row, or whose report failed, has no report a search could read. None: a lazy index,
    which has no reports by design."""
    if reports is None:
        return dg.AssetCheckResult(
            check_name="every_community_reported",
            passed=True,
            metadata={"communities_without_report": len(communities), "why": "a lazy index writes no reports"},
        )
    ok = set(reports.loc[reports["status"] == "ok", "community"])
    missing = sorted(set(communities["community"]) - ok)
    return dg.AssetCheckResult(
        check_name="every_community_reported",
        passed=not missing,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"communities_without_report": len(missing), "examples": str(missing[:20])},
    )
