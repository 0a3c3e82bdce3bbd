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


_COMPANIES = (
    "Harrow Mills",
    "Coldwater Foods",
    "Bexley Grain",
    "Marrow Dairy",
    "Ostend Packers",
    "Tamsin Oils",
    "Quarry Lane Bakers",
    "Wendle Fisheries",
    "Pellham Sugar",
    "Ardent Cocoa",
    "Ferris Orchards",
    "Lowmoor Salt",
)
_PLACES = ("Dunmore", "Caston", "Ravensport", "Eldham", "Kestrel Bay", "Milbrook", "Orford", "Trenton Wharf")
_PEOPLE = (
    "Alma Grieve",
    "Tobias Venn",
    "Ruth Okafor",
    "Piet Lindqvist",
    "Mara Solis",
    "Ewan Tully",
    "Ines Carrow",
    "Hugo Brandt",
)
_PRODUCTS = ("wheat flour", "cane sugar", "rapeseed oil", "skimmed milk powder", "cocoa butter", "rock salt")


def supply_contracts(folder: Path, count: int, seed: int = 0) -> list[str]:
    """`count` short fictional supply agreements between food companies: a corpus of another domain than the
    sample's novella (parties, goods, clauses, courts), for prompt tuning. Returns the file names."""
    import random

    pick = random.Random(seed)
    folder.mkdir(parents=True)
    names = []
    for n in range(count):
        supplier, buyer = pick.sample(_COMPANIES, 2)
        city, port, court = pick.sample(_PLACES, 3)
        signer, counter = pick.sample(_PEOPLE, 2)
        product = pick.choice(_PRODUCTS)
        text = f"""SUPPLY AGREEMENT No. {100 + n}

This Supply Agreement is made on {1 + n % 28} March 2024 between {supplier}, a company registered in {city} (the \
Supplier), and {buyer}, of {port} (the Buyer).

1. Goods. The Supplier shall deliver {pick.randint(20, 400)} tonnes of {product} to the warehouse of the Buyer at \
{port} each month. The goods must meet the standard set out in the schedule, and the Buyer may refuse a delivery \
that does not.

2. Price and payment. The Buyer shall pay {pick.randint(300, 900)} euros per tonne within {pick.choice((30, 45, 60))} \
days of each delivery. The Supplier sends the invoice on delivery. Late payment carries interest at \
{pick.randint(2, 8)} percent a year.

3. Term and termination. The agreement runs for {pick.randint(1, 5)} years from the effective date. Either party \
may end it with {pick.choice((30, 60, 90))} days of notice when the other party breaches a clause and does not \
cure the breach within that notice.

4. Warranty. The Supplier warrants that the goods are free of defects. The Buyer shall inspect the goods within \
{pick.randint(2, 10)} days and report any defect to the Supplier in writing; the Supplier then replaces the goods \
at its own cost.

5. Governing law. The agreement is governed by the law of the state, and any dispute goes to the court of {court}. \
Signed for the Supplier by {signer}, and for the Buyer by {counter}.
"""
        name = f"agreement-{100 + n}.txt"
        (folder / name).write_text(text, encoding="utf-8")
        names.append(name)
    return names


_TOPICS = ("the harbour budget", "the ferry timetable", "the school roof", "the flood barrier", "the market licence")


def meeting_transcripts(folder: Path, count: int, seed: int = 0) -> list[str]:
    """`count` transcripts of a town council's meetings: short turns of named speakers, the shape of the paper's
    podcast corpus, unlike prose or contracts."""
    import random

    pick = random.Random(seed)
    folder.mkdir(parents=True)
    names = []
    for n in range(count):
        speakers = pick.sample(_PEOPLE, 4)
        lines = [f"Meeting {n + 1} of the Port Wren council, {1 + n % 27} May 2024.", ""]
        for _ in range(60):
            who, topic, other = pick.choice(speakers), pick.choice(_TOPICS), pick.choice(speakers)
            said = pick.choice(
                (
                    f"I asked {other} to bring the figures on {topic}, and we still have not seen them.",
                    f"On {topic}: the committee met twice, and {other} proposed a vote next month.",
                    f"Thank you. {other} is right that {topic} cannot wait until the autumn.",
                    f"For the record, {pick.choice(_COMPANIES)} sent a quote for {topic} of {pick.randint(2, 90)} "
                    "thousand euros.",
                    "Agreed.",
                )
            )
            lines.append(f"{who.upper()}: {said}")
        name = f"meeting-{n + 1:02d}.txt"
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        names.append(name)
    return names


