"""The first half of the index: documents, text units, the entity graph and claims."""

import tempfile
from collections import Counter
from pathlib import Path

import dagster as dg
import polars as pl

from ..configs.index import AliasConfig, ClaimsConfig, GraphConfig, IndexPromptsConfig, IngestConfig
from ..failures import step_failure
from ..method import graphrag_import as imported_index
from ..method.corpus_folder import PROMPTS_FOLDER
from ..method.entity_graph import GraphBuild, GraphSettings, build_entity_graph
from ..method.graph import aliases as alias_method
from ..method.graph.claims import CLAIM_PROMPTS, COVARIATE_COLUMNS, extract_claims
from ..method.graph.extraction import EXTRACTION_PROMPTS
from ..method.graph.tables import LINKED_TEXT_UNITS, LINKED_TEXT_UNITS_BYTES
from ..method.ingest.conversion import MB, Limits
from ..method.ingest.documents import CorpusReadResult, TabularColumns, corpus_records, problem_summary, read_corpus
from ..method.ingest.text_units import chunk_to_files
from ..method.plan import IndexPlan
from ..method.prompts import DEFAULT_PROMPTS, PromptSet
from ..method.schema import frame
from ..method.tuning import INDEX_PROMPTS, PromptFileError, index_prompt_rows, prompt_diff
from ..models.interrupts import run_interruptibly
from ..resources import ChatModelResource, CorporaResource, DuckDBStoreResource
from ..store.tables import last_settings, read_table, table_exists
from .common import MODEL_POOL, code_version, corpus_asset, corpus_partitions
from .metadata import markdown, markdown_table, step_progress, tell, top_rows
from .publishing import Step, from_graphrag

ENTITY_PREVIEW = ["title", "type", "degree", "frequency", "description"]
_PROBLEMS_SHOWN = 5  # kinds of problem said in the log and terminal; the metadata has up to 20, each with a count


def read_documents(corpora: CorporaResource, folder, config: IngestConfig) -> CorpusReadResult:
    """The corpus folder's documents, read as the ingest settings say (the index and its estimate read alike)."""
    with corpora.conversion_cache() as conversions:
        return read_corpus(folder, *_reading(config), conversions=conversions)


def spool_documents(corpora: CorporaResource, folder, config: IngestConfig, spool: Path) -> CorpusReadResult:
    """The corpus folder's documents and their text units, read and chunked a batch at a time into two parquet files
    in `spool` (documents.parquet, base_text_units.parquet), so that no corpus is held whole; the result's
    documents frame stays empty."""
    read = CorpusReadResult(frame("documents"))
    with corpora.conversion_cache() as conversions:
        records = corpus_records(folder, read, *_reading(config), conversions=conversions)
        chunk_to_files(
            records,
            spool / "documents.parquet",
            spool / "base_text_units.parquet",
            config.chunk_size,
            config.chunk_overlap,
        )
    return read


def _reading(config: IngestConfig) -> tuple:
    columns = TabularColumns(config.text_column, config.title_column or None, tuple(config.metadata_columns))
    return columns, config.keep_boilerplate, Limits(int(config.max_file_mb * MB), config.max_document_chars)


def files_by_type(files: dict) -> str:
    """The corpus's files per type: how many were read, skipped, and the documents they gave."""
    rows = [(kind, c["read"], c["skipped"], c["documents"]) for kind, c in sorted(files.items())]
    return markdown(pl.DataFrame(rows, schema=["type", "read", "skipped", "documents"], orient="row"))


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "documents",
            description="One row per document of the corpus; id is the content hash.",
            code_version=code_version(),
            kinds={"duckdb"},
        ),
        dg.AssetSpec(
            "base_text_units",
            deps=["documents"],
            code_version=code_version(),
            kinds={"duckdb"},
            description="Token chunks of the documents, the unit of extraction and provenance.",
        ),
    ],
    partitions_def=corpus_partitions,
    group_name="ingest",
)
def corpus_documents(
    context: dg.AssetExecutionContext,
    config: IngestConfig,
    chat: ChatModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
):
    step = Step(context, duckdb)
    plan = step.plan(corpora, chat)
    if plan.imported:
        documents, text_units = from_graphrag(plan.imported, imported_index.documents_and_units)
        yield step.publish_imported("documents", documents, plan.imported)
        yield step.publish_imported("base_text_units", text_units, plan.imported)
        return
    folder = corpora.folder(context.partition_key)
    with tempfile.TemporaryDirectory(prefix="graphrag-ingest-") as spool:
        read = spool_documents(corpora, folder, config, Path(spool))
        problems = tell_problems(context, folder, read.problems)
        if not read.documents_read:
            raise step_failure(
                f"corpus folder {folder} has no readable documents", retryable=False, metadata={"problems": problems}
            )
        yield from publish_spooled(step, Path(spool), read, problems, plan, config)


