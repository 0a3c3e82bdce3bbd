"""Office, PDF and web files as Markdown text, with where each page, slide, sheet or heading starts.

Word, PowerPoint, Excel, HTML and EPUB go through Microsoft's markitdown, each to its own converter (no format
guessing, no archive unpacking, nothing fetched: a link or an image in a page stays a link). PDFs are read page by
page with pdfminer.six, the engine markitdown uses for prose PDFs: its joined text loses the page boundaries, and a
page-by-page read can stop at the size limit instead of holding a 10,000-page file's text first.

An outline is a list of marks `(offset, kind, label)`: from `offset` on, the text is on that page or slide, in that
sheet, or under that heading path. Text units get their pages and location from it (text_units.py).
"""

from __future__ import annotations

import bisect
import io
import re
import zipfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

MB = 1 << 20
CONVERTED_SUFFIXES = (".pdf", ".docx", ".pptx", ".xlsx", ".html", ".htm", ".epub")
_ARCHIVES = (".docx", ".pptx", ".xlsx", ".epub")  # zip files inside
# Office text compresses about 3-10x; a file declaring far more than this is a zip bomb, not a document.
ARCHIVE_EXPANSION = 20
# Converters hold a file's markup as a tree, some 25 bytes of memory per byte of it: markup (Office XML, HTML)
# beyond this many bytes per character a document may keep is refused before it is parsed, not after.
MARKUP_BYTES_PER_CHAR = 10
_MARKUP = (".xml", ".xhtml", ".html", ".htm")
# Bumped when what a conversion returns changes, so cached conversions of the old kind are not used.
CONVERSION_VERSION = f"1-markitdown-{version('markitdown')}-pdfminer-{version('pdfminer.six')}"

Mark = tuple[int, str, str]  # (offset in the text, "page" | "slide" | "sheet" | "heading", label)


@dataclass(frozen=True)
class Limits:
    """What one file may cost: its size on disk (and unzipped, for Office files), and the text it becomes."""

    max_file_bytes: int = 100 * MB
    max_document_chars: int = 10_000_000  # about 2.5M tokens, some 3,000 book pages


class ConversionError(Exception):
    """A file that cannot become text; the message says why, for the user."""


@dataclass(frozen=True)
class Converted:
    text: str
    outline: list[Mark] = field(default_factory=list)
    title: str | None = None  # what the file calls itself (an HTML <title>, an EPUB's dc:title)
    note: str | None = None  # what the user should know (text left out at the size limit)


def convert_file(path: Path, limits: Limits) -> Converted:
    """The file's text and outline; ConversionError when it has none to give."""
    suffix = path.suffix.lower()
    if suffix in _ARCHIVES:
        _check_markup(_archive_markup_bytes(path, limits), limits)
    elif suffix in _MARKUP:
        _check_markup(path.stat().st_size, limits)
    if suffix == ".pdf":
        return _pdf(path, limits)
    from markitdown import StreamInfo  # imports onnxruntime (through magika): only when a file needs it

    try:
        result = _markitdown_converter(suffix).convert(
            io.BytesIO(path.read_bytes()), StreamInfo(extension=suffix, filename=path.name)
        )
    except Exception as err:  # noqa: BLE001 - a converter can fail in any of its libraries; all are the file's fault
        raise ConversionError(f"could not be converted ({_reason(err)})") from None
    text, note = _within_limit(_EMBEDDED_IMAGE.sub(r"\1", result.markdown or ""), limits)
    if suffix == ".pptx":
        text, outline = _slides(text)
    elif suffix == ".xlsx":
        outline = [(offset, "sheet", label) for offset, _, label in headings(text, max_level=2)]
    else:
        outline = headings(text)
    if not text.strip():
        raise ConversionError("has no text")
    return Converted(text, outline, (result.title or "").strip() or None, note)


def _markitdown_converter(suffix: str):
    from markitdown import converters

    return {
        ".docx": converters.DocxConverter,
        ".pptx": converters.PptxConverter,
        ".xlsx": converters.XlsxConverter,
        ".html": converters.HtmlConverter,
        ".htm": converters.HtmlConverter,
        ".epub": converters.EpubConverter,
    }[suffix]()


def _reason(err: Exception) -> str:
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


