"""The paper's evaluation (sections 3.2-3.3 and 4): sensemaking questions from personas and tasks, pairwise
judging of answers on four criteria, and claim-based comprehensiveness and diversity.

The model calls live here; the statistics (win rates, paired tests, claim clusters) are plain functions of
the stored rows, so they can be checked by hand. scipy, scikit-learn and rouge-score (which imports nltk) are
imported where they are used: loading the project's definitions must not pay for them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from . import defaults
from .graph.records import check_free_text, parse_json_reply
from .model_interface import ChatModel, Embedder, InvalidReply
from .prompts import user_message
from .search.context import Index, SearchResult, windows
from .search.global_search import MAP_HEADERS, global_search, report_records, text_summary_search, unit_records
from .search.lazy_search import lazy_search
from .search.local_search import basic_search
from .search.settings import BasicSearchSettings, GlobalSearchSettings, LazySearchSettings, MapReduceSettings

# The paper's criteria, in our words. Directness is its control: the broad answers GraphRAG gives should lose on it.
CRITERIA = {
    "comprehensiveness": "how much of what the question asks about the answer covers, and in how much detail",
    "diversity": "how many different perspectives, aspects and insights the answer brings to the question",
    "empowerment": "how well the answer lets the reader understand the topic and reach informed judgements of "
    "their own",
    "directness": "how plainly and specifically the answer addresses what was asked",
}


def string_list(field: str, count: int | None = None):
    """A parser for a reply {field: [strings]}; with `count`, it must hold at least that many."""

    def parse(reply: str) -> list[str]:
        data, _ = parse_json_reply(reply)
        values = data.get(field) if isinstance(data, dict) else None
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidReply(f"the reply has no list of strings under {field!r}")
        values = [v.strip() for v in values if v.strip()]
        if count is not None and len(values) < count:
            raise InvalidReply(f"asked for {count} {field}, got {len(values)}")
        return values[:count] if count is not None else values

    return parse


async def describe_corpus(chat: ChatModel, root_reports: list[str]) -> str | None:
    reports = "\n\n".join(root_reports)
    return await chat.complete(user_message("evaluation_corpus", reports=reports), parse=check_free_text)


ACTIVITY_PROMPTS = {"activity_global": "evaluation_questions", "activity_local": "evaluation_questions_local"}
_JSON_REPLY = {"response_format": {"type": "json_object"}}


async def activity_questions(
    chat: ChatModel, description: str, personas: int, tasks: int, questions: int, classes: list[str]
) -> list[dict] | None:
    """K personas x N tasks x M questions per activity class: the paper's sensemaking questions (activity_global,
    needing the whole corpus) and BenchmarkQED's activity_local ones (answerable from one passage)."""
    people = await chat.complete(
        user_message("evaluation_personas", count=personas, description=description),
        parse=string_list("personas", personas),
        **_JSON_REPLY,
    )
    if people is None:
        return None

    async def tasks_of(persona: str):
        return await chat.complete(
            user_message("evaluation_tasks", count=tasks, description=description, persona=persona),
            parse=string_list("tasks", tasks),
            **_JSON_REPLY,
        )

    work = await asyncio.gather(*(tasks_of(p) for p in people))

    async def questions_of(persona: str, task: str, question_class: str):
        asked = await chat.complete(
            user_message(
                ACTIVITY_PROMPTS[question_class], count=questions, description=description, persona=persona, task=task
            ),
            parse=string_list("questions", questions),
            **_JSON_REPLY,
        )
        return [
            {"persona": persona, "task": task, "question": q, "question_class": question_class} for q in asked or []
        ]

    asked = [(p, t, c) for p, ts in zip(people, work) for t in ts or [] for c in classes]
    found = await asyncio.gather(*(questions_of(p, t, c) for p, t, c in asked))
    return [row for rows in found for row in rows]


