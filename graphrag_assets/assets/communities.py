"""Communities of the entity graph and their reports."""

import dagster as dg
import polars as pl

from ..configs.index import CommunityConfig, ReportConfig
from ..method import graphrag_import as imported_index
from ..method.communities.leiden import build_communities
from ..method.communities.reports import (
    REPORT_COLUMNS,
    REPORT_PROMPTS,
    SOURCE_REPORT_PROMPTS,
    ReportSettings,
    ReportStats,
    generate_reports,
)
from ..method.graph.aliases import resolve
from ..method.prompts import DEFAULT_PROMPTS
from ..method.schema import UNIT_LINKS
from ..resources import ChatModelResource, CorporaResource, DuckDBStoreResource
from .common import corpus_asset
from .metadata import markdown, markdown_table, step_progress
from .publishing import Step, from_graphrag


def per_level(df: pl.DataFrame, **aggregations: pl.Expr) -> dg.MetadataValue:
    return dg.MetadataValue.md(markdown(df.group_by("level").agg(**aggregations).sort("level")))


@corpus_asset(
    "communities",
    deps=["entities", "relationships", "entity_aliases"],
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
    step = Step(context, duckdb)
    imported = step.plan(corpora, chat).imported
    if imported:
        table = from_graphrag(imported, imported_index.communities)
        yield step.publish_imported("communities", table, imported)
        yield one_community_per_level(table)
        return
    reused = step.reuse_previous("communities", "graspologic", config)
    if reused:
        yield reused
        yield one_community_per_level(step.read("communities"))
        return
    table, started_from = clustered(step, config)
    yield step.publish(
        "communities", table, engine="graspologic", settings=config, metadata=community_metadata(table, started_from)
    )
    yield one_community_per_level(table)


def clustered(step: Step, config: CommunityConfig) -> tuple[pl.DataFrame, str]:
    """The communities table and what clustering started from. A function of its own so that the graph it reads is
    let go before the table is written: held through the write, it took 1,087 -> 967 MiB of the step at 50 MB of
    text."""
    graph = step.inputs("communities", without=CLUSTERING_LEAVES_OUT)
    graph["entities"], graph["relationships"] = resolve(
        graph.pop("entities"), graph.pop("relationships"), graph.pop("entity_aliases")
    )
    previous = (
        step.previous_output("communities", config, ignoring={"start_from_previous"})
        if config.start_from_previous
        else None
    )
    # Popped into the call, not held here: the method lets them go once it has coded their text units as numbers
    # (200 MB of text: 1,649 -> 1,545 MiB while the levels are built).
    table = build_communities(
        graph.pop("entities"),
        graph.pop("relationships"),
        config.max_cluster_size,
        config.seed,
        config.use_lcc,
        previous=previous,
    )
    return table, "the last run's communities" if previous is not None else "scratch"


def community_metadata(table: pl.DataFrame, started_from: str) -> dict:
    return {
        "levels": table["level"].n_unique(),
        "communities_per_level": per_level(
            table, communities=pl.len(), entities=pl.col("size").sum(), largest=pl.col("size").max()
        ),
        "started_from": started_from,
    }


def one_community_per_level(table: pl.DataFrame) -> dg.AssetCheckResult:
    problems = []
    clustered = None
    for (level,), group in table.sort("level").group_by("level", maintain_order=True):
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


# Resolving aliases reads which entity each accepted variant goes into, not the pair's names and scores.
RESOLVING_LEAVES_OUT = {"entity_aliases": ("id", "entity", "canonical", "method", "score", "confirmed_by")}
# Clustering reads names, weights and text units, no description (50 MB of text: 150 MiB less at the step's peak).
CLUSTERING_LEAVES_OUT = {"entities": ("description",), "relationships": ("description",), **RESOLVING_LEAVES_OUT}
# Columns no report reads: on a large corpus each is tens of megabytes held for the whole step. Only the fast
# method's reports read the entities' text units (FAST_REPORTS_LEAVE_OUT); 172 MiB at 200 MB of text.
FAST_REPORTS_LEAVE_OUT = {"text_units": UNIT_LINKS, "relationships": ("text_unit_ids",), **RESOLVING_LEAVES_OUT}
REPORTS_LEAVE_OUT = {**FAST_REPORTS_LEAVE_OUT, "entities": ("text_unit_ids",)}


@corpus_asset(
    "communities",
    deps=["communities", "entities", "relationships", "covariates", "text_units", "entity_aliases", "index_prompts"],
    prompts=(*REPORT_PROMPTS, *SOURCE_REPORT_PROMPTS),
    model=True,
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
    step = Step(context, duckdb)
    plan = step.plan(corpora, chat)
    tables = step.inputs(
        "community_reports", without=FAST_REPORTS_LEAVE_OUT if plan.method == "fast" else REPORTS_LEAVE_OUT
    )
    communities = tables["communities"]
    if plan.imported:
        reports = from_graphrag(plan.imported, imported_index.community_reports, communities)
        yield step.publish_imported("community_reports", reports, plan.imported)
        yield every_community_reported(communities, reports)
        return
    if not plan.writes_reports:
        why = "a lazy index writes no reports; basic and local search read it"
        yield step.publish_skipped("community_reports", REPORT_COLUMNS, "none (lazy method)", why)
        yield every_community_reported(communities, None)
        return
    numbers = communities.select("community")
    del communities  # the step's peak: see written_reports
    settings = report_settings(config, plan.method == "fast", step.prompts())
    reports, stats, usage = written_reports(context, step, chat, tables, settings)
    paid = (chat, usage)
    step.fail_if_too_many_failed("community reports", stats.failed, len(reports), paid, config.max_failed_fraction)
    quality = report_quality(plan.method, stats)
    yield step.publish(
        "community_reports", reports, engine=chat.engine, paid=paid, quality=quality, metadata=report_metadata(reports)
    )
    yield every_community_reported(numbers, reports)


def written_reports(context, step: Step, chat: ChatModelResource, tables: dict, settings: ReportSettings):
    """(reports, stats, usage). A function of its own that empties `tables`: the graph and the text are let go
    before the table is written, which held with them was the step's peak."""
    # Reports read the graph the communities were made from: alias groups as one entity.
    entities, relationships = resolve(tables.pop("entities"), tables.pop("relationships"), tables.pop("entity_aliases"))
    held = [tables.pop("communities"), entities, relationships, tables.pop("covariates"), tables.pop("text_units")]
    del entities, relationships

    def work(client):
        # Handed over, not closed over: generate_reports lets go of the graph and the text before the table is built
        communities, entities, relationships, covariates, units = held
        held.clear()
        progress = step_progress(context, "community reports written", len(communities), client)
        return generate_reports(client, communities, entities, relationships, covariates, units, settings, progress)

    (reports, stats), usage = step.run_model(chat, work)
    return reports, stats, usage


def report_quality(method: str, stats: ReportStats) -> dict:
    """How the reports were written: for the metadata and the lineage row."""
    return {
        "index_method": method,
        "written_from": "source text units" if method == "fast" else "entity and relationship descriptions",
        "generated": stats.generated,
        "reused_for_carried_down": stats.reused,
        "written_in_batches": stats.batched,
        "batch_requests": stats.batch_requests,
        "repaired_json": stats.repaired_json,
        "failed": stats.failed,
        "communities_with_substituted_sub_reports": len(stats.substitutions),
    }


def report_metadata(reports: pl.DataFrame) -> dict:
    top = reports.filter(pl.col("status") == "ok").sort(
        ["level", "rank"], descending=[False, True], maintain_order=True
    )
    return {
        "reports_per_level": per_level(reports, reports=pl.len(), mean_context_tokens=pl.col("context_tokens").mean()),
        "top_reports": markdown_table(top, ["community", "level", "rank", "title"]),
        "sample_report": dg.MetadataValue.md(top["full_content"][0] if len(top) else "_none_"),
    }


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


def every_community_reported(communities: pl.DataFrame, reports: pl.DataFrame | None) -> dg.AssetCheckResult:
    """A community without a row, or whose report failed, has no report a search could read. None: a lazy index,
    which has no reports by design."""
    if reports is None:
        return dg.AssetCheckResult(
            check_name="every_community_reported",
            passed=True,
            metadata={"communities_without_report": len(communities), "why": "a lazy index writes no reports"},
        )
    ok = set(reports.filter(pl.col("status") == "ok")["community"])
    missing = sorted(set(communities["community"]) - ok)
    return dg.AssetCheckResult(
        check_name="every_community_reported",
        passed=not missing,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"communities_without_report": len(missing), "examples": str(missing[:20])},
    )
