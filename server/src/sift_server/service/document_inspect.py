"""What a document is, read from its bytes before any converter parses it.

Runs in the prep thread, once per document: the format from the leading bytes
(and for a ZIP its member names), checked against the client's hint; the pages
it will cost; and the limits a converter would only meet half way through:
archives and PDF streams that unpack far beyond their size (ZIP and PDF
bombs), PDFs with more pages than allowed or behind a password, embedded images
of too many pixels. Only headers and directories are read here (the ZIP central
directory, a PDF's stream dictionaries and page tree, an image's header); no
page is loaded or rendered, and a PDF stream is inflated only to measure it,
stopped at the limit (``pdf_scan``). Every refusal is an ``InvalidInput`` that names the item.
"""

from __future__ import annotations

import io
import re
import warnings
import zipfile
from dataclasses import dataclass

from sift_server.adapters.document_input import Document
from sift_server.errors import InvalidInput
from sift_server.service.pdf_scan import scan_streams

# Member names that identify each Office Open XML format inside its ZIP.
_OOXML_MAIN = {"word/document.xml": "docx", "ppt/presentation.xml": "pptx", "xl/workbook.xml": "xlsx"}
_OOXML_MEDIA = ("word/media/", "ppt/media/", "xl/media/")
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*")
_HTML_START = re.compile(rb"<\s*(!doctype\s+html|html|head|body|table|div|p|h[1-6])\b", re.IGNORECASE)
# Formats without pages cost an estimate, one page per this many bytes of text (HTML,
# Markdown, CSV) or of body XML (DOCX: docProps/app.xml holds the page count the last editor
# saved, which python-docx and others never update). Estimates are costs, not checked against
# the page limit: the byte limits bound those documents' work.
TEXT_PAGE_BYTES = 16_384
DOCX_PAGE_BYTES = 16_384
# Formats whose pages (PDF pages, slides, sheets, image frames) are counted, and limited.
PAGED = frozenset({"pdf", "pptx", "xlsx", "image"})


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """Per document: encoded bytes, pages, pixels of one embedded image, for an Office
    archive the bytes it unpacks to, its members and its worst compression ratio (the
    same bytes and ratio for a PDF's streams), and a PDF's streams. The page, byte and
    timeout limits are the reference's catalog defaults."""

    max_bytes: int = 16 * 1024 * 1024
    max_pages: int = 100
    max_pixels: int = 50_000_000
    max_unpacked_bytes: int = 256 * 1024 * 1024
    max_members: int = 10_000
    # Streams of one PDF (content, images, fonts, object streams): what its scan reads.
    max_pdf_streams: int = 20_000
    max_ratio: int = 200
    per_request: int = 32


def _name(fmt: str) -> str:
    return {"md": "Markdown", "image": "an image"}.get(fmt, fmt.upper())


def sniff(data: bytes) -> str:
    """The format the bytes are, as far as their start and (for a ZIP) its members tell."""
    head = data[:1024]
    if b"%PDF-" in head:
        return "pdf"
    if data.startswith(b"PK\x03\x04") or data.startswith(b"PK\x05\x06"):
        return "zip"
    if data.startswith(_OLE_MAGIC):
        return "ole"
    if data.startswith(_IMAGE_MAGIC) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP"):
        return "image"
    return "text"


def _check_zip(raw: bytes, hint: str | None, where: str, limits: DocumentLimits) -> tuple[str, int]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise InvalidInput(f"{where}: the document is a truncated or corrupt ZIP archive ({exc}).") from None
    names = {member.filename for member in members}
    found = [fmt for main, fmt in _OOXML_MAIN.items() if main in names]
    if not found:
        raise InvalidInput(f"{where}: the ZIP archive is not a DOCX, PPTX or XLSX document.")
    fmt = found[0]
    if hint is not None and hint != fmt:
        raise InvalidInput(f"{where}: the document is declared {hint!r} but its data is a {_name(fmt)} document.")
    if len(members) > limits.max_members:
        raise InvalidInput(f"{where}: the archive has {len(members)} members; the limit is {limits.max_members}.")
    unpacked = 0
    for member in members:
        if member.flag_bits & 0x1:
            raise InvalidInput(f"{where}: the document is encrypted; send it without a password.")
        unpacked += member.file_size
        # Python's zipfile never yields more than the declared size, so these bound the work.
        if member.file_size > 1024 * 1024 and member.file_size > limits.max_ratio * max(member.compress_size, 1):
            raise InvalidInput(
                f"{where}: member {member.filename!r} unpacks {member.file_size // max(member.compress_size, 1)}"
                f" times its size; the limit is {limits.max_ratio} (a ZIP bomb?)."
            )
    if unpacked > limits.max_unpacked_bytes:
        raise InvalidInput(
            f"{where}: the document unpacks to {unpacked} bytes; the limit is {limits.max_unpacked_bytes}."
        )
    for member in members:
        if member.filename.startswith(_OOXML_MEDIA) and not member.is_dir():
            with archive.open(member) as stream:
                _check_pixels(stream, f"{where} ({member.filename})", limits.max_pixels, strict=False)
    return fmt, _ooxml_pages(archive, names, fmt)


