"""Reading a corpus folder into documents.

One bad file never sinks a corpus: every file that cannot be read becomes a
`Problem` naming the file and what is wrong with it, and the rest is read.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..graph.aliases import OVERRIDES_FILE
from ..schema import columns

SUPPORTED_SUFFIXES = (".txt", ".md", ".csv", ".jsonl")
_BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    skipped: bool = True

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class TabularColumns:
    """Which columns of a .csv or .jsonl file hold the text, the title and extra metadata."""

    text: str = "text"
    title: str | None = "title"
    metadata: tuple[str, ...] = ()


@dataclass
class CorpusReadResult:
    documents: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    files_read: int = 0


DOCUMENT_COLUMNS = [c for c in columns("documents") if c != "text_unit_ids"]  # read before chunking


def document_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _decode(path: Path, relative: str) -> tuple[str | None, list[Problem]]:
    """The file's text, and what was wrong with it. A NUL byte early on means a binary file (skipped);
    NUL bytes further in are removed, with a warning, since no text format has them."""
    raw = path.read_bytes()
    if not raw.strip():
        return None, [Problem(relative, "empty file, skipped")]
    first_nul = raw.find(b"\x00")
    if 0 <= first_nul < _BINARY_SNIFF_BYTES:
        return None, [Problem(relative, "binary file (contains NUL bytes), skipped")]
    problems = []
    if first_nul >= 0:
        nuls = raw.count(b"\x00")
        raw = raw.replace(b"\x00", b"")
        problems.append(
            Problem(
                relative,
                f"{nuls} NUL byte(s) from offset {first_nul} on were removed; the rest of the file was read",
                skipped=False,
            )
        )
    try:
        return raw.decode("utf-8-sig"), problems
    except UnicodeDecodeError as err:
        return None, problems + [
            Problem(
                relative,
                f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at offset {err.start}), skipped; re-save it as UTF-8",
            )
        ]


def _rows_from_csv(text: str, relative: str) -> tuple[list[dict], list[Problem]]:
    try:
        return list(csv.DictReader(io.StringIO(text))), []
    except csv.Error as err:
        return [], [Problem(relative, f"unreadable CSV ({err}), file skipped")]


def _rows_from_jsonl(text: str, relative: str) -> tuple[list[dict], list[Problem]]:
    rows, problems = [], []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(Problem(f"{relative}:{line_number}", f"invalid JSON ({err.msg}), line skipped"))
            continue
        if not isinstance(value, dict):
            problems.append(Problem(f"{relative}:{line_number}", "line is not a JSON object, skipped"))
            continue
        rows.append(value)
    return rows, problems


def _tabular_documents(
    text: str, relative: str, suffix: str, columns: TabularColumns
) -> tuple[list[dict], list[Problem]]:
    rows, problems = (_rows_from_csv if suffix == ".csv" else _rows_from_jsonl)(text, relative)
    if rows and not any(columns.text in row for row in rows):
        found = sorted({key for row in rows for key in row})
        return [], problems + [
            Problem(relative, f"no text column {columns.text!r} (columns found: {', '.join(found)}), file skipped")
        ]
    documents = []
    for number, row in enumerate(rows, start=1):
        body = row.get(columns.text)
        if not isinstance(body, str) or not body.strip():
            problems.append(Problem(f"{relative}#{number}", f"row has an empty {columns.text!r}, skipped"))
            continue
        title = row.get(columns.title) if columns.title else None
        metadata = {name: row.get(name) for name in columns.metadata if name in row}
        documents.append({"title": str(title) if title else f"{relative}#{number}", "text": body, "metadata": metadata})
    return documents, problems


# Project Gutenberg's own markers around a book; what lies outside them is its licence and catalogue text.
_BOOK_START = re.compile(r"^\*{3} *START OF (?:THE|THIS) PROJECT GUTENBERG E(?:BOOK|TEXT)\b.*$", re.MULTILINE | re.I)
_BOOK_END = re.compile(r"^\*{3} *END OF (?:THE|THIS) PROJECT GUTENBERG E(?:BOOK|TEXT)\b.*$", re.MULTILINE | re.I)


def strip_boilerplate(text: str) -> tuple[str, int]:
    """(the book between Project Gutenberg's START and END markers, characters left out); text without the
    markers comes back whole."""
    start, end = _BOOK_START.search(text), _BOOK_END.search(text)
    body = text[start.end() if start else 0 : end.start() if end and (not start or end.start() > start.end()) else None]
    return body.strip("\n"), len(text) - len(body.strip("\n"))


def read_corpus(
    folder: str | Path, columns: TabularColumns = TabularColumns(), keep_boilerplate: bool = False
) -> CorpusReadResult:
    """Read every supported file below `folder` (sorted, hidden files ignored) into one row per document.

    Project Gutenberg's licence header and footer are left out of plain-text documents unless `keep_boilerplate`:
    they would otherwise become entities and communities of their own."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"corpus folder {root} does not exist")
    resolved_root = root.resolve()
    problems: list[Problem] = []
    records: list[dict] = []
    seen: dict[str, str] = {}
    files_read = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        relative = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        if path.is_dir():  # a linked folder: rglob does not walk into it, so its files would vanish unsaid
            problems.append(Problem(relative, "is a link to a folder, which is not followed; link or copy its files"))
            continue
        if not path.is_file():
            problems.append(Problem(relative, "is a broken link, skipped"))
            continue
        target = path.resolve()
        if resolved_root not in target.parents:
            # A link to a file elsewhere would send text the user never put in the corpus to the model.
            problems.append(Problem(relative, f"links to {target}, outside the corpus folder; refused"))
            continue
        if relative == OVERRIDES_FILE:  # the user's alias decisions, read by the entity_aliases asset
            continue
        suffix = path.suffix.lower()
        if suffix not in SUPPORTED_SUFFIXES:
            problems.append(
                Problem(
                    relative,
                    f"unsupported file type {suffix or '(none)'}; expected one of {', '.join(SUPPORTED_SUFFIXES)}",
                )
            )
            continue
        text, file_problems = _decode(path, relative)
        problems.extend(file_problems)
        if text is None:
            continue
        files_read += 1
        if suffix in (".csv", ".jsonl"):
            documents, row_problems = _tabular_documents(text, relative, suffix, columns)
            problems.extend(row_problems)
        else:
            removed = 0
            if not keep_boilerplate:
                text, removed = strip_boilerplate(text)
            documents = [
                {
                    "title": path.name,
                    "text": text,
                    "metadata": {"boilerplate_chars_removed": removed} if removed else {},
                }
            ]
        for document in documents:
            doc_id = document_id(document["text"])
            if doc_id in seen:
                problems.append(Problem(relative, f"duplicate of {seen[doc_id]} (same content), skipped"))
                continue
            seen[doc_id] = document["title"] if suffix in (".csv", ".jsonl") else relative
            records.append(
                {
                    "id": doc_id,
                    "title": document["title"],
                    "text": document["text"],
                    "source_path": relative,
                    "metadata": json.dumps(document["metadata"], sort_keys=True, default=str),
                }
            )
    return CorpusReadResult(pd.DataFrame(records, columns=DOCUMENT_COLUMNS), problems, files_read)
