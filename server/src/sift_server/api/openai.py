"""OpenAI-compatible ``POST /v1/embeddings`` (API.md §5).

The body is read by hand (bounded by the body limit and the body timeout, like
the native routes) and decoded with msgspec, so every malformed body gets the
OpenAI error envelope with a 400 instead of FastAPI's 422 ``{"detail": [...]}``.
The pydantic model below only documents the body in ``/openapi.json``.
"""

from __future__ import annotations

import base64
import time
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from sift_server.api.body import read_body_buffer, wait_for_disconnect
from sift_server.api.errors import openai_error
from sift_server.api.native import request_id_of
from sift_server.api.state import ServerState
from sift_server.engine.ingress import IngressTicket
from sift_server.errors import InvalidInput, SiftError, TaskNotSupported
from sift_server.registry.catalog import MAX_MODEL_NAME_CHARS
from sift_server.service.encode import encode
from sift_server.service.run import RequestContext
from sift_server.wire.schemas import EncodeBody, Item
from sift_server.wire.sliced import decode_sliced
from sift_server.wire.split import Buffer

router = APIRouter()


class EmbeddingsBody(msgspec.Struct):
    """The request body; unknown fields are ignored. A model name longer than any
    model's is refused before it is decoded (wire/split.py)."""

    model: Annotated[str, msgspec.Meta(max_length=MAX_MODEL_NAME_CHARS)]
    # Required: UNSET only while the body is decoded in slices (wire/sliced.py
    # decodes the envelope without the input list, then fills it in).
    input: str | list[Any] | msgspec.UnsetType = msgspec.UNSET
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None


class EmbeddingsSchema(BaseModel):
    """The same body for the OpenAPI document (not used to decode)."""

    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None


_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": EmbeddingsSchema.model_json_schema()}},
    }
}


def _is_json(content_type: str | None) -> bool:
    """No Content-Type is read as JSON (as the native routes do); any other
    type must name JSON: this route has no msgpack form."""
    if content_type is None or not content_type.strip():
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _blank(raw: Buffer) -> bool:
    """Empty or only whitespace; a large body is copied only if it starts blank."""
    return len(raw) == 0 or (bytes(raw[:64]).isspace() and bytes(raw).isspace())


async def _parse(raw: Buffer, content_type: str | None) -> EmbeddingsBody:
    if not _is_json(content_type):
        raise InvalidInput("This route accepts JSON only: send 'Content-Type: application/json'.")
    if _blank(raw):
        raise InvalidInput("The request body is empty; send a JSON object with 'model' and 'input'.")
    try:
        body = await decode_sliced(raw, "json", EmbeddingsBody, "input", Any)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, param=_param_of(exc.message)) from exc
    if isinstance(body.input, msgspec.UnsetType):
        raise InvalidInput("Invalid request body: Object missing required field `input`", param="input")
    return body


def _param_of(message: str) -> str | None:
    """The field a msgspec message names (``... - at `$.dimensions``` or
    ``Object missing required field `model```)."""
    missing = "missing required field `"
    if missing in message:
        return message.split(missing, 1)[1].split("`", 1)[0] or None
    marker = "at `$."
    if marker not in message:
        return None
    field = message.split(marker, 1)[1].split("`", 1)[0]
    return field.split(".", 1)[0].split("[", 1)[0] or None


def _texts(value: str | list[Any] | msgspec.UnsetType) -> list[str]:
    assert not isinstance(value, msgspec.UnsetType)  # _parse refuses a body without it
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


@router.post("/v1/embeddings", summary="OpenAI-compatible embeddings", openapi_extra=_OPENAPI_BODY)
async def embeddings(request: Request) -> Response:
    state: ServerState = request.app.state.sift
    started = time.perf_counter()
    # Opened already where the request arrived another way (a worker's queue message).
    ingress: IngressTicket | None = request.scope.get("sift.ingress")
    model = ""
    try:
        raw = await read_body_buffer(request, state.settings.max_body_bytes, state.settings.body_timeout_s)
        body = await _parse(raw, request.headers.get("content-type"))
        model = body.model
        texts = _texts(body.input)
        if ingress is None:
            # The model is only known once the body is parsed: count the request
            # from here, so OpenAI traffic feeds the arrival model as well.
            ingress = state.registry.begin_ingress(body.model, started)
        native = EncodeBody(items=[Item(text=t) for t in texts])
        ctx = RequestContext(
            request_id=request_id_of(request),
            started=started,
            ingress=ingress,
            disconnected=lambda: wait_for_disconnect(request),
        )
        try:
            outcome = await encode(state.registry, body.model, native, state.limits, ctx, dimensions=body.dimensions)
        except TaskNotSupported as error:
            # The same check as the native route's, in this route's words.
            raise InvalidInput(f"Model '{body.model}' does not produce embeddings.", param="model") from error
    except SiftError as error:
        state.metrics.count(model, "embeddings", error.status)
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
    # msgspec, not JSONResponse's json.dumps: 64 embeddings took ~25 ms on the loop.
    return Response(
        msgspec.json.encode({"object": "list", "data": data, "model": body.model, "usage": usage}),
        media_type="application/json",
        headers={"X-SIE-Served-By": "local"},
    )
