"""How the test server misbehaves when told to: which requests, and how (chosen by a hash of the request, so a run
with faults is as deterministic as one without)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def request_key(body: bytes) -> str:
    """A request's identity, by which faults pick it."""
    return hashlib.sha256(body).hexdigest()


@dataclass
class Faults:
    """Which requests misbehave: those whose body hash is divisible by the given number (0 = none)."""

    transient_every: int = 0  # first attempt fails: 429 with Retry-After, or 500, alternately
    transient_status: int = 0  # with transient_every: always this status (429 or 500) instead of alternating
    retry_after_seconds: float = 0.05
    retry_after_in_ms: bool = False  # send retry-after-ms instead of Retry-After
    slow_every: int = 0  # first attempt answers after slow_seconds (beyond the client's timeout)
    slow_seconds: float = 3.0
    malformed_every: int = 0  # always answers text that is not in the record format
    truncated_every: int = 0  # always answers a reply cut off at max_tokens (finish_reason "length")
    garbled_every: int = 0  # first attempt: HTTP 200 whose JSON body is cut off mid-way
    refusal_every: int = 0  # always answers "I'm sorry, I can't help with that."
    wrong_kind_every: int = 0  # answers entity records to a claims prompt, claim records to an extraction prompt
    broken_every: int = 0  # always 500, with the caller's Authorization header echoed (a leaky proxy); not the probe
    heeds_corrections: bool = True  # a request that says what was wrong with the last reply gets no content fault
    hang: bool = False  # accept every request and never answer (until the server stops)
    mixed_up_batches: bool = False  # several community reports asked at once come back each on the wrong community
    status: int = 0  # answer every request with this HTTP status (401 bad key, 404 unknown model), echoing the key
    refused_kinds: frozenset[str] = frozenset()  # prompt kinds (extract, claims, report, embed, ...) always refused

    @classmethod
    def misbehaving(cls) -> Faults:
        """An endpoint with every everyday fault: 20% transient 5xx/429, about 12% HTTP 200 replies cut off at
        max_tokens or with a garbled body, and replies in prose, of the wrong record kind or refused."""
        return cls(
            transient_every=5,
            retry_after_seconds=0.01,
            truncated_every=12,
            garbled_every=25,
            malformed_every=40,
            wrong_kind_every=40,
            refusal_every=40,
        )


@dataclass
class BatchFaults:
    """How the Batch API misbehaves. Lines are picked by their body's hash; batches by the order they came in."""

    failed_line_every: int = 0  # such lines fail with HTTP 500 in the error file (on each batch they are in)
    expire_batches: int = 0  # the first N batches expire: the first half of their lines answered, the rest not
    reject_batches: int = 0  # the first N batches fail validation: status "failed", no output at all
    lose_batches: int = 0  # the first N batches are forgotten once created: retrieving them answers 404


def _picked(key: str, every: int) -> bool:
    return every > 0 and int(key[:8], 16) % every == 0
