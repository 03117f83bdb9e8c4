"""MessagePack with numpy arrays as msgpack-numpy maps (bin keys nd/type/kind/shape/data).

The SIE SDK decodes arrays only in this layout; see API.md §1.3.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

_ND, _TYPE, _KIND, _SHAPE, _DATA = b"nd", b"type", b"kind", b"shape", b"data"


def _encode_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        array = obj if obj.dtype.byteorder != ">" else obj.astype(obj.dtype.newbyteorder("<"))
        array = np.ascontiguousarray(array)
        return {_ND: True, _TYPE: array.dtype.str, _KIND: b"", _SHAPE: list(array.shape), _DATA: array.tobytes()}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialize {type(obj).__name__}")


def _decode_hook(obj: dict[Any, Any]) -> Any:
    if _ND in obj and _DATA in obj:
        dtype = np.dtype(obj[_TYPE])
        if obj[_ND]:
            return np.frombuffer(obj[_DATA], dtype=dtype).reshape(obj[_SHAPE])
        return np.frombuffer(obj[_DATA], dtype=dtype)[0]
    return obj


def packb(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(obj, default=_encode_default, use_bin_type=True)
    return packed


def unpackb(data: bytes, *, decode_arrays: bool = False) -> Any:
    hook = _decode_hook if decode_arrays else None
    return msgpack.unpackb(data, raw=False, object_hook=hook, strict_map_key=False)
