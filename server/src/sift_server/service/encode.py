"""The encode primitive: dense embeddings with output dtypes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sift_server.adapters.base import EncodeTask
from sift_server.errors import InvalidInput
from sift_server.registry.registry import Registry
from sift_server.service.common import (
    Limits,
    check_profile,
    item_texts,
    lane_of,
    overflow_policy,
    ready_for,
    string_option,
)
from sift_server.service.quantize import OUTPUT_DTYPES, quantize
from sift_server.service.run import Outcome, RequestContext, run_task
from sift_server.service.timing import Timing
from sift_server.wire.schemas import EncodeBody

OUTPUT_TYPES = ("dense", "sparse", "multivector")


@dataclass(slots=True)
class EncodeOutcome(Outcome):
    """Also the raw vectors and token count, for the OpenAI route."""

    vectors: list[np.ndarray]
    input_tokens: int


def _output_types(params_types: Sequence[str] | None, options: dict[str, Any], supported: Sequence[str]) -> list[str]:
    requested = options.get("output_types", params_types)
    if requested is None:
        return ["dense"]
    if not isinstance(requested, list) or not requested:
        raise InvalidInput("Field 'output_types' must be a non-empty list.")
    for kind in requested:
        if kind not in OUTPUT_TYPES:
            raise InvalidInput(f"Unknown output type {kind!r}; expected dense, sparse or multivector.")
        if kind not in supported:
            raise InvalidInput(f"This model does not produce {kind!r} output; it supports {', '.join(supported)}.")
    return list(dict.fromkeys(requested))


def _output_dtype(params_dtype: str | None, options: dict[str, Any]) -> str:
    dtype = params_dtype if params_dtype is not None else options.get("output_dtype", "float32")
    if dtype not in OUTPUT_DTYPES:
        raise InvalidInput(f"Unsupported output_dtype {dtype!r}; expected one of {', '.join(OUTPUT_DTYPES)}.")
    return str(dtype)


async def encode(
    registry: Registry, model: str, body: EncodeBody, limits: Limits, ctx: RequestContext
) -> EncodeOutcome:
    _, path_profile, record, worker = ready_for(registry, model, "encode")
    texts = item_texts(body.items, limits)
    params = body.params
    options = dict(params.options or {}) if params else {}
    check_profile(options, path_profile)
    # Read what the response needs now: the model may be evicted while the request waits.
    adapter = record.adapter
    assert adapter is not None
    output_types = _output_types(params.output_types if params else None, options, adapter.info.outputs)
    dtype = _output_dtype(params.output_dtype if params else None, options)
    instruction = (params.instruction if params else None) or string_option(options, "instruction")
    task = EncodeTask(
        texts=texts,
        is_query=bool(options.get("is_query", False)),
        instruction=instruction,
        overflow=overflow_policy(options),
        options=options,
    )
    timing = Timing(started=ctx.started)
    outputs, prepared = await run_task(record, worker, task, ctx, timing, lane_of(options, record))

    post_start = time.perf_counter()
    dims = adapter.info.dims.get("dense", 0)
    items_out: list[dict[str, Any]] = []
    assert body.items is not None
    for item, vector in zip(body.items, outputs, strict=True):
        values, label = quantize(vector, dtype)
        entry: dict[str, Any] = {}
        if item.id is not None:
            entry["id"] = item.id
        if "dense" in output_types:
            entry["dense"] = {"dims": dims, "dtype": label, "values": values}
        items_out.append(entry)
    timing.finish(post_start)
    payload = {
        "model": model,
        "items": items_out,
        "timing": timing.body(),
        "usage": {"input_tokens": prepared.input_tokens},
    }
    return EncodeOutcome(payload, timing, outputs, prepared.input_tokens)
