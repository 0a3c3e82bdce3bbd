"""Requests answered by the Batch API (OpenAI's and Azure OpenAI's) at half the price, within a day.

The operations stay as they are: they ask the client for one reply at a time, concurrently. In batch mode the
client's requests that miss the cache gather here; when no new one has come for `gather_seconds` (every text
unit's extraction has been asked, say), they go out as one batch, and the askers wait for its output. A round
that depends on the last one's replies (gleaning round 2, the next level of reports) gathers as the next batch,
so the number of batches follows the method's rounds, not its requests.

- Every batch is recorded (`BatchLedger`, DuckDB in the index) before it is waited on. A step that died or is
  retried finds the batches that cover its requests and waits for them again instead of submitting twice.
- Lines that failed or expired go into the next batch; a round of fewer chat requests than `min_requests`, or a
  request on its third batch, is sent one request at a time instead. A batch that failed validation is not sent
  again as a batch.
- Replies are returned to the client, which checks them exactly as it checks synchronous replies before caching:
  an invalid reply is asked for again, and so gathers into the next batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import openai
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from ..method.ingest.tokens import count_tokens
from .endpoint import BatchLedger, BatchSettings
from .errors import EndpointError

_PENDING = "creating-"  # a recorded batch's id until the endpoint has given it one
_KEY = "graphrag_batch_key"  # the metadata field that finds a batch whose creation was not recorded
# A batch's status once nothing more will happen to it; its output then holds whatever was answered.
FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})
_ATTEMPTS_IN_BATCHES = 2  # after the second batch a request still unanswered is sent on its own
SEND_NOW = object()  # what a waiter gets when its request is to be sent synchronously instead


@dataclass
class _Request:
    kind: str  # "chat" or "embed"
    body: dict
    waiters: list[asyncio.Future] = field(default_factory=list)


class BatchQueue:
    """Gathers requests into batches, submits and records them, and hands each asker its response body."""

    def __init__(
        self,
        api: openai.AsyncOpenAI,
        endpoint: str,
        ledger: BatchLedger,
        settings: BatchSettings,
        usage: Any,
        azure: bool = False,
    ):
        """`usage` (the client's Usage) counts batches, reattached batches, failed lines and time waited."""
        self._api = api
        self.usage = usage
        self._endpoint = endpoint  # base URL and model: which recorded batches are ours
        self._ledger = ledger
        self._settings = settings
        self._paths = {"chat": "/chat/completions", "embed": "/embeddings"}
        if not azure:  # Azure's batch lines and batches name the path without the version
            self._paths = {kind: "/v1" + path for kind, path in self._paths.items()}
        self._labels = dict(ledger.labels)
        self._pending: dict[str, _Request] = {}
        self._last_asked = 0.0
        self._gatherer: asyncio.Task | None = None
        self._work: set[asyncio.Task] = set()
        self._tried: Counter[str] = Counter()  # batches each request (custom id) went out in
        # Requests a batch answered whose askers have not yet checked and cached the reply, by batch: the batch is
        # consumed (never waited for again) only once none is left, so a step that dies first reads it again.
        self._unsettled: dict[str, set[str]] = {}

    @staticmethod
    def custom_id(kind: str, body: dict) -> str:
        return hashlib.sha256(json.dumps([kind, body], sort_keys=True).encode()).hexdigest()

    async def ask(self, kind: str, body: dict) -> dict | object:
        """The response body of this request once its batch is done, or SEND_NOW: send it yourself."""
        future = asyncio.get_running_loop().create_future()
        custom_id = self.custom_id(kind, body)
        self._pending.setdefault(custom_id, _Request(kind, body)).waiters.append(future)
        self._last_asked = time.monotonic()
        if self._gatherer is None or self._gatherer.done():
            self._gatherer = asyncio.create_task(self._gather())
        return await future

    async def _gather(self) -> None:
        while self._pending:
            quiet = time.monotonic() - self._last_asked
            if quiet < self._settings.gather_seconds:
                await asyncio.sleep(self._settings.gather_seconds - quiet)
                continue
            round_, self._pending = self._pending, {}
            for kind in ("chat", "embed"):
                requests = {cid: r for cid, r in round_.items() if r.kind == kind}
                if requests:
                    task = asyncio.create_task(self._answer(kind, requests))
                    self._work.add(task)
                    task.add_done_callback(self._work.discard)

    async def _answer(self, kind: str, requests: dict[str, _Request]) -> None:
        try:
            for recorded in self._ledger.unfinished(self._endpoint, list(requests)):
                if recorded["batch_id"].startswith(_PENDING):  # its process died while creating it
                    recorded = await self._created(recorded)
                    if recorded is None:
                        continue
                self.usage.batches_reattached += 1
                self._ledger.progress(f"waiting again for batch {recorded['batch_id']}, submitted by an earlier run")
                outcome = await self._outcome(recorded)
                self._hand_out(requests, outcome, recorded["batch_id"])
            while requests:
                # A request that already went out in two batches (a re-ask of an invalid reply included) goes alone.
                alone = [cid for cid in requests if self._tried[cid] >= _ATTEMPTS_IN_BATCHES]
                # An embedding request already carries hundreds of texts: one is worth a batch.
                if kind == "chat" and len(requests) - len(alone) < self._settings.min_requests:
                    alone = list(requests)
                self.usage.batch_sent_alone += len(alone)
                for custom_id in alone:
                    _resolve(requests.pop(custom_id), SEND_NOW)
                if not requests:
                    return
                batch = await self._submit(kind, requests)
                outcome = await self._outcome(batch)
                if outcome.rejected:  # the batch as a whole failed validation: a second one would too
                    self._ledger.progress(f"batch {batch['batch_id']} failed: {outcome.rejected}; sending alone")
                    for custom_id in requests:
                        self._tried[custom_id] = _ATTEMPTS_IN_BATCHES
                self._hand_out(requests, outcome, batch["batch_id"])
        except BaseException as error:  # the askers must not wait for a batch that will never come
            for request in requests.values():
                for waiter in request.waiters:
                    if not waiter.done():
                        waiter.set_exception(error if isinstance(error, Exception) else asyncio.CancelledError())
            if not isinstance(error, Exception):
                raise
            # The askers raise it, each in its own step; nobody awaits this task, which would only add "Task
            # exception was never retrieved" and a traceback to the one-line message.

    def settle(self, kind: str, body: dict) -> None:
        """The asker of this request is done with its reply (checked, and cached when valid)."""
        custom_id = self.custom_id(kind, body)
        for batch_id, waiting in list(self._unsettled.items()):
            waiting.discard(custom_id)
            if not waiting:
                del self._unsettled[batch_id]
                self._ledger.update(batch_id, consumed=True)

    def _hand_out(self, requests: dict[str, _Request], outcome: _Outcome, batch_id: str) -> None:
        handed = set()
        for custom_id, body in outcome.answered.items():
            request = requests.pop(custom_id, None)
            if request is not None:
                handed.add(custom_id)
                _resolve(request, body)
        unanswered = [cid for cid in outcome.covered if cid in requests]
        self.usage.batch_lines_failed += len(unanswered)
        if unanswered:
            reasons = sorted({outcome.errors.get(cid, "no output line") for cid in unanswered})
            self._ledger.progress(
                f"batch {batch_id}: {len(unanswered)} requests got no reply ({'; '.join(reasons)[:300]}); asked again"
            )
        if handed:
            self._unsettled.setdefault(batch_id, set()).update(handed)
        else:
            self._ledger.update(batch_id, consumed=True)

    async def _submit(self, kind: str, requests: dict[str, _Request]) -> dict:
        url = self._paths[kind]
        lines = "".join(
            json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": r.body}) + "\n"
            for cid, r in requests.items()
        )
        upload = await self._call(
            "upload a batch file",
            lambda: self._api.files.create(
                file=("requests.jsonl", io.BytesIO(lines.encode()), "application/jsonl"), purpose="batch"
            ),
        )
        # Recorded before it exists, under a key sent as its metadata: a process that dies once the endpoint has
        # created it (and is paying for it) leaves it findable, by listing the endpoint's batches.
        key = uuid.uuid4().hex
        batch = {
            "batch_id": _PENDING + key,
            "endpoint": self._endpoint,
            "kind": kind,
            "custom_ids": list(requests),
            "status": "creating",
            "input_file_id": upload.id,
            **self._labels,
        }
        self._ledger.record(batch)
        try:
            created = await self._call(
                "create a batch",
                lambda: self._api.batches.create(
                    input_file_id=upload.id,
                    endpoint=url,
                    completion_window=self._settings.completion_window,
                    metadata={**{k: v[:512] for k, v in self._labels.items()}, _KEY: key},
                ),
            )
        except Exception:
            self._ledger.update(batch["batch_id"], status="not created", consumed=True)
            raise
        self._ledger.update(batch["batch_id"], batch_id=created.id, status=created.status)
        batch.update(batch_id=created.id, status=created.status)
        self._tried.update(requests.keys())
        self.usage.batches += 1
        tokens = sum(_prompt_tokens(r.body) for r in requests.values())
        price = self._settings.prompt_price_per_million
        self._ledger.progress(
            f"submitted batch {created.id}: {len(requests)} {kind} requests, about {tokens:,} prompt tokens"
            + (f" (${tokens * price / 1e6:.4f} at the batch price, before the replies)" if price else "")
        )
        return batch

    async def _created(self, recorded: dict) -> dict | None:
        """The batch a record made before its creation stands for, found among the endpoint's batches by the key in
        its metadata; None (and the record closed) when it was never created."""
        key = recorded["batch_id"].removeprefix(_PENDING)
        listed = await self._call("list batches", lambda: self._api.batches.list(limit=100))
        found = next((b for b in listed.data if (b.metadata or {}).get(_KEY) == key), None)
        if found is None:
            self._ledger.update(recorded["batch_id"], status="not created", consumed=True)
            return None
        self._ledger.update(recorded["batch_id"], batch_id=found.id, status=found.status)
        self._ledger.progress(f"found batch {found.id}, created by an earlier run that stopped before recording it")
        return {**recorded, "batch_id": found.id, "status": found.status}

    async def _outcome(self, batch: dict) -> _Outcome:
        """Wait for the batch to finish, then read what it answered (of a lost batch: nothing)."""
        batch_id, started = batch["batch_id"], time.monotonic()
        pause = self._settings.poll_seconds
        while True:
            try:
                status = await self._call("check a batch", lambda: self._api.batches.retrieve(batch_id))
            except openai.NotFoundError:
                self._ledger.update(batch_id, status="lost", consumed=True)
                return _Outcome(covered=list(batch["custom_ids"]), errors=dict.fromkeys(batch["custom_ids"], "lost"))
            counts = status.request_counts
            waited = time.monotonic() - started
            self._ledger.progress(
                f"batch {batch_id}: {status.status}"
                + (f", {counts.completed}/{counts.total} completed, {counts.failed} failed" if counts else "")
                + f", waited {waited:.0f} s"
            )
            if status.status in FINISHED:
                break
            self._ledger.update(batch_id, status=status.status)
            await asyncio.sleep(pause)
            pause = min(pause * 2, self._settings.poll_max_seconds)
        self.usage.batch_wait_seconds += time.monotonic() - started
        self._ledger.update(
            batch_id, status=status.status, output_file_id=status.output_file_id, error_file_id=status.error_file_id
        )
        outcome = _Outcome(covered=list(batch["custom_ids"]))
        if status.status == "failed" and not status.output_file_id:
            errors = getattr(status.errors, "data", None) or []
            outcome.rejected = "; ".join(f"{e.code}: {e.message}" for e in errors[:3]) or "no reason given"
        for file_id in (status.output_file_id, status.error_file_id):
            if file_id:
                content = await self._call("read a batch's output", lambda f=file_id: self._api.files.content(f))
                _read_lines(content.text, outcome)
        return outcome

    async def _call(self, what: str, call):
        """One Batch API call, retried on what time can fix; an endpoint without the API is one clear error."""
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(_transient),
            wait=wait_random_exponential(multiplier=1, max=60),
            stop=stop_after_attempt(6),
            reraise=True,
        ):
            with attempt:
                try:
                    return await call()
                except openai.NotFoundError:
                    if what == "check a batch":
                        raise  # a batch the endpoint lost: _outcome submits its requests again
                    raise EndpointError(
                        f"{self._endpoint.split('|')[0]} has no Batch API (HTTP 404 when asked to {what}): "
                        "set batch_api to false for this endpoint",
                        retryable=False,
                    ) from None
                except openai.APIStatusError as error:
                    if _transient(error):
                        raise
                    raise EndpointError(
                        f"the Batch API refused to {what} (HTTP {error.status_code}): {str(error)[:200]}",
                        retryable=False,
                    ) from None