def short_notes(folder: Path, count: int, seed: int = 0) -> list[str]:
    """`count` notes of a sentence or three each, one file apiece: many tiny documents, each a text unit."""
    import random

    pick = random.Random(seed)
    folder.mkdir(parents=True)
    names = []
    for n in range(count):
        who, company, place = pick.choice(_PEOPLE), pick.choice(_COMPANIES), pick.choice(_PLACES)
        text = (
            f"{who} called {company} about the delivery to {place}. "
            + pick.choice(("It is late again.", f"{company} promised it for Friday.", "Nothing to add."))
            + (f" Remind {pick.choice(_PEOPLE)} to check the invoice." if n % 3 == 0 else "")
        )
        name = f"note-{n + 1:03d}.md"
        (folder / name).write_text(text + "\n", encoding="utf-8")
        names.append(name)
    return names


# Every C0 control character (NUL included), DEL, the C1 next-line, the Unicode line and paragraph separators, a
# byte-order mark mid-text, zero-width and bidirectional marks, combining accents, a noncharacter, emoji with joiners,
# and scripts other than Latin: what real documents carry and no test of the sample book sees.
C0_CONTROLS = "".join(map(chr, range(32)))
ODD_UNICODE = (
    "\x7f\x85\u2028\u2029\ufeff\u200b\u200d\u200e\u200f\u202e\u2066\u2069e\u0301\u0308\ufffe\ufffd"
    "\U0001f469\u200d\U0001f52c\U0001f3f3\ufe0f\u200d\U0001f308 \u00e6\u00f8\u00e5 \u03b1\u03b2\u03b3 "
    "\u0434\u0436\u0438 \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \u4e2d\u6587 \u65e5\u672c\u8a9e "
    "\U0001d54f\U0001d550 \u0928\u092e\u0938\u094d\u0924\u0947"
)
# Syllables of coined words: onsets, vowels and codas enough that words differ as a language's do (a few syllables
# alone made every coined name look like every other to a spelling comparison).
_SYLLABLES = tuple(
    onset + vowel + coda
    for onset in (
        "",
        "b",
        "br",
        "c",
        "ch",
        "d",
        "dr",
        "f",
        "g",
        "gl",
        "h",
        "j",
        "k",
        "l",
        "m",
        "n",
        "p",
        "pl",
        "qu",
        "r",
        "s",
        "sh",
        "st",
        "t",
        "th",
        "tr",
        "v",
        "w",
        "z",
    )
    for vowel in ("a", "e", "i", "o", "u", "ai", "ou", "ea")
    for coda in ("", "n", "r", "l", "s", "m", "x", "nd", "rk")
)
_COMMON = (
    "the of and to a in that is was he for it with as his on be at by had not are but from or have an they which "
    "one you were her all she there would their we him been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such like our "
    "over man me even most made after also did many before must through back years where much your way well down "
    "should because each just those people how too little state good very make world still own see men work long"
).split()


def _coined(rank: int) -> str:
    """The rank-th word of an open vocabulary: distinct ranks give distinct words."""
    letters = []
    while True:
        rank, digit = divmod(rank, len(_SYLLABLES))
        letters.append(_SYLLABLES[digit])
        if not rank:
            return "".join(letters)
        rank -= 1


