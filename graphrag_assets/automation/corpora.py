"""New corpora are found by a sensor; every corpus is re-indexed nightly.

Re-indexing is incremental by construction: every model call is cached by its full request, so an
unchanged document (same content hash, same chunks, same prompts) costs no call, an edited one is
re-extracted, a deleted one disappears from every table (each table is rebuilt per corpus from the
documents present), and only communities whose context changed get a new report.
"""

import hashlib
import json
from pathlib import Path

import dagster as dg

from ..instance import renamed_resources
from ..method.corpus_folder import ALIASES_FILE, PROMPTS_FOLDER
from ..naming import DEFAULT, InstanceNames
from ..resources import MAX_COST_TAG, ChatModelResource, CorporaResource, EmbeddingModelResource
from ..settings import RUN_BUDGET_VARIABLE, SettingRefused, run_budget
from .jobs import INDEX_JOB, index_assets

# What a change to a corpus's prompt files touches: everything built with a prompt, and all that follows.
PROMPTED_ASSETS = sorted(
    dg.AssetSelection.assets("index_prompts").downstream().resolve(index_assets), key=lambda k: k.to_user_string()
)
# What a change to a corpus's aliases.csv touches: the aliases and everything built on the resolved graph.
RESOLVED_GRAPH_ASSETS = sorted(
    dg.AssetSelection.assets("entity_aliases").downstream().resolve(index_assets), key=lambda k: k.to_user_string()
)


def budget_tags(
    chat: ChatModelResource, embeddings: EmbeddingModelResource, corpora: CorporaResource
) -> dict[str, str] | dg.SkipReason:
    """The budget tag every automatic run carries when it calls a model that is not free: the corpora's
    `run_budget_usd` (a dg component's `budget`), else GRAPHRAG_RUN_BUDGET_USD; without one, a reason to launch
    nothing, so that nothing spends unnoticed."""
    paid = [
        model
        for model in (chat, embeddings)
        if model.configured and ((price := model.settings().price()) is None or price.prompt or price.completion)
    ]
    if not paid:
        return {}  # the offline engine, or free models: nothing to spend
    try:
        budget = corpora.run_budget_usd or run_budget()
    except SettingRefused as problem:
        return dg.SkipReason(str(problem))
    if budget is None:
        names = " and ".join(repr(m.model) for m in paid)
        return dg.SkipReason(
            f"no run launched: {names} cost money, and automatic runs need a budget to spend on them: set "
            f"{RUN_BUDGET_VARIABLE} (dollars per run), or mark a free model so in GRAPHRAG_PRICES"
        )
    return {MAX_COST_TAG: str(budget)}


# The resources every automatic index run is decided with.
_DECIDED_WITH = ("corpora", "chat", "embeddings")


def _within_budget(evaluate):
    """The evaluation of a sensor or schedule that launches index runs, called only when automatic runs may spend
    (with the budget tags each run carries): without a budget for a paid model it launches nothing, and says why."""

    def decide(context, corpora: CorporaResource, chat: ChatModelResource, embeddings: EmbeddingModelResource):
        tags = budget_tags(chat, embeddings, corpora)
        if isinstance(tags, dg.SkipReason):
            return tags  # a cursor stays where it is: what is new is seen again once there is a budget
        return evaluate(context, corpora, chat, embeddings, tags)

    return decide


def _index_sensor(names: InstanceNames, name: str, description: str, evaluate) -> dg.SensorDefinition:
    return dg.sensor(
        name=names.name(name),
        job_name=names.name(INDEX_JOB),
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=description,
    )(renamed_resources(_within_budget(evaluate), names, _DECIDED_WITH))


