"""Extractive answers: the offline engine answers by quoting the index, never by generating text."""

from __future__ import annotations

import math
import re
from collections import Counter

from ..words import quoted_sentences, stems, terms

# Words of a question about the corpus as a whole rather than about one thing in it.
BROAD_WORDS = frozenset(
    "theme themes main overall story summary summarize summarise about important key major central message "
    "lesson lessons moral topics ideas".split()
)
_PAGE_NUMBER = re.compile(r"(?<=[a-z,;:.!?'\"”’]) \d{1,3} (?=[A-Z])")  # "Christmas Eve 16 Bob": a page number
_ILLUSTRATION = re.compile(r"\[Illustration[^\]]*\]", re.IGNORECASE)
_ITALICS = re.compile(r"(?<!\w)_([^_]+)_(?!\w)")
# Markdown a converted web page keeps: a list item's marker, and a link, quoted as its text ("* Use [`isinstance()`]
# (../library/functions.html) to check" -> "Use `isinstance()` to check"). A list item is often what answers.
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_LINK = re.compile(r"\[([^\]]+)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")


# What a publisher or a converter put around the text: licences, credits, links, markup. Never an answer.
_BOILERPLATE = re.compile(
    r"project gutenberg|gutenberg\.org|this e-?book|proofreading team|transcriber'?s note|all rights reserved|"
    r"copyright (?:©|\(c\)|\d{4})|https?://|www\.|<[a-z/][^>]*>|^\s*(?:#|\||[-*] |\d+\. )",
    re.IGNORECASE,
)


def reads_as_prose(sentence: str) -> bool:
    """False for what is no sentence of the text: a run of headings or a list of contents ("Tailpiece vi Heading
    to Stave One ..."), mostly capitalised words and numbers; a Markdown heading, table row or list item; a
    licence, credit or link; and a fragment that starts in the middle of a sentence (where a text unit was cut),
    which quoted alone says something the text does not."""
    if _BOILERPLATE.search(sentence):
        return False
    first = sentence.lstrip("'\"‘“(_*[")[:1]
    if first.islower():
        return False
    words = sentence.split()
    if len(words) < 8:
        return True
    return sum(w[0].isupper() or w[0].isdigit() for w in words) <= len(words) / 2


def clean_sentence(sentence: str) -> str:
    """A sentence as a reader wants it quoted: one line, no page numbers, captions or italics marks, no list marker,
    links as their text."""
    sentence = _LINK.sub(r"\1", _LIST_MARK.sub("", _ILLUSTRATION.sub(" ", sentence)))
    sentence = _ITALICS.sub(r"\1", " ".join(sentence.split()))
    return " ".join(_PAGE_NUMBER.sub(" ", sentence).split())


def terms_in_order(text: str) -> list[str]:
    """The words of a text in order, lower case, punctuation dropped: for matching names inside questions."""
    return re.findall(r"[a-z0-9']+", text.lower().replace("’", "'"))


def overlap_score(question: str, text: str) -> float:
    """Share of the question's content words that the text contains (0-1)."""
    wanted = terms(question)
    return len(wanted & terms(text)) / len(wanted) if wanted else 0.0


