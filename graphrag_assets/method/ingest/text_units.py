"""Chunking documents into text units, the unit of extraction and of provenance."""

from __future__ import annotations

import hashlib

import pandas as pd

from .tokens import DEFAULT_ENCODING, chunk_text

TEXT_UNIT_COLUMNS = ["id", "text", "n_tokens", "document_id", "chunk_index"]


def text_unit_id(document_id: str, chunk_index: int, text: str) -> str:
    return hashlib.sha256(f"{document_id}:{chunk_index}:{text}".encode()).hexdigest()


def chunk_documents(
    documents: pd.DataFrame, size: int = 600, overlap: int = 100, encoding: str = DEFAULT_ENCODING
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return (text_units, documents with a text_unit_ids column)."""
    rows = []
    ids_by_document: dict[str, list[str]] = {}
    for document in documents.itertuples(index=False):
        ids = ids_by_document.setdefault(document.id, [])
        for chunk in chunk_text(document.text, size, overlap, encoding):
            unit_id = text_unit_id(document.id, chunk.index, chunk.text)
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