def _archive_markup_bytes(path: Path, limits: Limits) -> int:
    """The bytes of markup an Office file or EPUB unpacks to; ConversionError for a corrupt archive or a zip bomb.

    Python's zipfile never reads past a member's declared size, so the declared sizes bound what conversion reads.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise ConversionError(f"is not a readable {path.suffix.lower()} file (corrupt archive: {err})") from None
    expanded = sum(member.file_size for member in members)
    limit = limits.max_file_bytes * ARCHIVE_EXPANSION
    if expanded > limit:
        raise ConversionError(
            f"unpacks to {expanded / MB:,.0f} MB, over the limit of {limit / MB:,.0f} MB "
            f"({ARCHIVE_EXPANSION}x max_file_mb): a damaged file or a zip bomb"
        )
    return sum(member.file_size for member in members if member.filename.lower().endswith(_MARKUP))


def _check_markup(size: int, limits: Limits) -> None:
    limit = limits.max_document_chars * MARKUP_BYTES_PER_CHAR
    if size > limit:
        raise ConversionError(
            f"holds {size / MB:,.0f} MB of markup, more than converting within max_document_chars "
            f"({limits.max_document_chars:,}) allows ({limit / MB:,.0f} MB); raise max_document_chars or split the file"
        )


def _within_limit(text: str, limits: Limits) -> tuple[str, str | None]:
    if len(text) <= limits.max_document_chars:
        return text, None
    return text[: limits.max_document_chars], (
        f"converted to {len(text):,} characters; only the first {limits.max_document_chars:,} were kept "
        "(max_document_chars)"
    )


def _pdf(path: Path, limits: Limits) -> Converted:
    from pdfminer.converter import TextConverter
    from pdfminer.layout import LAParams
    from pdfminer.pdfdocument import PDFEncryptionError
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage

    pages: list[str] = []
    outline: list[Mark] = []
    size, note = 0, None
    try:
        with path.open("rb") as stream:
            manager, page_text = PDFResourceManager(caching=True), io.StringIO()
            interpreter = PDFPageInterpreter(manager, TextConverter(manager, page_text, laparams=LAParams()))
            for number, page in enumerate(PDFPage.get_pages(stream, check_extractable=False), start=1):
                interpreter.process_page(page)
                text = page_text.getvalue().replace("\f", "").strip()
                page_text.seek(0)
                page_text.truncate()
                if not text:
                    continue
                if size + len(text) > limits.max_document_chars:
                    note = (
                        f"pages {number} and on were left out: the text before them reached the limit of "
                        f"{limits.max_document_chars:,} characters (max_document_chars)"
                    )
                    break
                outline.append((size, "page", str(number)))
                pages.append(text)
                size += len(text) + 2
    except PDFEncryptionError:
        raise ConversionError("is encrypted; save a copy without a password") from None
    except Exception as err:  # noqa: BLE001 - pdfminer raises many kinds for a damaged file
        raise ConversionError(f"is not a readable PDF ({_reason(err)})") from None
    if not pages:
        raise ConversionError("has no text layer (a scanned PDF?); run OCR on it first")
    return Converted("\n\n".join(pages), outline, None, note)


# markitdown leaves a picture inside a Word file as ![alt](data:image/png;base64...): only its alt text says anything.
_EMBEDDED_IMAGE = re.compile(r"!\[([^\]]*)\]\(data:[^)]*\)")
_SLIDE = re.compile(r"<!-- Slide number: (\d+) -->\n?")


def _slides(markdown_text: str) -> tuple[str, list[Mark]]:
    """markitdown's slide-number comments turned into marks and taken out of the text the model reads."""
    parts, outline, size = [], [], 0
    pieces = _SLIDE.split(markdown_text)
    for number, body in zip(pieces[1::2], pieces[2::2]):
        body = body.strip()
        if body:
            outline.append((size, "slide", number))
            parts.append(body)
            size += len(body) + 2
    return "\n\n".join(parts), outline


_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


def headings(text: str, max_level: int = 6) -> list[Mark]:
    """A mark at each Markdown heading (outside code fences), labelled with its path: 'Policy › Clerks'."""
    fences = [m.start() for m in _FENCE.finditer(text)]
    path: list[tuple[int, str]] = []
    marks: list[Mark] = []
    for match in _HEADING.finditer(text):
        level = len(match.group(1))
        if level > max_level or bisect.bisect_left(fences, match.start()) % 2:  # odd: inside a fence
            continue
        path = [(lvl, name) for lvl, name in path if lvl < level] + [(level, match.group(2).strip())]
        marks.append((match.start(), "heading", " › ".join(name for _, name in path)))
    return marks
