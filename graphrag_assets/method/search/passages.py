"""The part of a text unit a context packs instead of all of it: the sentences nearest a question."""

from __future__ import annotations

import math
from collections import Counter

from ..ingest.tokens import count_tokens, truncate_to_tokens
from ..offline.answers import overlap_score
from ..words import split_sentences, stems


def snippet(text: str, questions: list[str], tokens: int) -> str:
    """The sentences of a unit that share most words with the questions, in their order, within `tokens`: what a
    relevance test reads instead of the whole unit."""
    sentences = split_sentences(text)
    scored = sorted(range(len(sentences)), key=lambda i: (-max(overlap_score(q, sentences[i]) for q in questions), i))
    chosen, used = [], 0
    for i in scored:
        cost = count_tokens(sentences[i])
        if chosen and used + cost > tokens:
            break
        chosen.append(i)
        used += cost
    return truncate_to_tokens(" ".join(" ".join(sentences[i].split()) for i in sorted(chosen)), tokens)


def passage(text: str, question: str, tokens: int) -> str:
    """The run of a unit's sentences, within `tokens`, that holds the most of the question's words (stemmed, each
    weighted by its rarity among the unit's sentences): a run rather than the best sentences, since the sentence
    that answers often shares few words with the question and follows one that does."""
    if count_tokens(text) <= tokens:
        return text
    sentences = [" ".join(sentence.split()) for sentence in split_sentences(text)]
    wanted = stems(question)
    held = [stems(sentence) & wanted for sentence in sentences]
    count = Counter(word for words in held for word in words)
    weight = {word: math.log(1 + (len(sentences) - n + 0.5) / (n + 0.5)) for word, n in count.items()}
    cost = [count_tokens(sentence) + 1 for sentence in sentences]
    best, best_score = (0, 0), (-1.0, -1.0)
    for first in range(len(sentences)):
        last, used, words = first, cost[first], set(held[first])
        while last + 1 < len(sentences) and used + cost[last + 1] <= tokens:
            last, used = last + 1, used + cost[last + 1]
            words |= held[last]
        # Of runs holding as much, the one that opens on the question's words: the rest of it is what follows them.
        # fsum: a set's order changes with each process's string hashing, and so would a plain sum's last bits.
        score = (math.fsum(weight[word] for word in words), math.fsum(weight[word] for word in held[first]))
        if score > best_score:
            best, best_score = (first, last), score
    first, last = best
    run = truncate_to_tokens(" ".join(sentences[first : last + 1]), tokens)
    return ("… " if first else "") + run + (" …" if last + 1 < len(sentences) else "")