def best_sentences(
    question: str, sourced_texts: list[tuple[str, str]], limit: int = 5, continued: int = 0
) -> list[tuple[float, str, str]]:
    """(score, passage, source id) of the sentences that best match the question, best first, each with the
    sentences that follow it, up to `continued` characters of them.

    A sentence scores the question's words it holds, stemmed ("haunted" finds "haunt"), each weighted by how rare it
    is among the candidates (BM25's idf): the word that singles out the answer counts for more than the name every
    sentence repeats. A short sentence that follows another is also a candidate with it, as one passage: in
    dialogue the answer is the reply ("'What Idol has displaced you?' 'A golden one.'"), and the words of the
    question are in the line before it. What follows a sentence is often what answers: the question's words set the
    scene, and the next sentence says what was in it ("The chain he drew was clasped about his middle. It was ...
    made of cash-boxes, keys, padlocks"). So a sentence is ranked by all it quotes: a word of the question that only
    the sentences after it hold counts `FOLLOWING_WEIGHT` as much as one it holds itself.
    """
    candidates, seen = [], set()
    for position, (source, text) in enumerate(sourced_texts):
        sentences = [clean_sentence(sentence) for sentence in quoted_sentences(text)]
        for number, sentence in enumerate(sentences):
            if len(sentence) < 20 or len(sentence) > 500 or not reads_as_prose(sentence):
                continue
            reply = sentences[number + 1] if number + 1 < len(sentences) else ""
            passages = [(sentence,)] + ([(sentence, reply)] if 3 <= len(reply) <= _REPLY_CHARACTERS else [])
            for parts in passages:
                passage = " ".join(parts)
                if passage.lower() not in seen:  # overlapping text units repeat sentences
                    seen.add(passage.lower())
                    words = set().union(*(stems(part) for part in parts))
                    after = sentences[number + len(parts) : number + len(parts) + 3]
                    candidates.append((position, passage, source, words, parts, after))
    wanted = stems(question)
    if not wanted or not candidates:
        return []
    count = len(candidates)
    held = Counter(word for _, _, _, words, _, _ in candidates for word in words & wanted)
    weight = {word: math.log(1 + (count - held[word] + 0.5) / (held[word] + 0.5)) for word in wanted}
    total = math.fsum(weight.values())
    scored = []
    for position, passage, source, words, parts, after in candidates:
        own = words & wanted
        if not own:
            continue
        followed = stems(" ".join(_following(after, set(), continued))) & (wanted - own) if continued else set()
        # fsum: summed in a set's order, which each process's string hashing changes, equal scores would differ
        score = math.fsum(weight[word] for word in own) + FOLLOWING_WEIGHT * math.fsum(weight[w] for w in followed)
        score = score / total - _REPLY_PENALTY * (len(parts) - 1)
        if score > 0:
            scored.append((-score, position, passage, source, parts, after))
    best, quoted = [], set()
    for score, _, passage, source, parts, after in sorted(scored):
        if quoted.isdisjoint(part.lower() for part in parts):  # a sentence is quoted once, alone or with its reply
            quoted.update(part.lower() for part in parts)
            following = _following(after, quoted, continued)
            quoted.update(part.lower() for part in following)
            best.append((-score, " ".join([passage, *following]), source))
    return best[:limit]


def _following(after: list[str], quoted: set[str], characters: int) -> list[str]:
    """The sentences after a quoted one, up to `characters` in all, stopping at one quoted already or at a licence,
    link or heading."""
    taken, used = [], 0
    for sentence in after:
        if used + len(sentence) > characters or sentence.lower() in quoted or _BOILERPLATE.search(sentence):
            break
        taken.append(sentence)
        used += len(sentence)
    return taken


# What a word of the question counts for when only the sentences quoted after a sentence hold it: measured with the
# answer keys of scripts/benchmark.py retrieval (0 and 0.6: the sample book's quotes held the answer 68-71% and
# 68-72% of the time, the Python pages' 84-93% and 87-93%).
FOLLOWING_WEIGHT = 0.6

# A sentence this short that follows another may be its reply; quoting the two together costs a little score, so
# that a sentence that says as much alone is quoted alone.
_REPLY_CHARACTERS = 120
_REPLY_PENALTY = 0.01


def extractive_answer(points: list[tuple[float, str, str]], cite: str) -> str:
    """A labelled bullet list of quoted points, each with its data reference (human-readable record ids)."""
    from ..search.context import EXTRACTIVE_LABEL, NO_ANSWER

    if not points:
        return NO_ANSWER
    lines = [EXTRACTIVE_LABEL, ""] + [f"- {text} [Data: {cite} ({source})]" for _, text, source in points]
    return "\n".join(lines)


# How much of what follows each quoted sentence a passage-quoting answer quotes with it: measured with the answer
# keys of scripts/benchmark.py retrieval (0, 150, 250, 400: the Python pages' quotes held the answer 76-82%,
# 81-87%, 82-88%, 82-88% of the time, the sample book's 56-58%, 61-66%, 66-68%, 70-71%; answers grew from a median
# of 1,146 characters to 1,979 at 250 and 2,297 at 400).
CONTINUED_CHARACTERS = 250


def cited_sentences(index, question: str, kind: str, ids: list[str], texts: dict[str, str], limit: int = 6) -> str:
    """The best sentences of the given records, each with what follows it, cited as the context tables number
    them."""
    sourced = [(i, texts[i]) for i in ids if i in texts]
    sentences = best_sentences(question, sourced, limit, continued=CONTINUED_CHARACTERS)
    return extractive_answer(
        [(score, text, index.cite(kind, [source])) for score, text, source in sentences],
        "Reports" if kind == "reports" else "Sources",
    )
