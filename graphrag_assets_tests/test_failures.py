"""A failed run says why in one line, whether its step's code raised or its step's process died."""

import os

import dagster as dg
import pytest

from graphrag_assets.failures import failure_message

from .conftest import open_instance


@dg.op
def dies() -> None:
    os._exit(9)  # as a step process killed for its memory, or by a signal, ends: no exception, no traceback


@dg.op
def raises() -> None:
    raise ValueError("the endpoint said: 503 Service Unavailable")


@dg.job(executor_def=dg.multiprocess_executor)
def dying_job():
    dies()


@dg.job(executor_def=dg.multiprocess_executor)
def raising_job():
    raises()


@pytest.mark.slow  # two runs of step processes: 20 s
def test_a_run_whose_step_process_died_says_so_in_its_one_line(tmp_path):
    (tmp_path / "dagster.yaml").write_text("")
    with open_instance(tmp_path) as instance:
        died = dg.execute_job(dg.reconstructable(dying_job), instance=instance)
        raised = dg.execute_job(dg.reconstructable(raising_job), instance=instance)
        assert not died.success and not raised.success
        line = failure_message(died)
        assert "dies" in line and "exit" in line.lower() and "before any step ran" not in line, line
        assert failure_message(raised).startswith("raises: ValueError: the endpoint said: 503 Service Unavailable")
