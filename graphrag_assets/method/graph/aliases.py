"""Entity resolution that can be undone: variants of one entity ("EBENEZER SCROOGE", "SCROOGE") are linked as
aliases of a canonical entity, never merged in the entities table.

Candidates are found cheaply, among entities of the same type: one name's words inside the other's
("CRATCHIT" in "BOB CRATCHIT"), names sharing most of their words, or names spelled alike
(character-trigram vectors: "CRATCHIT", "CRATCHITS"; the embedding model runs later in the pipeline).
A model confirms them in batches; offline, a rule does (`confirm_by_rule`: a last name or an honorific
form, unambiguous, with agreeing descriptions). A user's `aliases.csv` in the corpus folder adds or rejects
pairs. The graph that communities and reports use treats an alias group as one node: `resolve` folds each
variant into its canonical entity. With no accepted alias it returns the graph unchanged, so rejecting every
alias gives back the previous communities exactly.
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl

from ..corpus_folder import ALIASES_FILE
from ..model_interface import ChatModel, InvalidReply
from ..prompts import user_message
from ..schema import frame
from ..words import STOPWORDS, stems, terms
from .records import parse_json_reply

MAX_NAMES_PER_WORD = 50
_NAME_WORD = re.compile(r"[A-Z0-9']+")


def _words(title: str) -> list[str]:
    return _NAME_WORD.findall(title.upper())


def _similar_spellings(titles: list[str], threshold: float) -> list[tuple[int, int, float]]:
    """Pairs of names whose character-trigram vectors are close ("CRATCHIT", "CRATCHITS"): (i, j, cosine), i < j.

    Comparing every two names that share a trigram grows with the square of the names: 600 s for the 170,000 of
    200 MB of generated text. So the names compared are blocked, as record linkage does, and each name meets a
    bounded number of others however many there are: its SPELLING_WINDOW neighbours in each of three sorted orders
    (its letters and digits, the same backwards, its words sorted) and the names that share a word's stem (see
    MAX_NAMES_PER_WORD). Measured against every pair sharing a trigram: on Python's documentation 95% of the pairs
    were found, the rest being a common name's lookalikes past its 20th ("PYTHON", "MONTY PYTHON"); on the
    generated text, 98% of the names with a lookalike got one. A name keeps its MAX_SIMILAR_SPELLINGS closest: one
    in a crowd of lookalikes would otherwise pair with all of them."""
    if len(titles) < 2:
        return []
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectors = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), use_idf=False).fit_transform(titles).tocsr()
    pairs = _spelling_candidates(titles)
    first, second = pairs[:, 0], pairs[:, 1]
    cosine = _cosines(vectors, first, second)
    near = cosine >= threshold
    first, second, cosine = first[near], second[near], cosine[near]
    # Each name's closest, ties to the earlier name; a pair stays when either of its names keeps it.
    names, others, both = np.concatenate([first, second]), np.concatenate([second, first]), np.tile(cosine, 2)
    order = np.lexsort((others, -both, names))
    ranked = names[order]
    rank = np.arange(len(order)) - np.searchsorted(ranked, ranked)  # within its name's run
    kept = np.unique(order[rank < MAX_SIMILAR_SPELLINGS] % len(first))
    return list(zip(first[kept].tolist(), second[kept].tolist(), cosine[kept].tolist()))


def _cosines(vectors, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The cosine of each pair of rows (the rows are unit vectors), a bounded number of pairs at a time."""
    parts = [
        np.asarray(vectors[first[at : at + _PAIRS_AT_ONCE]].multiply(vectors[second[at : at + _PAIRS_AT_ONCE]]).sum(1))
        for at in range(0, len(first), _PAIRS_AT_ONCE)
    ]
    return np.concatenate(parts).ravel() if parts else np.empty(0)


