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
