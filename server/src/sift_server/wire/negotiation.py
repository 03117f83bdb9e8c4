"""Content negotiation exactly as the reference server does it (API.md §1.2)."""

from __future__ import annotations

from typing import Literal

Format = Literal["msgpack", "json"]

MSGPACK_TYPE = "application/msgpack"
JSON_TYPE = "application/json"


def _is_msgpack(value: str) -> bool:
    return "application/msgpack" in value or "application/x-msgpack" in value


def request_format(content_type: str | None) -> Format:
    """msgpack only when the Content-Type says so; anything else is JSON."""
    return "msgpack" if content_type and _is_msgpack(content_type.lower()) else "json"


def response_format(accept: str | None) -> Format:
    """No Accept, or one naming msgpack: msgpack. Otherwise JSON only if named
    (so curl's ``*/*`` gets msgpack, as the reference does)."""
    if not accept:
        return "msgpack"
    lowered = accept.lower()
    if _is_msgpack(lowered):
        return "msgpack"
    return "json" if JSON_TYPE in lowered else "msgpack"
