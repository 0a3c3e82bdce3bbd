"""Chunking documents into text units, the unit of extraction and of provenance."""

from __future__ import annotations

import hashlib
from collections import Counter

import pandas as pd

from ..defaults import CHUNK_OVERLAP, CHUNK_SIZE
from ..schema import columns
from .tokens import DEFAULT_ENCODING, chunk_text

TEXT_UNIT_COLUMNS = columns("base_text_units")


def text_unit_id(source: str, text: str, occurrence: int) -> str:
    """Named by where the text comes from and what it says, not by its document's version or its position.

    A document's id is its content hash, and a chunk's index moves when text before it is cut differently:
    either in the id would give every chunk of an edited document a new id, and everything built on the
    chunks (descriptions, contexts, reports) would change with it. `occurrence` tells apart identical
    chunks of one source.
    """
    return hashlib.sha256(f"{source}\x00{occurrence}\x00{text}".encode()).hexdigest()


def chunk_documents(
    documents: pd.DataFrame, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP, encoding: str = DEFAULT_ENCODING
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return (text_units, documents with a text_unit_ids column)."""
    rows = []
    ids_by_document: dict[str, list[str]] = {}
    occurrences: Counter[tuple[str, str]] = Counter()
    for document in documents.itertuples(index=False):
        ids = ids_by_document.setdefault(document.id, [])
        source = f"{document.source_path}\x00{document.title}"  # several documents can share a CSV or JSONL file
        for chunk in chunk_text(document.text, size, overlap, encoding):
            occurrences[source, chunk.text] += 1
            unit_id = text_unit_id(source, chunk.text, occurrences[source, chunk.text])
            ids.append(unit_id)
            rows.append(
                {
                    "id": unit_id,
                    "text": chunk.text,
                    "n_tokens": chunk.n_tokens,
                    "document_id": document.id,
                    "chunk_index": chunk.index,
                }
            )
    documents = documents.copy()
    documents["text_unit_ids"] = [ids_by_document.get(doc_id, []) for doc_id in documents["id"]]
    return pd.DataFrame(rows, columns=TEXT_UNIT_COLUMNS), documents
