"""The score primitive: rerank candidates against a query, highest first."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

from sift_server.adapters.base import ScoreTask, TaskInput
from sift_server.errors import InferenceError, InvalidInput
from sift_server.registry.registry import Registry
from sift_server.service.common import (
    Limits,
    cap_text,
    cap_texts,
    char_cap,
    item_text,
    item_texts_sliced,
    lane_of,
    overflow_policy,
    profile_options,
    ready_for,
    result_id,
    shared_bytes,
    string_option,
)
from sift_server.service.images import RawImage, check_images, decode_images
from sift_server.service.prep import DeferredDecode
from sift_server.service.run import Outcome, RequestContext, run_task
from sift_server.service.timing import Timing
from sift_server.wire.schemas import ScoreBody

MAX_CANDIDATES = 1000


async def score(registry: Registry, model: str, body: ScoreBody, limits: Limits, ctx: RequestContext) -> Outcome:
    name, path_profile, record, engine = ready_for(registry, model, "score")
    if body.query is None:
        raise InvalidInput("Field 'query' is required.")
    options = profile_options(record.spec, path_profile, body.options or {})
    instruction = body.instruction or string_option(options, "instruction")
    query = item_text(body.query, 0, limits, field="query", shared_bytes=shared_bytes(instruction))
    if body.items is not None and len(body.items) > MAX_CANDIDATES:
        raise InvalidInput(f"Score accepts at most {MAX_CANDIDATES} candidate items; got {len(body.items)}.")
    # Every pair is read with the query (and the instruction).
    # Image models (ColPali) score a text query against candidates that may be images.
    adapter = record.adapter
    reads_images = adapter is not None and "image" in adapter.info.inputs
    texts = await item_texts_sliced(
        body.items,
        Limits(limits.max_item_bytes, MAX_CANDIDATES),
        shared_bytes=shared_bytes(instruction, query),
        images=reads_images,
    )
    raw_images = check_images(body.items or [], limits.images) if reads_images else []
    overflow = overflow_policy(options)
    cap = char_cap(record)
    task = ScoreTask(
        query=cap_text(query, cap, overflow, "query"),
        texts=cap_texts(texts, cap, overflow),
        instruction=cap_text(instruction, cap, overflow, "instruction") if instruction else None,
        overflow=overflow,
        options=options,
    )
    timing = Timing(started=ctx.started)
    lane = await lane_of(options, record, wait=True)
    outputs, prepared = await run_task(
        record, engine, task, ctx, timing, lane, _with_images(raw_images, limits.images.max_pixels)
    )

    post_start = time.perf_counter()
    assert body.items is not None
    scored = []
    for index, (item, value) in enumerate(zip(body.items, outputs, strict=True)):
        value = float(value)
        if not math.isfinite(value):
            raise InferenceError(f"Model '{name}' produced a non-finite score for item {index}.")
        scored.append((value, index, result_id(item, index)))
    # Stable: equal scores keep request order.
    scored.sort(key=lambda entry: (-entry[0], entry[1]))
    timing.finish(post_start)
    payload = {
        "model": model,
        "query_id": body.query.id,
        "scores": [
            {"item_id": item_id, "score": value, "rank": rank} for rank, (value, _, item_id) in enumerate(scored)
        ],
        "usage": {"input_tokens": prepared.input_tokens},
    }
    return Outcome(payload, timing)


def _with_images(raw: Sequence[Sequence[RawImage]], max_pixels: int) -> DeferredDecode | None:
    """Decode the candidates' images in the prep thread, into the task (None: there are none)."""
    if not any(raw):
        return None

    def complete(task: TaskInput) -> TaskInput:
        assert isinstance(task, ScoreTask)
        return replace(task, images=decode_images(raw, max_pixels))

    return complete