def _spelling_candidates(titles: list[str]) -> np.ndarray:
    """The (i, j) pairs, i < j, each once, that _similar_spellings compares."""
    squashed = [re.sub(r"[^0-9A-Z]", "", title.upper()) for title in titles]
    orders = (squashed, [name[::-1] for name in squashed], [" ".join(sorted(_words(title))) for title in titles])
    firsts, seconds = [], []
    for keys in orders:
        order = np.array(sorted(range(len(titles)), key=keys.__getitem__))
        for offset in range(1, SPELLING_WINDOW + 1):
            firsts.append(order[:-offset])
            seconds.append(order[offset:])
    by_stem: dict[str, list[int]] = defaultdict(list)
    for i, title in enumerate(titles):
        for stem in stems(title):
            by_stem[stem].append(i)
    for ids in by_stem.values():
        if 1 < len(ids) <= MAX_NAMES_PER_WORD:
            a, b = np.triu_indices(len(ids), 1)
            firsts.append(np.array(ids)[a])
            seconds.append(np.array(ids)[b])
    a, b = np.concatenate(firsts), np.concatenate(seconds)
    return np.unique(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1), axis=0)


SPELLING_WINDOW = 10
MAX_SIMILAR_SPELLINGS = 20
_PAIRS_AT_ONCE = 200_000


def _pair(a, b, method: str, likeness: float) -> dict | None:
    """A candidate row for two entity rows of the same type (None otherwise); the canonical is the better-connected."""
    if a["type"] and b["type"] and a["type"] != b["type"]:
        return None
    variant, canonical = (a, b) if (a["degree"], len(a["title"])) < (b["degree"], len(b["title"])) else (b, a)
    return {
        "id": f"{variant['id']}->{canonical['id']}",
        "entity_id": variant["id"],
        "entity": variant["title"],
        "canonical_id": canonical["id"],
        "canonical": canonical["title"],
        "method": method,
        "score": round(likeness * _description_overlap(a, b) ** 0.5, 3),
    }


def candidate_pairs(entities: pl.DataFrame, min_overlap: float = 0.5, min_spelling: float = 0.7) -> pl.DataFrame:
    """(entity, canonical) pairs worth asking about; the canonical is the better-connected name of the two."""
    # Only what a pair needs: a record per name with its text units' ids held a 50 MB corpus's names twice over.
    rows = entities.select("id", "title", "type", "degree", "description").to_dicts()
    words = [frozenset(_words(row["title"])) for row in rows]
    by_word: dict[str, list[int]] = defaultdict(list)
    for i, ws in enumerate(words):
        for w in ws:
            if w.lower() not in STOPWORDS:
                by_word[w].append(i)
    # A word in very many names ("HOUSE", "STREET") links nothing by itself and would make pairs quadratic.
    by_word = {w: ids for w, ids in by_word.items() if len(ids) <= MAX_NAMES_PER_WORD}
    found: dict[frozenset, dict] = {}
    for i, ws in enumerate(words):
        for j in {j for w in ws for j in by_word.get(w, ()) if j > i}:
            shared = len(ws & words[j]) / len(ws | words[j])
            contained = ws <= words[j] or words[j] <= ws
            if contained or shared >= min_overlap:
                method = "name containment" if contained else "shared name words"
                pair = _pair(rows[i], rows[j], method, 0.99 if contained else shared)
                if pair:
                    found[frozenset((i, j))] = pair
    for i, j, similarity in _similar_spellings([row["title"] for row in rows], min_spelling):
        pair = _pair(rows[i], rows[j], "similar spelling", similarity)
        if pair and frozenset((i, j)) not in found:
            found[frozenset((i, j))] = pair
    return frame("entity_aliases", found.values(), without=_VERDICT)


def _description_overlap(a, b) -> float:
    """Share of the shorter description's content words found in the other (1 when either has none)."""
    wa, wb = _terms(a), _terms(b)
    return len(wa & wb) / min(len(wa), len(wb)) if wa and wb else 1.0


