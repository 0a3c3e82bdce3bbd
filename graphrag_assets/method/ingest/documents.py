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
from collections import Counter
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from ..corpus_folder import is_document
from ..schema import frame
from .conversion import CONVERSION_VERSION, CONVERTED_SUFFIXES, MB, ConversionError, Limits, convert_file, headings

TABULAR_SUFFIXES = (".csv", ".jsonl", ".json", ".parquet")  # a document per row (or object)
SUPPORTED_SUFFIXES = (".txt", ".md", *TABULAR_SUFFIXES, *CONVERTED_SUFFIXES)
_BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    skipped: bool = True

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def problem_summary(problems: list[Problem], kinds: int = 20, places: int = 3) -> list[str]:
    """The problems grouped by what is wrong, most frequent first: one line for each kind, with how many there are
    and the first few places. However many rows of a file are bad, the summary stays a few lines."""
    groups: dict[str, list[str]] = {}
    for problem in problems:
        groups.setdefault(problem.message, []).append(problem.path)
    lines = []
    for message, paths in sorted(groups.items(), key=lambda group: -len(group[1]))[:kinds]:
        where = ", ".join(paths[:places]) + (f" and {len(paths) - places:,} more" if len(paths) > places else "")
        lines.append(f"{where}: {message}" if len(paths) == 1 else f"{len(paths):,} times ({where}): {message}")
    if len(groups) > kinds:
        rest = sum(len(paths) for message, paths in groups.items()) - sum(
            len(paths) for _, paths in sorted(groups.items(), key=lambda group: -len(group[1]))[:kinds]
        )
        lines.append(f"and {len(groups) - kinds:,} more kinds of problem ({rest:,} problems)")
    return lines


@dataclass(frozen=True)
class TabularColumns:
    """Which columns (fields) of a CSV, JSON, JSONL or parquet file hold the text, the title and extra metadata."""

    text: str = "text"
    title: str | None = "title"
    metadata: tuple[str, ...] = ()


_CHUNKED = ("text_unit_ids",)  # known only once the documents are chunked


@dataclass
class CorpusReadResult:
    documents: pl.DataFrame
    problems: list[Problem] = field(default_factory=list)
    files: dict[str, Counter] = field(default_factory=dict)  # by file type: files read and skipped, documents

    @property
    def files_read(self) -> int:
        return sum(counts["read"] for counts in self.files.values())

    @property
    def documents_read(self) -> int:
        return sum(counts["documents"] for counts in self.files.values())


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
    # Lines end at "\n" alone: str.splitlines() also cuts at U+2028, U+0085 and other separators that JSON strings
    # may hold raw, which would split one valid object in two.
    for line_number, line in enumerate(text.split("\n"), start=1):
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