def publish_spooled(
    step: Step, spool: Path, read: CorpusReadResult, problems: dg.MetadataValue, plan: IndexPlan, config: IngestConfig
):
    """The documents and text units that spool_documents wrote, into the store by DuckDB, with what was read."""
    preview = pl.read_parquet(spool / "documents.parquet", columns=["title", "source_path"], n_rows=10)
    yield step.publish_query(
        "documents",
        parquet_query(spool / "documents.parquet"),
        engine="none",
        metadata={
            "source": "documents folder",
            "index_plan": dg.MetadataValue.md(plan.as_markdown()),
            "files_read": read.files_read,
            "files": dg.MetadataValue.md(files_by_type(read.files)),
            "problems": problems,
            "preview": markdown_table(preview, ["title", "source_path"]),
        },
    )
    yield step.publish_query(
        "base_text_units",
        parquet_query(spool / "base_text_units.parquet"),
        engine="none",
        metadata={"chunk_size": config.chunk_size, "chunk_overlap": config.chunk_overlap},
        measures={"total_tokens": "sum(n_tokens)::BIGINT", "units_with_location": "count(location)"},
    )


def parquet_query(path: Path) -> str:
    return "SELECT * FROM read_parquet('{}')".format(str(path).replace("'", "''"))


def tell_problems(context: dg.AssetExecutionContext, folder, problems: list) -> dg.MetadataValue:
    """The first kinds of problem met reading the folder, in the log and the terminal; all of them (up to 20, each
    with a count) for the metadata."""
    summary = problem_summary(problems)
    for line in summary[:_PROBLEMS_SHOWN]:
        tell(context, f"{folder.name}/{line}", warning=True)
    if len(summary) > _PROBLEMS_SHOWN:
        more = len(summary) - _PROBLEMS_SHOWN
        tell(context, f"... and {more} more kinds: see the documents asset's metadata", warning=True)
    return dg.MetadataValue.md("\n".join(f"- {line}" for line in summary) or "none")


def graph_settings(config: GraphConfig, prompts: PromptSet = DEFAULT_PROMPTS) -> GraphSettings:
    """How the graph is built, from the step's config; the concept settings only for the fast and lazy methods (the
    noun-phrase graph)."""
    concepts = config.method != "standard"
    options = config.model_dump(
        exclude={"method", "entity_types", "max_failed_unit_fraction", "concept_max_unit_fraction", "concept_phrases"}
    )
    return GraphSettings(
        **options,
        entity_types=tuple(config.entity_types),
        concept_max_unit_fraction=config.concept_max_unit_fraction if concepts else None,
        concept_phrases=config.concept_phrases if concepts else "names",
        prompts=prompts,
    )


@corpus_asset("ingest", deps=["tuned_prompts"], prompts=INDEX_PROMPTS)
def index_prompts(
    context: dg.AssetExecutionContext, config: IndexPromptsConfig, corpora: CorporaResource, duckdb: DuckDBStoreResource
) -> dg.MaterializeResult:
    """The prompts the corpus's index is built with: the files in prompts/, the corpus's tuned prompts when chosen,
    and the corpus's own files in data/<corpus>/prompts/ over both. Its version changes when any prompt does, which
    marks what was extracted, summarized and reported with them stale."""
    corpus = context.partition_key
    choice, tuned = chosen_prompts(Step(context, duckdb), config.prompts)
    try:
        rows = pl.DataFrame(index_prompt_rows(tuned, corpora.folder(corpus) / PROMPTS_FOLDER, f"data/{corpus}"))
    except PromptFileError as problem:
        raise step_failure(f"{problem}; fix or remove the file and index again", retryable=False) from None
    replaced = rows.filter(pl.col("source") != "default")
    tell(context, f"prompts: {choice}" + (f"; replaced: {', '.join(replaced['id'])}" if len(replaced) else ""))
    diffs = "\n\n".join(
        f"**{row['id']}** ({row['source']})\n\n```diff\n{prompt_diff(row['id'], row['template'])}```"
        for row in replaced.iter_rows(named=True)
    )
    return Step(context, duckdb).publish(
        "index_prompts",
        rows,
        engine="none",
        settings=IndexPromptsConfig(prompts=choice),
        metadata={
            "prompts": choice,
            "replaced": dg.MetadataValue.md(
                markdown_table(replaced, ["id", "source", "sha"], rows=len(replaced)).value
                if len(replaced)
                else "none: every prompt is the file in prompts/"
            ),
            "diff_against_defaults": dg.MetadataValue.md(diffs or "_(no differences)_"),
        },
    )


