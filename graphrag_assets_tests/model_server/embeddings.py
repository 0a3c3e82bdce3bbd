"""The test server's embeddings: deterministic vectors in which texts that share words are near."""

from __future__ import annotations

import hashlib
import re


def embedding(text: str, dimensions: int) -> list[float]:
    """Hashed bag of words, normalised: texts sharing words get similar vectors."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z]+", text.lower()):
        h = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
        vector[h % dimensions] += 1.0 if (h >> 16) % 2 else -1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]
