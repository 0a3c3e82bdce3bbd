"""Answering from the store: each published corpus's index kept in memory, answers recorded through the journal.

The store is read in short read-only connections and written in short transactions, never held open while idle:
an index run (another process) can always take it. A newer publication of a corpus is noticed by polling a small
query, loaded beside the old index and swapped in whole; a question holds the index it started with, so no answer
reads two publications.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import polars as pl
from tabulate import tabulate

from .. import settings
from ..method import defaults
from ..method.schema import records
from ..method.search.context import Index, embed_query
from ..store.connection import connect
from .asking import Answer, Question, QuestionRefused, answer, check, check_level, options_for
from .options import CONVERSATIONAL, METHODS
from .published import Publication, load_index, publication, versions
from .records import AnswerJournal, stored_answer
from .sources import whole

if TYPE_CHECKING:
    from ..models import ModelSettings

log = logging.getLogger(__name__)


class StoreBusy(RuntimeError):
    """Another process holds the store for longer than a question may wait."""


class UnknownCorpus(LookupError):
    """No published index by that name (or none the asker may read: the same words, so a key learns nothing of the
    corpora outside its scope)."""

    def __init__(self, corpus: str | None):
        super().__init__(
            f"corpus {corpus!r} has no published index: index it with `graphrag-assets index --corpus {corpus}`"
        )


class UnknownAnswer(LookupError):
    """No recorded answer by that id."""


class UnknownDocument(LookupError):
    """No document by that id in the corpus's published index."""


@dataclass
class _Loaded:
    publication: Publication
    index: Index


def capped(chat, embeddings, max_cost_usd: float | None):
    """The endpoints with one budget for the question's chat and embedding requests together (None: as they are);
    BudgetReached fails the answer in one line before a request could pass it."""
    if max_cost_usd is None:
        return chat, embeddings
    cap = {"max_cost_usd": max_cost_usd, "budget_key": f"question-{uuid.uuid4()}", "spending_file": None}
    return tuple(dataclasses.replace(s, **cap) if s is not None else None for s in (chat, embeddings))


def endpoint_settings_from_environment() -> tuple[ModelSettings | None, ModelSettings | None]:
    """The chat and embedding endpoints the environment configures (None: the offline engine), as the index's
    resources would be configured from it."""
    if not any(os.getenv(v) for v in ("GRAPHRAG_API_BASE", "GRAPHRAG_EMBEDDING_API_BASE", settings.API_KEY_VARIABLE)):
        return None, None  # offline: no need to load the model client
    from ..resources import ChatModelResource, EmbeddingModelResource

    key = os.getenv(settings.API_KEY_VARIABLE)
    chat = ChatModelResource(**settings.endpoint_settings("chat", key))
    embeddings = EmbeddingModelResource(**settings.endpoint_settings("embeddings", key))
    return (
        chat.settings() if chat.configured else None,
        embeddings.settings() if embeddings.configured else None,
    )


