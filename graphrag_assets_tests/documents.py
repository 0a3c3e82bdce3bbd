"""Small real files of every format a corpus may hold, written with the libraries made for each."""

import json
import zipfile
from pathlib import Path

import docx
import openpyxl
import pandas as pd
import pptx
from fpdf import FPDF

PDF_PAGES = [
    "Ebenezer Scrooge kept his counting-house on Cornhill. Jacob Marley had been his partner for many years.",
    "Bob Cratchit copied letters in the tank. Fred invited Ebenezer Scrooge to Christmas dinner.",
]


def pdf(path: Path, pages: list[str] = PDF_PAGES, password: str | None = None) -> Path:
    document = FPDF()
    document.set_font("Helvetica", size=12)
    for text in pages:
        document.add_page()
        if text:
            document.multi_cell(0, 10, text)
        else:  # a page with a drawing and no text, as a scan has
            document.rect(20, 20, 100, 60, style="F")
    if password:
        document.set_encryption(owner_password=password + "-owner", user_password=password)
    document.output(str(path))
    return path


def word(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("Counting-house rules", 1)
    document.add_paragraph("Ebenezer Scrooge sets the rules of the counting-house.")
    document.add_heading("Wages", 2)
    document.add_paragraph("Bob Cratchit earns fifteen shillings a week.")
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip(table._cells, ["Clerk", "Weekly wage", "Bob Cratchit", "15 shillings"]):
        cell.text = text
    document.save(str(path))
    return path


def slides(path: Path) -> Path:
    deck = pptx.Presentation()
    for title, body in [
        ("Fezziwig's ball", "Mr Fezziwig gives a ball for his apprentices."),
        ("Belle", "Belle releases young Scrooge from their engagement."),
    ]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.save(str(path))
    return path


def workbook(path: Path) -> Path:
    book = openpyxl.Workbook()
    wages = book.active
    wages.title = "Wages"
    wages.append(["clerk", "shillings"])
    wages.append(["Bob Cratchit", 15])
    debts = book.create_sheet("Debts")
    debts.append(["debtor", "pounds"])
    debts.append(["Caroline's husband", 3])
    book.save(str(path))
    return path


def web_page(path: Path) -> Path:
    path.write_text(
        "<html><head><title>Tiny Tim</title></head><body><h1>The Cratchit family</h1>"
        "<p>Tiny Tim sits by the fire. <a href='http://example.com/more'>More</a>"
        "<img src='http://example.com/tim.png'></p><h2>Dinner</h2><p>Mrs Cratchit makes the pudding.</p>"
        "</body></html>",
        encoding="utf-8",
    )
    return path


def ebook(path: Path) -> Path:
    """An EPUB 3 by its specification: a zip with the mimetype first and stored, a container, a package, chapters."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="book/package.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        archive.writestr(
            "book/package.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Staves</dc:title>'
            '<dc:identifier id="id">staves-1</dc:identifier><dc:language>en</dc:language></metadata><manifest>'
            '<item id="one" href="one.xhtml" media-type="application/xhtml+xml"/>'
            '<item id="two" href="two.xhtml" media-type="application/xhtml+xml"/></manifest>'
            '<spine><itemref idref="one"/><itemref idref="two"/></spine></package>',
        )
        for name, heading, text in [
            ("one", "Marley's Ghost", "The ghost of Jacob Marley visits Ebenezer Scrooge."),
            ("two", "The First Spirit", "The Ghost of Christmas Past shows Scrooge his school."),
        ]:
            archive.writestr(
                f"book/{name}.xhtml",
                '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head><title>x</title></head>'
                f"<body><h1>{heading}</h1><p>{text}</p></body></html>",
            )
    return path


def every_format(folder: Path) -> Path:
    """A corpus holding one file of each format."""
    folder.mkdir(parents=True, exist_ok=True)
    pdf(folder / "ledger.pdf")
    word(folder / "rules.docx")
    slides(folder / "talk.pptx")
    workbook(folder / "accounts.xlsx")
    web_page(folder / "family.html")
    ebook(folder / "staves.epub")
    episode = {"title": "Episode 1", "text": "Fred talks about his uncle Ebenezer Scrooge and Christmas.", "n": 1}
    (folder / "episode.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(episode).encode())  # with a byte-order mark
    (folder / "letters.json").write_text(
        json.dumps(
            [
                {"title": "To Fred", "text": "Ebenezer Scrooge declines the dinner."},
                {"title": "No text", "body": "a letter without its text field"},
                {"title": "Number", "text": 42},
            ]
        )
    )
    pd.DataFrame(
        {
            "title": ["Ledger A", "Ledger B"],
            "text": ["Scrooge and Marley lend money in the City.", "Scrooge buys the prize turkey for Bob Cratchit."],
            "year": [1843, 1844],
        }
    ).to_parquet(folder / "ledgers.parquet", row_group_size=1)
    return folder
