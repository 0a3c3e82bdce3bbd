"""`graphrag-assets serve`: answers over HTTP from the warm indexes of every published corpus.

Four ways in, one answering path (answers/service.py): a JSON API under /api, an OpenAI-compatible API under /v1
(chat front-ends, the openai client), MCP at /mcp (agents and IDEs), and a chat page at /. The store is never held
open: an index run can always write it, and answers recorded meanwhile wait in the on-disk queue.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware

from ..answers.asking import MAX_QUESTION_CHARS, Answer, AnswerFailed, Question, QuestionRefused
from ..answers.service import AnswerService, StoreBusy, UnknownAnswer, UnknownCorpus, UnknownDocument
from .errors import ApiError, error_response
from .keys import LOCAL, Caller, KeyRing, RateLimits
from .shapes import AnswerOut, answer_out, stored_out

log = logging.getLogger("graphrag_assets.server")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
SERVED_METHODS = ("global", "local", "drift", "basic", "lazy")
PAGE = Path(__file__).with_name("page.html")


@dataclass
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    keys_file: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    poll_seconds: float = 1.0
    rate: int = 60  # questions a minute per key, unless its entry says otherwise
    max_body_bytes: int = 256 * 1024
    question_budget: float | None = None  # dollars each answer may spend on the model, whoever asks


class ServerRefused(ValueError):
    """The server will not start as configured."""


def load_keys(settings: ServerSettings) -> KeyRing | None:
    """The keys, if any; a server on another address than this machine's must have them."""
    keys = KeyRing.load(settings.keys_file) if settings.keys_file else None
    if keys is None and settings.host not in LOCAL_HOSTS:
        raise ServerRefused(
            f"serving on {settings.host} needs API keys: make one with `graphrag-assets key NAME`, put its entry in a "
            "keys file and pass it with --keys (or GRAPHRAG_SERVER_KEYS); without keys, serve on 127.0.0.1"
        )
    return keys


_OPEN = ("/", "/health", "/openapi.json", "/favicon.ico")


class Guard:
    """Who asks (a key, or nobody on a local server without keys) and how much they send, before any route runs.

    Sets the caller in the request's state; answers 401 for a missing or unknown key and 413 for a body over the
    limit (a declared length, or a chunked body that grows past it)."""

    def __init__(self, app, keys: KeyRing | None, max_body_bytes: int):
        self.app, self.keys, self.max_body_bytes = app, keys, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, headers = scope["path"], dict(scope["headers"])
        caller = LOCAL
        # A browser's CORS preflight carries no key; the CORS middleware answers it, and only for named origins.
        open_path = path in _OPEN or path.startswith("/docs") or scope["method"] == "OPTIONS"
        if self.keys is not None and not open_path:
            caller = self.keys.find(_presented_key(headers)) if _presented_key(headers) else None
            if caller is None:
                response = error_response(
                    401, "a valid API key is needed: send it as 'Authorization: Bearer <key>'", "authentication_error"
                )
                return await response(scope, receive, send)
        scope.setdefault("state", {})["caller"] = caller
        declared = headers.get(b"content-length")
        if declared and declared.isdigit() and int(declared) > self.max_body_bytes:
            return await _too_large(self.max_body_bytes)(scope, receive, send)
        received, refused = 0, False

        async def counted():
            nonlocal received, refused
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes and not refused:
                refused = True  # answered here; to the app the client has gone
                await _too_large(self.max_body_bytes)(scope, receive, send)
                return {"type": "http.disconnect"}
            return message

        async def unless_refused(message):
            if not refused:
                await send(message)

        try:
            await self.app(scope, counted, unless_refused)
        except Exception:
            if not refused:  # a body cut off by the limit ends the request: nothing to report
                raise


def _too_large(limit: int) -> JSONResponse:
    return error_response(
        413, f"the request body is over {limit // 1024} KiB: send a shorter question", "request_too_large"
    )


