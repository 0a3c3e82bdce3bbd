"""The HTTP server itself: /v1/chat/completions, /v1/embeddings and the Batch API's /v1/files and /v1/batches (or
Azure OpenAI's paths), with rate limits, latency, faults and a record of what it served."""

from __future__ import annotations

import base64
import email.policy
import json
import re
import struct
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from .batches import BatchAPI
from .chat import PROSE_KINDS, REFUSAL, chat_reply, wrong_kind_reply
from .embeddings import embedding
from .faults import BatchFaults, Faults, _picked, request_key
from .index_replies import tagged


@dataclass
class Served:
    kind: str
    key: str
    status: int
    at: float = 0.0  # time.monotonic() when answered
    prompt: str = ""  # the first message, for tests that check what was asked
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    endpoint: str = "chat"  # or "embeddings"
    via: str = "sync"  # or "batch": answered as a line of a batch


class _Listener(ThreadingHTTPServer):
    # The standard library's listen backlog is 5: hundreds of clients connecting at once, as a client using a high
    # rate limit does, overflowed it and saw refused connections a real endpoint would have accepted.
    request_queue_size = 1024


def duration(seconds: float) -> str:
    """A duration as OpenAI writes it in reset headers: "12ms", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3g}s" if minutes else f"{rest:.3g}s"


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body, as the openai client uploads a file."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    return {
        part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
        for part in message.iter_parts()
    }


class FakeOpenAIServer(BatchAPI):
    def __init__(
        self,
        faults: Faults | None = None,
        latency_seconds: float = 0.0,
        requests_per_minute: int = 0,
        tokens_per_minute: int = 0,
        rate_window_seconds: float = 60.0,
        rate_limit_headers: bool = True,
        latency_per_token_seconds: float = 0.0,
        slow_words: dict[str, float] | None = None,
        capacity: int = 0,
        embedding_dimensions: int = 64,
        api_key: str | None = None,
        azure_deployments: frozenset[str] = frozenset(),
        more_gleaning: bool = False,
        full_reports: bool = False,
        batch_seconds: float = 0.0,
        batch_faults: BatchFaults | None = None,
        batch_api: bool = True,
    ):
        """`api_key`: answer 401 to any other key (Bearer, or Azure's api-key header). `azure_deployments`:
        serve Azure OpenAI's paths for these deployments (api-version required) instead of /v1.
        `requests_per_minute`, `tokens_per_minute` (prompt and completion): limits over a moving
        `rate_window_seconds`, refused with 429, and announced in x-ratelimit-* headers as OpenAI does
        (unless `rate_limit_headers` is False).
        `capacity`: requests processed at once; the rest queue, so latency climbs under load, as a real
        server's does. Prompts that extend one already seen report its tokens as cached (OpenAI's rule:
        prompts of 1024 tokens or more, in steps of 128).
        `slow_words`: a chat request whose messages hold one of these words answers that many seconds later.
        `batch_seconds`: how long a batch of the Batch API (/v1/files, /v1/batches) stays in progress.
        `full_reports`: community reports as long as the report prompt asks a model for (see community_report)."""
        self.faults = faults or Faults()
        self.api_key = api_key
        self.azure_deployments = azure_deployments
        self.more_gleaning = more_gleaning
        self.full_reports = full_reports
        self.batch_seconds = batch_seconds
        self.batch_faults = batch_faults or BatchFaults()
        self.batch_api = batch_api  # False: /files and /batches are unknown paths, as on Ollama or vLLM
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}  # as created, with the time they were and the output once done
        self.uploads = 0  # files uploaded for batches
        self.batch_checks: Counter[str] = Counter()  # retrievals of each batch id
        self.latency_seconds = latency_seconds
        self.requests_per_minute = requests_per_minute  # per rate_window_seconds, a minute unless a test shortens it
        self.tokens_per_minute = tokens_per_minute
        self.rate_window_seconds = rate_window_seconds
        self.rate_limit_headers = rate_limit_headers
        self.latency_per_token_seconds = latency_per_token_seconds
        self.slow_words = slow_words or {}
        self._capacity = threading.Semaphore(capacity) if capacity else None
        self._token_log: deque[tuple[float, int]] = deque()
        self._tokens_in_window = 0
        self._seen_prefixes: set[str] = set()
        self.embedding_dimensions = embedding_dimensions
        self.served: list[Served] = []
        self._failed_once: set[str] = set()
        self._recent: deque[float] = deque()
        self._closing = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = _Listener(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def successes(self, kind: str | None = None) -> Counter:
        """How many times each request body was answered with 200 (the probe aside)."""
        with self._lock:
            return Counter(
                s.key for s in self.served if s.status == 200 and s.kind != "probe" and (kind is None or s.kind == kind)
            )

    def count(self, *kinds: str) -> int:
        """Requests answered, of these kinds (of any kind when none is named)."""
        with self._lock:
            return sum(1 for s in self.served if not kinds or s.kind in kinds)

    def _record(
        self,
        kind: str,
        key: str,
        status: int,
        prompt: str = "",
        tokens: tuple[int, int, int] = (0, 0, 0),
        endpoint: str = "chat",
        via: str = "sync",
    ) -> None:
        with self._lock:
            self.served.append(Served(kind, key, status, time.monotonic(), prompt, *tokens, endpoint=endpoint, via=via))

    def tokens(self, *kinds: str) -> dict[str, int]:
        """Prompt, cached prompt and completion tokens served, for the chat kinds named (all when none is)."""
        with self._lock:
            served = [s for s in self.served if s.status == 200 and (not kinds or s.kind in kinds)]
        return {
            "prompt": sum(s.prompt_tokens for s in served),
            "cached": sum(s.cached_tokens for s in served),
            "completion": sum(s.completion_tokens for s in served),
        }

    def _first_failure(self, key: str, every: int) -> bool:
        with self._lock:
            if _picked(key, every) and key not in self._failed_once:
                self._failed_once.add(key)
                return True
            return False

    def _over_rate_limit(self, tokens: int) -> bool:
        """Whether this request would pass a limit; counts it when it does not."""
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            over_requests = self.requests_per_minute and len(self._recent) >= self.requests_per_minute
            over_tokens = self.tokens_per_minute and self._tokens_in_window + tokens > self.tokens_per_minute
            if over_requests or over_tokens:
                return True
            self._recent.append(now)
            self._log_tokens(now, tokens)
            return False

    def _count_completion(self, tokens: int) -> None:
        """A reply's tokens count against the token limit too, as a provider counts them."""
        if self.tokens_per_minute:
            with self._lock:
                self._log_tokens(time.monotonic(), tokens)

    def _log_tokens(self, now: float, tokens: int) -> None:
        # A running total: summing the window on every request made a long run quadratic in its requests.
        self._token_log.append((now, tokens))
        self._tokens_in_window += tokens

    def _expire(self, now: float) -> None:
        while self._recent and now - self._recent[0] > self.rate_window_seconds:
            self._recent.popleft()
        while self._token_log and now - self._token_log[0][0] > self.rate_window_seconds:
            self._tokens_in_window -= self._token_log.popleft()[1]

    def _rate_headers(self) -> dict:
        """OpenAI's x-ratelimit-* headers: each limit, what is left of it, and when it is whole again."""
        if not self.rate_limit_headers or not (self.requests_per_minute or self.tokens_per_minute):
            return {}
        headers = {}
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            for unit, limit, used, last in (
                ("requests", self.requests_per_minute, len(self._recent), self._recent[-1] if self._recent else None),
                (
                    "tokens",
                    self.tokens_per_minute,
                    self._tokens_in_window,
                    self._token_log[-1][0] if self._token_log else None,
                ),
            ):
                if not limit:
                    continue
                whole_again = last + self.rate_window_seconds - now if last is not None else 0.0
                headers[f"x-ratelimit-limit-{unit}"] = str(limit)
                headers[f"x-ratelimit-remaining-{unit}"] = str(max(0, limit - used))
                headers[f"x-ratelimit-reset-{unit}"] = duration(whole_again)
        return headers

    def _cached_tokens(self, messages: list[dict], prompt_tokens: int) -> int:
        """Tokens of the longest earlier-seen prefix of `messages`, as OpenAI's prompt cache reports them."""
        keys = [request_key(json.dumps(messages[:k]).encode()) for k in range(1, len(messages) + 1)]
        with self._lock:
            hit = max((k for k, key in enumerate(keys, 1) if key in self._seen_prefixes), default=0)
            self._seen_prefixes.update(keys)
        if prompt_tokens < 1024 or not hit:
            return 0
        return sum(len(m["content"]) // 4 + 1 for m in messages[:hit]) // 128 * 128

    def embeddings_response(self, request: dict, key: str, via: str = "sync") -> tuple[int, dict]:
        """(status, body) of an embeddings request."""
        inputs = request["input"] if isinstance(request["input"], list) else [request["input"]]
        if "embed" in self.faults.refused_kinds and inputs != ["ping"]:
            self._record("refused", key, 400)
            return 400, {"error": {"message": "injected: this input is refused"}}
        vectors = [embedding(t, self.embedding_dimensions) for t in inputs]
        if request.get("encoding_format") == "base64":
            vectors = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() for v in vectors]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        tokens = sum(len(t) // 4 + 1 for t in inputs)
        kind = "probe" if inputs == ["ping"] else "embed"
        self._record(kind, key, 200, tokens=(tokens, 0, 0), endpoint="embeddings", via=via)
        return 200, {
            "object": "list",
            "data": data,
            "model": request["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def chat_content(self, request: dict, key: str) -> tuple[str, str, str]:
        """(prompt kind, reply text, finish reason) of a chat request, with the content faults applied."""
        faults = self.faults
        kind, reply = chat_reply(request["messages"], self.more_gleaning, self.full_reports)
        finish_reason = "stop"
        if kind != "probe" and any(kind.startswith(refused) for refused in faults.refused_kinds):
            reply = REFUSAL
        elif kind == "probe" or (faults.heeds_corrections and kind.endswith("_corrected")):
            pass
        elif faults.mixed_up_batches and kind.startswith("report_batch"):
            reports = json.loads(reply)["reports"]
            labels = [r["community"] for r in reports]
            for report, label in zip(reports, labels[1:] + labels[:1]):
                report["community"] = label
            reply = json.dumps({"reports": reports})
        elif _picked(key, faults.malformed_every) and kind not in PROSE_KINDS:
            reply = "Here is some prose instead of what you asked for. (unbalanced <|> nonsense"
        elif _picked(key, faults.truncated_every):
            reply = reply[: max(1, int(len(reply) * 0.6))]
            finish_reason = "length"
        elif _picked(key, faults.refusal_every):
            reply = REFUSAL
        elif _picked(key, faults.wrong_kind_every):
            reply = wrong_kind_reply(kind, tagged(request["messages"][0]["content"], "text")) or reply
        return kind, reply, finish_reason

    def chat_completion(
        self, request: dict, key: str, kind: str, reply: str, finish_reason: str, via: str = "sync"
    ) -> dict:
        """The chat completion body for a reply, counted and recorded as served."""
        prompt_tokens = sum(len(m["content"]) // 4 + 1 for m in request["messages"])
        completion_tokens = len(reply) // 4 + 1
        cached_tokens = self._cached_tokens(request["messages"], prompt_tokens)
        if via == "sync":
            self._count_completion(completion_tokens)
        tokens = (prompt_tokens, completion_tokens, cached_tokens)
        self._record(kind, key, 200, request["messages"][0]["content"], tokens, via=via)
        return {
            "id": f"chatcmpl-{key[:12]}",
            "object": "chat.completion",
            "created": 0,
            "model": request["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "message": {"role": "assistant", "content": reply},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached_tokens},
            },
        }

    # The Batch API: files and batches, kept in memory; a batch is processed when checked after batch_seconds.

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else a reply waits 40 ms for the client's delayed ACK

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict, headers: dict | None = None, cut_body: bool = False) -> None:
                body = json.dumps(payload).encode()
                body = body[: len(body) // 2] if cut_body else body
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _stream(self, completion: dict, headers: dict) -> None:
                """A chat completion as server-sent events, as OpenAI streams it: the reply in one delta chunk."""
                choice = completion["choices"][0]
                chunk = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
                events = [
                    chunk | {"choices": [{"index": 0, "delta": choice["message"], "finish_reason": None}]},
                    chunk | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
                ]
                body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(body.encode())))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body.encode())

            def _refusal_of_route(self) -> tuple[int, str] | None:
                """(status, message) when the path, api-version or key is not what this endpoint serves."""
                url = urlsplit(self.path)
                if server.azure_deployments:
                    match = re.fullmatch(r"/openai/deployments/([^/]+)/(chat/completions|embeddings)", url.path)
                    if not match:
                        return 404, f"no Azure OpenAI route {url.path}"
                    if "api-version" not in parse_qs(url.query):
                        return 400, "api-version is required"
                    if match.group(1) not in server.azure_deployments:
                        return 404, f"deployment {match.group(1)} not found"
                    presented = self.headers.get("api-key")
                else:
                    if url.path not in ("/v1/chat/completions", "/v1/embeddings"):
                        return 404, f"no route {url.path}"
                    presented = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                if server.api_key and presented != server.api_key:
                    return 401, "invalid api key"
                return None

            def _batch_route(self) -> tuple[str, str | None] | None:
                """(route, id) of a Batch API path of this endpoint's kind, or None for another path."""
                url = urlsplit(self.path)
                prefix = "/openai" if server.azure_deployments else "/v1"
                if not server.batch_api:
                    return None
                if server.azure_deployments and "api-version" not in parse_qs(url.query):
                    return None
                for route, pattern in (
                    ("files", r"/files"),
                    ("file_content", r"/files/([^/]+)/content"),
                    ("batches", r"/batches"),
                    ("batch", r"/batches/([^/]+)"),
                    ("cancel", r"/batches/([^/]+)/cancel"),
                ):
                    match = re.fullmatch(prefix + pattern, url.path)
                    if match:
                        return route, (match.group(1) if match.groups() else None)
                return None

            def _batch_api(self, method: str) -> bool:
                """Answer a Batch API request; False when the path is not one."""
                found = self._batch_route()
                if found is None:
                    return False
                route, item = found
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                presented = self.headers.get("api-key") or (self.headers.get("Authorization") or "").removeprefix(
                    "Bearer "
                )
                if server.api_key and presented != server.api_key:
                    self._send(401, {"error": {"message": "invalid api key"}})
                elif method == "POST" and route == "files":
                    fields = _multipart(self.headers.get("Content-Type", ""), body)
                    self._send(200, server.upload(fields["file"], fields["purpose"].decode()))
                elif method == "GET" and route == "file_content":
                    content = server.files.get(item)
                    if content is None:
                        self._send(404, {"error": {"message": f"no file {item}"}})
                    else:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/octet-stream")
                        self.send_header("Content-Length", str(len(content)))
                        self.end_headers()
                        self.wfile.write(content)
                elif method == "POST" and route == "batches":
                    self._send(*server.create_batch(json.loads(body)))
                elif method == "GET" and route == "batches":  # newest first, as OpenAI lists them
                    listed = [server._public(b) for b in sorted(server.batches.values(), key=lambda b: -b["_number"])]
                    self._send(200, {"object": "list", "data": listed, "has_more": False})
                elif method == "GET" and route == "batch":
                    self._send(*server.retrieve_batch(item))
                elif method == "POST" and route == "cancel":
                    self._send(*server.cancel_batch(item))
                else:
                    self._send(405, {"error": {"message": f"{method} {self.path} is not allowed"}})
                return True

            def do_GET(self) -> None:
                if not self._batch_api("GET"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self._batch_api("POST"):
                    return
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if server._capacity:
                        with server._capacity:
                            self._answer()
                    else:
                        self._answer()
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = request_key(body)
                faults = server.faults
                refused = self._refusal_of_route()
                if refused:
                    server._record("refused", key, refused[0])
                    return self._send(refused[0], {"error": {"message": refused[1]}})
                request = json.loads(body)
                if faults.hang:
                    server._record("hang", key, 0)
                    server._closing.wait(600)
                    return
                if faults.status:
                    server._record("status", key, faults.status)
                    return self._send(
                        faults.status,
                        {
                            "error": {
                                "message": f"injected HTTP {faults.status} for {self.headers.get('Authorization')}",
                                "code": "model_not_found" if faults.status == 404 else None,
                            }
                        },
                    )
                texts = request.get("input") or [m["content"] for m in request.get("messages", [])]
                tokens = sum(len(t) // 4 + 1 for t in ([texts] if isinstance(texts, str) else texts))
                if server._over_rate_limit(tokens):
                    server._record("rate_limited", key, 429)
                    return self._send(
                        429, {"error": {"message": "rate limit"}}, {"Retry-After": "1", **server._rate_headers()}
                    )
                if server._first_failure(key, faults.transient_every):
                    status = faults.transient_status or (429 if int(key[8:16], 16) % 2 else 500)
                    server._record("fault", key, status)
                    retry_after = (
                        {"retry-after-ms": str(int(faults.retry_after_seconds * 1000))}
                        if faults.retry_after_in_ms
                        else {"Retry-After": str(faults.retry_after_seconds)}
                    )
                    return self._send(
                        status, {"error": {"message": "injected fault"}}, retry_after if status == 429 else {}
                    )
                if _picked(key, faults.broken_every) and request.get("messages") != [
                    {"role": "user", "content": "ping"}
                ]:
                    server._record("broken", key, 500)
                    return self._send(
                        500, {"error": {"message": f"upstream failed for {self.headers.get('Authorization')}"}}
                    )
                if server._first_failure(key + ":slow", faults.slow_every):
                    time.sleep(faults.slow_seconds)
                if server.latency_seconds:
                    time.sleep(server.latency_seconds)
                if server.slow_words:
                    said = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
                    time.sleep(sum(seconds for word, seconds in server.slow_words.items() if word in said))
                if "/embeddings" in self.path:
                    status, payload = server.embeddings_response(request, key)
                    return self._send(status, payload, server._rate_headers() if status == 200 else {})
                kind, reply, finish_reason = server.chat_content(request, key)
                if server._first_failure(key + ":garbled", faults.garbled_every):
                    server._record("garbled", key, 200)
                    return self._send(200, {"choices": [{"message": {"content": reply}}]}, cut_body=True)
                completion = server.chat_completion(request, key, kind, reply, finish_reason)
                if server.latency_per_token_seconds:
                    time.sleep(server.latency_per_token_seconds * completion["usage"]["completion_tokens"])
                if request.get("stream"):
                    return self._stream(completion, server._rate_headers())
                self._send(200, completion, server._rate_headers())

        return Handler