def _ooxml_pages(archive: zipfile.ZipFile, names: set[str], fmt: str) -> int:
    """Slides, sheets, or for a DOCX the estimate from its body's size."""
    if fmt == "pptx":
        return sum(1 for name in names if re.fullmatch(r"ppt/slides/slide\d+\.xml", name))
    if fmt == "xlsx":
        return sum(1 for name in names if re.fullmatch(r"xl/worksheets/sheet\d+\.xml", name))
    return 1 + archive.getinfo("word/document.xml").file_size // DOCX_PAGE_BYTES


def _check_pixels(stream: io.BufferedIOBase | io.BytesIO | object, where: str, max_pixels: int, strict: bool) -> int:
    """An image's pixels from its header (``strict``: not an image is an error; else
    skipped, as Office media may be vector EMF/WMF). Returns its frames."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(stream)  # type: ignore[arg-type]
    except Image.DecompressionBombError:
        raise InvalidInput(f"{where}: an embedded image has too many pixels; the limit is {max_pixels}.") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        if strict:
            raise InvalidInput(f"{where}: the data is not a decodable image ({exc}).") from None
        return 0
    width, height = image.size
    if width * height > max_pixels:
        raise InvalidInput(
            f"{where}: an embedded image is {width} × {height} = {width * height} pixels; the limit is {max_pixels}."
        )
    return int(getattr(image, "n_frames", 1))


def _check_pdf(raw: bytes, where: str, limits: DocumentLimits) -> int:
    """Streams first, from the raw bytes (no page is loaded: a page's content could be a
    bomb), then the document's page tree and encryption with PDFium."""
    import pypdfium2

    streams = scan_streams(raw, limits.max_ratio, limits.max_unpacked_bytes, limits.max_pdf_streams)
    if streams.streams > limits.max_pdf_streams:
        raise InvalidInput(f"{where}: the PDF has more than {limits.max_pdf_streams} streams; that is the limit.")
    if streams.bomb is not None:
        out, consumed = streams.bomb
        if streams.inflated > limits.max_unpacked_bytes:
            raise InvalidInput(
                f"{where}: the PDF's streams unpack to more than {limits.max_unpacked_bytes} bytes (a PDF bomb?)."
            )
        raise InvalidInput(
            f"{where}: a stream of the PDF unpacks more than {out // max(consumed, 1)} times its size;"
            f" the limit is {limits.max_ratio} (a PDF bomb?)."
        )
    pixels, width, height = streams.largest_image
    if pixels > limits.max_pixels:
        raise InvalidInput(
            f"{where}: the PDF holds an image of {width} × {height} = {pixels} pixels;"
            f" the limit is {limits.max_pixels}."
        )
    try:
        pdf = pypdfium2.PdfDocument(raw)
    except pypdfium2.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise InvalidInput(f"{where}: the PDF is encrypted; send it without a password.") from None
        raise InvalidInput(f"{where}: the PDF is truncated or corrupt ({exc}).") from None
    try:
        pages = len(pdf)
        if pages == 0:
            raise InvalidInput(f"{where}: the PDF has no pages (truncated or corrupt).")
        if pages > limits.max_pages:
            raise InvalidInput(f"{where}: the PDF has {pages} pages; the limit is {limits.max_pages}.")
        return pages
    finally:
        pdf.close()


def _text_format(raw: bytes, hint: str | None, where: str) -> str:
    try:
        text_head = raw[:4096].decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start < 4090:  # a character cut at the window's end is no evidence
            raise InvalidInput(f"{where}: the document is neither a known binary format nor UTF-8 text.") from None
        text_head = raw[: exc.start].decode("utf-8-sig", errors="ignore")
    if hint is not None:
        return hint
    return "html" if _HTML_START.search(text_head.encode()) else "md"


def inspect_document(raw: bytes, hint: str | None, where: str, limits: DocumentLimits) -> Document:
    """The document checked and described; raises ``InvalidInput`` naming ``where``."""
    kind = sniff(raw)
    if kind == "ole":
        raise InvalidInput(
            f"{where}: the document is an encrypted Office file or a legacy binary one (doc, xls, ppt);"
            " send DOCX, PPTX or XLSX without a password."
        )
    if kind == "zip":
        fmt, pages = _check_zip(raw, hint, where, limits)
    elif kind in ("pdf", "image"):
        if hint is not None and hint != kind:
            raise InvalidInput(f"{where}: the document is declared {hint!r} but its data is {_name(kind)}.")
        fmt = kind
        if kind == "pdf":
            pages = _check_pdf(raw, where, limits)
        else:
            pages = _check_pixels(io.BytesIO(raw), where, limits.max_pixels, strict=True)
    else:
        if hint in ("pdf", "docx", "pptx", "xlsx", "image"):
            raise InvalidInput(f"{where}: the document is declared {hint!r} but its data is text.")
        fmt = _text_format(raw, hint, where)
        pages = 1 + len(raw) // TEXT_PAGE_BYTES
    pages = max(pages, 1)
    if fmt in PAGED and pages > limits.max_pages:
        raise InvalidInput(f"{where}: the document has {pages} pages; the limit is {limits.max_pages}.")
    return Document(raw, fmt, pages, where)
