"""Step settings from the command line: --config (a YAML file) and --set step.key=value, checked before a run."""

import re
from pathlib import Path

from .common import UserError

# Multi-assets run as one op named after their function; users think in assets.
OP_OF_ASSET = {
    "documents": "corpus_documents",
    "base_text_units": "corpus_documents",
    "entities": "entity_graph",
    "relationships": "entity_graph",
}

# Settings of one run as a whole, given without a step (--set prompts=tuned): the step that holds each.
RUN_SETTINGS = {"prompts": "index_prompts"}


def _yaml(text: str, where: str):
    """YAML, or one line saying where it is broken."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"{where} is not valid YAML{at}: {getattr(problem, 'problem', None) or problem}") from None


def step_settings(config_file: str | None, settings: list[str]) -> dict:
    """Run config from a YAML file (step settings, or a Dagster run config with ops: and resources:) and
    key=value overrides."""
    ops: dict = {}
    resources: dict = {}
    if config_file:
        try:
            text = Path(config_file).read_text()
        except OSError as problem:
            raise UserError(f"cannot read the run config {config_file}: {problem.strerror}") from None
        loaded = _yaml(text, f"the run config {config_file}") or {}
        if not isinstance(loaded, dict):
            raise UserError(f"{config_file} must hold a mapping of steps to settings")
        if {"ops", "resources"} & set(loaded):  # Dagster's run config, as the launchpad shows it
            ops = {step: dict((value or {}).get("config", {})) for step, value in (loaded.get("ops") or {}).items()}
            resources = loaded.get("resources") or {}
        else:
            ops = {step: dict(value or {}) for step, value in loaded.items()}
    for setting in settings:
        match = re.fullmatch(r"(?:(\w+)\.)?(\w+)=(.*)", setting, re.DOTALL)
        if not match or not (match.group(1) or match.group(2) in RUN_SETTINGS):
            raise UserError(
                f"--set {setting!r} is not of the form step.key=value (for example entities.max_gleanings=2)"
            )
        step, key, value = match.groups()
        step = step or RUN_SETTINGS[key]
        ops.setdefault(step, {})[key] = _yaml(value, f"the value of --set {setting!r}") if value else ""
    merged: dict = {}
    for step, values in ops.items():
        merged.setdefault(OP_OF_ASSET.get(step, step), {}).update(values)
    config = {"ops": {op: {"config": values} for op, values in merged.items()}}
    return config | ({"resources": resources} if resources else {})


def resource_settings(defs, given: dict) -> dict:
    """A run config's resource settings over what the environment configured: in run config, a resource's settings
    replace its configured ones whole, and a run would lose the endpoint it was not given again."""
    import dagster as dg

    merged = {}
    for name, value in given.items():
        resource = defs.resources.get(name)
        if resource is None:
            raise UserError(
                f"the run config sets resource {name!r}; the resources are {', '.join(sorted(defs.resources))}"
            )
        configured = {
            field: {"env": v.env_var_name} if isinstance(v, dg.EnvVar) else v  # the key stays a variable's name
            for field, v in resource._get_non_default_public_field_values().items()
        }
        merged[name] = {"config": {**configured, **((value or {}).get("config") or {})}}
    return merged


def check_settings(job, run_config: dict) -> None:
    """Refuse a setting out of its range (a negative count, a zero where one is needed) in one line, before a run
    is launched: Dagster's own check knows the settings' types, not their ranges, which each step's config
    class checks when the step starts."""
    import typing

    import pydantic

    for op, values in run_config.get("ops", {}).items():
        node = job.graph.node_dict.get(op)
        function = getattr(getattr(node.definition, "compute_fn", None), "decorated_fn", None) if node else None
        config_class = typing.get_type_hints(function).get("config") if function else None
        if (
            config_class is None
            or not isinstance(config_class, type)
            or not issubclass(config_class, pydantic.BaseModel)
        ):
            continue
        try:
            config_class(**(values or {}).get("config", {}))
        except pydantic.ValidationError as problem:
            first = problem.errors()[0]
            name = ".".join(str(part) for part in first["loc"])
            given = f" {first['input']!r}" if "input" in first and not isinstance(first["input"], dict) else ""
            raise UserError(f"the setting {op}.{name}{given} is refused: {first['msg']}") from None