def new_corpus_sensor_for(names: InstanceNames = DEFAULT) -> dg.SensorDefinition:
    partitions = dg.DynamicPartitionsDefinition(name=names.name("corpus"))

    def new_corpus_sensor(context: dg.SensorEvaluationContext, corpora, chat, embeddings, tags: dict):
        names_found, refused = corpora.scan()
        for folder, reason in refused.items():
            context.log.warning(f"{corpora.root}/{folder} refused: {reason}")
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [name for name in names_found if name not in known]
        if MAX_COST_TAG in tags:  # a paid model: each new corpus is estimated first, and one past the budget waits
            over = _over_budget(new, float(tags[MAX_COST_TAG]), corpora, chat, embeddings)
            for name, why in over.items():
                context.log.warning(f"{corpora.root}/{name} not indexed: {why}")
            new = [name for name in new if name not in over]
            if not new and over:
                return dg.SkipReason("; ".join(f"{name}: {why}" for name, why in over.items()))
        if not new:
            return dg.SkipReason(
                f"no new corpus folders ({len(names_found)} known"
                + (f", refused: {', '.join(sorted(refused))})" if refused else ")")
            )
        return dg.SensorResult(
            run_requests=[dg.RunRequest(partition_key=name, run_key=f"new-corpus-{name}", tags=tags) for name in new],
            dynamic_partitions_requests=[partitions.build_add_request(new)],
        )

    return _index_sensor(
        names,
        "new_corpus_sensor",
        "Registers each new corpus folder as a corpus partition and requests its index run (with a budget per run "
        "when the model is paid).",
        new_corpus_sensor,
    )


new_corpus_sensor = new_corpus_sensor_for()


def _over_budget(
    names: list[str],
    budget: float,
    corpora: CorporaResource,
    chat: ChatModelResource,
    embeddings: EmbeddingModelResource,
) -> dict[str, str]:
    """The corpora whose standard index the estimate prices above the budget (or cannot price), with why."""
    from ..assets.estimate import estimate_corpus  # reads and chunks the corpus: only when there is one to read

    over = {}
    for name in names:
        # standard's alone: the fast and lazy estimates build the corpus's graph, not work for a sensor's tick
        estimate = estimate_corpus(corpora, name, chat, embeddings, methods=("standard",))
        cost = estimate["methods"]["standard"]["cost_usd"]
        if cost is None:
            over[name] = "its cost cannot be estimated (a model with no known price): set GRAPHRAG_PRICES"
        elif cost > budget:
            over[name] = (
                f"the estimate (${cost:,.2f}) is above {RUN_BUDGET_VARIABLE} (${budget:,.2f}): raise it, or index "
                f"it by hand (graphrag-assets index --corpus {name} --estimate shows the methods and their costs)"
            )
    return over


NIGHTLY = "0 2 * * *"


def reindex_schedule(cron: str = NIGHTLY, names: InstanceNames = DEFAULT) -> dg.ScheduleDefinition:
    """The schedule that re-indexes every registered corpus (at 02:00 UTC unless a dg component sets `schedule`)."""

    def nightly_reindex(context: dg.ScheduleEvaluationContext, corpora, chat, embeddings, tags: dict):
        registered = context.instance.get_dynamic_partitions(names.name("corpus"))
        present = set(corpora.names())
        for name in sorted(set(registered) - present):
            context.log.warning(f"corpus {name!r} is no longer under {corpora.root}: not re-indexed")
        found = [name for name in registered if name in present]
        if not found:
            return dg.SkipReason(f"no registered corpus is under {corpora.root}")
        day = context.scheduled_execution_time.strftime("%Y-%m-%d")
        return [dg.RunRequest(partition_key=name, run_key=f"nightly-{name}-{day}", tags=tags) for name in found]

    return dg.schedule(
        job_name=names.name(INDEX_JOB),
        cron_schedule=cron,
        name=names.name("nightly_reindex"),
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Re-index every corpus ({cron}, UTC); unchanged documents cost no model call. A paid model "
        "needs a budget per run (GRAPHRAG_RUN_BUDGET_USD, or the component's budget).",
    )(renamed_resources(_within_budget(nightly_reindex), names, _DECIDED_WITH))


nightly_reindex = reindex_schedule()


def _aliases_digest(folder: Path) -> str:
    path = folder / ALIASES_FILE
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else ""


