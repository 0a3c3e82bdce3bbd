"""Step failures that say whether trying again can help.

Dagster's run retries re-run any run whose step failed. That is right for a dropped endpoint and
wasted for a bad config, a bad corpus or a refused key, which fail the same way every time. A
failure that retrying cannot fix tags its run so the retry daemon leaves it alone, and bypasses
op retry policies.
"""

from __future__ import annotations

import dagster as dg
from dagster._core.errors import DagsterInvariantViolationError

# Read by Dagster's run-retry daemon when it decides whether to retry a run that failed in a step.
NO_RUN_RETRY_TAG = "dagster/retry_on_asset_or_op_failure"


def step_failure(description: str, *, retryable: bool, metadata: dict | None = None) -> dg.Failure:
    if not retryable:
        try:
            context = dg.OpExecutionContext.get()
        except DagsterInvariantViolationError:
            context = None  # called outside a step (a test of the method): nothing to tag
        if context is not None:
            context.instance.add_run_tags(context.run_id, {NO_RUN_RETRY_TAG: "false"})
    return dg.Failure(description=description, metadata=metadata, allow_retries=retryable)


def failure_message(result) -> str:
    """Why a run failed, in one line: the first failed step's own message (the user code's exception, not Dagster's
    wrapper), how many other steps failed, or, when no step failed, what the run's own failure event says (a step
    process that crashed, a run that could not start). `result`: what execute_in_process or execute_job returned."""
    failures = result.get_step_failure_events()
    if not failures:
        return _run_failure(result)
    data = failures[0].step_failure_data
    more = f" (and {len(failures) - 1} more steps failed)" if len(failures) > 1 else ""
    if data.user_failure_data and data.user_failure_data.description:
        return f"{failures[0].step_key}: {data.user_failure_data.description}{more}"
    error = data.error
    while error is not None and error.cause is not None:  # the user code's exception, not Dagster's wrapper
        error = error.cause
    if error is not None and error.cls_name == "ChildProcessCrashException":
        # The step's process died (killed for its memory, a signal): the executor's own event says how.
        return f"{failures[0].step_key}: {_crash(result, failures[0].step_key)}{more}"
    message = error.message.strip() if error else "failed"
    return f"{failures[0].step_key}: {message}{more} (run again with --verbose for the traceback)"


def _crash(result, step_key: str) -> str:
    for event in result.all_events:
        if event.event_type_value == "ENGINE_EVENT" and event.step_key == step_key and "exited" in event.message:
            return event.message.strip()
    return "its process ended without an error of its own (killed, or out of memory)"


def _run_failure(result) -> str:
    """What a run that failed outside its steps' code says: a crashed step process, an engine error."""
    said = []
    for event in result.all_events:
        if event.event_type_value in ("ENGINE_EVENT", "RUN_FAILURE") and event.message:
            error = getattr(event.event_specific_data, "error", None)
            if error is not None or event.event_type_value == "RUN_FAILURE":
                said.append(event.message.strip() + (f": {error.message.strip()}" if error is not None else ""))
    useful = [line for line in said if "Execution of run" not in line] or said
    return useful[0] if useful else "the run failed before any step ran"
