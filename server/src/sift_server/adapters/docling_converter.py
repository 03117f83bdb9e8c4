"""Documents to Markdown and a DoclingDocument with docling, as the reference's
``docling`` model does (docs/models.md, "Documents").

docling holds the GIL for the whole of a conversion (pure-Python parsers) and
cannot be interrupted, so it runs in a child process of its own
(``conversion_process``): the engine's executor thread waits on a pipe without
the GIL, and a document past its deadline kills the child. One document runs
at a time; a request's documents cost their pages in the engine's batches.

Office documents (DOCX, PPTX, XLSX), HTML, Markdown and CSV need no weights.
PDFs and images go through docling's layout and table models, and their OCR through
RapidOCR's: weights that no package ships (the ``ocr`` option changes nothing for
the others). The operator puts them in the entry's model folder; a document that needs a folder that is not there is
refused before it is queued, with a message naming what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from sift_server.adapters._extract_common import extract_item
from sift_server.adapters.base import Adapter, AdapterInfo, ExtractTask, LoadContext, Part, Prepared, TaskInput
from sift_server.adapters.conversion_process import ConversionCrashed, ConversionProcess, ConversionTimeout
from sift_server.adapters.document_input import LAYOUT_FORMATS, Document
from sift_server.errors import InvalidInput

# docling's folder names inside its artifacts folder (the Hub repository ids with "/"
# as "--"; tests/adapters/test_docling_converter.py checks them against docling's own).
LAYOUT_FOLDER = "docling-project--docling-layout-heron"
TABLES_FOLDER = "docling-project--docling-models"
OCR_FOLDER = "RapidOcr"
# The catalog's defaults, as the reference's docling entry sets them.
DEFAULTS: Mapping[str, float] = {"max_num_pages": 100, "max_file_size_bytes": 16 * 1024 * 1024}
DEFAULT_TIMEOUT_S = 90.0
# The conversion process runs at this lower CPU priority (catalog option ``conversion_nice``),
# below the server's forward threads (engine.model_engine.SERVING_FORWARD_NICE, 10): at the
# same nice as them, a forward sharing a core with a conversion got half of it, and an encode
# beside a 50-page DOCX grew by two forwards (docs/benchmarks/documents.md).
CONVERSION_NICE = 19
# A cold child imports docling (and with it torch and transformers' model code).
START_TIMEOUT_S = 600.0


def _positive(options: Mapping[str, Any], name: str, fallback: float) -> float:
    value = options.get(name, fallback)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"catalog option {name} must be a positive number, not {value!r}")
    return float(value)


def missing_folders(artifacts: Path | None, fmt: str, ocr: bool) -> list[str]:
    """The artifact folders a document of ``fmt`` needs that ``artifacts`` lacks. ``ocr`` reaches
    docling's PDF and image pipeline only: office, HTML and Markdown documents convert without
    weights under it too, as the reference's ``ocr`` profile converts them."""
    if fmt not in LAYOUT_FORMATS:
        return []
    needed = [LAYOUT_FOLDER, TABLES_FOLDER]
    if ocr or fmt == "image":
        needed.append(OCR_FOLDER)
    return [name for name in needed if artifacts is None or not (artifacts / name).is_dir()]


class DoclingAdapter(Adapter):
    info: AdapterInfo
    # The server process never imports docling (nor torch for it): the child does.
    transformers_models: ClassVar[bool] = False

    def __init__(self, artifacts: Path | None, options: Mapping[str, Any], threads: int) -> None:
        self.artifacts = artifacts
        self.max_pages = int(_positive(options, "max_num_pages", DEFAULTS["max_num_pages"]))
        self.max_bytes = int(_positive(options, "max_file_size_bytes", DEFAULTS["max_file_size_bytes"]))
        self.timeout_s = _positive(options, "document_timeout_s", DEFAULT_TIMEOUT_S)
        config = {"artifacts": str(artifacts) if artifacts else None, "document_timeout_s": self.timeout_s}
        niceness = int(options.get("conversion_nice", CONVERSION_NICE))
        self.process = ConversionProcess(
            "sift_server.adapters.docling_child", {**config, "threads": threads, "nice": niceness}, START_TIMEOUT_S
        )
        self.info = AdapterInfo(
            tasks=frozenset({"extract"}), inputs=("document", "image"), outputs=("json",), max_sequence_length=0
        )

    @classmethod
    def load(cls, ctx: LoadContext) -> DoclingAdapter:
        artifacts = ctx.path if ctx.path.is_dir() else None
        adapter = cls(artifacts, ctx.options, ctx.torch_threads)
        adapter.process.start()
        return adapter

    def prepare(self, task: TaskInput) -> Prepared:
        if not isinstance(task, ExtractTask):
            raise InvalidInput("Model docling only extracts.")
        ocr = task.options.get("ocr", False)
        if not isinstance(ocr, bool):
            raise InvalidInput("Option 'ocr' must be true or false.")
        for document in task.documents:
            missing = missing_folders(self.artifacts, document.format, ocr)
            if missing:
                raise InvalidInput(self._missing_message(document, missing, ocr))
        return Prepared(
            item_costs=[document.pages for document in task.documents],
            compat_key=("docling", ocr),
            payload=(list(task.documents), ocr),
        )

    def _missing_message(self, document: Document, missing: Sequence[str], ocr: bool) -> str:
        what = f"a {document.format.upper()} document" + (" with OCR" if ocr else "")
        folder = str(self.artifacts) if self.artifacts is not None else "the model folder (it does not exist)"
        return (
            f"{document.where}: {what} needs docling's weights, which this server does not have: "
            f"{', '.join(missing)} not found in {folder}. The operator puts docling's artifacts there "
            "(docs/models.md, 'Documents'); DOCX, PPTX, XLSX, HTML, Markdown and CSV convert without them."
        )

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        out: list[list[Any]] = []
        for part in parts:
            documents, ocr = part.prepared.payload
            out.append([self._convert(document, ocr) for document in documents[part.start : part.stop]])
        return out

    def _convert(self, document: Document, ocr: bool) -> dict[str, Any]:
        item = extract_item()
        request = (document.data, document.format, ocr, self.max_pages, self.max_bytes)
        try:
            status, answer = self.process.call(request, self.timeout_s)
        except (ConversionTimeout, ConversionCrashed) as exc:
            item["error"] = {"code": "INFERENCE_ERROR", "message": f"Document conversion failed: {exc}."}
            return item
        if status != "ok":
            item["error"] = {"code": "INFERENCE_ERROR", "message": f"Document conversion failed: {answer}"}
        elif "error" in answer:
            item["error"] = {"code": "INFERENCE_ERROR", "message": answer["error"]}
        else:
            item["data"] = answer["data"]
        return item

    def close(self) -> None:
        self.process.stop()
