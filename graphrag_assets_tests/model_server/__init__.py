"""A real OpenAI-compatible HTTP server for tests and benchmarks, on 127.0.0.1.

It answers the project's prompt kinds (graph extraction, gleaning, summarization,
claims, embeddings) with well-formed content derived from the input text, always
the same for the same request, and can be told to misbehave: 429 with Retry-After,
500, replies slower than the client's timeout, malformed or truncated output, and a
requests-per-minute limit like a real endpoint's. Faults are chosen by a hash of the
request body, so a run with faults is as deterministic as one without. It also misbehaves the
way real endpoints do with HTTP 200: replies cut off at max_tokens, polite refusals, records
of the wrong kind; and it can hang, or answer every request with one status (401, 404).
A model asked again with a note that its reply could not be used answers the original request.

Split by what it serves: index_replies and query_replies (chat, by prompt kind, picked in chat),
embeddings, faults, and server (HTTP, the Batch API, rate limits).
"""

from .chat import CORRECTION_MARK, REFUSAL, chat_reply
from .faults import BatchFaults, Faults
from .index_replies import DEFAULT_TYPES, claims_reply, graph_reply, summary_reply, tagged
from .query_replies import _REPORT_ROW, distinct_words, key_phrase
from .server import FakeOpenAIServer, Served

__all__ = [
    "FakeOpenAIServer",
    "Faults",
    "BatchFaults",
    "Served",
    "REFUSAL",
    "CORRECTION_MARK",
    "tagged",
    "claims_reply",
    "graph_reply",
    "summary_reply",
    "key_phrase",
    "distinct_words",
    "_REPORT_ROW",
    "DEFAULT_TYPES",
    "chat_reply",
]
