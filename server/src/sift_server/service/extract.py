"""The extract primitive: entities (GLiNER, GLiNER2), classifications (GLiClass, NLI,
GLiNER2), structured data (GLiNER2, from ``output_schema``) and objects in images
(OWLv2, Grounding DINO: every item an image, decoded in the prep thread)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sift_server.adapters.base import ExtractTask, TaskInput
from sift_server.adapters.records import record_of
from sift_server.errors import InvalidInput
from sift_server.registry.registry import Registry
from sift_server.service.common import (
    Limits,
    cap_text,
    cap_texts,
    char_cap,
    item_texts_sliced,
    lane_of,
    overflow_policy,
    profile_options,
    ready_for,
    result_id,
    shared_bytes,
    string_option,
)
from sift_server.service.documents import extract_documents, reject_documents
from sift_server.service.extract_options import extract_task
from sift_server.service.images import RawImage, check_images, decode_images
from sift_server.service.prep import DeferredDecode
from sift_server.service.run import Outcome, RequestContext, run_task
from sift_server.service.timing import Timing
from sift_server.wire.schemas import ExtractBody

_EMPTY_RESULT = ("entities", "relations", "classifications", "objects")


def _shape(result: dict[str, Any], item_id: str) -> dict[str, Any]:
    shaped: dict[str, Any] = {"id": item_id}
    for key in _EMPTY_RESULT:
        shaped[key] = list(result.get(key) or [])
    shaped["data"] = dict(result.get("data") or {})
    if result.get("error"):
        shaped["error"] = result["error"]
    return shaped


async def extract(registry: Registry, model: str, body: ExtractBody, limits: Limits, ctx: RequestContext) -> Outcome:
    name, path_profile, record, engine = ready_for(registry, model, "extract")
    params = body.params
    options = profile_options(record.spec, path_profile, (params.options or {}) if params else {})
    if "document" in record_of(record.spec.adapter).inputs:
        return await extract_documents(model, record, engine, body.items, options, ctx)
    reject_documents(body.items, name)
    output_schema = params.output_schema if params is not None else None
    if output_schema is not None and not record_of(record.spec.adapter).structured_extract:
        raise InvalidInput(f"Model '{name}' does not support output_schema; send labels instead.")
    instruction = (params.instruction if params else None) or string_option(options, "instruction")
    overflow = overflow_policy(options)
    # Options and labels first (typed, each error naming its option), then the items,
    # whose size limit counts what is read with every one of them.
    task = extract_task([], list(params.labels or []) if params else [], options, instruction, overflow)
    grouped = [label for _, group in task.label_groups or () for label in group]
    reads_images = "image" in record_of(record.spec.adapter).inputs
    texts = await item_texts_sliced(
        body.items, limits, shared_bytes=shared_bytes(instruction, *task.labels, *grouped), images=reads_images
    )
    assert body.items is not None
    raw_images = _image_items(body.items, limits) if reads_images else []
    cap = char_cap(record)
    task = replace(
        task,
        texts=cap_texts(texts, cap, overflow),
        instruction=cap_text(instruction, cap, overflow, "instruction") if instruction else None,
        output_schema=output_schema,
        metadata=[item.metadata for item in body.items or ()],
    )
    timing = Timing(started=ctx.started)
    lane = await lane_of(options, record, wait=True)
    outputs, prepared = await run_task(
        record, engine, task, ctx, timing, lane, _with_images(raw_images, limits.images.max_pixels)
    )

    post_start = time.perf_counter()
    items_out = [
        _shape(result, result_id(item, index))
        for index, (item, result) in enumerate(zip(body.items, outputs, strict=True))
    ]
    timing.finish(post_start)
    payload = {"model": model, "items": items_out, "usage": {"input_tokens": prepared.input_tokens}}
    return Outcome(payload, timing)


def _image_items(items: Sequence[Any], limits: Limits) -> list[tuple[RawImage, ...]]:
    """An image model's items: each must carry an image (the model reads nothing else)."""
    raw = check_images(items, limits.images)
    for index, images in enumerate(raw):
        if not images:
            raise InvalidInput(f"items[{index}]: this model reads images; the item has none.")
    return raw


def _with_images(raw: Sequence[Sequence[RawImage]], max_pixels: int) -> DeferredDecode | None:
    """Decode the request's images in the prep thread, into the task (None: it has none)."""
    if not raw:
        return None

    def complete(task: TaskInput) -> TaskInput:
        assert isinstance(task, ExtractTask)
        return replace(task, images=decode_images(raw, max_pixels))

    return complete
