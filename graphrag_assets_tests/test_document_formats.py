"""Every document a user has: JSON, parquet, PDF, Word, PowerPoint, Excel, HTML and EPUB, with pages and places."""

import json
import re
import socket
import zipfile

import docx
import PIL.Image
import pytest

from graphrag_assets.method.ingest import documents as reading
from graphrag_assets.method.ingest.conversion import MB, Limits
from graphrag_assets.method.ingest.documents import TabularColumns, read_corpus
from graphrag_assets.method.ingest.text_units import chunk_documents

from . import documents as files
from .conftest import materialization_metadata


@pytest.fixture
def mixed(tmp_path):
    return files.every_format(tmp_path / "mixed")


def by_title(result):
    return result.documents.to_pandas().set_index("title")


def test_every_format_becomes_documents_with_its_text_and_title(mixed):
    result = read_corpus(mixed, TabularColumns(metadata=("year",)))
    docs = by_title(result)
    assert files.PDF_PAGES[0][:40] in docs.loc["ledger.pdf", "text"]
    assert files.PDF_PAGES[1][:40] in docs.loc["ledger.pdf", "text"]
    assert "# Counting-house rules" in docs.loc["rules.docx", "text"]
    assert "| Bob Cratchit | 15 shillings |" in docs.loc["rules.docx", "text"]  # the table, as Markdown
    assert "Belle releases young Scrooge" in docs.loc["talk.pptx", "text"]
    assert "<!--" not in docs.loc["talk.pptx", "text"]  # slide markers become the outline, not text for the model
    assert "| Caroline's husband | 3 |" in docs.loc["accounts.xlsx", "text"]
    assert "Tiny Tim sits by the fire" in docs.loc["family.html", "text"]
    assert "Ghost of Christmas Past" in docs.loc["staves.epub", "text"]
    assert docs.loc["Episode 1", "text"].startswith("Fred talks")  # the byte-order mark is not in the way
    assert docs.loc["To Fred", "source_path"] == "letters.json"
    assert json.loads(docs.loc["Ledger B", "metadata"]) == {"year": 1844}
    assert json.loads(docs.loc["family.html", "metadata"]) == {"format": "html", "title": "Tiny Tim"}
    problems = {p.path: p.message for p in result.problems}
    assert problems == {
        "letters.json#2": "no 'text', skipped",
        "letters.json#3": "'text' is a number, not a string; skipped",
    }
    assert result.files[".json"] == {"read": 2, "documents": 2}
    assert result.files[".parquet"] == {"read": 1, "documents": 2}
    assert result.files_read == 9


def test_text_units_know_their_pages_slides_sheets_and_headings(mixed):
    read = read_corpus(mixed)
    units, _ = chunk_documents(read.documents, size=40, overlap=5)
    units = units.to_pandas()
    titles = read.documents.to_pandas().set_index("id")["title"]
    units["document"] = units["document_id"].map(titles)
    pdf = units[units["document"] == "ledger.pdf"]
    assert pdf["pages"].map(list).tolist()[0] == [1] and pdf["pages"].map(list).tolist()[-1][-1] == 2
    marley = pdf[pdf["text"].str.contains("Marley had been")]
    fred = pdf[pdf["text"].str.contains("Fred invited")]
    assert set(marley["location"]) == {"page 1"} and set(fred["location"]) <= {"page 2", "pages 1-2"}
    deck = units[units["document"] == "talk.pptx"]
    assert set(deck[deck["text"].str.contains("Belle releases")]["pages"].map(max)) == {2}
    assert deck["location"].str.match(r"slides? \d").all()
    sheets = units[units["document"] == "accounts.xlsx"]
    assert "sheet Wages" in set(sheets["location"]) and sheets["location"].str.contains("Debts").any()
    rules = units[units["document"] == "rules.docx"]
    wage_units = rules[rules["text"].str.contains("fifteen shillings")]
    assert wage_units["location"].str.startswith("Counting-house rules").all()
    assert "Counting-house rules › Wages" in set(rules["location"])
    assert units[units["document"] == "Episode 1"]["location"].isna().all()  # no pages in a JSON object