def _terms(row: dict) -> set[str]:
    """The row's description's content words, worked out once: a name is in many candidate pairs."""
    if "_terms" not in row:
        # Interned: a corpus's descriptions repeat their words, and a string per word each time was most of them.
        row["_terms"] = frozenset(map(sys.intern, terms(str(row["description"]))))
    return row["_terms"]


# Words before a name that do not make it another person's: "Old Marley", "Master Scrooge", "Uncle Scrooge".
# ("Mrs" does: Mrs Cratchit is not Bob Cratchit.)
HONORIFICS = frozenset("MR MISTER MASTER MISS OLD YOUNG UNCLE SIR LORD LADY DR DOCTOR".split())


def _same_by_name(short: list[str], long: list[str]) -> str | None:
    """How the longer name extends the shorter one when that keeps it one person: "honorific", "given name"."""
    n = len(short)
    if long[-n:] != short:
        return None  # only a last name is a short form ("Scrooge"); a first name alone is too common ("Jacob")
    added = long[:-n]
    if "OF" in added:
        return None  # "Ghost of Jacob Marley" is a phrase about Jacob Marley, not a name of his
    return "honorific" if all(w in HONORIFICS for w in added) else "given name"


def confirm_by_rule(candidates: pl.DataFrame, min_score: float = 0.2) -> list[bool]:
    """Offline: a name is the short form of a longer one when it is its last word(s) ("Marley" of "Jacob Marley")
    or the longer one only adds an honorific ("Old Marley"), their descriptions agree, and no second longer name
    gives it another first name ("Cratchit" of "Bob Cratchit" and of "Tim Cratchit" stays apart)."""
    forms: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
    for row in candidates.iter_rows(named=True):
        a, b = sorted((_words(row["entity"]), _words(row["canonical"])), key=len)
        if _same_by_name(a, b) == "given name":
            forms[tuple(a)].add(tuple(b))
    verdicts = []
    for row in candidates.iter_rows(named=True):
        short, long = sorted((_words(row["entity"]), _words(row["canonical"])), key=len)
        how = _same_by_name(short, long) if len(short) < len(long) else None
        unambiguous = len(forms.get(tuple(short), set())) <= 1
        verdicts.append(how is not None and unambiguous and row["score"] >= min_score)
    return verdicts


def aliases_by_rule(candidates: pl.DataFrame) -> pl.DataFrame:
    """The candidate pairs with the rule's verdicts, as the aliases table holds them (no model asked)."""
    return _with_verdicts(candidates, ["rule"] * len(candidates), confirm_by_rule(candidates))


def aliases_by_model(candidates: pl.DataFrame, verdicts: list[bool | None]) -> pl.DataFrame:
    """The candidate pairs with the model's verdicts (None: its reply never parsed, so the pair is not accepted)."""
    return _with_verdicts(
        candidates, ["model" if v is not None else "unconfirmed" for v in verdicts], [bool(v) for v in verdicts]
    )


_VERDICT = ("confirmed_by", "accepted")


def _with_verdicts(candidates: pl.DataFrame, confirmed_by: list[str], accepted: list[bool]) -> pl.DataFrame:
    return candidates.with_columns(
        confirmed_by=pl.Series(confirmed_by, dtype=pl.String), accepted=pl.Series(accepted, dtype=pl.Boolean)
    )


def parse_verdicts(count: int):
    def parse(reply: str) -> list[bool]:
        data, _ = parse_json_reply(reply)
        same = data.get("same") if isinstance(data, dict) else None
        if not isinstance(same, list) or len(same) != count or not all(isinstance(v, bool) for v in same):
            raise InvalidReply(f"expected {{'same': [{count} true/false]}}")
        return same

    return parse


