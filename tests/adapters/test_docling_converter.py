"""adapters/docling_converter.py without its conversion process: which weights a document
needs, the refusal that names them, the costs, and the folder names against docling's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from sift_server.adapters.base import ExtractTask
from sift_server.adapters.docling_converter import (
    LAYOUT_FOLDER,
    OCR_FOLDER,
    TABLES_FOLDER,
    DoclingAdapter,
    missing_folders,
)
from sift_server.adapters.document_input import Document
from sift_server.errors import InvalidInput


def _adapter(artifacts: Path | None, **options: object) -> DoclingAdapter:
    return DoclingAdapter(artifacts, options, threads=1)  # never started: prepare needs no process


def _task(*documents: Document, **options: object) -> ExtractTask:
    return ExtractTask(texts=[""] * len(documents), labels=(), options=options, documents=documents)


def test_weight_free_formats_need_no_folder(tmp_path: Path) -> None:
    for fmt in ("docx", "pptx", "xlsx", "html", "md", "csv"):
        assert missing_folders(None, fmt, ocr=False) == []
    assert missing_folders(None, "pdf", ocr=False) == [LAYOUT_FOLDER, TABLES_FOLDER]
    assert missing_folders(None, "image", ocr=False) == [LAYOUT_FOLDER, TABLES_FOLDER, OCR_FOLDER]
    assert missing_folders(None, "docx", ocr=True) == []  # docling OCRs PDFs and images only
    (tmp_path / LAYOUT_FOLDER).mkdir()
    (tmp_path / TABLES_FOLDER).mkdir()
    assert missing_folders(tmp_path, "pdf", ocr=False) == []
    assert missing_folders(tmp_path, "pdf", ocr=True) == [OCR_FOLDER]


def test_prepare_names_the_item_and_the_missing_folders(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    pdf = Document(b"%PDF-", "pdf", 3, "items[2].document")
    with pytest.raises(InvalidInput) as caught:
        adapter.prepare(_task(Document(b"# x", "md", 1, "items[0].document"), pdf))
    message = str(caught.value)
    assert message.startswith("items[2].document: a PDF document needs docling's weights")
    assert f"{LAYOUT_FOLDER}, {TABLES_FOLDER} not found in {tmp_path}" in message
    with pytest.raises(InvalidInput, match="Option 'ocr' must be true or false"):
        adapter.prepare(_task(pdf, ocr="yes"))


def test_documents_cost_their_pages_and_ocr_is_a_separate_batch(tmp_path: Path) -> None:
    for name in (LAYOUT_FOLDER, TABLES_FOLDER, OCR_FOLDER):
        (tmp_path / name).mkdir()
    adapter = _adapter(tmp_path)
    documents = (Document(b"%PDF-", "pdf", 7, "a"), Document(b"PK", "docx", 2, "b"))
    plain, ocr = adapter.prepare(_task(*documents)), adapter.prepare(_task(*documents, ocr=True))
    assert plain.item_costs == [7, 2]
    assert plain.compat_key != ocr.compat_key


def test_catalog_options_are_checked_at_load() -> None:
    assert _adapter(None, max_num_pages=5, document_timeout_s=2.5).timeout_s == 2.5
    with pytest.raises(ValueError, match="document_timeout_s must be a positive number"):
        _adapter(None, document_timeout_s=0)
    with pytest.raises(ValueError, match="max_num_pages must be a positive number"):
        _adapter(None, max_num_pages="ten")


def test_the_folder_names_are_doclings_own() -> None:
    """docling looks for its weights under these names; a docling upgrade that renames one fails here."""
    from docling.datamodel.pipeline_options import LayoutOptions
    from docling.models.stages.ocr.rapid_ocr_model import RapidOcrModel
    from docling.models.stages.table_structure.table_structure_model import TableStructureModel

    assert LayoutOptions().model_spec.model_repo_folder == LAYOUT_FOLDER
    assert TableStructureModel._model_repo_folder == TABLES_FOLDER
    assert RapidOcrModel._model_repo_folder == OCR_FOLDER


def test_the_conversion_runs_below_the_forward_threads() -> None:
    """At the forward threads' own nice, a forward sharing a core with a conversion got half of it."""
    from sift_server.adapters.docling_converter import CONVERSION_NICE
    from sift_server.engine.model_engine import SERVING_FORWARD_NICE

    assert CONVERSION_NICE > SERVING_FORWARD_NICE
