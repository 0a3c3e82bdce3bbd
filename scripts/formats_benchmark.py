"""Conversion of PDF and Word files against plain text of the same size (see benchmark.py for how to run it).

formats: a PDF of --pages pages and a DOCX of --docx-megabytes MB, both made of the sample book's text, each read
  into documents and text units (read_corpus, then chunk_documents) in a fresh process for its peak memory, with
  the conversion cache off; baseline: a .txt file holding the text the conversion gave, read the same way. A second
  read of each converted file through the conversion cache shows what a nightly re-index of unchanged files costs.
"""

import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

from harness import run_in_child

REPO = Path(__file__).resolve().parents[1]
BOOK = next((REPO / "data" / "a-christmas-carol").glob("*.txt"))
MiB = 2**20


def _read(folder: Path, cache: Path | None = None) -> dict:
    return run_in_child("read_and_chunk", folder, cache or "")


def _book_paragraphs() -> list[str]:
    return [" ".join(p.split()) for p in BOOK.read_text(encoding="utf-8").split("\n\n") if p.strip()]


def write_pdf(path: Path, pages: int) -> None:
    from fpdf import FPDF

    # The PDF core fonts hold Latin-1 only: the book's curly quotes and dashes become plain ones.
    text = "\n".join(_book_paragraphs())
    text = text.translate(str.maketrans("“”‘’—", "\"\"''-")).encode("latin-1", "replace").decode("latin-1")
    per_page = 2_800  # about a printed book page
    document = FPDF()
    document.set_font("Helvetica", size=9)
    for number in range(pages):
        start = (number * per_page) % max(1, len(text) - per_page)
        document.add_page()
        document.multi_cell(0, 4, text[start : start + per_page])
    document.output(str(path))


def write_docx(path: Path, megabytes: float) -> None:
    """A Word file from python-docx, its body then filled with the book's paragraphs (and a heading each 200) until
    the file reaches `megabytes`: python-docx itself takes minutes to add tens of megabytes of paragraphs."""
    import docx

    template = path.with_suffix(".template.docx")
    docx.Document().save(str(template))
    with zipfile.ZipFile(template) as source:
        members = {name: source.read(name) for name in source.namelist()}
    template.unlink()
    xml = members["word/document.xml"].decode()
    head, tail = xml.split("<w:body>", 1)
    tail = tail[tail.index("<w:sectPr") :]
    paragraphs = [f'<w:p><w:r><w:t xml:space="preserve">{escape(p)}</w:t></w:r></w:p>' for p in _book_paragraphs()]
    copies = 1
    while True:
        body = []
        for copy in range(copies):
            for number, paragraph in enumerate(paragraphs):
                if number % 200 == 0:
                    body.append(
                        f'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Copy {copy} part {number}'
                        "</w:t></w:r></w:p>"
                    )
                body.append(paragraph)
        members["word/document.xml"] = f"{head}<w:body>{''.join(body)}{tail}".encode()
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
            for name, data in members.items():
                out.writestr(name, data)
        size = path.stat().st_size / MiB
        if size >= megabytes:
            return
        copies = max(copies + 1, int(copies * megabytes / size) + 1)


def formats_benchmark(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="graphrag-formats-"))
    rows = []
    try:
        for kind, write in (
            (f"{args.pages}-page PDF", lambda p: write_pdf(p, args.pages)),
            (f"{args.docx_megabytes:g} MB DOCX", lambda p: write_docx(p, args.docx_megabytes)),
        ):
            suffix = ".pdf" if "PDF" in kind else ".docx"
            converted_dir, text_dir, cache = work / f"{suffix[1:]}", work / f"{suffix[1:]}-text", work / "cache"
            converted_dir.mkdir()
            text_dir.mkdir()
            write(converted_dir / f"file{suffix}")
            size = (converted_dir / f"file{suffix}").stat().st_size / MiB
            converted = _read(converted_dir)
            # The baseline: the same text, as the plain-text file a user might have had instead.
            sys.path.insert(0, str(REPO))
            from graphrag_assets.method.ingest.conversion import Limits, convert_file

            text = convert_file(converted_dir / f"file{suffix}", Limits(1 << 30, 1 << 30)).text
            (text_dir / "file.txt").write_text(text, encoding="utf-8")
            del text
            plain = _read(text_dir)
            _read(converted_dir, cache)  # fills the conversion cache
            cached = _read(converted_dir, cache)
            rows.append((kind, size, converted, plain, cached))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = (
        f"{'file':<16}{'MiB':>6}{'pages':>7}{'text MiB':>9}{'units':>7}{'read s':>8}{'MiB/s':>7}{'pages/s':>8}"
        f"{'peak MiB':>9}{'txt read s':>11}{'txt peak':>9}{'x time':>7}{'x RSS':>6}{'cached s':>9}"
    )
    print(header)
    print("-" * len(header))
    for kind, size, converted, plain, cached in rows:
        text_mib = converted["chars"] / MiB
        print(
            f"{kind:<16}{size:>6.1f}{converted['pages'] or '-':>7}{text_mib:>9.1f}{converted['units']:>7}"
            f"{converted['read_s']:>8.1f}{size / converted['read_s']:>7.2f}"
            f"{(converted['pages'] / converted['read_s'] if converted['pages'] else 0):>8.1f}"
            f"{converted['peak_rss_mib']:>9.0f}{plain['read_s']:>11.2f}{plain['peak_rss_mib']:>9.0f}"
            f"{converted['read_s'] / plain['read_s']:>7.1f}{converted['peak_rss_mib'] / plain['peak_rss_mib']:>6.2f}"
            f"{cached['read_s']:>9.2f}"
        )
        for problem in converted["problems"]:
            print(f"  note: {problem}")
    print(
        "\nread s: reading the folder into documents (conversion included); txt: the same text as a .txt file "
        "(the baseline); x time, x RSS: converted against txt; cached s: the converted file read again with the "
        "conversion cache, as a nightly re-index of an unchanged file does."
    )


def ingest_benchmark(args) -> None:
    """A large text file read and cut (robustness_benchmark.py; --megabytes 0 skips it), then PDF and Word files
    converted against plain text of the same size."""
    if args.megabytes:
        import robustness_benchmark

        robustness_benchmark.ingest_benchmark(args)
        print()
    formats_benchmark(args)
