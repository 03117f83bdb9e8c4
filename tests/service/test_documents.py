"""service/documents.py and service/document_inspect.py: document items checked before any
converter parses them (documents made by tests/fixtures/documents.py)."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from sift_server.errors import InvalidInput
from sift_server.service.document_inspect import DocumentLimits, inspect_document, sniff
from sift_server.service.documents import canonical_hint, check_documents, document_limits, reject_documents
from sift_server.wire.schemas import DocumentInput, ExtractBody, ImageInput, Item
from tests.fixtures import documents

LIMITS = DocumentLimits()


def _inspect(data: bytes, hint: str | None = None, limits: DocumentLimits = LIMITS) -> tuple[str, int]:
    document = inspect_document(data, hint, "items[3].document", limits)
    return document.format, document.pages


def _refused(data: bytes, hint: str | None = None, limits: DocumentLimits = LIMITS) -> str:
    with pytest.raises(InvalidInput) as caught:
        inspect_document(data, hint, "items[3].document", limits)
    message = str(caught.value)
    assert message.startswith("items[3].document")
    return message


def test_the_sdk_wire_shapes_decode_alike() -> None:
    """msgpack sends bin, JSON base64, as sie-sdk's documents.py and the reference's struct do."""
    data = documents.docx_report()
    packed = msgspec.msgpack.encode({"items": [{"document": {"data": data, "format": "docx"}}]})
    as_json = msgspec.json.encode({"items": [{"document": {"data": data, "format": None}}]})
    from_msgpack = msgspec.msgpack.decode(packed, type=ExtractBody)
    from_json = msgspec.json.decode(as_json, type=ExtractBody)
    assert from_msgpack.items and from_json.items
    assert from_msgpack.items[0].document == DocumentInput(data, "docx")
    assert from_json.items[0].document == DocumentInput(data, None)
    with pytest.raises(msgspec.ValidationError, match=r"items\[0\]\.document\.data"):
        msgspec.json.decode(b'{"items": [{"document": {"data": "not base64!"}}]}', type=ExtractBody)


@pytest.mark.parametrize(
    ("hint", "canonical"),
    [("docx", "docx"), ("HTM", "html"), ("xhtml", "html"), ("markdown", "md"), (".pdf", "pdf"), ("jpg", "image")],
)
def test_hints_and_their_aliases(hint: str, canonical: str) -> None:
    assert canonical_hint(hint, "items[0].document") == canonical


def test_an_empty_hint_is_no_hint_and_unknown_ones_are_named() -> None:
    assert canonical_hint("", "x") is None and canonical_hint(None, "x") is None
    with pytest.raises(InvalidInput, match=r"items\[1\]\.document: documents of format 'rtf' are not converted"):
        canonical_hint("rtf", "items[1].document")
    with pytest.raises(InvalidInput, match="unknown document format 'exe'"):
        canonical_hint("exe", "items[1].document")


def test_weight_free_formats_are_recognised_from_their_bytes() -> None:
    assert _inspect(documents.docx_report()) == ("docx", 1)
    assert _inspect(documents.HTML_PAGE) == ("html", 1)
    assert _inspect(documents.MARKDOWN) == ("md", 1)
    # A hint among the text formats is trusted: Markdown may hold HTML.
    assert _inspect(documents.HTML_PAGE, "md") == ("md", 1)
    assert _inspect(documents.pdf_image_only()) == ("pdf", 1)


def test_a_format_contradicting_its_hint_is_refused() -> None:
    assert "declared 'pdf' but its data is a DOCX document" in _refused(documents.docx_report(), "pdf")
    assert "declared 'docx' but its data is text" in _refused(documents.HTML_PAGE, "docx")
    assert "declared 'html' but its data is PDF" in _refused(documents.pdf_image_only(), "html")
    assert "declared 'pptx' but its data is a DOCX document" in _refused(documents.docx_report(), "pptx")


def test_truncated_and_encrypted_documents_are_refused() -> None:
    docx = documents.docx_report()
    assert "truncated or corrupt ZIP" in _refused(docx[: len(docx) // 2], "docx")
    pdf = documents.pdf_pages(3)
    assert "PDF is truncated or corrupt" in _refused(pdf[: len(pdf) // 3], "pdf")
    assert "PDF is encrypted" in _refused(documents.pdf_encrypted(), "pdf")
    assert "encrypted Office file" in _refused(documents.OLE_DOCUMENT, "docx")


def test_a_zip_bomb_is_refused_from_its_directory() -> None:
    message = _refused(documents.docx_bomb(), "docx")
    assert "word/media/padding.bin" in message and "ZIP bomb" in message
    small = DocumentLimits(max_unpacked_bytes=1000)
    assert "unpacks to" in _refused(documents.docx_report(), limits=small)


def test_pages_are_counted_before_parsing() -> None:
    assert _inspect(documents.pdf_pages(7)) == ("pdf", 7)
    assert "the PDF has 10000 pages; the limit is 100" in _refused(documents.pdf_pages(10_000))
    assert "has 3 pages; the limit is 2" in _refused(documents.pptx_slides(3), limits=DocumentLimits(max_pages=2))
    assert _inspect(documents.xlsx_sheets(2, 10)) == ("xlsx", 2)
    # Formats without pages cost an estimate by size, which the page limit does not refuse.
    assert _inspect(documents.MARKDOWN * 1500, limits=DocumentLimits(max_pages=1)) == ("md", 10)
    assert _inspect(documents.docx_pages(1500)) == ("docx", 46)


def test_images_of_too_many_pixels_are_refused_from_their_header() -> None:
    assert "8000 × 6251 = 50008000 pixels" in _refused(documents.png_header(8000, 6251), "image")
    assert _inspect(documents.png_header(80, 60), "image") == ("image", 1)
    message = _refused(documents.docx_with_image(10_000, 10_000))
    assert "word/media/image1.png" in message and "the limit is 50000000" in message


def test_sniff_names_what_it_cannot_tell_apart() -> None:
    assert sniff(b"PK\x03\x04rest") == "zip"
    assert sniff(b"   %PDF-1.7") == "pdf"
    assert sniff("plain text, é".encode()) == "text"
    assert "neither a known binary format nor UTF-8" in _refused(b"\xff\xfe\x00garbage\x80\x81")


def test_items_are_checked_on_the_loop() -> None:
    items = [
        Item(document=DocumentInput(b"# hi\n", "markdown")),
        Item(images=[ImageInput(documents.png_header(10, 10), "png")]),
    ]
    raws = check_documents(items, LIMITS)
    assert [(raw.hint, raw.where) for raw in raws] == [("md", "items[0].document"), ("image", "items[1].document")]
    with pytest.raises(InvalidInput, match=r"items\[0\]: the document is 6 bytes; the limit is 5 bytes"):
        check_documents([Item(document=DocumentInput(b"123456"))], DocumentLimits(max_bytes=5))
    with pytest.raises(InvalidInput, match=r"items\[0\]: the document data is empty"):
        check_documents([Item(document=DocumentInput(b""))], LIMITS)
    with pytest.raises(InvalidInput, match=r"items\[0\]: this model reads documents; the item has no 'document'"):
        check_documents([Item(text="hello")], LIMITS)
    with pytest.raises(InvalidInput, match="at most 1 per request"):
        check_documents(items, DocumentLimits(per_request=1))


def test_catalog_options_set_the_page_and_byte_limits() -> None:
    limits = document_limits({"max_num_pages": 3, "max_file_size_bytes": 1000})
    assert (limits.max_pages, limits.max_bytes) == (3, 1000)
    assert document_limits({}) == LIMITS


def test_a_model_without_documents_refuses_them_by_item() -> None:
    reject_documents([Item(text="fine")], "tiny/gliner")
    with pytest.raises(InvalidInput, match=r"items\[1\]: model 'tiny/gliner' does not read documents"):
        reject_documents([Item(text="fine"), Item(document=DocumentInput(b"x"))], "tiny/gliner")


def test_a_pdf_bomb_is_refused_without_loading_its_page() -> None:
    """The content stream unpacks 500-fold: measured while inflating, stopped at the limit
    (loading the page, as the server once did, parsed all of it in the prep thread)."""
    message = _refused(documents.pdf_stream_bomb(8), "pdf")
    assert "a stream of the PDF unpacks more than" in message and "the limit is 200 (a PDF bomb?)" in message
    small = DocumentLimits(max_unpacked_bytes=2 * 1024 * 1024)
    assert "the PDF's streams unpack to more than 2097152 bytes" in _refused(
        documents.pdf_stream_bomb(8), limits=replace(small, max_ratio=10_000)
    )


def test_a_pdf_image_of_too_many_pixels_is_refused_from_its_dictionary() -> None:
    assert _inspect(documents.pdf_with_image(320, 120)) == ("pdf", 1)
    assert "an image of 8000 × 6251 = 50008000 pixels" in _refused(documents.pdf_with_image(8000, 6251))
    assert "an image of 8000 × 6251" in _refused(documents.pdf_with_image(8000, 6251, indirect=True))


def test_a_pdf_of_too_many_streams_is_refused_before_pdfium_reads_it() -> None:
    limits = DocumentLimits(max_pdf_streams=2)
    assert _inspect(documents.pdf_with_image(32, 32), limits=limits) == ("pdf", 1)
    assert "the PDF has more than 1 streams" in _refused(
        documents.pdf_with_image(32, 32), limits=replace(limits, max_pdf_streams=1)
    )
