"""What a corpus folder (data/<corpus>/) may hold besides its documents, named in one place: the ingest step skips
these, and the steps that read them find them here."""

from __future__ import annotations

import re
from pathlib import Path

# A corpus's name is a folder's and a partition's: fullmatch, since "$" would let a trailing newline in.
SAFE_CORPUS_NAME = re.compile(r"[a-z0-9][a-z0-9_\-]{0,63}")

ALIASES_FILE = "aliases.csv"  # entity,canonical,action: aliases added or rejected by hand (graph/aliases.py)
PROMPTS_FOLDER = "prompts"  # <name>.txt: the corpus's own prompt, in place of the file in prompts/
QUESTIONS_FOLDER = "questions"  # evaluation questions, read by evaluation_questions and never indexed
# A Microsoft GraphRAG output to import instead of documents: in the folder itself or in its output/
GRAPHRAG_OUTPUT_TABLES = ("entities", "communities", "community_reports")


def graphrag_output(folder: Path) -> Path | None:
    """The folder holding a GraphRAG output inside a corpus folder, or None when the corpus is plain documents."""
    for candidate in (folder, folder / "output"):
        if all((candidate / f"{name}.parquet").is_file() for name in GRAPHRAG_OUTPUT_TABLES):
            return candidate
    return None


def is_document(root: Path, path: Path) -> bool:
    """Whether a file under the corpus folder `root` is one of its documents (not hidden, not one of the above)."""
    parts = path.relative_to(root).parts
    if any(part.startswith(".") for part in parts) or path.relative_to(root).as_posix() == ALIASES_FILE:
        return False
    return not (len(parts) > 1 and parts[0] in (QUESTIONS_FOLDER, PROMPTS_FOLDER))
