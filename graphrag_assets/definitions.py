"""The one Definitions object of this repository's project: its corpora folder (GRAPHRAG_DATA_DIR, data/) as the
documents, everything else from the environment (settings.py). A dg component builds its own the same way
(project.py).

With no GRAPHRAG_API_BASE and no GRAPHRAG_API_KEY, the offline engine runs every step.
"""

from __future__ import annotations

from .automation.jobs import estimate_assets, evaluation_assets, index_assets, query_assets, tuning_assets
from .project import ProjectSettings, graphrag_definitions

__all__ = ["defs", "estimate_assets", "evaluation_assets", "index_assets", "query_assets", "tuning_assets"]

defs = graphrag_definitions(ProjectSettings())