def chosen_prompts(step: Step, prompts: str) -> tuple[str, dict[str, str]]:
    """The prompt choice ("last" is what the last run chose) and the corpus's tuned templates when it is "tuned"."""
    corpus = step.corpus
    with step.duckdb.get_connection() as conn:
        last = (last_settings(conn, "index_prompts", corpus) or {}).get("prompts", "default")
        choice = last if prompts == "last" else prompts
        has_tuned = choice == "tuned" and table_exists(conn, "tuned_prompts")
        tuned = read_table(conn, "tuned_prompts", corpus) if has_tuned else None
    if choice == "tuned" and (tuned is None or tuned.is_empty()):
        raise step_failure(
            f"prompts=tuned, but corpus {corpus!r} has no tuned prompts: run `graphrag-assets tune --corpus {corpus}` "
            "(or materialize tuned_prompts in the prompt_tuning group), then index again",
            retryable=False,
        )
    return choice, dict(zip(tuned["id"], tuned["template"])) if tuned is not None else {}


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "entities",
            deps=["base_text_units", "index_prompts"],
            code_version=code_version(*EXTRACTION_PROMPTS, "summarize_descriptions"),
            kinds={"duckdb"},
            description="Entities merged by exact name, with summarized descriptions.",
        ),
        dg.AssetSpec(
            "relationships",
            deps=["base_text_units", "index_prompts"],
            code_version=code_version(*EXTRACTION_PROMPTS, "summarize_descriptions"),
            kinds={"duckdb"},
            description="Relationships merged by (source, target); weight sums strengths.",
        ),
    ],
    partitions_def=corpus_partitions,
    group_name="graph",
    pool=MODEL_POOL,
    check_specs=[
        dg.AssetCheckSpec(
            "relationship_endpoints_are_entities",
            asset="relationships",
            description="Every relationship's source and target is an extracted entity.",
        ),
        dg.AssetCheckSpec(
            "entities_found",
            asset="entities",
            blocking=True,
            description="A corpus with text yields entities; an empty graph stops the run here.",
        ),
    ],
)
def entity_graph(
    context: dg.AssetExecutionContext,
    config: GraphConfig,
    chat: ChatModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
):
    step = Step(context, duckdb)
    plan = step.plan(corpora, chat)
    if plan.imported:
        yield from _imported_graph(step, plan.imported)
        return
    concepts = config.method != "standard"  # the noun-phrase graph: no client, so not one request, not even a probe
    graph, usage, tokens = extracted_graph(step, config, chat, concepts)
    fail_if_graph_incomplete(step, graph, (chat, usage), config.max_failed_unit_fraction)
    engine = f"nlp ({config.method} method)" if concepts else chat.engine
    yield from publish_graph(step, graph, engine, (chat, usage), config)
    yield relationship_endpoints_are_entities(graph.entities, graph.relationships)
    yield entities_found(tokens, graph.entities)


def extracted_graph(step: Step, config: GraphConfig, chat: ChatModelResource, concepts: bool):
    """(the graph, what it paid, the text units' tokens). A function of its own so that the corpus's text is let go
    before the graph is written: held through the write, it took 1,223 -> 1,137 MiB of the step at 50 MB of text."""
    units, prompts = step.read("base_text_units"), step.prompts()

    def build(client):
        progress = step_progress(step.context, "text units extracted", len(units), client)
        return build_entity_graph(client, units, graph_settings(config, prompts), progress=progress)

    graph, usage = (run_interruptibly(build(None)), None) if concepts else step.run_model(chat, build)
    return graph, usage, int(units["n_tokens"].sum())


