"""Decode a large request body in slices, so that no single step holds the event
loop for long (``/healthz`` answers within a few milliseconds while the largest
accepted body is decoded).

msgspec decodes in one C call that holds the GIL: a worker thread does not free
the loop, it only moves the stall. Instead the body is split into its envelope
and the elements of its one large array (wire/split.py), and the elements are
decoded a slice at a time, with ``await asyncio.sleep(0)`` after every
``SLICE_BYTES``. Bodies the split does not understand are decoded whole, as
before, which also gives the exact error message.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import msgspec

from sift_server.errors import InvalidInput
from sift_server.wire.codec import decode_body, encode_body
from sift_server.wire.negotiation import Format
from sift_server.wire.split import Buffer, Split, StringTooLong, split_body

T = TypeVar("T", bound=msgspec.Struct)

# Bodies smaller than this are decoded whole: a millisecond or two at most.
SLICED_DECODE_BYTES = 1 << 20
# Bytes decoded or stepped over between two turns of the event loop.
SLICE_BYTES = 1 << 20
# The largest single JSON value that is stepped over in one call; a body with a
# larger one (far above the per-item limit, which is 2 MiB by default) is decoded
# whole.
SPLIT_WINDOW_BYTES = 8 << 20

# A JSON answer with more items than this is encoded this many items at a time:
# one call for hundreds of dense vectors holds the loop for milliseconds
# (docs/architecture.md, "Keeping the event loop free").
ENCODE_SLICE_ITEMS = 64

_max_chars: dict[type[msgspec.Struct], dict[str, int]] = {}
_json_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
_msgpack_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}


def _element_decoder(fmt: Format, kind: Any) -> msgspec.json.Decoder[Any] | msgspec.msgpack.Decoder[Any]:
    if fmt == "msgpack":
        return _msgpack_decoders.get(kind) or _msgpack_decoders.setdefault(kind, msgspec.msgpack.Decoder(kind))
    return _json_decoders.get(kind) or _json_decoders.setdefault(kind, msgspec.json.Decoder(kind))


def element_error(message: str, field: str, index: int) -> str:
    """msgspec's message for one element, with the path it has in the whole body
    (``- at `$.text``` becomes ``- at `$.items[3].text```)."""
    where = f"$.{field}[{index}]"
    marker = " - at `$"
    if marker in message:
        return message.replace(marker, " - at `" + where, 1)
    return f"{message} - at `{where}`"


def string_limits(schema: type[msgspec.Struct]) -> dict[str, int]:
    """The schema's top-level string fields with a maximum length, by the name
    they have in the body (OpenAI's ``model``)."""
    limits = _max_chars.get(schema)
    if limits is None:
        info = msgspec.inspect.type_info(schema)
        assert isinstance(info, msgspec.inspect.StructType)
        limits = {
            f.encode_name: f.type.max_length
            for f in info.fields
            if isinstance(f.type, msgspec.inspect.StrType) and f.type.max_length is not None
        }
        _max_chars[schema] = limits
    return limits


async def _walk(data: Buffer, fmt: Format, field: str, schema: type[msgspec.Struct]) -> Split | None:
    walk = split_body(data, fmt, field, SPLIT_WINDOW_BYTES, string_limits(schema))
    stepped = 0
    while True:
        try:
            stepped += next(walk)
        except StopIteration as done:
            result: Split | None = done.value
            return result
        except StringTooLong as exc:
            # msgspec's own message for the field, without decoding the string.
            raise InvalidInput(
                f"Invalid request body: Expected `str` of length <= {exc.max_chars} - at `$.{exc.key}`"
            ) from None
        if stepped >= SLICE_BYTES:
            stepped = 0
            await asyncio.sleep(0)


async def decode_sliced(data: Buffer, fmt: Format, schema: type[T], field: str, element: Any) -> T:
    """``data`` decoded into ``schema``, whose ``field`` is a list of ``element``
    (``None`` by default, so the envelope decodes without it)."""
    if len(data) < SLICED_DECODE_BYTES:
        return decode_body(data, fmt, schema)
    split = await _walk(data, fmt, field, schema)
    if split is None:
        return decode_body(data, fmt, schema)
    envelope = decode_body(split.envelope, fmt, schema)
    if split.elements is None:
        return envelope
    await asyncio.sleep(0)
    decoder = _element_decoder(fmt, element)
    values: list[Any] = []
    decoded = 0
    for index, raw in enumerate(split.elements):
        try:
            values.append(decoder.decode(raw))
        except msgspec.ValidationError as exc:
            raise InvalidInput(f"Invalid request body: {element_error(str(exc), field, index)}") from exc
        except (msgspec.DecodeError, RecursionError):
            # Malformed inside the element: the whole decode names the error exactly.
            return decode_body(data, fmt, schema)
        decoded += len(raw)
        if decoded >= SLICE_BYTES:
            decoded = 0
            await asyncio.sleep(0)
    return msgspec.structs.replace(envelope, **{field: values})


async def encode_sliced(payload: dict[str, Any], fmt: Format, field: str = "items") -> bytes:
    """``encode_body(payload, fmt)``, with a loop turn after every
    ``ENCODE_SLICE_ITEMS`` elements of ``field`` in a JSON answer. The elements
    are encoded a slice at a time and spliced back as one ``msgspec.Raw``, so the
    bytes (key order included) are those of the whole encode. MessagePack answers
    are packed whole (binary vectors: no float formatting)."""
    elements = payload.get(field)
    if fmt != "json" or not isinstance(elements, list) or len(elements) <= ENCODE_SLICE_ITEMS:
        return encode_body(payload, fmt)
    parts: list[bytes] = []
    for start in range(0, len(elements), ENCODE_SLICE_ITEMS):
        # b"[...]" without its brackets.
        parts.append(encode_body(elements[start : start + ENCODE_SLICE_ITEMS], fmt)[1:-1])
        await asyncio.sleep(0)
    return encode_body({**payload, field: msgspec.Raw(b"[" + b",".join(parts) + b"]")}, fmt)
