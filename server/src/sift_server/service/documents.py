"""Extract from documents: the items' ``document`` fields as sie-sdk 0.10.1 sends
them (``{"data": <bytes>, "format": <hint or None>}``: msgpack bin, or base64 in
JSON), checked before any parsing, converted by the model's engine.

On the loop: the count, each document's byte size and its hint (lower-cased,
aliases such as ``htm`` or ``markdown`` folded in, an empty hint meaning none).
In the prep thread, before anything parses it: what the bytes are, whether they
contradict the hint, the pages and embedded images (``document_inspect``). An
item with one image and no document is a one-page image document, as in the
reference. Every refusal is a 400 naming the item.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sift_server.adapters.base import ExtractTask, TaskInput
from sift_server.errors import InvalidInput
from sift_server.registry.registry import ModelRecord
from sift_server.service.common import result_id
from sift_server.service.document_inspect import DocumentLimits, inspect_document
from sift_server.service.run import Outcome, RequestContext, run_task
from sift_server.service.timing import Timing
from sift_server.wire.schemas import Item

# Hints the SDK sends (its suffix table) and common spellings, to canonical formats.
_HINTS: dict[str, str] = {
    "pdf": "pdf",
    "docx": "docx",
    "pptx": "pptx",
    "xlsx": "xlsx",
    "html": "html",
    "htm": "html",
    "xhtml": "html",
    "md": "md",
    "markdown": "md",
    "csv": "csv",
    **{name: "image" for name in ("png", "jpg", "jpeg", "tif", "tiff", "bmp", "webp", "gif", "image")},
}
# Hints the SDK can send that docling has no reader for.
_UNSUPPORTED = ("doc", "rtf", "odt", "txt", "xls", "ppt")
ACCEPTED = "pdf, docx, pptx, xlsx, html, md, csv or an image"


@dataclass(frozen=True, slots=True)
class RawDocument:
    data: bytes
    hint: str | None
    where: str


def document_limits(options: Mapping[str, Any], base: DocumentLimits | None = None) -> DocumentLimits:
    """The server's limits, with the catalog entry's page and byte limits (the
    reference's option names) where it sets them (checked at load by the adapter)."""
    limits = base or DocumentLimits()
    pages, size = options.get("max_num_pages"), options.get("max_file_size_bytes")
    if isinstance(pages, int) and not isinstance(pages, bool) and pages > 0:
        limits = replace(limits, max_pages=pages)
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        limits = replace(limits, max_bytes=size)
    return limits


def canonical_hint(value: str | None, where: str) -> str | None:
    if value is None:
        return None
    name = value.strip().lower().lstrip(".")
    if not name:
        return None
    if name in _HINTS:
        return _HINTS[name]
    if name in _UNSUPPORTED:
        raise InvalidInput(f"{where}: documents of format {value!r} are not converted; send {ACCEPTED}.")
    raise InvalidInput(f"{where}: unknown document format {value!r}; expected {ACCEPTED}.")


def _document_of(item: Item, where: str) -> tuple[bytes, str | None]:
    if item.document is not None:
        return item.document.data, item.document.format
    images = item.images or []
    if len(images) == 1:
        return images[0].data, images[0].format or "image"
    if images:
        raise InvalidInput(f"{where}: a document model reads one image per item; this item has {len(images)}.")
    raise InvalidInput(f"{where}: this model reads documents; the item has no 'document' (or one image).")


def check_documents(items: Sequence[Item] | None, limits: DocumentLimits) -> list[RawDocument]:
    """Every item's document, its size and hint checked (on the loop: cheap)."""
    if not items:
        raise InvalidInput("Field 'items' must not be empty")
    if len(items) > limits.per_request:
        raise InvalidInput(
            f"The request has {len(items)} documents; this server converts at most {limits.per_request} per request."
        )
    raws = []
    for index, item in enumerate(items):
        where = f"items[{index}]"
        data, hint = _document_of(item, where)
        if not data:
            raise InvalidInput(f"{where}: the document data is empty.")
        if len(data) > limits.max_bytes:
            raise InvalidInput(f"{where}: the document is {len(data)} bytes; the limit is {limits.max_bytes} bytes.")
        raws.append(RawDocument(data, canonical_hint(hint, f"{where}.document"), f"{where}.document"))
    return raws


def reject_documents(items: Sequence[Item] | None, model: str) -> None:
    """A model that does not read documents answers 400 to an item that has one."""
    for index, item in enumerate(items or ()):
        if item.document is not None:
            raise InvalidInput(
                f"items[{index}]: model '{model}' does not read documents; send them to a document model (docling)."
            )


def _inspected(raws: Sequence[RawDocument], limits: DocumentLimits) -> Any:
    def complete(task: TaskInput) -> TaskInput:
        assert isinstance(task, ExtractTask)
        return replace(task, documents=[inspect_document(raw.data, raw.hint, raw.where, limits) for raw in raws])

    return complete


async def extract_documents(
    model: str,
    record: ModelRecord,
    engine: Any,
    items: Sequence[Item] | None,
    options: Mapping[str, Any],
    ctx: RequestContext,
    base_limits: DocumentLimits | None = None,
) -> Outcome:
    """The extract answer of a document model: per item ``data`` (text, markdown,
    document) or ``error``; the documents are inspected in the prep thread."""
    limits = document_limits(record.spec.options, base_limits)
    raws = check_documents(items, limits)
    assert items is not None
    task = ExtractTask(texts=[""] * len(raws), labels=(), options=options)
    timing = Timing(started=ctx.started)
    outputs, _ = await run_task(record, engine, task, ctx, timing, None, _inspected(raws, limits))
    post_start = time.perf_counter()
    shaped = []
    for index, (item, result) in enumerate(zip(items, outputs, strict=True)):
        one = {"id": result_id(item, index), **{key: list(result[key]) for key in _LISTS}, "data": result["data"]}
        if result.get("error"):
            one["error"] = result["error"]
        shaped.append(one)
    timing.finish(post_start)
    return Outcome({"model": model, "items": shaped, "usage": {"input_tokens": 0}}, timing)


_LISTS = ("entities", "relations", "classifications", "objects")
