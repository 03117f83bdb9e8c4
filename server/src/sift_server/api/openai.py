"""OpenAI-compatible ``POST /v1/embeddings`` (API.md §5)."""

from __future__ import annotations

import base64
import time
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import JSONResponse, Response

from sift_server.api.body import wait_for_disconnect
from sift_server.api.errors import openai_error
from sift_server.api.native import request_id_of
from sift_server.api.state import ServerState
from sift_server.engine.ingress import IngressTicket
from sift_server.errors import InvalidInput, SiftError
from sift_server.service.encode import encode
from sift_server.service.run import RequestContext
from sift_server.wire.schemas import EncodeBody, Item

router = APIRouter()


class UnsupportedField(InvalidInput):
    code = "unsupported_field"


class EmbeddingsBody(BaseModel):
    model: str
    input: str | list[Any]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None


def _texts(value: str | list[Any]) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not value:
        raise InvalidInput("Input cannot be empty.", param="input")
    if any(isinstance(entry, (int, list)) for entry in value):
        raise InvalidInput("Token-id input is not supported; send strings.", param="input")
    if not all(isinstance(entry, str) for entry in value):
        raise InvalidInput("Each input must be a string.", param="input")
    return list(value)


def _embedding(vector: np.ndarray, fmt: str | None) -> list[float] | str:
    as_f32 = np.asarray(vector, dtype="<f4")
    if fmt == "base64":
        return base64.b64encode(as_f32.tobytes()).decode("ascii")
    floats: list[float] = as_f32.tolist()
    return floats


@router.post("/v1/embeddings", summary="OpenAI-compatible embeddings")
async def embeddings(request: Request, body: EmbeddingsBody) -> Response:
    state: ServerState = request.app.state.sift
    started = time.perf_counter()
    # Opened already where the request arrived another way (a worker's queue message).
    ingress: IngressTicket | None = request.scope.get("sift.ingress")
    try:
        texts = _texts(body.input)
        record = state.registry.record(body.model)
        if ingress is None and record.worker is not None:
            # The model is only known once the body is parsed: count the request
            # from here, so OpenAI traffic feeds the arrival model as well.
            ingress = record.worker.ingress.begin(started)
        if "encode" not in record.spec.tasks:
            raise InvalidInput(f"Model '{body.model}' does not produce embeddings.", param="model")
        native = EncodeBody(items=[Item(text=t) for t in texts])
        ctx = RequestContext(
            request_id=request_id_of(request),
            started=started,
            ingress=ingress,
            disconnected=lambda: wait_for_disconnect(request),
        )
        if body.dimensions is not None:
            # Checked once the model is loaded, when its width is known.
            state.registry.ready_worker(body.model)
            assert record.adapter is not None
            native_dims = record.adapter.info.dims.get("dense")
            if body.dimensions != native_dims:
                raise UnsupportedField(
                    f"dimensions={body.dimensions} is not supported; this model produces {native_dims}.",
                    param="dimensions",
                )
        outcome = await encode(state.registry, body.model, native, state.limits, ctx)
    except SiftError as error:
        state.metrics.count(body.model, "embeddings", error.status)
        return openai_error(error)
    finally:
        if ingress is not None:
            ingress.end()
    data = [
        {"object": "embedding", "embedding": _embedding(vector, body.encoding_format), "index": index}
        for index, vector in enumerate(outcome.vectors)
    ]
    usage = {
        "prompt_tokens": outcome.input_tokens,
        "total_tokens": outcome.input_tokens,
        "sie_token_source": "worker",
    }
    state.metrics.count(body.model, "embeddings", 200, time.perf_counter() - started)
    return JSONResponse(
        {"object": "list", "data": data, "model": body.model, "usage": usage},
        headers={"X-SIE-Served-By": "local"},
    )
