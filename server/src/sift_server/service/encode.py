"""The encode primitive: dense, sparse and multivector embeddings with output dtypes.

An adapter's per-item output is a dense vector (ndarray) or a mapping of output
name to value: ``dense`` (ndarray), ``sparse`` (indices and values) or
``multivector`` (a 2-D ndarray, one row per token). Only the requested outputs
reach the answer (API.md §2.2)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sift_server.adapters.base import EncodeTask, TaskInput
from sift_server.errors import InvalidInput, UnsupportedField
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
    shared_bytes,
    string_option,
)
from sift_server.service.images import RawImage, check_images, decode_images
from sift_server.service.prep import DeferredDecode
from sift_server.service.quantize import OUTPUT_DTYPES, quantize, quantize_rows
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
        # The contract's default, also for models without dense (a 400 below): the
        # OpenAI route relies on it, and clients of sparse models name the output.
        requested = ["dense"]
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


def check_dimensions(dimensions: int | None, native_dims: int | None) -> None:
    """The OpenAI route's ``dimensions``: only the model's own dense width."""
    if dimensions is not None and dimensions != native_dims:
        raise UnsupportedField(
            f"dimensions={dimensions} is not supported; this model produces {native_dims}.",
            param="dimensions",
        )


async def encode(
    registry: Registry,
    model: str,
    body: EncodeBody,
    limits: Limits,
    ctx: RequestContext,
    *,
    dimensions: int | None = None,
) -> EncodeOutcome:
    """``dimensions`` (the OpenAI route's field) is checked once the model is
    loaded, when its width is known."""
    _, path_profile, record, engine = ready_for(registry, model, "encode")
    # Read what the response needs now: the model may be evicted while the request waits.
    adapter = record.adapter
    assert adapter is not None
    check_dimensions(dimensions, adapter.info.dims.get("dense"))
    params = body.params
    options = profile_options(record.spec, path_profile, (params.options or {}) if params else {})
    instruction = (params.instruction if params else None) or string_option(options, "instruction")
    reads_images = "image" in adapter.info.inputs
    texts = await item_texts_sliced(body.items, limits, shared_bytes=shared_bytes(instruction), images=reads_images)
    assert body.items is not None
    raw_images = check_images(body.items, limits.images) if reads_images else []
    output_types = _output_types(params.output_types if params else None, options, adapter.info.outputs)
    dtype = _output_dtype(params.output_dtype if params else None, options)
    overflow = overflow_policy(options)
    cap = char_cap(record)
    task = EncodeTask(
        texts=cap_texts(texts, cap, overflow),
        is_query=bool(options.get("is_query", False)),
        instruction=cap_text(instruction, cap, overflow, "instruction") if instruction else None,
        overflow=overflow,
        options=options,
        output_types=tuple(output_types),
    )
    timing = Timing(started=ctx.started)
    lane = await lane_of(options, record)
    outputs, prepared = await run_task(
        record, engine, task, ctx, timing, lane, _with_images(raw_images, limits.images.max_pixels)
    )

    post_start = time.perf_counter()
    dims = adapter.info.dims
    items_out: list[dict[str, Any]] = []
    dense_vectors: list[np.ndarray] = []
    for item, output in zip(body.items, outputs, strict=True):
        produced = {"dense": output} if isinstance(output, np.ndarray) else output
        entry: dict[str, Any] = {}
        if item.id is not None:
            entry["id"] = item.id
        for kind in output_types:
            entry[kind] = _shape_output(kind, produced[kind], dtype, dims)
        if "dense" in produced:
            dense_vectors.append(produced["dense"])
        items_out.append(entry)
    timing.finish(post_start)
    payload = {"model": model, "items": items_out, "timing": timing.body()}
    if not raw_images or not all(raw_images):
        # As the reference reports it: the text tokens read (none for an item read
        # as its images); no usage at all when every item was read as images.
        payload["usage"] = {"input_tokens": prepared.input_tokens}
    return EncodeOutcome(payload, timing, dense_vectors, prepared.input_tokens)


def _with_images(raw: Sequence[Sequence[RawImage]], max_pixels: int) -> DeferredDecode | None:
    """Decode the request's images in the prep thread, into the task (None: it has none)."""
    if not any(raw):
        return None

    def complete(task: TaskInput) -> TaskInput:
        assert isinstance(task, EncodeTask)
        return replace(task, images=decode_images(raw, max_pixels))

    return complete


def _shape_output(kind: str, value: Any, dtype: str, dims: Mapping[str, int]) -> dict[str, Any]:
    if kind == "dense":
        values, label = quantize(value, dtype)
        # The vector's own width: a Matryoshka request (options.dimensions) is narrower than the model's.
        return {"dims": len(value), "dtype": label, "values": values}
    if kind == "sparse":
        # Sparse is never quantized: float16 when asked, float32 otherwise.
        half = dtype == "float16"
        return {
            "dims": dims.get("sparse"),
            "dtype": "float16" if half else "float32",
            "indices": value.indices.astype(np.int32, copy=False),
            "values": value.values.astype(np.float16 if half else np.float32, copy=False),
        }
    values, label = quantize_rows(value, dtype)
    return {"token_dims": int(value.shape[1]), "num_tokens": int(value.shape[0]), "dtype": label, "values": values}
