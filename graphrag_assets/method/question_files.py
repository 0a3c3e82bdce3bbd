"""Questions a user brings instead of generating them: BenchmarkQED's question files, JSON Lines, or CSV.

BenchmarkQED's format is a JSON list of objects with `question_id`, `question_text` and, where present,
`assertions` (objects with `statement`, `score` and `rank`). A JSON Lines file holds one such object per line; a
CSV file needs a `question_text` or `question` column (an `assertions` column, if any, holds them as JSON).
Fields this project does not use are kept, as JSON, in the `metadata` column.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import polars as pl

QUESTION_CLASSES = ("data_local", "data_global", "activity_local", "activity_global")
QUESTION_SUFFIXES = (".json", ".jsonl", ".csv")
UNCLASSIFIED = "unclassified"
_USED = {"question_id", "id", "question_text", "question", "assertions", "question_class", "class"}


class QuestionFileError(ValueError):
    """A question file that cannot be used as it is: the message names the file and the entry."""


def question_files(folder: Path) -> list[Path]:
    """The question files in a corpus's questions folder, sorted (hidden files ignored)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in QUESTION_SUFFIXES and not p.name.startswith("."))


def read_question_files(paths: list[Path]) -> pl.DataFrame:
    """Every question of every file, in file order: id, question, question_class, assertions (JSON: statement,
    score, rank), metadata (JSON) and source (the file's name). Raises QuestionFileError on the first problem."""
    rows, seen = [], {}
    for path in paths:
        for number, entry in _entries(path):
            row = _question(path, number, entry)
            if row["id"] in seen:
                raise QuestionFileError(
                    f"{path}: entry {number}: question_id {row['id']!r} is used twice (first in {seen[row['id']]})"
                )
            seen[row["id"]] = f"{path.name}, entry {number}"
            rows.append(row)
    if not rows:
        raise QuestionFileError(f"{', '.join(map(str, paths))}: no questions found")
    return pl.DataFrame(rows)


def _entries(path: Path) -> list[tuple[int, object]]:
    """(entry number from 1, entry) for each question of the file."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as spreadsheet programs write, is fine
    except UnicodeDecodeError as error:
        raise QuestionFileError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise QuestionFileError(f"{path}: cannot be read ({error.strerror})") from None
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise QuestionFileError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
        if isinstance(data, dict) and isinstance(data.get("questions"), list):
            data = data["questions"]
        if not isinstance(data, list):
            raise QuestionFileError(f"{path}: expected a list of question objects (BenchmarkQED's format)")
        return list(enumerate(data, start=1))
    if suffix == ".jsonl":
        entries = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entries.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise QuestionFileError(f"{path}: line {number}: not valid JSON ({error.msg})") from None
        return entries
    reader = csv.DictReader(io.StringIO(text))
    try:
        records = list(reader)
    except csv.Error as error:
        raise QuestionFileError(f"{path}: not a readable CSV file ({error})") from None
    columns = reader.fieldnames or []
    if not {"question_text", "question"} & set(columns):
        raise QuestionFileError(f"{path}: no question_text or question column (columns: {', '.join(columns)})")
    entries = []
    for number, record in enumerate(records, start=1):
        if None in record:  # csv puts the fields past the header's under None
            raise QuestionFileError(f"{path}: row {number} has more fields than the header has columns")
        record = {column: value or "" for column, value in record.items()}  # a short row's missing fields: empty
        if record.get("assertions"):
            try:
                record["assertions"] = json.loads(record["assertions"])
            except json.JSONDecodeError:
                raise QuestionFileError(f"{path}: row {number}: the assertions column is not a JSON list") from None
        else:
            record.pop("assertions", None)
        entries.append((number, record))
    return entries


def _question(path: Path, number: int, entry: object) -> dict:
    def problem(what: str) -> QuestionFileError:
        named = entry.get("question_id") if isinstance(entry, dict) else None
        return QuestionFileError(f"{path}: entry {number}{f' ({named})' if named else ''}: {what}")

    if not isinstance(entry, dict):
        raise problem(f"expected an object with question_text, got {type(entry).__name__}")
    text = entry.get("question_text", entry.get("question"))
    if not isinstance(text, str) or not text.strip():
        raise problem("no question_text (a non-empty string)")
    identifier = entry.get("question_id", entry.get("id"))
    if identifier in (None, ""):
        identifier = hashlib.sha256(text.strip().encode()).hexdigest()[:24]
    elif not isinstance(identifier, (str, int)) or isinstance(identifier, bool):
        raise problem(f"question_id must be a string or a number, not {type(identifier).__name__}")
    return {
        "id": str(identifier),
        "question": text.strip(),
        "question_class": _question_class(path, entry.get("question_class", entry.get("class")), problem),
        "assertions": json.dumps(_assertions(entry.get("assertions"), problem)),
        "metadata": json.dumps({k: v for k, v in entry.items() if k not in _USED}, default=str),
        "source": path.name,
    }


def _question_class(path: Path, given: object, problem) -> str:
    """The entry's class, else the one its file's name says (BenchmarkQED writes a file per class)."""
    if given not in (None, ""):
        normal = str(given).strip().lower().replace("-", "_").replace(" ", "_")
        if normal not in QUESTION_CLASSES:
            raise problem(f"question_class {given!r} is not one of {', '.join(QUESTION_CLASSES)}")
        return normal
    stem = path.stem.lower().replace("-", "_")
    return next((c for c in QUESTION_CLASSES if c in stem), UNCLASSIFIED)


def _assertions(given: object, problem) -> list[dict]:
    if given in (None, ""):
        return []
    if not isinstance(given, list):
        raise problem("assertions must be a list")
    assertions = []
    for place, item in enumerate(given, start=1):
        item = {"statement": item} if isinstance(item, str) else item
        statement = item.get("statement") if isinstance(item, dict) else None
        if not isinstance(statement, str) or not statement.strip():
            raise problem(f"assertion {place} has no statement (a non-empty string)")
        score = item.get("score", 1)
        if isinstance(score, bool) or not isinstance(score, (int, float)) or score < 0:
            raise problem(f"assertion {place}'s score must be a number of at least 0, not {score!r}")
        rank = item.get("rank")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):
            raise problem(f"assertion {place}'s rank must be a whole number, not {rank!r}")
        assertions.append({"statement": statement.strip(), "score": float(score), "rank": rank})
    return assertions
