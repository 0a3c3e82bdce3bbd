"""Corpora made from the sample for tests and benchmarks."""

from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "a-christmas-carol" / "a-christmas-carol.txt"


def split_sample(folder: Path, parts: int) -> list[str]:
    """The sample corpus as several documents cut at paragraph breaks; returns their file names."""
    paragraphs = SAMPLE.read_text(encoding="utf-8-sig").split("\n\n")
    size = len(paragraphs) // parts + 1
    folder.mkdir(parents=True)
    names = []
    for i in range(parts):
        name = f"part-{i:02d}.txt"
        (folder / name).write_text("\n\n".join(paragraphs[i * size : (i + 1) * size]))
        names.append(name)
    return names
