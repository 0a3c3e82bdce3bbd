"""The names one GraphRAG deployment takes in a Dagster project.

This repository's project has no prefix: its assets, ops, resources, jobs, sensors and schedule have their bare
names (`entities`, `duckdb`, `index_corpus`). A dg component instance has one (`support`): its asset keys sit under
it (`support/entities`) and every other name starts with it (`support__duckdb`, `support__index_corpus`), so two
instances, or an instance and the platform's own `documents` asset or `duckdb` resource, never collide. The tables
in each instance's store keep the bare names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import dagster as dg

SEPARATOR = "__"
PREFIX = re.compile(r"[a-z][a-z0-9_]{0,39}")


def bare(name: str) -> str:
    """An op's, job's or resource's name without its instance's prefix."""
    return name.rpartition(SEPARATOR)[2]


@dataclass(frozen=True)
class InstanceNames:
    prefix: str = ""

    def __post_init__(self):
        if self.prefix and (not PREFIX.fullmatch(self.prefix) or SEPARATOR in self.prefix or self.prefix[-1] == "_"):
            raise ValueError(
                f"{self.prefix!r} cannot prefix an instance's names: use lowercase letters, digits and single "
                "underscores, starting with a letter (at most 40)"
            )

    def name(self, bare_name: str) -> str:
        """An op's, resource's, job's, sensor's or partition set's name in this instance."""
        return f"{self.prefix}{SEPARATOR}{bare_name}" if self.prefix else bare_name

    def key(self, asset: str) -> dg.AssetKey:
        return dg.AssetKey([self.prefix, asset]) if self.prefix else dg.AssetKey(asset)

    def group(self, group: str) -> str:
        return f"{self.prefix}_{group}" if self.prefix else group

    def owns(self, key: dg.AssetKey) -> bool:
        return key.path[:-1] == ([self.prefix] if self.prefix else [])

    @classmethod
    def of(cls, op_name: str) -> InstanceNames:
        """The instance a running op belongs to, from its name."""
        return cls(op_name.rpartition(SEPARATOR)[0])


DEFAULT = InstanceNames()
