"""docs/settings.md, written from the configs themselves: `python -m graphrag_assets.settings_reference`. A test
holds the file equal to what this writes, so the reference cannot fall behind the code."""

from __future__ import annotations

import inspect
import json
import re
import sys
import typing
from pathlib import Path

import dagster as dg
from pydantic_core import PydanticUndefined

from .configs import evaluation, index, queries
from .settings import STATE_DIR

GROUPS = (("The index", index), ("Query methods", queries), ("Evaluation and prompt tuning", evaluation))
DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def steps_by_config() -> dict[type, list[str]]:
    """Each config class and the steps (assets) that take it, from the project's definitions."""
    from .definitions import defs

    steps: dict[type, list[str]] = {}
    for asset in defs.assets or []:
        for parameter in inspect.signature(asset.op.compute_fn.decorated_fn).parameters.values():
            kind = parameter.annotation
            if isinstance(kind, type) and issubclass(kind, dg.Config) and not issubclass(kind, dg.ConfigurableResource):
                steps.setdefault(kind, []).append(asset.op.name)
    return steps


def _default(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    shown = json.dumps(value, ensure_ascii=False)
    # A default under the state folder is shown as the variable that moves it, not as this machine's value.
    return f"`{shown.replace(STATE_DIR, '$GRAPHRAG_HOME') if isinstance(value, str) else shown}`"


def _type(annotation) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " or ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    if typing.get_origin(annotation) is not None:  # list[str], int | None
        return re.sub(r"\b(?:typing|[a-z_]+(?:\.[a-z_]+)+)\.", "", str(annotation))
    return annotation.__name__


def reference() -> str:
    steps = steps_by_config()
    lines = [
        "# Launch-time settings",
        "",
        "Every setting a run of a step takes: in the launchpad, in a run config as `ops.<step>.config.<setting>`, "
        "and from the CLI as `--set <step>.<setting>=<value>`. The query methods take the same settings as options "
        "of `graphrag-assets ask`, the HTTP API and MCP. Written by `python -m graphrag_assets.settings_reference` "
        "from `graphrag_assets/configs/`; do not edit it by hand. `$GRAPHRAG_HOME` is `.graphrag` unless the "
        "variable is set.",
    ]
    for title, module in GROUPS:
        lines += ["", f"## {title}", "", inspect.getdoc(module).split("\n\n")[0].replace("\n", " ")]
        for config in vars(module).values():
            if not isinstance(config, type) or config not in steps or config.__module__ != module.__name__:
                continue
            names = ", ".join(f"`{step}`" for step in sorted(steps[config]))
            lines += ["", f"### {names} ({config.__name__})", "", "| setting | type | default | what it does |"]
            lines.append("| --- | --- | --- | --- |")
            for name, field in config.model_fields.items():
                description = (field.description or "").replace("|", "\\|")
                lines.append(f"| `{name}` | {_type(field.annotation)} | {_default(field)} | {description} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    DOCUMENT.write_text(reference())
    sys.stdout.write(f"wrote {DOCUMENT}\n")
