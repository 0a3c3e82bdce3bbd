"""Runs whose process died (SIGKILL, out of memory, a restart) are marked failed instead of STARTED for good.

`graphrag-assets` runs jobs in its own process and tags each run with its PID and host. Run
monitoring cannot see such a process, so the CLI (at every start) and the `abandoned_runs_sensor`
(in the daemon) look for runs of this host whose process is gone, and fail them with the reason.
"""

import os
import socket

import dagster as dg

from ..assets.publication import discard_failed_stage
from ..instance import renamed_resources
from ..naming import DEFAULT, InstanceNames
from ..resources import PUBLISHED_INDEX, DuckDBStoreResource

PID_TAG = "graphrag/pid"
HOST_TAG = "graphrag/host"
_UNFINISHED = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def fail_runs_of_dead_processes(instance: dg.DagsterInstance) -> list[tuple[str, int]]:
    """Fail this host's unfinished CLI runs whose process is gone; returns (run id, pid) of each."""
    host = socket.gethostname()
    failed = []
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=_UNFINISHED, tags={HOST_TAG: host}))
    for run in runs:
        pid = int(run.tags.get(PID_TAG, "0") or 0)
        if pid and pid != os.getpid() and not _alive(pid):
            instance.report_run_failed(
                run,
                message=(
                    f"the process that ran this run (pid {pid} on {host}) is gone: killed or crashed. Run it again; "
                    "model replies it received are cached and will not be paid for twice"
                ),
            )
            failed.append((run.run_id, pid))
    return failed


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Marks failed the graphrag-assets CLI runs of this host whose process died.",
)
def abandoned_runs_sensor(context: dg.SensorEvaluationContext):
    failed = fail_runs_of_dead_processes(context.instance)
    for run_id, pid in failed:
        context.log.warning(f"run {run_id}: process {pid} is gone; marked failed")
    return dg.SkipReason(f"{len(failed)} abandoned run(s) marked failed")


def failed_stages_sensor_for(names: InstanceNames = DEFAULT) -> dg.SensorDefinition:
    publishing_step = names.name(PUBLISHED_INDEX)

    def failed_stages_sensor(context: dg.RunFailureSensorContext, duckdb: DuckDBStoreResource):
        run = context.dagster_run
        plan = (
            context.instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
            if run.execution_plan_snapshot_id
            else None
        )
        if plan is None or not any(step.key == publishing_step for step in plan.steps):
            return  # the run staged nothing in this instance's store (a question, one asset by hand, another instance)
        with duckdb.get_connection() as conn:
            stage = discard_failed_stage(conn, context.instance, context.dagster_run)
        if stage:
            context.log.info(f"dropped {stage}, staged by failed run {context.dagster_run.run_id}")

    return dg.run_failure_sensor(
        name=names.name("failed_stages_sensor"),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Drops the staged tables and exports of an index run that failed with no retry to follow.",
    )(renamed_resources(failed_stages_sensor, names, ("duckdb",)))


failed_stages_sensor = failed_stages_sensor_for()
