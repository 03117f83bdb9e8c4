"""The hand-off between front-ends and the engine process: typed messages, several per
frame (each loop turn's), MessagePack with numpy arrays as (dtype, shape, bytes) extensions.

Values whose types MessagePack would not bring back as they were (an adapter's private
payload other than token-id rows, outputs other than arrays, a compat key other than a
string or an integer, an error) travel pickled inside an extension, so that the engine
sees exactly what the front-end's adapter prepared and the front-end exactly what the
forward returned."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import msgspec
import numpy as np

_ARRAY, _PICKLED, _SCALAR = 1, 2, 3
HEADER = struct.Struct("<I")


class Pickled:
    """A value to send pickled (types MessagePack would change)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


# ---- front-end -> engine -------------------------------------------------


class Begin(msgspec.Struct, tag=1, array_like=True):
    """A request's headers arrived (at ``at``, the monotonic clock) for ``model``."""

    ident: int
    model: str
    at: float


class End(msgspec.Struct, tag=2, array_like=True):
    """That request left ingress without a submit (refused before admission)."""

    ident: int


class Submit(msgspec.Struct, tag=3, array_like=True):
    """A prepared request; ``ingress``: its open ``Begin`` (-1: none), ended by the admission."""

    key: int
    model: str
    request_id: str
    costs: list[int]
    compat: Any
    payload: Any
    tokens: int
    lane: str | None
    ingress: int


class Cancel(msgspec.Struct, tag=4, array_like=True):
    """Nobody waits for ``key`` any more (its client disconnected)."""

    key: int


class Ask(msgspec.Struct, tag=5, array_like=True):
    """A question answered by a ``Reply`` with the same key: ``ready`` (the engine's
    preloads are loaded), ``describe`` (``model``'s /v1/models entry), ``want`` (load
    ``model`` if it is not: the reply is the refusal or None), ``metrics`` (the
    Prometheus text of the whole server)."""

    key: int
    what: str
    model: str


class Count(msgspec.Struct, tag=9, array_like=True):
    """A finished request, for the request metrics (which the engine process keeps for all)."""

    model: str
    endpoint: str
    status: int
    seconds: float | None


# ---- engine -> front-end -------------------------------------------------


class Answer(msgspec.Struct, tag=6, array_like=True):
    key: int
    outputs: Any
    queue_s: float
    inference_s: float


class Failure(msgspec.Struct, tag=7, array_like=True):
    """``key`` failed with ``error`` (a pickled ``SiftError``)."""

    key: int
    error: Any


class Reply(msgspec.Struct, tag=8, array_like=True):
    key: int
    value: Any


Message = Begin | End | Submit | Cancel | Ask | Count | Answer | Failure | Reply


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        array = np.ascontiguousarray(obj)
        head = msgspec.msgpack.encode((array.dtype.str, array.shape))
        return msgspec.msgpack.Ext(_ARRAY, HEADER.pack(len(head)) + head + array.tobytes())
    if isinstance(obj, np.generic):
        return msgspec.msgpack.Ext(_SCALAR, obj.dtype.str.encode() + b"|" + obj.tobytes())
    if isinstance(obj, Pickled):
        return msgspec.msgpack.Ext(_PICKLED, pickle.dumps(obj.value, protocol=5))
    raise TypeError(f"cannot send {type(obj).__name__}")


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _ARRAY:
        (size,) = HEADER.unpack_from(data)
        dtype, shape = msgspec.msgpack.decode(data[HEADER.size : HEADER.size + size])
        # A writable copy, as the forward's own array was.
        return np.frombuffer(bytearray(data[HEADER.size + size :]), dtype=dtype).reshape(shape)
    if code == _SCALAR:
        raw = bytes(data)
        dtype, _, value = raw.partition(b"|")
        return np.frombuffer(value, dtype=dtype.decode())[0]
    if code == _PICKLED:
        return pickle.loads(data)
    raise ValueError(f"unknown extension {code}")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_decoder = msgspec.msgpack.Decoder(list[Message], ext_hook=_ext_hook)


def encode_frame(messages: list[Any]) -> bytes:
    """The messages as one frame: a 4-byte length, then their MessagePack array."""
    body = _encoder.encode(messages)
    return HEADER.pack(len(body)) + body


def decode_frame(body: bytes | bytearray | memoryview) -> list[Any]:
    result: list[Any] = _decoder.decode(body)
    return result


def _token_rows(value: Any) -> bool:
    """Rows of token ids (the commonest payload), which MessagePack brings back as they were."""
    return type(value) is list and all(type(row) is list and all(type(token) is int for token in row) for row in value)


def pack_payload(value: Any) -> Any:
    return value if value is None or _token_rows(value) else Pickled(value)


def pack_compat(value: Any) -> Any:
    return value if value is None or type(value) in (str, int) else Pickled(value)


def pack_outputs(values: list[Any]) -> Any:
    """A forward's outputs for one request: arrays as arrays (the commonest), else pickled."""
    if all(type(value) is np.ndarray for value in values):
        return values
    return Pickled(values)
