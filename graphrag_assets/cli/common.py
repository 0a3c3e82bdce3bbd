"""What every command shares: the project and the instance a command runs in, the Definitions it launches, and
the user's errors."""

import contextlib
import functools
import io
import logging
import os
import shutil
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class UserError(Exception):
    """Something the user can fix; printed as one paragraph, without a traceback."""


def project_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds a Dagster workspace.yaml: the project a command is run in."""
    return next((folder for folder in (start, *start.parents) if (folder / "workspace.yaml").is_file()), None)


def enter_project() -> None:
    """Run from the project's root, wherever inside it the command was typed.

    The store, the cache, the corpora and the instance's storage are paths relative to the project
    (.graphrag/, data/, dagster.yaml's .dagster/): run from a sub-folder they would name other, empty places.
    """
    here = Path.cwd()
    root = project_root(here)
    if root is not None and root != here:
        print(f"note: using the project at {root}", file=sys.stderr)
        os.chdir(root)


class _WithoutConfigNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No dagster instance configuration file")


@functools.cache
def dagster_instance():
    import dagster as dg
    from dagster_shared.telemetry import get_or_set_instance_id

    from ..automation.runs import fail_runs_of_dead_processes

    # The project's dagster.yaml is the instance config unless the user points DAGSTER_HOME elsewhere.
    os.environ.setdefault("DAGSTER_HOME", str(Path.cwd() if (Path.cwd() / "dagster.yaml").is_file() else REPO))
    home = Path(os.environ["DAGSTER_HOME"])
    if not (home / "dagster.yaml").is_file():
        # Dagster says so in a warning per instance and, the first time, a telemetry banner: one line instead.
        print(
            f"note: DAGSTER_HOME {home} has no dagster.yaml, so Dagster's defaults apply; copy the project's "
            f"{REPO / 'dagster.yaml'} there for its settings (run queue, retries, no telemetry)",
            file=sys.stderr,
        )
        logging.getLogger("dagster").addFilter(_WithoutConfigNotice())
        with contextlib.redirect_stderr(io.StringIO()):
            get_or_set_instance_id()
    instance = dg.DagsterInstance.get()
    for run_id, pid in fail_runs_of_dead_processes(instance):
        print(f"note: run {run_id} was left STARTED by process {pid}, which is gone; marked failed", file=sys.stderr)
    return instance


CODE_LOCATION = "graphrag_assets"  # workspace.yaml and pyproject.toml's [tool.dg.project] name it so


def run_tags() -> dict:
    """Who runs this run (a later command fails it if this process dies without saying so), and where its job
    lives: the UI lists a job's runs by this label, which runs launched from the UI get from their origin."""
    from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
    from dagster._core.storage.tags import REPOSITORY_LABEL_TAG

    from ..automation.runs import HOST_TAG, PID_TAG

    return {
        PID_TAG: str(os.getpid()),
        HOST_TAG: socket.gethostname(),
        REPOSITORY_LABEL_TAG: f"{SINGLETON_REPOSITORY_NAME}@{CODE_LOCATION}",
    }


# The instance chosen with --instance in a dg project: its project's root, defs.yaml and attributes (empty: this
# repository's own project, by GRAPHRAG_ variables).
_CHOSEN: dict = {}


def use_instance(name: str) -> None:
    """Point the command at one GraphRAG instance of the dg project it runs in: its store, corpora and endpoint
    become the GRAPHRAG_ variables, before anything reads them, and its jobs are the ones launched."""
    from ..instance_files import dg_project_root, instance_environment, instances

    root = dg_project_root(Path.cwd())
    if root is None:
        raise UserError(
            f"--instance {name}: {Path.cwd()} is in no dg project (a pyproject.toml with [tool.dg]); run it in the "
            "project that holds the instance's defs.yaml, or leave --instance out for this repository's project"
        )
    found = instances(root)
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise UserError(f"--instance {name}: the project at {root} has no GraphRAG instance of that name ({known})")
    where, attributes = found[name]
    os.chdir(root)
    os.environ.update(instance_environment(attributes, root))
    _CHOSEN.update(root=root, where=where, attributes=attributes)


@functools.cache
def definitions():
    """The Definitions the command launches runs of: this repository's, or the chosen instance's."""
    if not _CHOSEN:
        from ..definitions import defs

        return defs
    import pydantic

    from ..components import GraphRAG
    from ..project import graphrag_definitions

    try:
        component = GraphRAG.model_validate(_CHOSEN["attributes"])
    except pydantic.ValidationError as problem:
        mistakes = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in problem.errors())
        raise UserError(f"{_CHOSEN['where']}: {mistakes}") from None
    return graphrag_definitions(component.settings(_CHOSEN["root"]))


def instance_names():
    from ..naming import InstanceNames

    return InstanceNames(_CHOSEN.get("attributes", {}).get("key_prefix", ""))


def resource(name: str):
    return definitions().resources[instance_names().name(name)]


def command_name() -> str:
    """This command as a user can type it again: by name where the shell finds it, else by its path."""
    found = shutil.which("graphrag-assets")
    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0].endswith("graphrag-assets") else None
    if found and (here is None or Path(found).resolve() == here):
        return "graphrag-assets"
    return str(here) if here else f"{sys.executable} -m graphrag_assets.cli"
