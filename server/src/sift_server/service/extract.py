"""The extract primitive: entities (GLiNER) and classifications (GLiClass)."""

from __future__ import annotations

import time
from typing import Any

from sift_server.adapters.base import ExtractTask
from sift_server.errors import InvalidInput
from sift_server.registry.registry import Registry
from sift_server.service.common import (
    Limits,
    cap_text,
    cap_texts,
    char_cap,
    check_profile,
    item_texts,
    lane_of,
    overflow_policy,
    ready_for,
    result_id,
    shared_bytes,
    string_option,
)
from sift_server.service.run import Outcome, RequestContext, run_task
from sift_server.service.timing import Timing
from sift_server.wire.schemas import ExtractBody

MAX_LABELS = 1000
_EMPTY_RESULT = ("entities", "relations", "classifications", "objects")


def _threshold(options: dict[str, Any]) -> float | None:
    value = options.get("threshold")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise InvalidInput("Option 'threshold' must be a number between 0 and 1.")
    return float(value)


def _multi_label(options: dict[str, Any]) -> bool | None:
    value = options.get("multi_label")
    if value is not None and not isinstance(value, bool):
        raise InvalidInput("Option 'multi_label' must be true or false.")
    return value


def _shape(result: dict[str, Any], item_id: str) -> dict[str, Any]:
    shaped: dict[str, Any] = {"id": item_id}
    for key in _EMPTY_RESULT:
        shaped[key] = list(result.get(key) or [])
    shaped["data"] = dict(result.get("data") or {})
    if result.get("error"):
        shaped["error"] = result["error"]
    return shaped


async def extract(registry: Registry, model: str, body: ExtractBody, limits: Limits, ctx: RequestContext) -> Outcome:
    name, path_profile, record, worker = ready_for(registry, model, "extract")
    params = body.params
    options = dict(params.options or {}) if params else {}
    labels = list(params.labels or []) if params else []
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"Extract accepts at most {MAX_LABELS} labels; got {len(labels)}.")
    instruction = (params.instruction if params else None) or string_option(options, "instruction")
    texts = item_texts(body.items, limits, shared_bytes=shared_bytes(instruction, *labels))
    check_profile(options, path_profile)
    overflow = overflow_policy(options)
    cap = char_cap(record)
    if params is not None and params.output_schema is not None:
        raise InvalidInput(f"Model '{name}' does not support output_schema; send labels instead.")
    task = ExtractTask(
        texts=cap_texts(texts, cap, overflow),
        labels=labels,
        threshold=_threshold(options),
        multi_label=_multi_label(options),
        instruction=cap_text(instruction, cap, overflow, "instruction") if instruction else None,
        overflow=overflow,
        options=options,
    )
    timing = Timing(started=ctx.started)
    outputs, prepared = await run_task(record, worker, task, ctx, timing, lane_of(options, record))

    post_start = time.perf_counter()
    assert body.items is not None
    items_out = [
        _shape(result, result_id(item, index))
        for index, (item, result) in enumerate(zip(body.items, outputs, strict=True))
    ]
    timing.finish(post_start)
    payload = {"model": model, "items": items_out, "usage": {"input_tokens": prepared.input_tokens}}
    return Outcome(payload, timing)