async def confirm_by_model(chat: ChatModel, candidates: pl.DataFrame, entities: pl.DataFrame, batch: int = 20):
    """The model's yes or no for each pair, `batch` pairs a call; None for a batch whose reply never parsed."""
    described = dict(zip(entities["id"], entities["description"], strict=True))
    pairs = [
        f"{n + 1}. {r['entity']} ({described.get(r['entity_id'], '')[:200]}) | {r['canonical']} "
        f"({described.get(r['canonical_id'], '')[:200]})"
        for n, r in enumerate(candidates.iter_rows(named=True))
    ]

    async def ask(chunk: list[str]):
        numbered = [re.sub(r"^\d+\.", f"{k + 1}.", p) for k, p in enumerate(chunk)]
        return await chat.complete(
            user_message("resolve_entities", pairs="\n".join(numbered)),
            parse=parse_verdicts(len(chunk)),
            response_format={"type": "json_object"},
        )

    chunks = [pairs[i : i + batch] for i in range(0, len(pairs), batch)]
    replies = await asyncio.gather(*(ask(chunk) for chunk in chunks))
    return [verdict for chunk, reply in zip(chunks, replies) for verdict in (reply or [None] * len(chunk))]


def read_overrides(folder: Path) -> tuple[list[tuple[str, str, bool]], list[str]]:
    """([(entity, canonical, accepted)], problems) from the corpus folder's aliases.csv: columns entity,
    canonical, action (add or reject), entity names as in the entities table (any case)."""
    path = folder / ALIASES_FILE
    if not path.is_file():
        return [], []
    rows, problems = [], []
    for line, row in enumerate(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig"))), start=2):
        entity, canonical = (row.get("entity") or "").strip().upper(), (row.get("canonical") or "").strip().upper()
        action = (row.get("action") or "").strip().lower()
        if not entity or not canonical or action not in ("add", "reject"):
            problems.append(f"{path.name} line {line}: expected entity,canonical,action with action add or reject")
            continue
        rows.append((entity, canonical, action == "add"))
    return rows, problems


def apply_overrides(
    aliases: pl.DataFrame, overrides: list[tuple[str, str, bool]], entities: pl.DataFrame
) -> tuple[pl.DataFrame, list[str]]:
    """The user's word wins: a rejected pair is kept as a rejected row, an added one as an accepted row. A later
    line about the same pair wins over an earlier one. The table is filtered, not rebuilt: at 200 MB of text it holds
    half a million pairs."""
    ids = dict(zip(entities["title"], entities["id"], strict=True))
    chosen, problems = {}, []
    for entity, canonical, accepted in overrides:
        missing = [name for name in (entity, canonical) if name not in ids]
        if missing:
            problems.append(f"{ALIASES_FILE}: no entity named {', '.join(missing)}")
            continue
        row = {"id": f"{ids[entity]}->{ids[canonical]}", "entity_id": ids[entity], "entity": entity}
        row |= {"canonical_id": ids[canonical], "canonical": canonical}
        row |= {"method": "user", "score": 1.0, "confirmed_by": "user", "accepted": accepted}
        pair = tuple(sorted((ids[entity], ids[canonical])))
        chosen.pop(pair, None)  # moved to the end, where its line puts it
        chosen[pair] = row
    if not chosen:
        return aliases, problems
    named = pl.DataFrame(list(chosen), schema={"low": pl.String, "high": pl.String}, orient="row")
    ends = {
        "low": pl.min_horizontal("entity_id", "canonical_id"),
        "high": pl.max_horizontal("entity_id", "canonical_id"),
    }
    kept = aliases.with_columns(**ends).join(named, on=["low", "high"], how="anti", maintain_order="left")
    return pl.concat([kept.drop("low", "high"), frame("entity_aliases", list(chosen.values()))]), problems


def canonical_of(aliases: pl.DataFrame) -> dict[str, str]:
    """Each accepted variant's canonical entity, followed through chains (A -> B -> C gives A -> C)."""
    accepted = aliases.filter(pl.col("accepted"))
    parent = dict(zip(accepted["entity_id"], accepted["canonical_id"]))
    resolved = {}
    for entity in parent:
        seen, target = {entity}, parent[entity]
        while target in parent and target not in seen:
            seen.add(target)
            target = parent[target]
        if target != entity:
            resolved[entity] = target
    return resolved


def resolve(
    entities: pl.DataFrame, relationships: pl.DataFrame, aliases: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The graph with every alias group as one node: the canonical entity gets its variants' descriptions, text
    units and relationships; degrees are counted again. Without accepted aliases the inputs come back as they are.

    Columnar, but for the canonical entities that take variants in: a Python record per entity and per
    relationship held a 50 MB corpus's graph three times over in memory."""
    mapping = canonical_of(aliases)
    if not mapping:
        return entities, relationships
    present = dict(zip(entities["id"], entities["title"]))
    kept = entities.with_row_index("_order").filter(~pl.col("id").is_in(list(mapping)))
    kept_ids = set(kept["id"])
    merges = {v: c for v, c in mapping.items() if v in present and c in kept_ids}
    kept = pl.concat(
        [kept.filter(~pl.col("id").is_in(list(set(merges.values())))), _merged(kept, entities, merges)]
    ).sort("_order")
    by_title = {present[v]: present[c] for v, c in mapping.items() if v in present and c in present}
    edges = relationships.with_columns(pl.col("source").replace(by_title), pl.col("target").replace(by_title)).filter(
        pl.col("source") != pl.col("target")
    )
    # neighbours, each once: every unordered pair of titles counts once for each of its ends
    pairs = edges.select(
        pl.min_horizontal("source", "target").alias("a"), pl.max_horizontal("source", "target").alias("b")
    ).unique()
    degree = (
        pl.concat([pairs["a"], pairs["b"]]).alias("title").value_counts(name="_degree")
        if len(pairs)
        else pl.DataFrame(schema={"title": pl.String, "_degree": pl.UInt32})
    )
    kept = kept.join(degree, on="title", how="left", maintain_order="left").with_columns(
        pl.col("_degree").fill_null(0).cast(entities.schema.get("degree", pl.Int64)).alias("degree")
    )
    ends = [degree.rename({"title": end, "_degree": f"_{end}"}) for end in ("source", "target")]
    edges = (
        edges.join(ends[0], on="source", how="left", maintain_order="left")
        .join(ends[1], on="target", how="left", maintain_order="left")
        .with_columns(
            (pl.col("_source").fill_null(0) + pl.col("_target").fill_null(0))
            .cast(relationships.schema.get("combined_degree", pl.Int64))
            .alias("combined_degree")
        )
    )
    return kept.select(entities.columns), edges.select(relationships.columns)


def _merged(kept: pl.DataFrame, entities: pl.DataFrame, merges: dict[str, str]) -> pl.DataFrame:
    """The canonical rows of `kept` that variants merge into (variant -> canonical, in `merges`' order), each with
    its variants' descriptions appended and their text units added."""
    rows = {row["id"]: row for row in kept.filter(pl.col("id").is_in(list(set(merges.values())))).iter_rows(named=True)}
    variants = {row["id"]: row for row in entities.filter(pl.col("id").is_in(list(merges))).iter_rows(named=True)}
    for variant, canonical in merges.items():
        row, into = variants[variant], rows[canonical]
        if "description" in into:  # a step that clusters reads no descriptions
            into["description"] = f"{into['description']} {row['description']}".strip()
        if "text_unit_ids" in into:  # nor do the full method's reports read text units
            into["text_unit_ids"] = list(dict.fromkeys([*into["text_unit_ids"], *row["text_unit_ids"]]))
            into["frequency"] = len(into["text_unit_ids"])
    return pl.DataFrame(list(rows.values()), schema=kept.schema)


def alias_groups(aliases: pl.DataFrame) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = defaultdict(list)
    for variant, canonical in canonical_of(aliases).items():
        groups[canonical].append(variant)
    return dict(groups)
