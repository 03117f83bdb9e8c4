"""Decode request bodies and encode response bodies in either wire format."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import numpy as np

from sift_server.errors import InvalidInput
from sift_server.wire.ndarray_msgpack import packb
from sift_server.wire.negotiation import Format
from sift_server.wire.split import Buffer

T = TypeVar("T")

_json_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
_msgpack_decoders: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def decode_body(data: Buffer, fmt: Format, schema: type[T]) -> T:
    try:
        result: T
        if fmt == "msgpack":
            packed = _msgpack_decoders.get(schema) or _msgpack_decoders.setdefault(
                schema, msgspec.msgpack.Decoder(schema)
            )
            result = packed.decode(data)
        else:
            text = _json_decoders.get(schema) or _json_decoders.setdefault(schema, msgspec.json.Decoder(schema))
            result = text.decode(data)
        return result
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"Invalid request body: {exc}") from exc
    except msgspec.DecodeError as exc:
        kind = "MessagePack" if fmt == "msgpack" else "JSON"
        raise InvalidInput(f"Request body is not valid {kind}: {exc}") from exc
    except RecursionError as exc:
        # msgspec guards its recursion with the interpreter's limit: a body nested
        # thousands of levels deep is refused here, before anything else sees it.
        raise InvalidInput("Request body is nested too deeply.") from exc


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialize {type(obj).__name__}")


_json_encoder = msgspec.json.Encoder(enc_hook=_json_default)


def encode_body(payload: Any, fmt: Format) -> bytes:
    if fmt == "msgpack":
        return packb(payload)
    return _json_encoder.encode(payload)
