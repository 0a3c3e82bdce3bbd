"""Chunking documents into text units, the unit of extraction and of provenance."""

from __future__ import annotations

import bisect
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from ..defaults import CHUNK_OVERLAP, CHUNK_SIZE
from ..schema import frame
from .tokens import DEFAULT_ENCODING, chunk_text


def text_unit_id(source: str, text: str, occurrence: int) -> str:
    """Named by where the text comes from and what it says, not by its document's version or its position.

    A document's id is its content hash, and a chunk's index moves when text before it is cut differently:
    either in the id would give every chunk of an edited document a new id, and everything built on the
    chunks (descriptions, contexts, reports) would change with it. `occurrence` tells apart identical
    chunks of one source.
    """
    return hashlib.sha256(f"{source}\x00{occurrence}\x00{text}".encode()).hexdigest()


def chunk_documents(
    documents: pl.DataFrame, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP, encoding: str = DEFAULT_ENCODING
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return (text_units, documents with a text_unit_ids column)."""
    rows, ids = [], []
    for _, units in chunked_documents(documents.iter_rows(named=True), size, overlap, encoding):
        ids.append([unit["id"] for unit in units])
        rows.extend(units)
    unit_ids = pl.Series("text_unit_ids", ids, dtype=pl.List(pl.String))
    return frame("base_text_units", rows), documents.with_columns(unit_ids)


def chunked_documents(
    documents: Iterable[dict], size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP, encoding: str = DEFAULT_ENCODING
) -> Iterator[tuple[dict, list[dict]]]:
    """Each document with its text units (rows of base_text_units), a document at a time. A file's documents come one
    after another (corpus_records), so what tells identical chunks of one source apart is kept for a file at a
    time, by the chunk's hash: a corpus's chunk texts are never held together."""
    occurrences: Counter[tuple[str, bytes]] = Counter()
    file = None
    for document in documents:
        if document["source_path"] != file:
            file = document["source_path"]
            occurrences.clear()
        source = f"{document['source_path']}\x00{document['title']}"  # several documents can share a CSV or JSONL file
        where = Locator(document.get("outline"))
        units = []
        for chunk in chunk_text(document["text"], size, overlap, encoding):
            seen = (source, hashlib.sha256(chunk.text.encode()).digest())
            occurrences[seen] += 1
            units.append(
                {
                    "id": text_unit_id(source, chunk.text, occurrences[seen]),
                    "text": chunk.text,
                    "n_tokens": chunk.n_tokens,
                    "document_id": document["id"],
                    "chunk_index": chunk.index,
                    **where(chunk.start, chunk.end),
                }
            )
        yield document, units


_SPOOLED_TEXT = 4 * 2**20  # characters of document text per batch written to the spool files


def chunk_to_files(
    documents: Iterable[dict],
    documents_file: Path,
    units_file: Path,
    size: int = CHUNK_SIZE,
    overlap: int = CHUNK_OVERLAP,
    encoding: str = DEFAULT_ENCODING,
) -> int:
    """The documents and their text units written to two parquet files as they are read and chunked, a batch at a
    time, so that a corpus of any size is never held whole; returns how many documents were written."""
    written, batch, units = 0, [], []
    schemas = (frame("documents").to_arrow().schema, frame("base_text_units").to_arrow().schema)
    with (
        pq.ParquetWriter(documents_file, schemas[0]) as out_documents,
        pq.ParquetWriter(units_file, schemas[1]) as out_units,
    ):

        def flush() -> None:
            if not batch:
                return
            out_documents.write_table(frame("documents", batch).to_arrow().cast(schemas[0]))
            out_units.write_table(frame("base_text_units", units).to_arrow().cast(schemas[1]))
            batch.clear()
            units.clear()

        text = 0
        for document, its_units in chunked_documents(documents, size, overlap, encoding):
            batch.append({**document, "text_unit_ids": [unit["id"] for unit in its_units]})
            units.extend(its_units)
            written, text = written + 1, text + len(document["text"])
            if text >= _SPOOLED_TEXT:
                flush()
                text = 0
        flush()
    return written


class Locator:
    """The pages (or slides) a span of a document's text covers, and a label a person can follow to it: 'pages 3-4',
    'slide 2 · Pricing', 'sheet Wages', 'Policy › Clerks'. From the outline its conversion recorded (conversion.py)."""

    def __init__(self, outline: str | list | None):
        marks = (json.loads(outline) if isinstance(outline, str) else outline) or []
        self.pages = _Marks([(offset, kind, int(label)) for offset, kind, label in marks if kind in ("page", "slide")])
        self.sections = _Marks([(offset, kind, label) for offset, kind, label in marks if kind in ("sheet", "heading")])

    def __call__(self, start: int, end: int) -> dict:
        if not self.pages.marks and not self.sections.marks:
            return {"pages": None, "location": None}
        labels, numbers = [], None
        covered = self.pages.covering(start, end)
        if covered:
            numbers = [number for _, _, number in covered]
            kind = covered[0][1]
            first, last = numbers[0], numbers[-1]
            labels.append(f"{kind} {first}" if first == last else f"{kind}s {first}-{last}")
        sections = self.sections.covering(start, end)
        if sections and sections[0][1] == "sheet":
            names = list(dict.fromkeys(label for _, _, label in sections))
            labels.append(("sheet " if len(names) == 1 else "sheets ") + ", ".join(names))
        elif sections:
            labels.append(sections[0][2])  # the heading the span opens under
        return {"pages": numbers, "location": " · ".join(labels) or None}


class _Marks:
    def __init__(self, marks: list[tuple[int, str, object]]):
        self.marks = marks
        self.offsets = [offset for offset, _, _ in marks]

    def covering(self, start: int, end: int) -> list[tuple[int, str, object]]:
        """The marks in effect over [start, end): the last at or before start, and every one after it before end."""
        first = max(0, bisect.bisect_right(self.offsets, start) - 1)
        return self.marks[first : bisect.bisect_left(self.offsets, max(end, start + 1))]
