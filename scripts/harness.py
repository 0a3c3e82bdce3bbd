"""What every benchmark shares: the registry entry of a command, figures of a child process measured from outside
(its wall time and peak memory), this process's peak memory, and the quiet run config.

A benchmark's figures depend on the machine, so each prints them as a ratio to a baseline measured in the same run;
a figure of memory is the peak resident set of a process that did only the work measured, so the work runs in a
child of its own (run_child) and the child prints its other figures as one JSON object on its last line.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}  # a materialize's run config: errors only


@dataclass(frozen=True)
class Benchmark:
    """One command of scripts/benchmark.py: its name, one line of help, its arguments (argparse's add_argument
    parameters), and what it runs ("module:function", imported only when the command is chosen, called with the
    parsed arguments)."""

    name: str
    help: str
    run: str
    arguments: tuple[tuple[tuple[str, ...], dict], ...] = ()


def argument(*flags: str, **options) -> tuple[tuple[str, ...], dict]:
    return flags, options


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_in_child(name: str, *arguments: object, **options) -> dict:
    """One of children.py's children, with its arguments (see run_child for the options and what it returns)."""
    return run_child([str(Path(__file__).with_name("children.py")), name, *map(str, arguments)], **options)


def run_child(
    arguments: list[str], *, cwd: Path = REPO, env: dict | None = None, check: bool = True, python: str = sys.executable
) -> dict:
    """Run `python <arguments>` (a script, or "-c" and code; `python` may name another interpreter) and return the
    JSON object it printed last, with its wall time (`wall_s`) and peak memory (`peak_rss_mib`) measured from
    outside: the child's own resource usage from wait4, so a child needs no code of its own to report them (a
    figure it prints itself wins). A failed child ends the benchmark with its last error line, or with check=False
    gives {"failed": line, ...}."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        child = subprocess.Popen([python, *arguments], cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        measured = {"wall_s": time.perf_counter() - started, "peak_rss_mib": usage.ru_maxrss / 1024}
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode:
        last = (stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1][:300]
        if check:
            raise SystemExit(f"a benchmark child failed: {last}\n{stderr[-3000:]}")
        return {"failed": last, **measured}
    lines = stdout.strip().splitlines()
    return {**measured, **(json.loads(lines[-1]) if lines else {})}