class AnswerService:
    def __init__(
        self,
        database: str = settings.DATABASE,
        *,
        data_path: str | None = settings.DUCKLAKE_DATA_PATH,
        vector_index_dir: str | None = settings.VECTOR_INDEX_DIR,
        journal: AnswerJournal | None = None,
        chat: ModelSettings | None = None,
        embeddings: ModelSettings | None = None,
        observe: Callable[[list[tuple[str, dict]]], None] | None = None,
        store_wait_seconds: float = 10.0,
    ):
        self.database, self.data_path, self.vector_index_dir = database, data_path, vector_index_dir
        self.journal = journal or AnswerJournal(settings.answer_queue_path(database))
        self.chat, self.embeddings = chat, embeddings
        self.observe = observe or (lambda answers: None)
        self.store_wait_seconds = store_wait_seconds
        # DuckDB refuses a read-write connection in a process that has a read-only one open to the same file:
        # this process's connections take turns.
        self._store_lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._versions: dict[str, str] = {}
        self._loaded: dict[str, _Loaded] = {}
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self.last_refresh: float = 0.0

    # -- the store, briefly ------------------------------------------------------------------------------------
    @contextmanager
    def store(self, read_only: bool = True, wait: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short connection; while another process writes the file, tried again for `wait` seconds. Every
        connection of this process goes through here, one at a time: DuckDB opens a file with one configuration per
        process, so a read-only one opened while the flush held the file read-write would fail."""
        deadline = time.monotonic() + (self.store_wait_seconds if wait is None else wait)
        while True:
            with self._store_lock:
                try:
                    conn = connect(self.database, data_path=self.data_path, read_only=read_only)
                except duckdb.IOException as problem:
                    if "lock" not in str(problem).lower() and "no such file" not in str(problem).lower():
                        raise
                    if time.monotonic() >= deadline:
                        raise StoreBusy(
                            f"the store {self.database} stayed busy for {wait or self.store_wait_seconds:g} s "
                            "(an index run is writing it): ask again in a moment"
                        ) from None
                else:
                    try:
                        yield conn
                    finally:
                        conn.close()
                    return
            time.sleep(0.05)

    # -- what is published -------------------------------------------------------------------------------------
    def refresh(self, wait: float = 0.0) -> bool:
        """Notice new and newer publications; load and swap in the indexes that changed. False when the store was
        busy (the indexes in memory keep answering)."""
        try:
            with self.store(wait=wait) as conn:
                found = versions(conn)
                changed = {c: v for c, v in found.items() if self._versions.get(c) != v}
                publications = {c: publication(conn, c, v) for c, v in changed.items()}
                indexes = {
                    c: load_index(conn, c, self.vector_index_dir) for c, p in publications.items() if p is not None
                }
        except (StoreBusy, duckdb.IOException):
            return False
        except duckdb.CatalogException:  # the store is being created: no tables yet
            return False
        for corpus, index in indexes.items():
            _warm(index)
            with self._load_lock:
                self._loaded[corpus] = _Loaded(publications[corpus], index)  # whole, in one assignment
            log.info("answering %s from its index of %s", corpus, publications[corpus].published_at)
        with self._load_lock:
            for corpus in set(self._loaded) - set(found):  # a corpus whose rows were deleted
                del self._loaded[corpus]
            self._versions.update({c: v for c, v in changed.items() if c in indexes or publications[c] is None})
        self.last_refresh = time.monotonic()
        return True

    def corpora(self) -> list[Publication]:
        with self._load_lock:
            return sorted((loaded.publication for loaded in self._loaded.values()), key=lambda p: p.corpus)

    def loaded(self, corpus: str) -> _Loaded:
        with self._load_lock:
            found = self._loaded.get(corpus)
        if found is None and not self._poller:  # one-shot use (the CLI): read the store now
            self.refresh(wait=self.store_wait_seconds)
            with self._load_lock:
                found = self._loaded.get(corpus)
        if found is None:
            raise UnknownCorpus(corpus)
        return found

    # -- asking ------------------------------------------------------------------------------------------------
    def ask(
        self, question: Question, asked_by: str = "local", allowed: Callable[[str], bool] = lambda corpus: True
    ) -> Answer:
        """Answer a question of a published corpus and record it; a follow-up continues a recorded answer's
        conversation (its corpus, method and level unless the question gives them). Raises QuestionRefused,
        UnknownCorpus, UnknownAnswer or AnswerFailed."""
        q = question
        check_level(q.level)
        corpus, method, level, conversation = q.corpus, q.method, q.level, q.conversation
        if q.follow_up:
            earlier = self.conversation_of(q.follow_up, allowed)
            corpus = corpus or earlier["corpus"]
            method = method or earlier["method"]
            level = level if level is not None else earlier["level"]
            conversation = [*earlier["turns"], *(conversation or [])]
        if not corpus or not allowed(corpus):
            raise UnknownCorpus(corpus)
        method = method or "global"
        loaded = self.loaded(corpus)
        options = options_for(method, q.text, level, q.dynamic, conversation, **q.settings)
        check(method, options, loaded.index, self.embeddings is not None, self.chat is not None)
        chat, embeddings = capped(self.chat, self.embeddings, q.max_cost_usd)
        found = answer(corpus, loaded.index, method, options, chat, embeddings, loaded.publication.version)
        self.journal.add(corpus, found.row(asked_by))
        return found

    def suggestions(self, corpus: str, questions: list[str], count: int = 3) -> tuple[list[str], dict[str, int]]:
        """Questions to ask next after these, from the question-generation method, and the tokens it spent; not
        recorded: a front-end's suggestions are not answers. Raises as `ask` does."""
        loaded = self.loaded(corpus)
        options = METHODS["question_generation"].options(previous_questions=questions, question_count=count)
        check("question_generation", options, loaded.index, self.embeddings is not None, self.chat is not None)
        found = answer(corpus, loaded.index, "question_generation", options, self.chat, self.embeddings)
        spent = {unit: found.usage[unit] for unit in ("prompt_tokens", "completion_tokens")}
        return found.result.details.get("questions", []), spent

    def conversation_of(self, answer_id: str, allowed: Callable[[str], bool] = lambda corpus: True) -> dict:
        """The corpus, method, level and turns (its own question and answer last) of a recorded answer."""
        corpus, row = self.stored(answer_id, allowed)
        if row["method"] not in CONVERSATIONAL:
            raise QuestionRefused(f"answer {answer_id} is a list of suggested questions: it has no conversation")
        turns = row["conversation"]
        turns = turns if isinstance(turns, list) else json.loads(turns or "[]")
        return {
            "corpus": corpus,
            "method": row["method"],
            "level": None if _missing(row["community_level"]) else int(row["community_level"]),
            "turns": [
                *turns,
                {"role": "user", "content": row["question"]},
                {"role": "assistant", "content": row["answer"]},
            ],
        }

    def stored(self, answer_id: str, allowed: Callable[[str], bool] = lambda corpus: True) -> tuple[str, dict]:
        """(corpus, row) of a recorded answer, queued or in the store."""
        found = self.journal.get(answer_id)
        if found is None:
            with self.store() as conn:
                found = stored_answer(conn, answer_id)
        if found is None or not allowed(found[0]):
            raise UnknownAnswer(f"no answer {answer_id!r} is recorded: use the answer id that an answer gave")
        corpus, row = found
        with self._load_lock:
            loaded = self._loaded.get(corpus)
        if loaded is not None and row.get("sources"):
            sources = row["sources"] if isinstance(row["sources"], list) else json.loads(row["sources"])
            row = {**row, "sources": whole(sources, loaded.index)}
        return corpus, row

    def entities(self, corpus: str, text: str, limit: int = 10) -> list[dict]:
        """The entities that best match `text` (vectors and keywords fused, as local search chooses them), each with
        its description, its strongest relationships and the retrievers that found it."""
        index = self.loaded(corpus).index

        async def nearest() -> list[tuple[str, list[str]]]:
            from ..models import ModelClient

            embedder = ModelClient(self.embeddings) if self.embeddings else None
            try:
                vector = await embed_query(embedder, index, text)
            finally:
                if embedder is not None:
                    await embedder.close()
            return index.hybrid("entity", np.asarray(vector), text, limit, defaults.KEYWORD_WEIGHT)

        entities = index.rows("entities")
        found = []
        for entity_id, retrieved_by in asyncio.run(nearest()):
            entity_id = index.aliases.get(entity_id, entity_id)
            if entity_id not in entities or any(f["id"] == entity_id for f in found):
                continue
            entity = entities[entity_id]
            links = index.relationships.filter(
                (pl.col("source") == entity.title) | (pl.col("target") == entity.title)
            ).sort("weight", descending=True, nulls_last=True, maintain_order=True)
            found.append(
                {
                    "id": entity_id,
                    "title": entity.title.title(),
                    "type": entity.type,
                    "description": entity.description,
                    "retrieved_by": retrieved_by,
                    "relationships": [
                        {"source": r.source.title(), "target": r.target.title(), "description": r.description}
                        for r in records(links.head(10))
                    ],
                }
            )
        return found

    def document(self, corpus: str, document_id: str) -> dict:
        """A document's whole text, read from the store when asked (StoreBusy while an index run writes it): the
        index in memory leaves it out, since its text units hold the same text and a corpus's documents whole
        would double what a server keeps."""
        self.loaded(corpus)
        with self.store() as conn:
            found = conn.execute(
                "SELECT title, text FROM documents WHERE corpus = ? AND id = ?", [corpus, document_id]
            ).fetchone()
        if found is None:
            raise UnknownDocument(f"corpus {corpus!r} has no document {document_id!r}")
        return {"id": document_id, "title": found[0], "text": found[1]}

    # -- recording ---------------------------------------------------------------------------------------------
    def flush(self, wait: float = 0.0) -> int:
        """Write queued answers to the store if it is free within `wait` seconds; how many were written."""
        try:
            return self.journal.flush(lambda: self.store(read_only=False, wait=wait), self.observe)
        except (StoreBusy, duckdb.IOException):
            return 0

    # -- in the background -------------------------------------------------------------------------------------
    def start(self, poll_seconds: float = 1.0) -> None:
        """Load every published corpus now, then poll for publications and flush answers every `poll_seconds`."""
        self.refresh(wait=self.store_wait_seconds)
        self.flush(wait=self.store_wait_seconds)

        def loop() -> None:
            while not self._stop.wait(poll_seconds):
                try:
                    self.refresh()
                    self.flush()
                except Exception:  # the loop must outlive one bad poll; the next one tries again
                    log.exception("polling the store failed")

        self._poller = threading.Thread(target=loop, name="store-poller", daemon=True)
        self._poller.start()

    def stop(self) -> None:
        """Stop polling and write what is queued, waiting a while for the store. Safe to call again."""
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None
        self.flush(wait=self.store_wait_seconds)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _warm(index: Index) -> None:
    """Run once what the first question would otherwise pay for (the offline embedder's first call)."""
    if index.local_embedder is not None:
        index.local_embedder.embed(["warm up"])


def observe_in_dagster(answers: list[tuple[str, dict]], instance=None) -> None:
    """Answers given outside a Dagster run, as observations of their method's query asset (partition: the corpus):
    one per corpus and method for each batch written, with its figures and questions, so that the asset's page
    shows them beside the launchpad's answers. `instance`: DAGSTER_HOME's."""
    import dagster as dg

    if instance is None:
        if not os.getenv("DAGSTER_HOME"):
            return
        instance = dg.DagsterInstance.get()
    batches: dict[tuple[str, str], list[dict]] = {}
    for corpus, row in answers:
        if row["method"] in METHODS:
            batches.setdefault((corpus, row["method"]), []).append(row)
    for (corpus, method), rows in batches.items():
        costs = [row["cost_usd"] for row in rows]
        shown = [
            (row["id"], row["asked_by"], row["question"][:200], row["latency_seconds"])
            for row in rows[:_OBSERVED_QUESTIONS]
        ]
        instance.report_runless_asset_event(
            dg.AssetObservation(
                asset_key=METHODS[method].asset,
                partition=corpus,
                metadata={
                    "answers": len(rows),
                    "asked_by": ", ".join(sorted({row["asked_by"] or "" for row in rows})),
                    "model_calls": sum(row["model_calls"] for row in rows),
                    "prompt_tokens": sum(row["prompt_tokens"] for row in rows),
                    "completion_tokens": sum(row["completion_tokens"] for row in rows),
                    "cost_usd": float(sum(costs)) if not any(_missing(c) for c in costs) else "unknown",
                    "median_latency_seconds": round(statistics.median(row["latency_seconds"] for row in rows), 3),
                    "questions": dg.MetadataValue.md(
                        tabulate(shown, headers=["id", "asked_by", "question", "latency_seconds"], tablefmt="pipe")
                    ),
                    "trace_sql": "SELECT * FROM answer_sources WHERE answer_id = '<id>'",
                },
            )
        )


_OBSERVED_QUESTIONS = 20  # questions listed in one observation; the figures count them all
