"""MessagePack codec with the msgpack-numpy "nd-map" array convention (API.md §1.3).

A numpy array travels as a map whose keys are msgpack *bin* (Python ``bytes``)::

    {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [3], b"data": <raw C-order bytes>}

A numpy scalar uses ``b"nd": False`` and carries only ``type`` and ``data``. Ordinary map keys
are str, so the nd-map is recognised by its bytes keys.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack  # type: ignore[import-untyped,unused-ignore]
import numpy as np

__all__ = ["WireFormatError", "decode_nd", "encode_nd", "packb", "unpackb"]

_ND = b"nd"
_TYPE = b"type"
_KIND = b"kind"
_SHAPE = b"shape"
_DATA = b"data"

#: numpy kinds accepted on the wire: bool, signed int, unsigned int, float.
_ALLOWED_KINDS = frozenset("biuf")
_MAX_DIMS = 8


class WireFormatError(ValueError):
    """A msgpack payload or nd-map does not follow the wire contract."""


def _wire_dtype(type_str: object) -> np.dtype[Any]:
    if isinstance(type_str, bytes):
        type_str = type_str.decode("ascii", errors="replace")
    if not isinstance(type_str, str) or not type_str:
        raise WireFormatError(f"nd-map 'type' must be a numpy dtype string, got {type_str!r}")
    try:
        dtype = np.dtype(type_str)
    except TypeError as exc:
        raise WireFormatError(f"unknown nd-map dtype {type_str!r}") from exc
    if dtype.kind not in _ALLOWED_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise WireFormatError(f"unsupported nd-map dtype {type_str!r}")
    return dtype


def _native(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A writable, native-byte-order copy (wire buffers are read-only and may be big-endian)."""
    return array.astype(array.dtype.newbyteorder("="), copy=True)


def decode_nd(obj: dict[Any, Any]) -> Any:
    """Turn one nd-map into an ``np.ndarray`` (or a numpy scalar when ``nd`` is false)."""
    kind = obj.get(_KIND, b"")
    if kind not in (b"", ""):
        raise WireFormatError(f"unsupported nd-map kind {kind!r}")
    dtype = _wire_dtype(obj.get(_TYPE))
    data = obj.get(_DATA)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireFormatError("nd-map 'data' must be bin")
    if not obj.get(_ND):
        if len(data) != dtype.itemsize:
            raise WireFormatError("numpy scalar 'data' does not match its dtype size")
        return _native(np.frombuffer(data, dtype=dtype))[0]
    shape = obj.get(_SHAPE)
    if (
        not isinstance(shape, (list, tuple))
        or len(shape) > _MAX_DIMS
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise WireFormatError(f"invalid nd-map shape {shape!r}")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise WireFormatError(f"nd-map data has {len(data)} bytes; shape {list(shape)} of {dtype.str} needs {expected}")
    return _native(np.frombuffer(data, dtype=dtype).reshape(shape))


def encode_nd(obj: Any) -> Any:
    """``default`` hook for msgpack: pack numpy arrays and scalars as little-endian nd-maps."""
    if isinstance(obj, np.ndarray):
        array = np.ascontiguousarray(obj)
        if array.dtype.kind not in _ALLOWED_KINDS or array.dtype.fields is not None:
            raise TypeError(f"cannot send numpy arrays of dtype {array.dtype}")
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        return {
            _ND: True,
            _TYPE: array.dtype.str,
            _KIND: b"",
            _SHAPE: list(array.shape),
            _DATA: array.tobytes(),
        }
    if isinstance(obj, np.generic) and obj.dtype.kind in _ALLOWED_KINDS:
        scalar = np.asarray(obj).astype(obj.dtype.newbyteorder("<"))
        return {_ND: False, _TYPE: scalar.dtype.str, _DATA: scalar.tobytes()}
    raise TypeError(f"cannot serialise object of type {type(obj).__name__}")


def _object_hook(obj: dict[Any, Any]) -> Any:
    if _ND in obj and _TYPE in obj and _DATA in obj:
        return decode_nd(obj)
    return obj


def packb(obj: Any) -> bytes:
    """Pack with the new spec (str is str, bytes is bin) and nd-maps for numpy values."""
    packed: bytes = msgpack.packb(obj, use_bin_type=True, default=encode_nd)
    return packed


def unpackb(data: bytes) -> Any:
    """Unpack with ``raw=False``; nd-maps become ``np.ndarray``. Raises :class:`WireFormatError`."""
    try:
        return msgpack.unpackb(data, raw=False, object_hook=_object_hook)
    except WireFormatError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise WireFormatError(f"malformed msgpack payload: {exc}") from exc
