"""Running a job of the project in this process, as the UI's runs are recorded, and the store it writes."""

from pathlib import Path

from .common import UserError, dagster_instance, definitions, instance_names, run_tags
from .step_settings import check_settings, resource_settings


def logging_config(verbose: bool) -> dict:
    return {"loggers": {"console": {"config": {"log_level": "INFO" if verbose else "CRITICAL"}}}}


def open_store(read_only: bool = True):
    """The configured store; a local DuckDB file is opened once no run of ours holds it."""
    from ..settings import DATABASE, DUCKLAKE_DATA_PATH
    from ..store.connection import connect, connect_when_free, is_local_file

    if is_local_file(DATABASE):
        database = Path(DATABASE).resolve()
        if not database.exists():
            raise UserError(f"there is no store at {database} yet: run `graphrag-assets index` first")
        return connect_when_free(database, read_only=read_only)
    return connect(DATABASE, data_path=DUCKLAKE_DATA_PATH, read_only=read_only)


def interrupted(result) -> bool:
    """Whether the run ended because the user pressed Ctrl-C (or the process was asked to stop)."""
    for failure in result.get_step_failure_events():
        error = failure.step_failure_data.error
        while error is not None:
            if error.cls_name == "DagsterExecutionInterruptedError":
                return True
            error = error.cause
    return False


def execute(job_name: str, corpus: str, run_config: dict, verbose: bool, tags: dict[str, str] | None = None):
    import dagster as dg

    from ..settings import DATABASE
    from ..store.connection import connect_when_free, is_local_file

    if is_local_file(DATABASE) and Path(DATABASE).exists():
        connect_when_free(Path(DATABASE).resolve()).close()
    defs, names = definitions(), instance_names()
    job_name = names.name(job_name)
    job = defs.resolve_job_def(job_name)
    run_config = {
        section: {names.name(key): value for key, value in run_config[section].items()}
        for section in ("ops", "resources")
        if section in run_config
    } | {key: value for key, value in run_config.items() if key not in ("ops", "resources")}
    run_config = _merged(job.get_run_config_for_partition_key(corpus), run_config)  # the job's own defaults under
    check_settings(job, run_config)
    if run_config.get("resources"):
        run_config = {**run_config, "resources": resource_settings(defs, run_config["resources"])}
    try:
        return job.execute_in_process(
            instance=dagster_instance(),
            partition_key=corpus,
            raise_on_error=False,
            run_config={**logging_config(verbose), **run_config},
            tags={**run_tags(), **(tags or {})},
        )
    except dg.DagsterInvalidConfigError as problem:
        details = "; ".join(error.message.split(" Expected")[0].rstrip(".") for error in problem.errors)
        steps = ", ".join(sorted(job.graph.node_dict))
        raise UserError(f"the settings are not valid for {job_name}: {details}. Steps of this job: {steps}") from None


def _merged(defaults: dict, given: dict) -> dict:
    """`given` over `defaults`, mapping by mapping: a setting given replaces that setting, not its step's others."""
    merged = dict(defaults)
    for key, value in given.items():
        both = isinstance(value, dict) and isinstance(defaults.get(key), dict)
        merged[key] = _merged(defaults[key], value) if both else value
    return merged