def _prompt_files_digest(folder: Path) -> str:
    files = sorted((folder / PROMPTS_FOLDER).glob("*.txt"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16] if files else ""


# What a sensor of changed corpus files watches: (sensor, file described, run key label, digest, what it re-runs).
_CHANGED_FILE_SENSORS = {
    "alias_overrides_sensor": (
        ALIASES_FILE,
        "aliases",
        _aliases_digest,
        RESOLVED_GRAPH_ASSETS,
        "When a corpus's aliases.csv is added, edited or removed, re-runs entity_aliases and what is built on it "
        "(communities, reports, embeddings, layouts, exports) for that corpus.",
    ),
    "prompt_files_sensor": (
        "prompt file",
        "prompts",
        _prompt_files_digest,
        PROMPTED_ASSETS,
        "When a prompt file in a corpus's prompts/ folder is added, edited or removed, re-runs index_prompts and "
        "what is built with the prompts (the graph, claims, reports and all after them) for that corpus; model "
        "calls whose prompt did not change are answered from the cache.",
    ),
}


def changed_files_sensor(sensor: str, names: InstanceNames = DEFAULT) -> dg.SensorDefinition:
    """A run of what a changed file touches (run key `label-corpus-digest`) for each registered corpus whose digest
    of the file (digest_of(folder); "" when absent) changed since the sensor's last look, which its cursor keeps."""
    what, label, digest_of, selection, description = _CHANGED_FILE_SENSORS[sensor]
    selection = [names.key(key.path[-1]) for key in selection]

    def changed_files(context: dg.SensorEvaluationContext, corpora, chat, embeddings, tags: dict):
        seen = json.loads(context.cursor) if context.cursor else {}
        present = set(corpora.names())
        registered = context.instance.get_dynamic_partitions(names.name("corpus"))
        current = {name: digest_of(corpora.folder(name)) for name in sorted(n for n in registered if n in present)}
        context.update_cursor(json.dumps(current, sort_keys=True))
        changed = [name for name, digest in current.items() if seen.get(name, "") != digest]
        if not changed:
            return dg.SkipReason(f"no {what} changed in {len(current)} corpora")
        return [
            dg.RunRequest(
                partition_key=name,
                run_key=f"{label}-{name}-{current[name] or 'removed'}",
                asset_selection=selection,
                tags=tags,
            )
            for name in changed
        ]

    return _index_sensor(names, sensor, description, changed_files)


alias_overrides_sensor = changed_files_sensor("alias_overrides_sensor")
prompt_files_sensor = changed_files_sensor("prompt_files_sensor")


def upstream_changes_sensor(upstream: list[dg.AssetKey], names: InstanceNames = DEFAULT) -> dg.SensorDefinition:
    """Re-indexes every registered corpus when an asset of the user's project that the documents come from is
    materialized again (with the budget as the guard, as every automatic run)."""

    def upstream_changes(context: dg.SensorEvaluationContext, corpora, chat, embeddings, tags: dict):
        latest = {}
        for key in upstream:
            records = context.instance.fetch_materializations(key, limit=1).records
            latest[key.to_user_string()] = records[0].storage_id if records else 0
        seen = json.loads(context.cursor) if context.cursor else {}
        context.update_cursor(json.dumps(latest, sort_keys=True))
        changed = sorted(key for key, storage_id in latest.items() if storage_id and seen.get(key) != storage_id)
        if not changed:
            return dg.SkipReason(f"no new materialization of {', '.join(sorted(latest))}")
        registered = context.instance.get_dynamic_partitions(names.name("corpus"))
        present = set(corpora.names())
        version = "-".join(str(latest[key]) for key in sorted(latest))
        return [
            dg.RunRequest(partition_key=name, run_key=f"upstream-{name}-{version}", tags=tags)
            for name in registered
            if name in present
        ] or dg.SkipReason(f"{', '.join(changed)} changed, and no registered corpus to re-index yet")

    return _index_sensor(
        names,
        "upstream_changes_sensor",
        f"Re-indexes every corpus when {', '.join(k.to_user_string() for k in upstream)}, which the documents come "
        "from, is materialized again (a paid model needs the budget per run).",
        upstream_changes,
    )