def _transient(error: BaseException) -> bool:
    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return True
    return isinstance(error, openai.APIStatusError) and error.status_code >= 500


@dataclass
class _Outcome:
    covered: list[str]
    answered: dict[str, dict] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    rejected: str | None = None


def _read_lines(text: str, outcome: _Outcome) -> None:
    """A batch's output or error file: each line's response body when it is a 200 with a body, else why not."""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            custom_id = entry["custom_id"]
        except (ValueError, KeyError, TypeError):
            continue  # a line we cannot attribute: its request stays unanswered and is asked again
        response, error = entry.get("response") or {}, entry.get("error")
        body = response.get("body")
        if response.get("status_code") == 200 and isinstance(body, dict) and not error:
            outcome.answered[custom_id] = body
        else:
            detail = (error or {}).get("code") or (error or {}).get("message") or f"HTTP {response.get('status_code')}"
            outcome.errors[custom_id] = str(detail)


def _prompt_tokens(body: dict) -> int:
    texts = body.get("input") or [m.get("content") or "" for m in body.get("messages", [])]
    return sum(count_tokens(text) for text in ([texts] if isinstance(texts, str) else texts))


def _resolve(request: _Request, value: object) -> None:
    for waiter in request.waiters:
        if not waiter.done():
            waiter.set_result(value)
