"""Prompts are editable text files in prompts/; their hash versions everything built with them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DEFAULT_PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"


_prompts_dir = DEFAULT_PROMPTS_DIR


def use_prompts_dir(folder: str | Path) -> None:
    """Read the prompt files from `folder` instead of prompts/ (settings.py does, for GRAPHRAG_PROMPTS_DIR)."""
    global _prompts_dir
    _prompts_dir = Path(folder)


def prompts_dir() -> Path:
    return _prompts_dir


@dataclass(frozen=True)
class Prompt:
    name: str
    template: str

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.template.encode()).hexdigest()[:12]

    def format(self, **values: object) -> str:
        # str.format would trip over the braces of JSON examples inside prompts.
        text = self.template
        for key, value in values.items():
            text = text.replace("{" + key + "}", str(value))
        return text


@lru_cache(maxsize=64)
def _load(path: Path, mtime_ns: int) -> Prompt:
    return Prompt(path.stem, path.read_text(encoding="utf-8"))


def load_prompt(name: str) -> Prompt:
    path = prompts_dir() / f"{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {path} is missing")
    return _load(path, path.stat().st_mtime_ns)


@dataclass(frozen=True)
class PromptSet:
    """The prompts an index is built with: the files in prompts/, but for those this set replaces (a corpus's tuned
    prompts, or its own files). Passed to the operations that extract, summarize and report."""

    replaced: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, templates: dict[str, str]) -> PromptSet:
        return cls(tuple(sorted(templates.items())))

    def __getitem__(self, name: str) -> Prompt:
        template = dict(self.replaced).get(name)
        return load_prompt(name) if template is None else Prompt(name, template)


DEFAULT_PROMPTS = PromptSet()


def user_message(name: str, **values: object) -> list[dict]:
    """The prompt `name` filled in with `values`, as the one user message of a chat request."""
    return [{"role": "user", "content": load_prompt(name).format(**values)}]


def prompts_version(*names: str) -> str:
    """One short hash over several prompts, for an asset's code version."""
    digest = hashlib.sha256("".join(load_prompt(name).sha for name in names).encode())
    return digest.hexdigest()[:12]
