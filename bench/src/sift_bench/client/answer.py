"""What every client checks in an answer, and what it reports per request.

Shared by the library clients (``transports``) and the lean raw client (``raw``),
so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import msgpack
import numpy as np

ClientKind = Literal["sdk", "httpx", "raw"]


@dataclass(slots=True)
class Outcome:
    ok: bool
    status: int | None = None
    error: str | None = None
    # perf_counter when the request was handed to the HTTP stack (after the SDK built it).
    issued: float | None = None


class Transport(Protocol):
    kind: str

    async def send(self, request_id: str, texts: list[str]) -> Outcome:
        """Run the request spec's primitive on ``texts`` and check the answer."""
        ...

    async def aclose(self) -> None: ...


def validate_dense(matrix: Any, items: int, dims: int | None) -> str | None:
    """Why ``matrix`` is not ``items`` finite float vectors of ``dims`` (None: it is)."""
    if not isinstance(matrix, np.ndarray):
        return f"expected an array, got {type(matrix).__name__}"
    if matrix.ndim != 2 or matrix.shape[0] != items:
        return f"expected {items} vectors, got shape {matrix.shape}"
    if dims is not None and matrix.shape[1] != dims:
        return f"expected {dims} dims, got {matrix.shape[1]}"
    if matrix.shape[1] == 0:
        return "empty vectors"
    if matrix.dtype.kind != "f":
        return f"expected float vectors, got {matrix.dtype}"
    if not bool(np.isfinite(matrix).all()):
        return "non-finite values"
    return None


def check_status(status: int | None, echoed: str | None, request_id: str) -> str | None:
    """Why an answer's status or echoed request id is wrong (None: both are right)."""
    if status != 200:
        return f"HTTP {status}"
    if echoed != request_id:
        return f"request id not echoed (sent {request_id!r}, got {echoed!r})"
    return None


def _nd_hook(obj: dict[Any, Any]) -> Any:
    """msgpack-numpy nd-map (bytes keys) to an array."""
    if b"nd" in obj and b"data" in obj:
        raw_type = obj[b"type"]
        dtype = np.dtype(raw_type.decode() if isinstance(raw_type, bytes) else raw_type)
        array = np.frombuffer(obj[b"data"], dtype=dtype)
        return array.reshape(obj[b"shape"]) if obj[b"nd"] else array[0]
    return obj


def decode_encode_response(content: bytes, items: int) -> Any:
    """The ``(items, dims)`` dense matrix of a MessagePack encode response."""
    body = msgpack.unpackb(content, raw=False, object_hook=_nd_hook, strict_map_key=False)
    rows = body["items"]
    if len(rows) != items:
        raise ValueError(f"expected {items} items, got {len(rows)}")
    vectors = [np.asarray(row["dense"]["values"]) for row in rows]
    for row, vector in zip(rows, vectors, strict=True):
        if vector.ndim != 1 or vector.shape[0] != int(row["dense"]["dims"]):
            raise ValueError(f"vector of shape {vector.shape} for dims {row['dense']['dims']}")
    return np.stack(vectors)
