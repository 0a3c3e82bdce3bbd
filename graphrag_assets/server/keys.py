"""Who may ask a shared server: API keys with a name, the corpora each may read and its rate of questions.

The keys file holds no key, only its SHA-256 (`graphrag-assets key NAME` makes a key and prints its entry):

    keys:
      - name: support-bot
        sha256: 5e88...          # of the key the bot sends as `Authorization: Bearer <key>`
        corpora: [handbook]      # or "*" (the default): every corpus
        per_minute: 120          # questions a minute; the server's --rate when left out
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter


class KeysFileError(ValueError):
    """The keys file cannot be used as it is."""


@dataclass(frozen=True)
class Caller:
    """Who asks: a key's name (or "local" on a server without keys) and the corpora it may read (None: all)."""

    name: str
    corpora: frozenset[str] | None = None
    per_minute: int | None = None

    def may_read(self, corpus: str) -> bool:
        return self.corpora is None or corpus in self.corpora


LOCAL = Caller("local")


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    def __init__(self, entries: dict[str, Caller]):
        self._by_digest = entries

    def __len__(self) -> int:
        return len(self._by_digest)

    @classmethod
    def load(cls, path: str | Path) -> KeyRing:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as problem:
            raise KeysFileError(f"cannot read the keys file {path}: {problem}") from None
        entries = loaded.get("keys") if isinstance(loaded, dict) else None
        if not isinstance(entries, list) or not entries:
            raise KeysFileError(f"the keys file {path} has no `keys:` list (make an entry with `graphrag-assets key`)")
        ring: dict[str, Caller] = {}
        for number, entry in enumerate(entries, 1):
            if not isinstance(entry, dict) or not entry.get("name") or not entry.get("sha256"):
                raise KeysFileError(f"{path}: key {number} needs a name and the sha256 of its key")
            if "key" in entry:
                raise KeysFileError(f"{path}: key {entry['name']!r} holds a key in clear: keep only its sha256")
            corpora = entry.get("corpora", "*")
            per_minute = entry.get("per_minute")
            if per_minute is not None and (not isinstance(per_minute, int) or per_minute < 1):
                raise KeysFileError(f"{path}: key {entry['name']!r} has per_minute {per_minute!r}: use a whole number")
            ring[str(entry["sha256"]).lower()] = Caller(
                str(entry["name"]),
                None if corpora == "*" else frozenset(corpora if isinstance(corpora, list) else [corpora]),
                per_minute,
            )
        return cls(ring)

    def find(self, presented: str) -> Caller | None:
        """The caller a presented key belongs to, compared in constant time."""
        wanted = digest(presented)
        for known, caller in self._by_digest.items():
            if hmac.compare_digest(known, wanted):
                return caller
        return None


def new_key_entry(name: str, corpora: list[str], per_minute: int | None) -> tuple[str, str]:
    """A new key, and the keys-file entry that stands for it."""
    key = "gra-" + secrets.token_urlsafe(32)
    entry = {"name": name, "sha256": digest(key), "corpora": "*" if corpora == ["*"] else corpora}
    if per_minute:
        entry["per_minute"] = per_minute
    return key, yaml.safe_dump({"keys": [entry]}, sort_keys=False)


class RateLimits:
    """Questions a minute per caller, in a moving window; a local server without keys is not limited."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def retry_after(self, caller: Caller) -> int | None:
        """None when the caller may ask now (and counts the question); else the seconds to wait."""
        if caller is LOCAL:
            return None
        item = RateLimitItemPerMinute(caller.per_minute or self.per_minute)
        if self._limiter.hit(item, caller.name):
            return None
        reset = self._limiter.get_window_stats(item, caller.name).reset_time
        return max(1, math.ceil(reset - time.time()))