def _presented_key(headers: dict) -> str | None:
    authorization = headers.get(b"authorization", b"").decode(errors="replace")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip() or None
    return headers.get(b"x-api-key", b"").decode(errors="replace").strip() or None


def caller_of(request: Request) -> Caller:
    return request.scope.get("state", {}).get("caller", LOCAL)


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    corpus: str | None = Field(None, max_length=64, description="The corpus; with follow_up, the followed answer's.")
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, description="What to ask.")
    method: Literal["global", "local", "drift", "basic", "lazy"] | None = Field(
        None, description="global (the default), local, drift, basic or lazy; with follow_up, the followed answer's."
    )
    # Checked with the CLI's and MCP's one check (answers/asking.py), so each says the same.
    level: int | None = Field(None, description="Community level: 0 is the root, deeper is finer.")
    dynamic: bool = Field(False, description="Global search: rate reports from the root down, read relevant ones.")
    follow_up: str | None = Field(None, max_length=64, description="An answer id: continue its conversation.")
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="Most this answer's model requests may spend (dollars); the server's own cap applies too.",
    )


def build_app(service: AnswerService, settings: ServerSettings, keys: KeyRing | None, with_mcp: bool = True):
    """The ASGI app, with the MCP server (server/mcp_tools.py) at /mcp; the two share the rate limits."""
    from .mcp_tools import build_mcp
    from .openai_compatible import routes

    limits = RateLimits(settings.rate)
    mcp = build_mcp(service, limits) if with_mcp else None
    mcp_app = (
        mcp.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, host=settings.host) if mcp else None
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with mcp.session_manager.run() if mcp else contextlib.nullcontext():
            yield
        # Here, not after uvicorn returns: on SIGTERM it re-raises the signal once it has shut down.
        await run_in_threadpool(service.stop)

    app = FastAPIOffline(
        title="graphrag-assets",
        summary="Answers from GraphRAG indexes: global, local, DRIFT, basic and lazy search, with their sources.",
        version="1",
        lifespan=lifespan,
    )
    add_error_responses(app)
    asking, ask_now = gates(service, limits)
    app.include_router(answer_routes(service, settings, asking, ask_now))
    app.include_router(routes(service, asking, ask_now, SERVED_METHODS, settings.question_budget))
    if mcp_app is not None:
        app.mount("/", mcp_app)  # its one route is /mcp; mounted last, after every route of ours
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
        )
    return Guard(app, keys, settings.max_body_bytes)


def add_error_responses(app: FastAPI) -> None:
    """Every error as the same JSON body (OpenAI's error shape): ours, a request that fails validation, and a fault
    of the server, which is logged with an incident id the reply gives."""

    @app.exception_handler(ApiError)
    async def apierror_response(request: Request, error: ApiError):
        return error_response(error.status, str(error), error.kind, error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError):
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"] if part != "body") or "body"
        return error_response(422, f"{where}: {first['msg']}", "invalid_request_error")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):
        incident = uuid.uuid4().hex[:8]
        log.exception("request %s %s failed (incident %s)", request.method, request.url.path, incident)
        return error_response(500, f"the server failed to answer (incident {incident} in its log)", "server_error")


def gates(service: AnswerService, limits: RateLimits):
    """`asking`: the caller of a request that asks, refused past its rate; `ask_now`: one answer, with every
    refusal as the HTTP status it is. The JSON API and the OpenAI endpoint share both."""

    def asking(request: Request) -> Caller:
        caller = caller_of(request)
        wait = limits.retry_after(caller)
        if wait is not None:
            raise ApiError(
                429,
                f"{caller.name} asked more than its questions a minute: ask again in {wait} s",
                "rate_limit_error",
                {"Retry-After": str(wait)},
            )
        return caller

    def ask_now(caller: Caller, question: Question) -> Answer:
        try:
            return service.ask(question, asked_by=caller.name, allowed=caller.may_read)
        except (UnknownCorpus, UnknownAnswer) as problem:
            raise ApiError(404, str(problem), "not_found_error") from None
        except QuestionRefused as problem:
            raise ApiError(422, str(problem), "invalid_request_error") from None
        except AnswerFailed as problem:
            raise ApiError(502, str(problem), "model_error") from None
        except StoreBusy as problem:
            raise ApiError(503, str(problem), "store_busy", {"Retry-After": "2"}) from None

    return asking, ask_now


