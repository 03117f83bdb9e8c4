"""The OpenAI embeddings body (API.md §5): decoded with msgspec, so every malformed
body is a 400 in the OpenAI envelope, and the answer built from the vectors."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import msgspec
import numpy as np

from sift_server.errors import InvalidInput
from sift_server.registry.catalog import MAX_MODEL_NAME_CHARS
from sift_server.wire.msgspec_text import top_field
from sift_server.wire.sliced import decode_sliced
from sift_server.wire.split import Buffer


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


def is_json_type(content_type: str | None) -> bool:
    """No Content-Type is read as JSON (as the native routes do); any other
    type must name JSON: this route has no msgpack form."""
    if content_type is None or not content_type.strip():
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def is_blank(raw: Buffer) -> bool:
    """Empty or only whitespace; a large body is copied only if it starts blank."""
    return len(raw) == 0 or (bytes(raw[:64]).isspace() and bytes(raw).isspace())


async def parse_embeddings(raw: Buffer, content_type: str | None) -> EmbeddingsBody:
    if not is_json_type(content_type):
        raise InvalidInput("This route accepts JSON only: send 'Content-Type: application/json'.")
    if is_blank(raw):
        raise InvalidInput("The request body is empty; send a JSON object with 'model' and 'input'.")
    try:
        body = await decode_sliced(raw, "json", EmbeddingsBody, "input", Any)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, param=top_field(exc.message)) from exc
    if isinstance(body.input, msgspec.UnsetType):
        raise InvalidInput("Invalid request body: Object missing required field `input`", param="input")
    return body


def input_texts(value: str | list[Any] | msgspec.UnsetType) -> list[str]:
    assert not isinstance(value, msgspec.UnsetType)  # parse_embeddings refuses a body without it
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


def embeddings_answer(body: EmbeddingsBody, vectors: list[np.ndarray], input_tokens: int) -> bytes:
    data = [
        {"object": "embedding", "embedding": _embedding(vector, body.encoding_format), "index": index}
        for index, vector in enumerate(vectors)
    ]
    usage = {"prompt_tokens": input_tokens, "total_tokens": input_tokens, "sie_token_source": "worker"}
    # msgspec, not json.dumps: the stdlib encoder held the loop for tens of ms (docs/architecture.md).
    return msgspec.json.encode({"object": "list", "data": data, "model": body.model, "usage": usage})