def _rows_from_json(text: str, relative: str) -> tuple[list[dict], list[Problem]]:
    """One object, or an array of objects: the form public GraphRAG benchmark corpora are published in."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return [], [Problem(relative, f"invalid JSON ({err.msg} at line {err.lineno}), file skipped")]
    if isinstance(value, dict):
        return [value], []
    if not isinstance(value, list):
        return [], [Problem(relative, f"holds a JSON {type(value).__name__}, not an object or an array of objects")]
    rows, problems = [], []
    for number, item in enumerate(value, start=1):
        if isinstance(item, dict):
            rows.append(item)
        else:
            problems.append(Problem(f"{relative}#{number}", "array entry is not a JSON object, skipped"))
    return rows, problems


_PARQUET_BATCH_ROWS = 1024
_JSON_KINDS = {int: "a number", float: "a number", bool: "true or false", list: "a list", dict: "an object"}


def _rows_from_parquet(path: Path, relative: str, columns: TabularColumns) -> Iterator[dict | Problem]:
    """The file's rows, a batch at a time and only the columns the documents need: a large file is never whole in
    memory. A Problem, when the file is unreadable or lacks the text column."""
    try:
        table = pq.ParquetFile(path)
        names = table.schema_arrow.names
    except Exception as err:  # noqa: BLE001 - pyarrow raises several kinds for a damaged file
        yield Problem(relative, f"not a readable parquet file ({err}), skipped")
        return
    if columns.text not in names:
        yield Problem(relative, f"no text column {columns.text!r} (columns found: {', '.join(names)}), file skipped")
        return
    wanted = [c for c in dict.fromkeys([columns.text, columns.title, *columns.metadata]) if c in names]
    try:
        for batch in table.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=wanted):
            yield from batch.to_pylist()
    except Exception as err:  # noqa: BLE001
        yield Problem(relative, f"stopped reading at a damaged part of the file ({err}); the rows before it were read")


def _tabular_documents(
    rows: Iterable[dict | Problem], relative: str, columns: TabularColumns, single: bool = False
) -> tuple[list[dict], list[Problem]]:
    """A document per row with a text; `single`: the file is one object, so it is named by the file."""
    documents, problems, found, missing = [], [], set(), []
    for number, row in enumerate(rows, start=1):
        if isinstance(row, Problem):
            problems.append(row)
            continue
        found.update(row)
        where = relative if single else f"{relative}#{number}"
        body = row.get(columns.text)
        if body is None:
            missing.append(where)
        elif not isinstance(body, str):
            kind = _JSON_KINDS.get(type(body), type(body).__name__)
            problems.append(Problem(where, f"{columns.text!r} is {kind}, not a string; skipped"))
        elif not body.strip():
            problems.append(Problem(where, f"empty {columns.text!r}, skipped"))
        else:
            title = row.get(columns.title) if columns.title else None
            metadata = {name: row.get(name) for name in columns.metadata if name in row}
            documents.append({"title": str(title) if title else where, "text": body, "metadata": metadata})
    if found and columns.text not in found:
        kind = "field" if single else "column"
        problems.append(
            Problem(relative, f"no text {kind} {columns.text!r} ({kind}s found: {', '.join(sorted(found))}), skipped")
        )
    else:
        problems.extend(Problem(where, f"no {columns.text!r}, skipped") for where in missing)
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
    folder: str | Path,
    columns: TabularColumns = TabularColumns(),
    keep_boilerplate: bool = False,
    limits: Limits | None = None,
    conversions: MutableMapping | None = None,
) -> CorpusReadResult:
    """Read every supported file below `folder` (sorted, hidden files ignored) into one row per document (see
    corpus_records)."""
    result = CorpusReadResult(frame("documents", without=_CHUNKED))
    records = list(corpus_records(folder, result, columns, keep_boilerplate, limits, conversions))
    result.documents = frame("documents", records, without=_CHUNKED)
    return result


def corpus_records(
    folder: str | Path,
    result: CorpusReadResult,
    columns: TabularColumns = TabularColumns(),
    keep_boilerplate: bool = False,
    limits: Limits | None = None,
    conversions: MutableMapping | None = None,
) -> Iterator[dict]:
    """Each document below `folder` as a record of the documents table, as it is read (files sorted, hidden files
    ignored); `result` collects what was wrong and the counts by file type. The documents of one file come one after
    another.

    Project Gutenberg's licence header and footer are left out of plain-text documents unless `keep_boilerplate`:
    they would otherwise become entities and communities of their own. `conversions` (a mapping, such as a
    diskcache.Cache) keeps converted office and PDF files by content, so an unchanged file is not converted again."""
    root, limits = Path(folder), limits or Limits()
    if not root.is_dir():
        raise FileNotFoundError(f"corpus folder {root} does not exist")
    resolved_root = root.resolve()
    seen: dict[str, str] = {}
    for path in sorted(_document_files(root)):
        relative = path.relative_to(root).as_posix()
        suffix = path.suffix.lower()
        counts = result.files.setdefault(suffix or "(none)", Counter())
        refusal = _refusal(path, relative, resolved_root, suffix, limits)
        if refusal:
            result.problems.append(Problem(relative, refusal))
            counts["skipped"] += 1
            continue
        documents, problems = _file_documents(path, relative, suffix, columns, keep_boilerplate, limits, conversions)
        result.problems.extend(problems)
        if documents is None or not documents and problems:  # nothing could be read from it: refused, not read
            counts["skipped"] += 1
            continue
        counts["read"] += 1
        for document in documents:
            where = relative if document["title"] == path.name else f"{relative} ({document['title']})"
            result.problems.extend(_encodable(document, where))
            doc_id = document_id(document["text"])
            if doc_id in seen:
                result.problems.append(Problem(relative, f"duplicate of {seen[doc_id]} (same content), skipped"))
                continue
            seen[doc_id] = relative if document["title"] == path.name else document["title"]
            counts["documents"] += 1
            yield {
                "id": doc_id,
                "title": document["title"],
                "text": document["text"],
                "source_path": relative,
                "metadata": json.dumps(document["metadata"], sort_keys=True, default=str),
                "outline": json.dumps(document["outline"]) if document.get("outline") else None,
            }


_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(document: dict, where: str) -> list[Problem]:
    """Lone surrogates (which JSON escapes such as `\\ud800` can produce) replaced by U+FFFD in the document's text
    and title: UTF-8 cannot hold them, so neither can the store, a hash, a model request or an export."""
    problems = []
    for name in ("text", "title"):
        value = document[name]
        if isinstance(value, str) and _SURROGATE.search(value):
            document[name], count = _SURROGATE.subn("\ufffd", value)
            problems.append(
                Problem(where, f"{count} lone surrogate(s) in its {name} replaced by U+FFFD", skipped=False)
            )
    return problems


def _document_files(root: Path) -> Iterator[Path]:
    """The files of a corpus folder that are its documents (or would be, if they can be read): not hidden, not the
    alias overrides, not its question sets or prompt files."""
    for path in root.rglob("*"):
        if not (path.is_file() or path.is_symlink()):
            continue
        if is_document(root, path):
            yield path


def has_documents(folder: str | Path) -> bool:
    """Whether a corpus folder holds any file to index (readable or not), found without reading them all."""
    return next(_document_files(Path(folder)), None) is not None


def _refusal(path: Path, relative: str, root: Path, suffix: str, limits: Limits) -> str | None:
    """Why a path is not read at all, or None."""
    if path.is_dir():  # a linked folder: rglob does not walk into it, so its files would vanish unsaid
        return "is a link to a folder, which is not followed; link or copy its files"
    if not path.is_file():
        return "is a broken link, skipped"
    target = path.resolve()
    if root not in target.parents:
        # A link to a file elsewhere would send text the user never put in the corpus to the model.
        return f"links to {target}, outside the corpus folder; refused"
    if suffix not in SUPPORTED_SUFFIXES:
        return f"unsupported file type {suffix or '(none)'}; expected one of {', '.join(SUPPORTED_SUFFIXES)}"
    size = path.stat().st_size
    if size > limits.max_file_bytes:
        return (
            f"is {size / MB:,.1f} MB, over the limit of {limits.max_file_bytes / MB:,.0f} MB per file "
            "(max_file_mb); skipped: raise the limit or split the file"
        )
    return None


def _file_documents(
    path: Path,
    relative: str,
    suffix: str,
    columns: TabularColumns,
    keep_boilerplate: bool,
    limits: Limits,
    conversions: MutableMapping | None,
) -> tuple[list[dict] | None, list[Problem]]:
    """(the file's documents, or None when the file was skipped; what was wrong)."""
    if suffix == ".parquet":
        return _tabular_documents(_rows_from_parquet(path, relative, columns), relative, columns)
    if suffix in CONVERTED_SUFFIXES:
        return _converted_document(path, relative, limits, conversions)
    text, problems = _decode(path, relative)
    if text is None:
        return None, problems
    if suffix in TABULAR_SUFFIXES:
        rows, row_problems = {".csv": _rows_from_csv, ".jsonl": _rows_from_jsonl, ".json": _rows_from_json}[suffix](
            text, relative
        )
        documents, more = _tabular_documents(rows, relative, columns, single=suffix == ".json" and len(rows) == 1)
        return documents, problems + row_problems + more
    removed = 0
    if not keep_boilerplate:
        text, removed = strip_boilerplate(text)
    document = {"title": path.name, "text": text, "metadata": {"boilerplate_chars_removed": removed} if removed else {}}
    if suffix == ".md":
        document["outline"] = headings(text)
    return [document], problems


def _converted_document(
    path: Path, relative: str, limits: Limits, conversions: MutableMapping | None
) -> tuple[list[dict] | None, list[Problem]]:
    content = path.read_bytes()
    key = f"{CONVERSION_VERSION}:{limits.max_document_chars}:{hashlib.sha256(content).hexdigest()}"
    del content
    cached = conversions.get(key) if conversions is not None else None
    if cached is None:
        try:
            converted = convert_file(path, limits)
        except ConversionError as reason:
            return None, [Problem(relative, f"{reason}; skipped")]
        cached = asdict(converted)
        if conversions is not None:
            conversions[key] = cached
    metadata = {"format": path.suffix.lower().lstrip("."), **({"title": cached["title"]} if cached["title"] else {})}
    problems = [Problem(relative, cached["note"], skipped=False)] if cached["note"] else []
    return [{"title": path.name, "text": cached["text"], "metadata": metadata, "outline": cached["outline"]}], problems
