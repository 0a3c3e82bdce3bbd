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
"""

from __future__ import annotations

import base64
import email.policy
import hashlib
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

_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")
_COMMON = frozenset(
    "The This That There They Then When What Where Which While With Who How And But For Not You Your His Her "
    "Its Our Their She Him Them Now Here Yes Why Let Come Said Upon After Before Into From Over Some One Two "
    "All Any Each Every Well Very Such Only Even Still Just Oh Ah Nay Aye Was Were Had Has Have Are Can".split()
)


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


@dataclass
class BatchFaults:
    """How the Batch API misbehaves. Lines are picked by their body's hash; batches by the order they came in."""

    failed_line_every: int = 0  # such lines fail with HTTP 500 in the error file (on each batch they are in)
    expire_batches: int = 0  # the first N batches expire: the first half of their lines answered, the rest not
    reject_batches: int = 0  # the first N batches fail validation: status "failed", no output at all
    lose_batches: int = 0  # the first N batches are forgotten once created: retrieving them answers 404


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


def _key(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def duration(seconds: float) -> str:
    """A duration as OpenAI writes it in reset headers: "12ms", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3g}s" if minutes else f"{rest:.3g}s"


def _picked(key: str, every: int) -> bool:
    return every > 0 and int(key[:8], 16) % every == 0


def names_in(text: str, limit: int = 5) -> list[str]:
    counts = Counter(w for w in _NAME.findall(text) if w not in _COMMON)
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def _first_sentence_with(text: str, name: str) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if name in sentence:
            return " ".join(sentence.split())[:160]
    return ""


def _between(text: str, start: str, end: str) -> str:
    head = text.rsplit(start, 1)[-1]
    return head.split(end, 1)[0] if end in head else head


DEFAULT_TYPES = ["PERSON", "GEO", "ORGANIZATION", "EVENT"]


def listed_types(prompt: str) -> list[str]:
    """The entity types an extraction prompt lists; the default four in a fixed order for the default prompt."""
    found = re.search(r"^Entity types: (.+)$", prompt, re.MULTILINE)
    types = [t.strip().upper() for t in found.group(1).split(",")] if found else []
    return DEFAULT_TYPES if not types or set(types) == set(DEFAULT_TYPES) else types


_NOT_KINDS = frozenset("other same first last whole next following former latter".split())


def kind_words(text: str) -> list[str]:
    """Words that follow "the" in the text, most frequent first: what a tuning reply calls the corpus's kinds."""
    words = (w.lower() for w in re.findall(r"\b[Tt]he ([A-Za-z]{4,})\b", text))
    counts = Counter(w for w in words if w.capitalize() not in _COMMON and w not in _NOT_KINDS)
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def graph_reply(text: str, types: list[str] = DEFAULT_TYPES) -> str:
    names = names_in(text)
    records = [
        f'("entity"<|>{n.upper()}<|>{types[len(n) % len(types)]}<|>'
        f"{n} appears in the text: {_first_sentence_with(text, n)})"
        for n in names
    ]
    records += [
        f'("relationship"<|>{a.upper()}<|>{b.upper()}<|>{a} and {b} appear in the same passage'
        f"<|>{1 + (len(a) + len(b)) % 9})"
        for a, b in zip(names, names[1:])
    ]
    return "\n##\n".join(records) + "\n<|COMPLETE|>"


def gleaning_reply(text: str, kind: str = "EVENT") -> str:
    extra = [n for n in names_in(text, limit=8)[5:]]
    if not extra:
        return "<|COMPLETE|>"
    return (
        "\n##\n".join(f'("entity"<|>{n.upper()}<|>{kind}<|>{n} was found on a second look)' for n in extra)
        + "\n<|COMPLETE|>"
    )


def claims_reply(text: str) -> str:
    records = [
        f"({n.upper()}<|>NONE<|>MENTION<|>TRUE<|>NONE<|>NONE<|>{n} is mentioned in the text"
        f"<|>{_first_sentence_with(text, n)})"
        for n in names_in(text, limit=2)
    ]
    return "\n##\n".join(records) + "\n<|COMPLETE|>"


def tagged(prompt: str, tag: str) -> str:
    """The data between <tag> and </tag> (the last such block: examples come before the data)."""
    return _between(prompt, f"<{tag}>\n", f"\n</{tag}>")


def summary_reply(prompt: str) -> str:
    if "<descriptions>" in prompt:
        name, listed = _between(prompt, "all about ", ", into").strip(), tagged(prompt, "descriptions")
    else:  # another GraphRAG's prompt (the comparison benchmark)
        name, listed = _between(prompt, "Entities:", "\n").strip(), _between(prompt, "Description List:", "#######")
    descriptions = [d[2:].strip() for d in listed.splitlines() if d.startswith("- ")]
    return f"{name}: " + " ".join(sorted(descriptions))[:400]


def report_reply(prompt: str, full: bool = False) -> str:
    return community_report(tagged(prompt, "community"), full)


def report_batch_reply(prompt: str, full: bool = False) -> str:
    """One report on each community of the request, in order."""
    blocks = re.findall(r'<community id="(\d+)">\n(.*?)\n</community>', prompt, re.DOTALL)
    return json.dumps(
        {"reports": [{"community": int(n), **json.loads(community_report(data, full, 5))} for n, data in blocks]}
    )


PARAGRAPH = 600  # characters, about 100 words: 10 such findings stay under the prompt's 1,500 words


def community_report(data: str, full: bool = False, most: int = 10) -> str:
    """A report on a community's context. A finding is one row's description; `full`: as many findings as the
    report prompt asks of a model (`most`: 10, or 5 for a report of a batch), each a paragraph of the rows it
    cites (a relationship's description, then its two entities'), so that what global search reads per report is
    as long as a model's."""
    entities = _between(data, "-----Entities-----\nid,entity,description,degree\n", "\n\n").splitlines()
    names = [line.split(",")[1] for line in entities if line.count(",") >= 3]
    described = {line.split(",")[1]: line.split(",")[2] for line in entities if line.count(",") >= 3}
    reports = (
        _between(data, "-----Reports-----\ncommunity,title,report\n", "\n\n").splitlines()
        if "-----Reports-----" in data
        else []
    )
    relationships = (
        _between(data, "-----Relationships-----\nid,source,target,description,combined_degree\n", "\n\n").splitlines()
        if "-----Relationships-----" in data
        else []
    )

    def paragraph(row: list[str]) -> str:
        if not full:
            return row[3]
        return " ".join([row[3], described.get(row[1], ""), described.get(row[2], "")])[:PARAGRAPH]

    findings = [
        {
            "summary": f"{r.split(',')[1]} and {r.split(',')[2]}",
            "explanation": f"{paragraph(r.split(','))} [Data: Relationships ({r.split(',')[0]})]",
        }
        for r in relationships[: most if full else 5]
        if r.count(",") >= 4
    ]
    findings += [
        {"summary": f"Sub-community {r.split(',')[0]}", "explanation": r.split(",", 2)[-1]} for r in reports[:3]
    ]
    if "-----Sources-----" in data:  # a fast index's context: concepts and the passages they occur in
        concepts = _between(data, "-----Concepts-----\nid,concept,mentions\n", "\n\n").splitlines()
        names = [line.split(",")[1] for line in concepts if line.count(",") >= 2]
        sources = _between(data, "-----Sources-----\nid,text\n", "\n\n").splitlines()
        findings += [
            {
                "summary": f"Passage {r.split(',')[0]}",
                "explanation": f"{r.split(',', 1)[1][: PARAGRAPH if full else 160]} "
                f"[Data: Sources ({r.split(',')[0]})]",
            }
            for r in sources[: most if full else 5]
            if "," in r
        ]
    title = "Community of " + " and ".join(n.title() for n in names[:2]) if names else "Community of sub-communities"
    return json.dumps(
        {
            "title": title,
            "summary": f"{title} has {len(names)} entities in its context and {len(reports)} sub-community reports.",
            "rating": float(len(names) % 10),
            "rating_explanation": "The rating counts the entities in the context.",
            "findings": findings,
        }
    )


def generic_report_reply(data: str) -> str:
    """A well-formed report JSON about the names in any community text."""
    names = names_in(data.title(), limit=6)
    title = "Community of " + " and ".join(names[:2]) if names else "A small community"
    return json.dumps(
        {
            "title": title,
            "summary": f"{title} has {len(names)} prominent names in its context.",
            "rating": float(len(names)),
            "rating_explanation": "The rating counts the prominent names.",
            "findings": [{"summary": n, "explanation": _first_sentence_with(data.title(), n)} for n in names],
        }
    )


def _question_words(question: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", question.lower())} - {"what", "does", "from", "about", "with", "that"}


def _hits(question: str, text: str) -> int:
    lowered = text.lower()
    return sum(1 for w in _question_words(question) if w in lowered)


def lazy_search_reply(prompt: str, question: str) -> tuple[str, str] | None:
    """Lazy search's prompts. Scripted: a question splits at ' and '; a passage is relevant when it holds two of the
    question's words; a claim is the first sentence of each passage that holds one."""
    if "<concepts>" in prompt:
        parts = [p.strip(" ?") + "?" for p in question.split(" and ")] if " and " in question else [question]
        return "lazy_refine", json.dumps({"sub_questions": parts})
    if "<snippets>" in prompt:
        rows = [r.split("|", 1) for r in tagged(prompt, "snippets").splitlines() if "|" in r]
        return "lazy_relevance", json.dumps({"relevant": [int(n) for n, text in rows if _hits(question, text) >= 2]})
    if "<passages>" in prompt:
        passages = re.findall(r"^\[(\d+)\] (.*)$", tagged(prompt, "passages"), re.MULTILINE)
        claims = [
            {
                "claim": re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:200],
                "sources": [int(n)],
                "score": 20 * _hits(question, text),
            }
            for n, text in passages
            if _hits(question, text)
        ]
        return "lazy_claims", json.dumps({"claims": [{**c, "score": min(100, c["score"])} for c in claims]})
    if "<claims>" in prompt:
        rows = [r.split("|") for r in tagged(prompt, "claims").splitlines()[1:] if r.count("|") >= 2]
        cited = ", ".join(dict.fromkeys(r[2].split(",")[0].strip() for r in rows[:3]))
        return "lazy_answer", f"Answer to '{question}' from {len(rows)} claims [Data: Sources ({cited})]."
    if "<sub_answers>" in prompt:
        answers = tagged(prompt, "sub_answers").count("----Sub-question:")
        return "lazy_reduce", f"Answer to '{question}' combined from {answers} sub-answers."
    return None


def query_reply(prompt: str) -> tuple[str, str]:
    """Answers to the query prompts, derived from the question and the data the prompt carries."""
    question = tagged(prompt, "question").strip()
    lazy = lazy_search_reply(prompt, question)
    if lazy:
        return lazy
    if "<records>" in prompt:  # global search map: one point per data row that mentions the question
        rows = [r for r in tagged(prompt, "records").splitlines()[1:] if "|" in r]
        points = [
            {
                "description": f"{r.split('|')[1][:80]} bears on the question [Data: Reports ({r.split('|')[0]})]",
                "score": min(100, 10 * _hits(question, r)),
            }
            for r in rows[:20]
        ]
        return "map", json.dumps({"points": points})
    if "<points>" in prompt:
        analysts = tagged(prompt, "points").count("----Analyst")
        return "reduce", f"Answer to '{question}', merged from {analysts} analyst reports."
    if "<report>" in prompt:
        return "rate", json.dumps(
            {"reason": "word overlap", "rating": min(5, _hits(question, tagged(prompt, "report")))}
        )
    if "<reports>" in prompt:  # DRIFT's primer
        names = names_in(tagged(prompt, "reports"), limit=3)
        return "drift_primer", json.dumps(
            {
                "intermediate_answer": f"A first answer to '{question}'.",
                "score": 50,
                "follow_up_queries": [f"What is the role of {n}?" for n in names],
            }
        )
    if "<main_question>" in prompt:  # one follow-up of a DRIFT search
        follow_up = question
        # One deeper question per follow-up, so a search of depth 2 or more has something to follow.
        deeper = [] if follow_up.startswith("And then") else [f"And then, {follow_up[0].lower()}{follow_up[1:]}"]
        return "drift_local", json.dumps(
            {"response": f"On '{follow_up}': the tables answer it.", "score": 60, "follow_up_queries": deeper}
        )
    if "<answers>" in prompt:
        answers = tagged(prompt, "answers").count("\n----") + 1
        return "drift_reduce", f"Answer to '{question}' combined from {answers} intermediate answers."
    if "<earlier_questions>" in prompt:
        names = names_in(tagged(prompt, "tables"), limit=5)
        return "questions", "\n".join(f"- What happens to {n}?" for n in names)
    records = tagged(prompt, "tables" if "<tables>" in prompt else "sources").count("\n")
    return "answer", f"Answer to '{question}' from {records} records [Data: Sources (0, 1)]."


_REPORT_ROW = re.compile(r"^(\d+)\|([^|\n]*)\|", re.MULTILINE)


def microsoft_query_reply(system: str, question: str) -> tuple[str, str]:
    """Answers to Microsoft GraphRAG's query prompts (a system prompt, then the question), for the test
    that runs its query engine on our export: a map point per report row, and answers that say what they read."""
    data = system.split("---Data tables---", 1)[-1]
    if "list of key points" in system:
        points = [
            {
                "description": f"{title} bears on the question [Data: Reports ({number})]",
                "score": 50 + _hits(question, title),
            }
            for number, title in _REPORT_ROW.findall(data)
        ]
        return "ms_map", json.dumps({"points": points})
    if "---Analyst Reports---" in system:
        return "ms_reduce", f"Answer to '{question}', merged from {system.count('----Analyst')} analyst reports."
    tables = re.findall(r"^-----(\w+)-----$", data, re.MULTILINE)
    return "ms_answer", f"Answer to '{question}' from the tables {', '.join(tables)}."


def distinct_words(text: str) -> int:
    return len(set(re.findall(r"[a-z]+", text.lower())))


def key_phrase(statement: str) -> str:
    """What the scripted judge looks for in an answer: the statement's last word, in lower case."""
    return re.findall(r"[a-z]+", statement.lower())[-1]


def _count_asked(prompt: str) -> int:
    return int(re.search(r"(?:Name|Write) (\d+)", prompt).group(1))


def structured_reply(prompt: str) -> tuple[str, str] | None:
    """Entity resolution and the evaluation's prompts. Scripted: two names are one entity when they end with the
    same word; the judge prefers the answer with more distinct words, equal is a tie."""
    if "<pairs>" in prompt:  # entity resolution: the same entity when both names end with the same word
        pairs = re.findall(r"^\d+\. ([^(|]+?) \(.*?\) \| ([^(]+?) \(", tagged(prompt, "pairs"), re.MULTILINE)
        return "resolve", json.dumps({"same": [a.split()[-1] == b.split()[-1] for a, b in pairs]})
    if "<statement>" in prompt:  # assertion scoring: supported when the answer holds the statement's key phrase
        phrase = key_phrase(tagged(prompt, "statement"))
        supported = phrase in tagged(prompt, "answer").lower()
        return "assertion", json.dumps(
            {"reasoning": f"{phrase!r} {'found' if supported else 'missing'}", "supported": supported}
        )
    if "<answer_1>" in prompt:
        first, second = distinct_words(tagged(prompt, "answer_1")), distinct_words(tagged(prompt, "answer_2"))
        winner = 1 if first > second else 2 if second > first else 0
        return "judge", json.dumps({"reasoning": f"{first} against {second} distinct words", "winner": winner})
    if "<answer>" in prompt:
        claims = [c.strip() for c in re.split(r"[.;]\s+|,\s+", tagged(prompt, "answer")) if c.strip()]
        return "claims_of_answer", json.dumps({"claims": claims})
    if '{"domain":' in prompt:  # prompt tuning: the corpus's kinds are the words that follow "the" most often
        kinds = kind_words(tagged(prompt, "passages")) or ["thing"]
        profile = {
            "domain": f"passages about {' and '.join(kinds[:2])}",
            "persona": f"A reader who follows the {kinds[0]} closely",
            "language": "English",
        }
        return "tune_corpus", json.dumps(profile)
    if '{"entity_types":' in prompt:
        most = int(re.search(r"from 2 to (\d+)", prompt).group(1))
        kinds = kind_words(tagged(prompt, "passages"))[:most]
        return "tune_entity_types", json.dumps({"entity_types": kinds if len(kinds) >= 2 else ["person", "place"]})
    if '{"personas":' in prompt:
        return "personas", json.dumps({"personas": [f"Reader {i}" for i in range(_count_asked(prompt))]})
    if '{"tasks":' in prompt:
        persona = tagged(prompt, "persona").strip()
        return "tasks", json.dumps({"tasks": [f"{persona} task {i}" for i in range(_count_asked(prompt))]})
    if '{"questions":' in prompt and "<passage>" in prompt:  # data-local: about a name the passage mentions
        names = names_in(tagged(prompt, "passage"), limit=3) or ["the weather"]
        asked = [f"What happens to {names[i % len(names)]} here, detail {i}?" for i in range(_count_asked(prompt))]
        return "data_local_questions", json.dumps({"questions": asked})
    if '{"questions":' in prompt and "<notes>" in prompt:
        asked = [f"What recurs across the whole corpus, theme {i}?" for i in range(_count_asked(prompt))]
        return "data_global_questions", json.dumps({"questions": asked})
    if '{"questions":' in prompt:
        who, task = tagged(prompt, "persona").strip(), tagged(prompt, "task").strip()
        scope = "detail" if "one passage of the corpus can answer" in prompt else "theme"
        asked = [
            f"What does the corpus say about {task.lower()} for {who.lower()}, {scope} {i}?"
            for i in range(_count_asked(prompt))
        ]
        return "sensemaking_questions", json.dumps({"questions": asked})
    if "<reports>" in prompt and "<question>" not in prompt:
        names = names_in(tagged(prompt, "reports"), limit=3)
        return "corpus_description", f"A corpus about {', '.join(names) or 'many things'}."
    return None


CORRECTION_MARK = "Your previous reply could not be used"
# Replies that are prose by design: "prose instead of the format" is no fault for them.
PROSE_KINDS = frozenset({"summarize", "reduce", "answer", "drift_reduce", "questions", "corpus_description", "other"})
REFUSAL = "I'm sorry, I can't help with that."


def wrong_kind_reply(kind: str, text: str) -> str | None:
    """A well-formed reply to another prompt than the one asked, as a confused model gives."""
    if kind in ("claims", "claims_gleaning"):
        return graph_reply(text)
    if kind in ("extract", "gleaning"):
        return claims_reply(text) if names_in(text) else None
    if kind == "report":
        return json.dumps({"title": "A title", "summary": "A summary", "rating": 5.0, "rating_explanation": ""})
    return None


def chat_reply(messages: list[dict], more_gleaning: bool = False, full_reports: bool = False) -> tuple[str, str]:
    """(kind, reply) for a conversation. `more_gleaning`: answer Y when asked whether entities were missed.
    `full_reports`: community reports as long as the prompt asks (see community_report)."""
    if len(messages) > 2 and CORRECTION_MARK in messages[-1]["content"]:
        kind, reply = chat_reply(messages[:-2], more_gleaning, full_reports)
        return f"{kind}_corrected", reply
    first, last = messages[0]["content"], messages[-1]["content"]
    if messages[0]["role"] == "system" and ("---Data tables---" in first or "---Analyst Reports---" in first):
        return microsoft_query_reply(first, last)
    if messages == [{"role": "user", "content": "ping"}]:
        return "probe", "pong"
    if len(messages) > 1 and "Y or N" in last:
        return "loop", "Y" if more_gleaning else "N"
    text = tagged(first, "text") if "<text>" in first else _between(first, "Text:", "Output:")
    if "Claims to look for:" in first:
        return ("claims_gleaning", "<|COMPLETE|>") if len(messages) > 1 else ("claims", claims_reply(text))
    if "Entity types:" in first or "Entity_types:" in first:  # ours, or another GraphRAG's
        if len(messages) > 1:
            return "gleaning", gleaning_reply(text, listed_types(first)[-1])
        return "extract", graph_reply(text, listed_types(first))
    evaluated = structured_reply(first)
    if evaluated:
        return evaluated
    if '<community id="' in first:
        return ("report_batch_repair" if len(messages) > 1 else "report_batch"), report_batch_reply(first, full_reports)
    if "<community>" in first:
        return ("report_repair" if len(messages) > 1 else "report"), report_reply(first, full_reports)
    if "# Real Data" in first and "report" in first:  # another GraphRAG's report prompt (the comparison benchmark)
        return "report", generic_report_reply(_between(first, "# Real Data", "Output:"))
    if "<descriptions>" in first or "Description List:" in first:
        return "summarize", summary_reply(first)
    if "<question>" in first or "<earlier_questions>" in first:
        return query_reply(first)
    return "other", "I have no answer for this prompt."


def embedding(text: str, dimensions: int) -> list[float]:
    """Hashed bag of words, normalised: texts sharing words get similar vectors."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z]+", text.lower()):
        h = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
        vector[h % dimensions] += 1.0 if (h >> 16) % 2 else -1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body, as the openai client uploads a file."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    return {
        part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
        for part in message.iter_parts()
    }


class FakeOpenAIServer:
    def __init__(
        self,
        faults: Faults | None = None,
        latency_seconds: float = 0.0,
        requests_per_minute: int = 0,
        tokens_per_minute: int = 0,
        rate_window_seconds: float = 60.0,
        rate_limit_headers: bool = True,
        latency_per_token_seconds: float = 0.0,
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
        keys = [_key(json.dumps(messages[:k]).encode()) for k in range(1, len(messages) + 1)]
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

    def upload(self, content: bytes, purpose: str) -> dict:
        with self._lock:
            file_id = f"file-{len(self.files) + 1:06d}"
            self.files[file_id] = content
            self.uploads += purpose == "batch"
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": "requests.jsonl",
            "purpose": purpose,
            "status": "processed",
        }

    def create_batch(self, request: dict) -> tuple[int, dict]:
        if request.get("input_file_id") not in self.files:
            return 400, {"error": {"message": f"no file {request.get('input_file_id')}"}}
        with self._lock:
            number = len(self.batches) + 1
            batch = {
                "id": f"batch_{number:06d}",
                "object": "batch",
                "endpoint": request["endpoint"],
                "input_file_id": request["input_file_id"],
                "completion_window": request.get("completion_window", "24h"),
                "status": "in_progress",
                "created_at": int(time.time()),
                "metadata": request.get("metadata"),
                "output_file_id": None,
                "error_file_id": None,
                "errors": None,
                "request_counts": {
                    "total": len(self.files[request["input_file_id"]].splitlines()),
                    "completed": 0,
                    "failed": 0,
                },
                "_number": number,
                "_created": time.monotonic(),
            }
            self.batches[batch["id"]] = batch
        return 200, self._public(batch)

    def retrieve_batch(self, batch_id: str) -> tuple[int, dict]:
        batch = self.batches.get(batch_id)
        self.batch_checks[batch_id] += 1
        if batch is None or batch["_number"] <= self.batch_faults.lose_batches:
            return 404, {"error": {"message": f"No batch found with id '{batch_id}'."}}
        with self._lock:
            due = batch["status"] == "in_progress" and time.monotonic() - batch["_created"] >= self.batch_seconds
            if due:
                batch["status"] = "finalizing"  # processed once, however many checks come at once
        if due:
            self._process(batch)
        return 200, self._public(batch)

    def cancel_batch(self, batch_id: str) -> tuple[int, dict]:
        batch = self.batches.get(batch_id)
        if batch is None:
            return 404, {"error": {"message": f"No batch found with id '{batch_id}'."}}
        with self._lock:
            due = batch["status"] == "in_progress"
            if due:
                batch["status"] = "cancelling"
        if due:
            self._process(batch, cancelled=True)
        return 200, self._public(batch)

    @staticmethod
    def _public(batch: dict) -> dict:
        return {k: v for k, v in batch.items() if not k.startswith("_")}

    def _process(self, batch: dict, cancelled: bool = False) -> None:
        """Answer the batch's lines as the synchronous endpoints would, into an output and an error file."""
        faults, number = self.batch_faults, batch["_number"]
        if number <= faults.reject_batches:
            batch.update(
                status="failed",
                errors={
                    "object": "list",
                    "data": [
                        {"code": "invalid_request", "message": "injected: the input file failed validation", "line": 1}
                    ],
                },
            )
            return
        lines = [json.loads(line) for line in self.files[batch["input_file_id"]].splitlines() if line.strip()]
        expires = number <= faults.expire_batches
        answered, failed = [], []
        for index, line in enumerate(lines):
            body, custom_id = line["body"], line["custom_id"]
            key = _key(json.dumps(body, sort_keys=True).encode())
            entry = {"id": f"batch_req_{number}_{index}", "custom_id": custom_id}
            if cancelled or (expires and index >= len(lines) // 2):
                code = "batch_cancelled" if cancelled else "batch_expired"
                failed.append(entry | {"response": None, "error": {"code": code, "message": f"injected: {code}"}})
                continue
            if line["url"] != batch["endpoint"] or (
                self.azure_deployments and body.get("model") not in self.azure_deployments
            ):
                failed.append(
                    entry
                    | {
                        "response": {
                            "status_code": 400,
                            "body": {
                                "error": {
                                    "message": f"url {line['url']} or model {body.get('model')} is not the batch's"
                                }
                            },
                        },
                        "error": None,
                    }
                )
                continue
            if _picked(key, faults.failed_line_every):
                failed.append(
                    entry
                    | {
                        "response": {"status_code": 500, "body": {"error": {"message": "injected: the line failed"}}},
                        "error": None,
                    }
                )
                continue
            if batch["endpoint"].endswith("/embeddings"):
                status, payload = self.embeddings_response(body, key, via="batch")
            else:
                kind, reply, finish_reason = self.chat_content(body, key)
                status, payload = 200, self.chat_completion(body, key, kind, reply, finish_reason, via="batch")
            (answered if status == 200 else failed).append(
                entry | {"response": {"status_code": status, "request_id": entry["id"], "body": payload}, "error": None}
            )
        for name, entries in (("output_file_id", answered), ("error_file_id", failed)):
            if entries:
                batch[name] = self.upload("".join(json.dumps(e) + "\n" for e in entries).encode(), "batch_output")["id"]
        batch["request_counts"] = {"total": len(lines), "completed": len(answered), "failed": len(failed)}
        batch["status"] = "cancelled" if cancelled else "expired" if expires else "completed"

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
                key = _key(body)
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
