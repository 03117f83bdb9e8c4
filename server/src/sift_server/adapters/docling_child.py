"""The docling side of the conversion process: runs in the child only.

The answer's ``data`` is what the reference server returns for a document
(plain text, Markdown and the DoclingDocument as JSON); docling is asked never
to download anything: its weights come from the artifacts folder or not at all.
"""

from __future__ import annotations

import io
import os
import sys
from multiprocessing.connection import Connection
from typing import Any

# The file name docling reads its format from, per canonical format (the reference names
# the stream ``document.<hint>``; docling sniffs the bytes of binary formats anyway).
_SUFFIX = {"image": "png"}


def _converter(artifacts: str | None, ocr: bool, document_timeout_s: float, threads: int) -> Any:
    from docling.datamodel.accelerator_options import AcceleratorOptions
    from docling.datamodel.base_models import InputFormat
    from docling.datamodel.pipeline_options import PdfPipelineOptions, RapidOcrOptions
    from docling.document_converter import DocumentConverter, ImageFormatOption, PdfFormatOption

    options: dict[str, Any] = {
        "do_ocr": ocr,
        "document_timeout": document_timeout_s,
        # English recognition, as the reference pins it (docling's default is Chinese).
        "ocr_options": RapidOcrOptions(lang=["en"]),
        "accelerator_options": AcceleratorOptions(device="cpu", num_threads=threads),
    }
    if artifacts is not None:
        options["artifacts_path"] = artifacts
    pdf = PdfPipelineOptions(**options)
    return DocumentConverter(
        format_options={
            InputFormat.PDF: PdfFormatOption(pipeline_options=pdf),
            InputFormat.IMAGE: ImageFormatOption(pipeline_options=pdf),
        }
    )


def convert(converter: Any, data: bytes, fmt: str, max_pages: int, max_bytes: int) -> dict[str, Any]:
    """One document: ``{"data": {...}, "pages": n}`` or ``{"error": message, "pages": n}``."""
    from docling.datamodel.base_models import ConversionStatus, DocumentStream

    stream = DocumentStream(name=f"document.{_SUFFIX.get(fmt, fmt)}", stream=io.BytesIO(data))
    result = converter.convert(stream, raises_on_error=False, max_num_pages=max_pages, max_file_size=max_bytes)
    pages = len(result.pages or ())
    if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
        reasons = "; ".join(str(error.error_message) for error in result.errors or ())[:300]
        return {"error": f"Document conversion failed{': ' + reasons if reasons else ''}", "pages": pages}
    document = result.document
    payload = {
        "text": document.export_to_text(),
        "markdown": document.export_to_markdown(),
        "document": document.export_to_dict(),
    }
    return {"data": payload, "pages": pages}


def serve(
    receive: Connection,
    send: Connection,
    artifacts: str | None,
    document_timeout_s: float,
    threads: int,
    niceness: int = 0,
) -> None:
    """The child's loop: ``(data, format, ocr, max_pages, max_bytes)`` in, ``("ok", answer)`` or
    ``("failed", message)`` out, until the parent closes the pipe. ``niceness`` lowers the
    child's CPU priority: on a shared core, a conversion yields to the server's forwards."""
    if niceness:
        os.nice(niceness)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        # docling imports transformers' model code; without scikit-learn and SciPy it starts faster.
        from sift_server.adapters._lean_imports import import_transformers_models

        import_transformers_models()
        converters = {False: _converter(artifacts, False, document_timeout_s, threads)}
    except Exception as exc:  # reported to the parent, which fails the load
        send.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    send.send(("ready", None))
    while True:
        try:
            request = receive.recv()
        except (EOFError, OSError):
            return
        data, fmt, ocr, max_pages, max_bytes = request
        try:
            if ocr not in converters:
                converters[ocr] = _converter(artifacts, ocr, document_timeout_s, threads)
            send.send(("ok", convert(converters[ocr], data, fmt, max_pages, max_bytes)))
        except Exception as exc:  # one document's failure is its own answer
            send.send(("failed", f"{type(exc).__name__}: {str(exc)[:300]}"))


if __name__ == "__main__":
    from sift_server.adapters.conversion_process import child_connections

    receive, send, config = child_connections(sys.argv)
    serve(receive, send, config["artifacts"], config["document_timeout_s"], config["threads"], config.get("nice", 0))