def publish_graph(step: Step, graph: GraphBuild, engine: str, paid: tuple, config: GraphConfig):
    """The entities (with what the model's replies were worth) and the relationships."""
    top = top_rows(graph.entities, ["degree", "frequency"])
    yield step.publish(
        "entities",
        graph.entities,
        engine=engine,
        paid=paid,
        quality=graph_quality(config.method, graph),
        settings=config,
        metadata={"top_entities_by_degree": markdown_table(top, ENTITY_PREVIEW)},
    )
    strongest = top_rows(graph.relationships, ["weight"])
    yield step.publish(
        "relationships",
        graph.relationships,
        engine=engine,
        settings=config,
        metadata={"sample": markdown_table(strongest, ["source", "target", "weight", "description"])},
    )


def fail_if_graph_incomplete(step: Step, graph: GraphBuild, paid: tuple, limit: float) -> None:
    """Too many text units with no valid extraction, or descriptions with no valid summary, fail the step."""
    extraction, summaries = graph.extraction, graph.summaries
    step.fail_if_too_many_failed("text units", len(extraction.failed_units), extraction.units, paid, limit)
    summarized = summaries.summarized + summaries.failed
    step.fail_if_too_many_failed("description summaries", summaries.failed, summarized, paid, limit)


def graph_quality(method: str, graph: GraphBuild) -> dict:
    """What extraction and summaries made of the model's replies: for the metadata and the lineage row."""
    return {
        "index_method": method,
        **graph.extraction.as_metadata(),
        "summarized_descriptions": graph.summaries.summarized,
        "joined_descriptions": graph.summaries.joined,
        "failed_summaries": graph.summaries.failed,
        **graph.pruned,
    }


def _imported_graph(step: Step, imported):
    """A Microsoft GraphRAG output's entities and relationships, as it wrote them, with the same checks."""
    entities, relationships = from_graphrag(imported, imported_index.graph)
    yield step.publish_imported("entities", entities, imported)
    yield step.publish_imported("relationships", relationships, imported)
    yield relationship_endpoints_are_entities(entities, relationships, imported=True)
    yield entities_found(int(step.read("base_text_units", without=("text",))["n_tokens"].sum()), entities)


def entities_found(tokens: int, entities: pl.DataFrame) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name="entities_found",
        asset_key="entities",
        passed=bool(len(entities) or not tokens),
        metadata={"entities": len(entities), "input_tokens": tokens},
    )


def relationship_endpoints_are_entities(
    entities: pl.DataFrame, relationships: pl.DataFrame, imported: bool = False
) -> dg.AssetCheckResult:
    """Our extraction makes an entity of every endpoint, so a dangling one is an error. An imported index is kept
    as its tool wrote it (Microsoft GraphRAG's own test index has 84 such relationships): a warning, and the
    graph's steps leave those relationships out of the entity graph."""
    titles = set(entities["title"])
    named = entities["title"].implode()
    endpoints = relationships["source"].is_in(named) & relationships["target"].is_in(named)
    dangling = sorted({t for t in (*relationships["source"], *relationships["target"]) if t not in titles})
    return dg.AssetCheckResult(
        check_name="relationship_endpoints_are_entities",
        asset_key="relationships",
        passed=not dangling,
        severity=dg.AssetCheckSeverity.WARN if imported else dg.AssetCheckSeverity.ERROR,
        description="imported as written; these relationships are no edges of the entity graph"
        if dangling and imported
        else None,
        metadata={
            "dangling_endpoints": len(dangling),
            "relationships_with_a_dangling_endpoint": int((~endpoints).sum()),
            "examples": ", ".join(dangling[:10]) or "none",
        },
    )