class GrowingVocabulary:
    """Words drawn as real text draws them: common words most often, then a Zipf tail with no end, so that
    distinct words keep growing with the text (Heaps' law: about n^0.7 here, several hundred thousand distinct
    words in 50 MB), capitalised names among them, and odd Unicode in some."""

    def __init__(self, seed: int, zipf: float = 1.25):
        import numpy as np

        self._rng = np.random.default_rng(seed)
        self.zipf = zipf

    def words(self, count: int) -> list[str]:
        ranks = self._rng.zipf(self.zipf, count)
        shapes = self._rng.random(count)
        out = []
        for rank, shape in zip(ranks.tolist(), shapes.tolist()):
            if rank <= len(_COMMON):
                out.append(_COMMON[rank - 1])
                continue
            word = _coined(rank)
            if shape < 0.02:
                word = word.title()  # a name said once or twice
            elif shape < 0.025:
                word += ODD_UNICODE[int(shape * 1e5) % len(ODD_UNICODE)]
            out.append(word)
        return out

    def names(self, count: int) -> list[str]:
        """People and places of one document: drawn from a Zipf population too, so the famous recur across
        documents and the rest are new (each a name of one or two coined words)."""
        ranks = self._rng.zipf(1.1, (count, 2)) + 5_000
        return [" ".join(_coined(r).title() for r in pair[: 1 + (pair[0] + pair[1]) % 2]) for pair in ranks.tolist()]

    def prose(self, approx_bytes: int) -> str:
        """Sentences of 8-30 words in paragraphs, about `approx_bytes` long, each naming one to three of the
        passage's cast (names co-occur, as real text's people and places do)."""
        paragraphs, size = [], 0
        cast = self.names(20)
        while size < approx_bytes:
            sentences = []
            if self._rng.random() < 0.1:  # the scene moves on: some of the cast change
                cast[int(self._rng.integers(0, len(cast)))] = self.names(1)[0]
            for _ in range(int(self._rng.integers(2, 7))):
                words = self.words(int(self._rng.integers(8, 31)))
                for name in self._rng.choice(cast, size=int(self._rng.integers(1, 4)), replace=False).tolist():
                    words.insert(int(self._rng.integers(1, len(words))), name)
                sentence = " ".join(words)
                sentences.append(sentence[0].upper() + sentence[1:] + ".")
            paragraph = " ".join(sentences)
            paragraphs.append(paragraph)
            size += len(paragraph) + 2
        return "\n\n".join(paragraphs)


def dirty_corpus(
    folder: Path, megabytes: float, seed: int = 0, long_line_mb: float = 2.0, huge_document_mb: float = 20.0
) -> dict[str, int]:
    """A corpus of generated prose with a growing vocabulary and the dirt of real documents, as files of several
    formats; returns the bytes written per file name.

    - `documents.jsonl`: one object per line, some texts with every C0 control character and lone surrogates as
      JSON escapes (`\\u0000`, `\\ud800`), and raw U+2028 / U+0085 inside strings (JSON allows both);
    - `controls.txt`: prose with every C0 control character and DEL written raw (NUL past the first 8 KB);
    - `long-line.md`: one line of `long_line_mb` megabytes, no newline in it;
    - `huge.txt`: a document of `huge_document_mb` megabytes (when the corpus is that large);
    - `page.html`: a web page whose text carries control characters as character references;
    - the rest as `part-NNNN.txt` files of about 200 KB, with odd Unicode in their words.
    """
    import json

    vocabulary = GrowingVocabulary(seed)
    folder.mkdir(parents=True, exist_ok=True)
    budget = int(megabytes * 2**20)
    written: dict[str, int] = {}

    def write(name: str, text: str) -> None:
        data = text.encode("utf-8", "surrogatepass")
        (folder / name).write_bytes(data)
        written[name] = len(data)

    dirt = C0_CONTROLS + ODD_UNICODE
    lines = []
    for n in range(12):
        text = vocabulary.prose(6_000)
        if n % 3 == 0:
            cut = len(text) // 2
            text = text[:cut] + f" {dirt} \ud800 lone \udfff surrogates " + text[cut:]
        lines.append(json.dumps({"id": f"row-{n}", "title": f"Row {n}\x02{ODD_UNICODE[:3]}", "text": text}))
    # A raw U+2028 and U+0085 inside a JSON string: valid JSON that str.splitlines() would cut in two.
    lines.append(json.dumps({"title": "separators", "text": vocabulary.prose(3_000)}, ensure_ascii=False))
    lines[-1] = lines[-1].replace(". ", ".\u2028 ", 1).replace(". ", ".\x85 ", 1)
    write("documents.jsonl", "\n".join(lines) + "\n")
    body = vocabulary.prose(20_000)
    write("controls.txt", body[:9_000] + f" {dirt} " + body[9_000:] + f"\n{dirt}\n")
    line = vocabulary.prose(int(long_line_mb * 2**20)).replace("\n\n", " ")
    write("long-line.md", f"# One long line {ODD_UNICODE[:20]}\n\n{line}\n")
    entities = "".join(f"&#x{ord(c):x};" if c not in "\x00" else "" for c in C0_CONTROLS[1:] if c not in "\t\n\r")
    page = vocabulary.prose(30_000).replace("\n\n", "</p><p>")
    write("page.html", f"<html><head><title>Odd {entities}</title></head><body><p>{page}{entities}</p></body></html>")
    if budget >= huge_document_mb * 2**20 * 2:
        write("huge.txt", vocabulary.prose(int(huge_document_mb * 2**20)))
    part = 0
    while sum(written.values()) < budget:
        write(f"part-{part:04d}.txt", vocabulary.prose(200_000))
        part += 1
    return written
