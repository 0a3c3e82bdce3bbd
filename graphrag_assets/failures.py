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
