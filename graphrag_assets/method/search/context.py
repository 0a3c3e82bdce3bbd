"""What every query method shares: the index it reads, nearest neighbours, packing, results."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..embeddings.text import LocalEmbedder
from ..graph.records import check_answer_text
from ..ingest.tokens import count_tokens, truncate_to_tokens
from ..prompts import user_message
from ..schema import records, vector_matrix

EXTRACTIVE_LABEL = "**Extractive answer (offline engine: no model wrote this; sentences are quoted from the index).**"
NO_ANSWER = "I do not know: no relevant information was found in the index for this question."


@dataclass
class Index:
    """The tables of one indexed corpus that the query methods read."""

    entities: pl.DataFrame
    relationships: pl.DataFrame
    covariates: pl.DataFrame
    communities: pl.DataFrame
    reports: pl.DataFrame
    text_units: pl.DataFrame
    documents: pl.DataFrame
    embeddings: pl.DataFrame  # id, kind, embedding (FLOAT[]): polars, so vectors stay one buffer, not a list each
    local_embedder: LocalEmbedder | None = None
    # Accepted aliases, variant id -> canonical id: `entities` and `relationships` are the resolved graph, where an
    # alias group is one entity, and a variant found by vector search stands for its canonical entity.
    aliases: dict[str, str] = field(default_factory=dict)
    # Kinds of vectors searched through an HNSW index instead of `embeddings` (large corpora): kind -> index,
    # any object with nearest(query, k) and all() (store/vector_index.py's NearestIndex).
    approximate: dict = field(default_factory=dict)
    # BM25 over the corpus's text units, entities and reports: any object with search(kind, text, k) -> [(id,
    # score)] (store/keyword_index.py's KeywordIndex); None searches by vectors alone.
    keywords: object | None = None

    def __post_init__(self) -> None:
        # A community carried down to a deeper level unsplit is a copy of the community Leiden made (or an imported
        # index holds): contexts and answers cite it by that community's number, one that exists in any export.
        carried = dict(zip(self.communities["community"].to_list(), self.communities["carried_from"].to_list()))

        def original(number: int) -> int:
            while (parent := carried.get(number)) is not None and parent >= 0:
                number = parent
            return number

        cited_as = [original(c) for c in self.reports["community"].to_list()]
        self.reports = self.reports.with_columns(cited_as=pl.Series(cited_as, dtype=pl.Int64))
        self._rows: dict[str, dict[str, tuple]] = {}
        self._numbers: dict[str, dict[str, int]] = {}

    def rows(self, table: str) -> dict[str, tuple]:
        """A small table's rows by id (named tuples: row.title), made once: the methods look them up one at a
        time. Text units are never all made Python objects: see rows_of and texts."""
        if table not in self._rows:
            self._rows[table] = {row.id: row for row in records(getattr(self, table))}
        return self._rows[table]

    def rows_of(self, table: str, ids: Iterable[str]) -> list[tuple]:
        """The rows of these ids, in their order; an id the table lacks is skipped."""
        ids = list(ids)
        found = {row.id: row for row in records(getattr(self, table).filter(pl.col("id").is_in(ids)))}
        return [found[i] for i in ids if i in found]

    def texts(self, ids: Iterable[str] | None = None) -> dict[str, str]:
        """Text unit id -> its text, for these ids (all when None)."""
        units = self.text_units if ids is None else self.text_units.filter(pl.col("id").is_in(list(ids)))
        return dict(units.select("id", "text").iter_rows())

    def document_titles(self) -> dict[str, str]:
        """Document id -> its title."""
        return {document: row.title for document, row in self.rows("documents").items()}

    def citation_numbers(self, kind: str) -> dict[str, int]:
        """Record id -> the number answers cite it by: a report's original community, a text unit's position.
        Made once per kind: an extractive answer cites each of its sentences."""
        if kind not in self._numbers:
            if kind == "reports":
                self._numbers[kind] = {report: row.cited_as for report, row in self.rows("reports").items()}
            else:
                self._numbers[kind] = {unit: n for n, unit in enumerate(self.text_units["id"].to_list())}
        return self._numbers[kind]

    def cite(self, kind: str, ids: list[str]) -> str:
        """Record ids as the context tables show them: report community numbers, text unit positions."""
        numbers = self.citation_numbers(kind)
        return ", ".join(str(numbers[i]) for i in ids if i in numbers)

    def report_text(self) -> dict[str, str]:
        """Report summaries and findings as plain sentences, for extractive answers."""
        return {
            r.id: " ".join([r.summary] + [f["explanation"] for f in json.loads(r.findings or "[]")])
            for r in records(self.reports)
        }

    @property
    def levels(self) -> list[int]:
        return sorted(self.communities["level"].unique().to_list())

    def vectors(self, kind: str) -> tuple[list[str], np.ndarray]:
        if kind in self.approximate:
            return self.approximate[kind].all()
        rows = self.embeddings.filter(pl.col("kind") == kind)
        if rows.is_empty():
            return [], np.zeros((0, 1), dtype=np.float32)
        return rows["id"].to_list(), vector_matrix(rows["embedding"])

    def close(self) -> None:
        """Release the HNSW indexes' files and the keyword index."""
        for searcher in self.approximate.values():
            searcher.close()
        if self.keywords is not None:
            self.keywords.close()

    def nearest(self, kind: str, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The k vectors of a kind most similar to the query, best first: by the HNSW index where the kind has
        one, else by the exact scan."""
        if kind in self.approximate:
            return self.approximate[kind].nearest(query, k)
        return nearest(query, *self.vectors(kind), k)

    def keyword_search(self, kind: str, text: str, k: int) -> list[tuple[str, float]]:
        """The k records of a kind whose words best match the text (BM25), best first; none without a keyword
        index."""
        return self.keywords.search(kind, text, k) if self.keywords is not None else []

    def hybrid(self, kind: str, query: np.ndarray, text: str, k: int, keyword_weight: float) -> list[Found]:
        """The k records of a kind best for a question: its nearest vectors and its best keyword matches, fused by
        reciprocal rank. `keyword_weight` is a keyword rank's weight against a vector rank's 1 (0: vectors alone)."""
        rankings = {"vector": [i for i, _ in self.nearest(kind, query, k)]}
        if keyword_weight > 0:
            rankings["keyword"] = [i for i, _ in self.keyword_search(kind, text, k)]
        return reciprocal_rank_fusion(rankings, {"vector": 1.0, "keyword": keyword_weight})[:k]


Found = tuple[str, list[str]]  # a record's id and the retrievers that found it ("vector", "keyword")
RRF_K = 60  # reciprocal rank fusion's constant (Cormack, Clarke and Buettcher, 2009): deep ranks still count a little


def reciprocal_rank_fusion(rankings: dict[str, list[str]], weights: dict[str, float], k: int = RRF_K) -> list[Found]:
    """Ids ranked by the weighted sum of 1 / (k + rank) over the rankings that hold them, each with the names of
    those rankings. Ties keep the order the ids were first met in (the first ranking's first)."""
    scores: dict[str, float] = {}
    found: dict[str, list[str]] = {}
    for name, ids in rankings.items():
        for rank, record in enumerate(dict.fromkeys(ids), start=1):
            scores[record] = scores.get(record, 0.0) + weights.get(name, 1.0) / (k + rank)
            found.setdefault(record, []).append(name)
    return [(record, found[record]) for record in sorted(scores, key=lambda r: -scores[r])]


@dataclass
class SearchResult:
    answer: str
    extractive: bool
    context_tokens: int
    context: dict = field(default_factory=dict)  # ids by kind ("reports", "entities", ...), "points" with scores
    details: dict = field(default_factory=dict)  # method-specific figures (reports rated, follow-ups, ...)

    def context_json(self) -> str:
        return json.dumps(self.context, sort_keys=True, default=str)


async def embed_query(chat_or_embedder, index: Index, text: str) -> np.ndarray:
    """The question in the same vector space as the index: the embedding model, or the offline model."""
    if chat_or_embedder is None:
        if index.local_embedder is None:
            raise LookupError("the index has no offline embedding model: materialize text_embeddings first")
        return index.local_embedder.embed([text])[0]
    vectors = await chat_or_embedder.embed([text])
    if vectors is None:
        raise RuntimeError("the embedding model failed to embed the question after retries")
    return np.asarray(vectors[0], dtype=np.float32)


def nearest(query: np.ndarray, ids: list[str], matrix: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The k ids most similar to the query by cosine similarity, best first."""
    if not ids:
        return []
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    scores = matrix @ query / np.where(norms == 0, 1.0, norms)
    order = np.argsort(-scores, kind="stable")[:k]
    return [(ids[i], float(scores[i])) for i in order]


def pack(records: list[tuple[str, str]], header: str, budget: int) -> tuple[str, list[str], int]:
    """Records (id, line) under a header until the token budget is full: (text, ids packed, tokens)."""
    lines, ids, used = [header], [], count_tokens(header)
    for record_id, line in records:
        cost = count_tokens(line) + 1
        if used + cost > budget:
            break
        lines.append(line)
        ids.append(record_id)
        used += cost
    return "\n".join(lines), ids, used


def windows(records: list[tuple[str, str]], header: str, budget: int) -> list[tuple[str, list[str], int]]:
    """Consecutive packs covering all records; a record larger than a window is cut to fit."""
    result, start = [], 0
    while start < len(records):
        text, ids, used = pack(records[start:], header, budget)
        if not ids:  # one record alone exceeds the window: keep its beginning
            record_id, line = records[start]
            line = truncate_to_tokens(line, budget - count_tokens(header) - 2)
            text, ids, used = f"{header}\n{line}", [record_id], count_tokens(header) + count_tokens(line) + 1
        result.append((text, ids, used))
        start += len(ids)
    return result


# What an answer says when the model calls that would have written it failed: the context is still recorded.
MODEL_FAILED = "The model call failed after retries; the context it would have read is recorded."


async def written_answer(
    chat, prompt: str, context_data: str, question: str, response_type: str, conversation: list[dict] | None
) -> str | None:
    """The model's answer from one context, as the local, basic and DRIFT reduce prompts ask for it: the checked
    text, or None when the calls failed."""
    return await chat.complete(
        user_message(
            prompt,
            context_data=context_data,
            question=question,
            response_type=response_type,
            conversation=conversation_block(conversation),
        ),
        parse=check_answer_text,
    )


def conversation_block(conversation: list[dict] | None) -> str:
    """The earlier turns, for a prompt's {conversation} slot; nothing when there are none."""
    if not conversation:
        return ""
    turns = "\n".join(f"{turn['role']}: {turn['content']}" for turn in conversation)
    intro = "The question follows on from these earlier turns of the conversation:"
    return f"{intro}\n<conversation>\n{turns}\n</conversation>\n\n"


def with_recent_turns(question: str, conversation: list[dict] | None, turns: int = 2) -> str:
    """The text that chooses the context: the question after the user's most recent earlier turns, so that a
    follow-up like "what happens to him?" finds the entity the conversation is about."""
    recent = [turn["content"] for turn in conversation or [] if turn["role"] == "user"][-turns:]
    return "\n".join([*recent, question])


def csv_line(*values: object) -> str:
    return "|".join(str(v).replace("\n", " ").replace("|", "/") for v in values)
