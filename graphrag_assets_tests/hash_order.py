"""Prints a digest of the offline engine's passages and quotes for the sample book and a set of questions, for
`test_hybrid_retrieval` to run under several string-hash seeds: what it prints must not depend on the seed."""

import hashlib
import json

from graphrag_assets.method.offline.answers import best_sentences
from graphrag_assets.method.search.passages import passage

from .workspaces import REPO, SAMPLE_CORPUS

QUESTIONS = (
    "What does Scrooge learn from the ghosts about Christmas?",
    "Who is Bob Cratchit and what does he earn?",
    "What did the Ghost of Christmas Yet to Come show Scrooge?",
    "Why does Marley wear a chain?",
)


def main() -> None:
    book = next((REPO / "data" / SAMPLE_CORPUS).iterdir()).read_text()
    paragraphs = [p for p in book.split("\n\n") if p.strip()]
    units = [(f"u{n}", " ".join(paragraphs[n : n + 12])) for n in range(0, len(paragraphs), 12)]
    found = []
    for question in QUESTIONS:
        found.append([passage(text, question, 60) for _, text in units])
        found.append(best_sentences(question, units, limit=8))
    print(hashlib.sha256(json.dumps(found).encode()).hexdigest())


if __name__ == "__main__":
    main()