@corpus_asset("graph", deps=["entities"], prompts=("resolve_entities",), model=True)
def entity_aliases(
    context: dg.AssetExecutionContext,
    config: AliasConfig,
    chat: ChatModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """Names of one entity, linked to a canonical entity instead of merged: undo one by rejecting it in the
    corpus folder's aliases.csv (entity,canonical,action with action add or reject)."""
    step = Step(context, duckdb)
    entities, plan = step.read("entities", without=("text_unit_ids",)), step.plan(corpora, chat)
    candidates = alias_method.candidate_pairs(entities, config.min_name_overlap) if plan.looks_for_aliases else None
    usage = None
    if candidates is None or candidates.is_empty():
        table = frame("entity_aliases")
    elif plan.aliases_by_model:
        calls = -(-len(candidates) // config.batch_size)
        context.log.info(f"{len(candidates)} candidate alias pairs: {calls} model calls")
        verdicts, usage = step.run_model(
            chat,
            lambda client: alias_method.confirm_by_model(client, candidates, entities, config.batch_size),
            batches=False,
        )
        table = alias_method.aliases_by_model(candidates, verdicts)
    else:
        table = alias_method.aliases_by_rule(candidates)
    overrides, problems = alias_method.read_overrides(corpora.folder(step.corpus))
    table, unknown = alias_method.apply_overrides(table, overrides, entities)
    for problem in problems + unknown:
        context.log.warning(problem)
    metadata = alias_metadata(table, entities, len(overrides), problems + unknown)
    return step.publish("entity_aliases", table, engine=chat.engine, paid=(chat, usage), metadata=metadata)


def alias_metadata(table: pl.DataFrame, entities: pl.DataFrame, overrides: int, problems: list[str]) -> dict:
    groups = alias_method.alias_groups(table)
    titles = dict(zip(entities["id"], entities["title"], strict=True))
    return {
        "candidate_pairs": len(table),
        "accepted": table["accepted"].sum(),
        "alias_groups": len(groups),
        "groups": dg.MetadataValue.md(
            "\n".join(f"- {titles[c]}: {', '.join(titles[v] for v in vs)}" for c, vs in groups.items()) or "_none_"
        ),
        "overrides": overrides,
        "override_problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems) or "none"),
    }


@corpus_asset("graph", deps=["base_text_units", "index_prompts"], prompts=CLAIM_PROMPTS, model=True)
def covariates(
    context: dg.AssetExecutionContext,
    config: ClaimsConfig,
    chat: ChatModelResource,
    corpora: CorporaResource,
    duckdb: DuckDBStoreResource,
) -> dg.MaterializeResult:
    """Claims about entities (subject, object, type, status, dates, quote), one LLM pass per text unit."""
    step = Step(context, duckdb)
    plan = step.plan(corpora, chat)
    if plan.imported:
        return step.publish_imported(
            "covariates", from_graphrag(plan.imported, imported_index.covariates), plan.imported
        )
    if plan.claims_skipped_because:
        return step.publish_skipped("covariates", COVARIATE_COLUMNS, chat.engine, plan.claims_skipped_because)
    units, prompts = step.read("base_text_units"), step.prompts()

    def work(client):
        progress = step_progress(context, "text units searched for claims", len(units), client)
        specs = tuple(config.entity_specs)
        return extract_claims(client, units, specs, config.claim_description, config.max_gleanings, progress, prompts)

    (claims, stats), usage = step.run_model(chat, work)
    limit, paid = config.max_failed_unit_fraction, (chat, usage)
    step.fail_if_too_many_failed("text units", len(stats.failed_units), stats.units, paid, limit)
    return step.publish(
        "covariates",
        claims,
        engine=chat.engine,
        paid=paid,
        quality=stats.as_metadata(),
        metadata={
            "claims_by_status": dg.MetadataValue.json(dict(Counter(claims["status"]).most_common())),
            "sample": markdown_table(claims, ["subject_id", "type", "status", "description"]),
        },
    )


@corpus_asset("graph", deps=["base_text_units", "entities", "relationships", "covariates"])
def text_units(context: dg.AssetExecutionContext, duckdb: DuckDBStoreResource) -> dg.MaterializeResult:
    """Text units with the ids of the entities, relationships and claims extracted from each."""
    return Step(context, duckdb).publish_query(
        "text_units",
        LINKED_TEXT_UNITS,
        engine="none",
        measures={"units_without_entities": "count_if(len(entity_ids) = 0)"},
        sized_by=LINKED_TEXT_UNITS_BYTES,
    )