def answer_routes(service: AnswerService, settings: ServerSettings, asking, ask_now) -> APIRouter:
    """The JSON API, the health check and the chat page."""
    router = APIRouter()

    @router.get("/health", tags=["service"])
    def health() -> dict:
        """Whether the server answers, how many corpora it serves and how many answers wait for the store."""
        return {"status": "ok", "corpora": len(service.corpora()), "queued_answers": len(service.journal)}

    @router.get("/api/corpora", tags=["answers"])
    def corpora(request: Request) -> dict:
        """The published corpora this key may read: methods they answer, levels, when published, index method."""
        caller = caller_of(request)
        return {"corpora": [p.as_json() for p in service.corpora() if caller.may_read(p.corpus)]}

    @router.post("/api/ask", tags=["answers"], response_model=AnswerOut)
    async def ask(body: AskRequest, request: Request) -> AnswerOut:
        """Answer a question of a corpus, with its sources, usage and time; the answer is recorded."""
        caller = asking(request)
        cap = min(filter(None, (body.max_cost_usd, settings.question_budget)), default=None)
        question = Question(
            corpus=body.corpus,
            text=body.question,
            method=body.method,
            level=body.level,
            dynamic=body.dynamic,
            follow_up=body.follow_up,
            max_cost_usd=cap,
        )
        return answer_out(await run_in_threadpool(ask_now, caller, question))

    @router.get("/api/answers/{answer_id}", tags=["answers"], response_model=AnswerOut)
    def stored(answer_id: str, request: Request) -> AnswerOut:
        """A recorded answer with its sources."""
        try:
            corpus, row = service.stored(answer_id, caller_of(request).may_read)
        except UnknownAnswer as problem:
            raise ApiError(404, str(problem), "not_found_error") from None
        return stored_out(corpus, row)

    @router.get("/api/corpora/{corpus}/documents/{document_id}", tags=["answers"])
    def document(corpus: str, document_id: str, request: Request) -> dict:
        """A document's whole text, to read a source where it stands."""
        if not caller_of(request).may_read(corpus):
            raise ApiError(404, str(UnknownCorpus(corpus)), "not_found_error")
        try:
            return service.document(corpus, document_id)
        except (UnknownCorpus, UnknownDocument) as problem:
            raise ApiError(404, str(problem), "not_found_error") from None
        except StoreBusy as problem:
            raise ApiError(503, str(problem), "store_busy", {"Retry-After": "2"}) from None

    @router.get("/", include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text())

    return router


def run(settings: ServerSettings, instance=None) -> int:
    """Serve until interrupted; the answers still queued are written before it ends."""
    import functools

    import uvicorn

    from ..answers.service import endpoint_settings_from_environment, observe_in_dagster

    keys = load_keys(settings)
    chat, embeddings = endpoint_settings_from_environment()
    observe = functools.partial(observe_in_dagster, instance=instance) if instance is not None else None
    service = AnswerService(chat=chat, embeddings=embeddings, observe=observe)
    service.start(settings.poll_seconds)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    served = ", ".join(p.corpus for p in service.corpora()) or "none yet (index one; it is served once published)"
    engine = f"model {chat.model}" if chat else "the offline engine (extractive answers)"
    print(f"serving {served} with {engine} at http://{settings.host}:{settings.port}/", flush=True)
    print(
        f"  JSON API docs http://{settings.host}:{settings.port}/docs   OpenAI base URL "
        f"http://{settings.host}:{settings.port}/v1   MCP http://{settings.host}:{settings.port}/mcp",
        flush=True,
    )
    try:
        uvicorn.run(build_app(service, settings, keys), host=settings.host, port=settings.port, log_level="warning")
    finally:
        service.stop()
    return 0