def test_files_that_cannot_be_read_are_skipped_with_the_reason(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    files.pdf(folder / "fine.pdf")
    files.pdf(folder / "locked.pdf", password="secret")
    files.pdf(folder / "scan.pdf", pages=["", ""])
    (folder / "corrupt.docx").write_bytes(b"PK\x03\x04 this is no archive")
    (folder / "truncated.pdf").write_bytes(files.pdf(tmp_path / "whole.pdf").read_bytes()[:300])
    (folder / "big.txt").write_text("Scrooge. " * (MB // 4))
    with zipfile.ZipFile(folder / "bomb.docx", "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("word/document.xml", b"\x00" * (30 * MB))  # 30 KB on disk
    (folder / "array.json").write_text('["just", "strings"]')
    (folder / "bad.parquet").write_bytes(b"PAR1 not really")
    result = read_corpus(folder, limits=Limits(max_file_bytes=MB))
    problems = {p.path: p.message for p in result.problems}
    assert list(by_title(result).index) == ["fine.pdf"]
    assert problems["locked.pdf"] == "is encrypted; save a copy without a password; skipped"
    assert "has no text layer (a scanned PDF?); run OCR on it first" in problems["scan.pdf"]
    assert "not a readable .docx file (corrupt archive" in problems["corrupt.docx"]
    assert "not a readable PDF" in problems["truncated.pdf"]
    assert "over the limit of 1 MB per file (max_file_mb)" in problems["big.txt"]
    assert "unpacks to 30 MB, over the limit of 20 MB" in problems["bomb.docx"] and "zip bomb" in problems["bomb.docx"]
    assert "array entry is not a JSON object" in problems["array.json#1"]
    assert "not a readable parquet file" in problems["bad.parquet"]
    assert result.files[".pdf"] == {"read": 1, "skipped": 3, "documents": 1}


def test_a_document_that_converts_to_too_much_text_keeps_the_pages_before_the_limit(tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()
    files.pdf(folder / "long.pdf", pages=[f"Page {n} of the ledger. " * 20 for n in range(1, 41)])
    result = read_corpus(folder, limits=Limits(max_document_chars=5_000))
    [problem] = result.problems
    assert not problem.skipped and "pages 11 and on were left out" in problem.message
    outline = json.loads(result.documents["outline"][0])
    assert [label for _, _, label in outline] == [str(n) for n in range(1, 11)]
    assert len(result.documents["text"][0]) <= 5_000


def test_markup_too_large_to_convert_is_refused_before_it_is_parsed(tmp_path):
    folder = tmp_path / "markup"
    folder.mkdir()
    files.word(folder / "rules.docx")
    files.web_page(folder / "family.html")
    result = read_corpus(folder, limits=Limits(max_document_chars=20))  # 200 bytes of markup at most
    problems = {p.path: p.message for p in result.problems}
    assert result.documents.is_empty()
    for name in ("rules.docx", "family.html"):
        assert "of markup, more than converting within max_document_chars (20) allows" in problems[name]


def test_a_picture_in_a_word_file_leaves_its_alt_text_not_its_bytes(tmp_path):
    folder = tmp_path / "pictures"
    folder.mkdir()
    picture = tmp_path / "red.png"
    PIL.Image.new("RGB", (64, 64), "red").save(picture)
    document = docx.Document()
    document.add_paragraph("Before the picture.")
    document.add_picture(str(picture))
    document.add_paragraph("After the picture.")
    document.save(str(folder / "pictured.docx"))
    [text] = read_corpus(folder).documents["text"]
    assert "Before the picture." in text and "After the picture." in text and "data:" not in text


def test_conversion_is_kept_by_content_and_redone_when_the_file_changes(tmp_path, monkeypatch):
    folder = tmp_path / "kept"
    folder.mkdir()
    files.word(folder / "rules.docx")
    files.pdf(folder / "ledger.pdf")
    converted, convert = [], reading.convert_file

    def counted(path, limits):
        converted.append(path.name)
        return convert(path, limits)

    monkeypatch.setattr(reading, "convert_file", counted)
    cache: dict = {}
    first = read_corpus(folder, conversions=cache)
    again = read_corpus(folder, conversions=cache)
    assert sorted(converted) == ["ledger.pdf", "rules.docx"]  # the second read converted nothing
    assert first.documents.equals(again.documents)
    files.pdf(folder / "ledger.pdf", pages=["A new first page.", *files.PDF_PAGES])
    changed = read_corpus(folder, conversions=cache)
    assert sorted(converted) == ["ledger.pdf", "ledger.pdf", "rules.docx"]
    assert set(changed.documents["id"]) != set(first.documents["id"])
    assert len(cache) == 3


def test_conversion_makes_no_network_call(mixed, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"conversion tried to connect to {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    result = read_corpus(mixed)
    assert "http://example.com/tim.png" in by_title(result).loc["family.html", "text"]  # kept as a link, not fetched


@pytest.mark.slow
def test_a_corpus_of_every_format_indexes_offline_and_answers_with_the_pdf_page(workspace):
    files.every_format(workspace.data / "mixed")
    export = {"config": {"folder": str(workspace.root / "exports")}}
    small_units = {"config": {"chunk_size": 30, "chunk_overlap": 5}}  # so that each PDF page has units of its own
    result = workspace.materialize(
        "mixed",
        run_config={"ops": {"corpus_documents": small_units, "graphml_export": export, "parquet_export": export}},
    )
    assert result.success
    documents = materialization_metadata(result, "documents")
    assert documents["source"] == "documents folder" and documents["files_read"] == 9
    assert re.search(r"\| \.pdf +\| +1 \| +0 \| +1 \|", documents["files"])  # type, read, skipped, documents
    answered = workspace.ask("mixed", "basic_search", {"question": "Who copied letters in the tank?"})
    sources = materialization_metadata(answered, "basic_search")["sources"]
    assert re.search(r"\| ledger\.pdf +\| pages? (1-)?2 +\|", sources), sources  # its overlap may start on page 1
    traced = workspace.sql(
        "SELECT s.location, s.pages FROM answer_sources s JOIN query_answers a ON a.id = s.answer_id "
        "WHERE a.run_id = ? AND s.document_title = 'ledger.pdf'",
        answered.run_id,
    )
    assert any(2 in pages for pages in traced["pages"])