def questions_about(passage: str, count: int):
    """A parser for data-local questions: `count` of them, each naming something the passage mentions."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    def content_words(text: str) -> set[str]:
        return {w for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in ENGLISH_STOP_WORDS}

    in_passage = content_words(passage)
    parse_list = string_list("questions", count)

    def parse(reply: str) -> list[str]:
        asked = parse_list(reply)
        unrelated = [q for q in asked if not content_words(q) & in_passage]
        if unrelated:
            raise InvalidReply(f"these questions name nothing the passage mentions: {unrelated[:3]}")
        return asked

    return parse


async def data_local_questions(chat: ChatModel, units: list[tuple[str, str]], count: int) -> list[dict]:
    """`count` questions from each sampled text unit, each answerable from it (BenchmarkQED's data_local)."""

    async def of(unit_id: str, text: str):
        asked = await chat.complete(
            user_message("evaluation_data_local", count=count, passage=text),
            parse=questions_about(text, count),
            **_JSON_REPLY,
        )
        return [
            {"question": q, "question_class": "data_local", "metadata": json.dumps({"text_unit_id": unit_id})}
            for q in asked or []
        ]

    found = await asyncio.gather(*(of(u, t) for u, t in units))
    return [row for rows in found for row in rows]


async def data_global_questions(chat: ChatModel, description: str, notes: list[str], count: int) -> list[dict]:
    """`count` questions about the corpus as a whole, from its description and notes on its parts (BenchmarkQED's
    data_global)."""
    asked = await chat.complete(
        user_message("evaluation_data_global", count=count, description=description, notes="\n\n".join(notes)),
        parse=string_list("questions", count),
        **_JSON_REPLY,
    )
    return [{"question": q, "question_class": "data_global"} for q in asked or []]


def generation_calls(personas: int, tasks: int, describe: bool, classes: list[str], units: int = 0) -> int:
    """Chat calls the generation of `classes` makes: the description when one is needed, personas and tasks, a
    call per persona, task and activity class, one per sampled text unit, one for the data-global questions."""
    activity = [c for c in classes if c in ACTIVITY_PROMPTS]
    needs_description = bool(activity) or "data_global" in classes
    calls = int(describe and needs_description)
    if activity:
        calls += 1 + personas + personas * tasks * len(activity)
    return calls + units * ("data_local" in classes) + ("data_global" in classes)


@dataclass(frozen=True)
class QuestionSettings:
    """Which questions to generate and how many (the evaluation_questions step's config gives every value)."""

    classes: list[str]
    corpus_description: str  # empty: the model writes it from the root reports
    personas: int
    tasks_per_persona: int
    questions_per_task: int
    questions_per_text_unit: int
    data_global_questions: int

    def calls(self, sampled_units: int) -> int:
        local = sampled_units if "data_local" in self.classes else 0
        describe = not self.corpus_description
        return generation_calls(self.personas, self.tasks_per_persona, describe, self.classes, local)


async def generate_questions(
    chat: ChatModel, settings: QuestionSettings, root_notes: list[str], sampled: list[tuple[str, str]]
) -> tuple[str | None, list[dict] | None]:
    """The corpus description and the questions of every class asked for. `root_notes`: the summaries of the
    top-level reports; `sampled`: text units (id, text) for data_local, and for data_global when the
    index has no reports. (None, None) when no description could be had."""
    s, classes = settings, settings.classes
    description = ""
    if any(c != "data_local" for c in classes):
        description = s.corpus_description or await describe_corpus(chat, root_notes)
        if not description:
            return None, None
    parts = []
    activity = [c for c in classes if c in ACTIVITY_PROMPTS]
    if activity:
        parts.append(
            activity_questions(chat, description, s.personas, s.tasks_per_persona, s.questions_per_task, activity)
        )
    if "data_local" in classes and sampled:
        parts.append(data_local_questions(chat, sampled, s.questions_per_text_unit))
    if "data_global" in classes:
        notes = root_notes or [text[:500] for _, text in sampled]
        parts.append(data_global_questions(chat, description, notes, s.data_global_questions))
    found = await asyncio.gather(*parts)
    return description, [row for rows in found for row in rows or []]


_CONDITION = re.compile(r"(?P<kind>C|LGR)(?P<number>\d+)|TS|SS")


@dataclass(frozen=True)
class Condition:
    """One of the conditions answers are compared under: C<level> (global search over that level's reports), TS
    (map-reduce over the source text), SS (vector search over it), LGR<budget> (lazy search with that relevance
    budget). Parsed here and nowhere else."""

    name: str
    level: int | None = None  # of C<level>
    budget: int | None = None  # of LGR<budget>

    @classmethod
    def parse(cls, name: str) -> Condition:
        found = _CONDITION.fullmatch(name)
        if not found or (found["kind"] == "LGR" and int(found["number"]) < 1):
            raise ValueError(f"unknown condition {name!r}: use C<level>, TS, SS or LGR<relevance budget> (LGR100)")
        number = int(found["number"]) if found["number"] else None
        return cls(name, number if found["kind"] == "C" else None, number if found["kind"] == "LGR" else None)

    @property
    def order(self) -> tuple:
        """The paper's order: C0, C1, ... then TS, then the others by name (LGR..., SS)."""
        return (0, self.level) if self.level is not None else (1, self.name != "TS", self.name)


def condition_order(condition: str) -> tuple:
    return Condition.parse(condition).order


def condition_calls(index: Index, condition: str, window: int) -> int:
    """Chat calls one answer under `condition` makes, at most: a map call per window of records, then the reduce;
    for lazy search, the refinement, a relevance test per community visit, a claims call per community found
    relevant, and an answer per sub-question with the reduce."""
    parsed = Condition.parse(condition)
    if parsed.name == "SS":
        return 1
    if parsed.budget is not None:
        visits = -(-parsed.budget // defaults.LAZY_UNITS_PER_VISIT)
        return 1 + 2 * visits + defaults.LAZY_MAX_SUB_QUESTIONS + 1
    records = unit_records(index) if parsed.name == "TS" else report_records(index, level=parsed.level)
    kind = "text_units" if parsed.name == "TS" else "reports"
    return len(windows(records, MAP_HEADERS[kind], window)) + 1


async def answer_under(
    chat: ChatModel,
    embedder: Embedder | None,
    index: Index,
    condition: str,
    question: str,
    window: int,
    response_type: str,
) -> SearchResult:
    """An answer under one condition (C<level>, TS, SS, LGR<budget>), by the query methods' own code, with the same
    context window and answer format for every condition."""
    parsed = Condition.parse(condition)
    if parsed.budget is not None:
        lazy = LazySearchSettings(
            response_type,
            relevance_budget=parsed.budget,
            max_sub_questions=defaults.LAZY_MAX_SUB_QUESTIONS,
            units_per_visit=defaults.LAZY_UNITS_PER_VISIT,
            patience=defaults.LAZY_PATIENCE,
            snippet_tokens=defaults.LAZY_SNIPPET_TOKENS,
            claim_passage_tokens=defaults.LAZY_CLAIM_PASSAGE_TOKENS,
            max_context_tokens=window,
            keyword_weight=defaults.KEYWORD_WEIGHT,
        )
        return await lazy_search(chat, embedder, index, question, lazy)
    if parsed.name == "SS":
        # the paper's SS condition: vector search alone
        basic = BasicSearchSettings(response_type, len(index.text_units), window, keyword_weight=0.0)
        return await basic_search(chat, embedder, index, question, basic)
    if parsed.name == "TS":
        return await text_summary_search(
            chat, embedder, index, question, MapReduceSettings(response_type, window, window, 42)
        )
    settings = GlobalSearchSettings(
        response_type, window, window, 42, parsed.level, dynamic_community_selection=False, dynamic_threshold=1
    )
    return await global_search(chat, embedder, index, question, settings)


def parse_verdict(reply: str) -> dict:
    data, _ = parse_json_reply(reply)
    try:
        winner = int(data["winner"])
    except (TypeError, KeyError, ValueError):
        raise InvalidReply("the judgement has no winner 0, 1 or 2") from None
    if winner not in (0, 1, 2):
        raise InvalidReply(f"the judgement's winner is {winner}, not 0, 1 or 2")
    return {"winner": winner, "reasoning": str(data.get("reasoning") or "")}


@dataclass(frozen=True)
class Comparison:
    """One judge call: a question's answers under two conditions, shown in one order, on one criterion."""

    question_id: str
    question: str
    first: tuple[str, str, str]  # (condition, answer id, answer text) shown as Answer 1
    second: tuple[str, str, str]
    criterion: str
    repeat: int


def comparisons(answers: pl.DataFrame, questions: pl.DataFrame, criteria: list[str], repeats: int) -> list[Comparison]:
    """Every pair of conditions of every question, in both orders, `repeats` times, per criterion."""
    text = dict(zip(questions["id"], questions["question"]))
    planned = []
    for (question_id,), group in answers.sort("question_id", maintain_order=True).group_by(
        "question_id", maintain_order=True
    ):
        rows = group.sort("condition", maintain_order=True).iter_rows(named=True)
        for a, b in itertools.combinations(rows, 2):
            for first, second in ((a, b), (b, a)):
                for criterion in criteria:
                    for repeat in range(repeats):
                        planned.append(
                            Comparison(
                                question_id,
                                text[question_id],
                                (first["condition"], first["id"], first["answer"]),
                                (second["condition"], second["id"], second["answer"]),
                                criterion,
                                repeat,
                            )
                        )
    return planned


async def judge(chat: ChatModel, comparison: Comparison) -> dict | None:
    """The judge's verdict; `seed` carries the repeat, so each repeat is its own request (and cache entry)."""
    verdict = await chat.complete(
        user_message(
            "evaluation_judge",
            criterion=comparison.criterion,
            definition=CRITERIA[comparison.criterion],
            question=comparison.question,
            answer_1=comparison.first[2],
            answer_2=comparison.second[2],
        ),
        parse=parse_verdict,
        response_format={"type": "json_object"},
        seed=comparison.repeat,
    )
    if verdict is None:
        return None
    winner = {0: None, 1: comparison.first[0], 2: comparison.second[0]}[verdict["winner"]]
    return {"winner_condition": winner, "reasoning": verdict["reasoning"]}


def majority_labels(judgements: pl.DataFrame) -> pl.DataFrame:
    """Per question, pair of conditions and criterion, the paper's majority label over orders and repeats:
    the condition that won more judgements, or None for a tie. Columns: question_id, criterion, condition_a,
    condition_b (a < b), winner."""
    first, second = pl.col("first_condition"), pl.col("second_condition")
    keys = ["question_id", "criterion", "condition_a", "condition_b"]
    return (
        judgements.with_columns(
            condition_a=pl.when(first <= second).then(first).otherwise(second),
            condition_b=pl.when(first <= second).then(second).otherwise(first),
        )
        .group_by(keys)
        .agg(
            wins_a=(pl.col("winner_condition") == pl.col("condition_a")).sum(),
            wins_b=(pl.col("winner_condition") == pl.col("condition_b")).sum(),
        )
        .sort(keys)
        .select(
            *keys,
            winner=pl.when(pl.col("wins_a") > pl.col("wins_b"))
            .then(pl.col("condition_a"))
            .when(pl.col("wins_b") > pl.col("wins_a"))
            .then(pl.col("condition_b")),
        )
    )


WIN_RATE_COLUMNS = [
    "criterion",
    "row_condition",
    "column_condition",
    "questions",
    "wins",
    "losses",
    "ties",
    "win_rate",
    "p_value",
    "p_adjusted",
]


def win_rate_table(labels: pl.DataFrame) -> pl.DataFrame:
    """Per criterion and ordered pair (row, column), the share of questions whose majority label is the row
    condition (a tie counts half), the wins, losses and ties, and a two-sided sign test of wins against losses
    (a paired test over questions), with the p-values of each criterion adjusted for the number of pairs
    (Benjamini-Hochberg)."""
    from scipy import stats

    counted = (
        labels.group_by("criterion", "condition_a", "condition_b")
        .agg(
            wins_a=(pl.col("winner") == pl.col("condition_a")).sum(),
            wins_b=(pl.col("winner") == pl.col("condition_b")).sum(),
            questions=pl.len(),
        )
        .sort("criterion", "condition_a", "condition_b")
    )
    rows = []
    for (criterion,), group in counted.group_by("criterion", maintain_order=True):
        pairs = [
            (
                a,
                b,
                wins_a,
                wins_b,
                questions,
                stats.binomtest(wins_a, wins_a + wins_b, 0.5).pvalue if wins_a + wins_b else 1.0,
            )
            for _, a, b, wins_a, wins_b, questions in group.iter_rows()
        ]
        adjusted = stats.false_discovery_control([p for *_, p in pairs])
        for (a, b, wins_a, wins_b, questions, p), p_adjusted in zip(pairs, adjusted):
            for row, column, wins, losses in ((a, b, wins_a, wins_b), (b, a, wins_b, wins_a)):
                ties = questions - wins - losses
                rows.append(
                    {
                        "criterion": criterion,
                        "row_condition": row,
                        "column_condition": column,
                        "questions": questions,
                        "wins": wins,
                        "losses": losses,
                        "ties": ties,
                        "win_rate": (wins + 0.5 * ties) / questions,
                        "p_value": float(p),
                        "p_adjusted": float(p_adjusted),
                    }
                )
    return pl.DataFrame(rows, schema=WIN_RATE_COLUMNS, infer_schema_length=None)


def rouge_l_distances(claims: list[str]) -> np.ndarray:
    """1 - ROUGE-L F-measure between every two claims (rouge-score's implementation)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"])
    n = len(claims)
    distances = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        distances[i, j] = distances[j, i] = 1.0 - scorer.score(claims[i], claims[j])["rougeL"].fmeasure
    return distances


def claim_clusters(claims: list[str], threshold: float) -> int:
    """Clusters of an answer's claims: agglomerative, complete linkage, on 1 - ROUGE-L, cut at `threshold`."""
    if len(claims) < 2:
        return len(claims)
    from sklearn.cluster import AgglomerativeClustering

    clustering = AgglomerativeClustering(
        n_clusters=None, metric="precomputed", linkage="complete", distance_threshold=threshold
    )
    return int(clustering.fit(rouge_l_distances(claims)).n_clusters_)


async def judge_all(chat: ChatModel, planned: list[Comparison]) -> list[dict | None]:
    """Every planned comparison judged, concurrently; None for one whose reply never parsed."""
    return await asyncio.gather(*(judge(chat, c) for c in planned))


async def claims_of_answers(chat: ChatModel, answers) -> list[list[str] | None]:
    """The claims of each answer, concurrently; None for one whose reply never parsed."""
    return await asyncio.gather(*(answer_claims(chat, a) for a in answers))


CLAIM_COLUMNS = ["answer_id", "question_id", "condition", "claims", "claim_count", "clusters"]


def claim_table(answers: pl.DataFrame, found: list[list[str] | None], thresholds: list[float]) -> pl.DataFrame:
    """The claim_metrics rows: each answer's claims, their count, and their clusters at each distance threshold."""
    rows = [
        {
            "answer_id": answer["id"],
            "question_id": answer["question_id"],
            "condition": answer["condition"],
            "claims": json.dumps(claims),
            "claim_count": len(claims),
            "clusters": json.dumps({f"{t:g}": claim_clusters(claims, t) for t in thresholds}),
        }
        for answer, claims in zip(answers.iter_rows(named=True), found)
        if claims is not None
    ]
    return pl.DataFrame(rows, schema=CLAIM_COLUMNS, infer_schema_length=None)


async def answer_claims(chat: ChatModel, answer: str) -> list[str] | None:
    return await chat.complete(
        user_message("evaluation_claims", answer=answer),
        parse=string_list("claims"),
        response_format={"type": "json_object"},
    )


def claim_agreement(claims: pl.DataFrame, judgements: pl.DataFrame, thresholds: list[float]) -> pl.DataFrame:
    """Paper section 4.2: where the judges' majority is not a tie, how often the answer with more claims (or
    claim clusters, at each threshold) is the one they preferred. `claims` holds the claim_metrics rows."""
    scores, answer_of = {}, {}
    for r in claims.iter_rows(named=True):
        clusters = {f"clusters_at_{t}": n for t, n in json.loads(r["clusters"]).items()}
        scores[r["answer_id"]] = {"claims": r["claim_count"]} | clusters
        answer_of[(r["question_id"], r["condition"])] = r["answer_id"]
    decided_labels = majority_labels(judgements).filter(pl.col("winner").is_not_null())
    measures = [("comprehensiveness", "claims")] + [("diversity", f"clusters_at_{t:g}") for t in thresholds]
    rows = []
    for criterion, measure in measures:
        decided = [
            label
            for label in decided_labels.filter(pl.col("criterion") == criterion).iter_rows(named=True)
            if (label["question_id"], label["condition_a"]) in answer_of
            and (label["question_id"], label["condition_b"]) in answer_of
        ]
        agree = ties = 0
        for label in decided:
            a = scores[answer_of[(label["question_id"], label["condition_a"])]][measure]
            b = scores[answer_of[(label["question_id"], label["condition_b"])]][measure]
            ties += a == b
            agree += a != b and (label["condition_a"] if a > b else label["condition_b"]) == label["winner"]
        rows.append(
            {
                "criterion": criterion,
                "measure": measure,
                "decided_pairs": len(decided),
                "agreeing": int(agree),
                "claim_ties": int(ties),
                "agreement": agree / len(decided) if decided else None,
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def heatmap(rates: pl.DataFrame, criterion: str) -> bytes:
    """A PNG of one criterion's win rates, row condition against column condition, as in the paper's figure."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rate = {
        (row, column): value
        for row, column, value in rates.filter(pl.col("criterion") == criterion)
        .select("row_condition", "column_condition", "win_rate")
        .iter_rows()
    }
    conditions = sorted({condition for pair in rate for condition in pair}, key=condition_order)
    figure, axes = plt.subplots(figsize=(1.1 * len(conditions) + 2, 1.0 * len(conditions) + 1.5), dpi=90)
    matrix = np.array([[rate.get((row, column), np.nan) for column in conditions] for row in conditions], dtype=float)
    image = axes.imshow(matrix, cmap="RdYlGn", vmin=0, vmax=1)
    axes.set_xticks(range(len(conditions)), conditions)
    axes.set_yticks(range(len(conditions)), conditions)
    for i, j in itertools.product(range(len(conditions)), repeat=2):
        if not np.isnan(matrix[i, j]):
            axes.text(j, i, f"{100 * matrix[i, j]:.0f}", ha="center", va="center", fontsize=9)
    axes.set_title(f"{criterion}: % of questions the row wins")
    figure.colorbar(image, ax=axes, fraction=0.046)
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
