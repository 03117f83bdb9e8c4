"""Typed exceptions and the mapping from an HTTP error response to one of them (API.md §1.7)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._retry import parse_retry_after
from ._wire import WireFormatError, unpackb

__all__ = [
    "AuthenticationError",
    "InputTooLongError",
    "MalformedResponseError",
    "ModelLoadFailedError",
    "ModelLoadingError",
    "ModelNotFoundError",
    "QueueFullError",
    "RateLimitError",
    "RequestError",
    "ResourceExhaustedError",
    "ServerError",
    "SiftConnectionError",
    "SiftError",
    "SiftTimeoutError",
    "error_from_response",
]


class SiftError(Exception):
    """Base class of every error raised by the SDK.

    ``status_code`` is the HTTP status (``None`` for transport errors), ``code`` the server's
    machine-readable code (e.g. ``"MODEL_NOT_FOUND"``) when it sent one, ``retry_after`` the
    parsed ``Retry-After`` header in seconds, and ``details`` any extra fields of the error body.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.retry_after = retry_after
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        parts = [str(self.status_code) if self.status_code is not None else "", self.code or ""]
        prefix = " ".join(part for part in parts if part)
        return f"[{prefix}] {self.message}" if prefix else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(message={self.message!r}, status_code={self.status_code!r}, code={self.code!r})"


class RequestError(SiftError):
    """The server rejected the request (4xx); retrying the same request will not help."""


class AuthenticationError(RequestError):
    """401: missing or invalid API key."""


class ModelNotFoundError(RequestError):
    """404 ``MODEL_NOT_FOUND``: the server does not serve this model id."""


class InputTooLongError(RequestError):
    """``INPUT_TOO_LONG``: an input exceeds the model's capacity or the body size limit."""


class RateLimitError(RequestError):
    """429 that persisted until the retry deadline."""


class ServerError(SiftError):
    """The server failed (5xx)."""


class ModelLoadingError(ServerError):
    """503 ``MODEL_LOADING``: the model was still loading when the retry deadline passed."""


class QueueFullError(ServerError):
    """503 ``QUEUE_FULL``: the server stayed overloaded until the retry deadline passed."""


class ResourceExhaustedError(ServerError):
    """503 ``RESOURCE_EXHAUSTED``: the accelerator ran out of memory until the deadline passed."""


class ModelLoadFailedError(ServerError):
    """502 ``MODEL_LOAD_FAILED``: the model cannot be loaded; not retried.

    ``error_class`` (e.g. ``"GATED"``), ``permanent`` and ``attempts`` come from the body.
    """

    @property
    def error_class(self) -> str | None:
        value = self.details.get("error_class")
        return value if isinstance(value, str) else None

    @property
    def permanent(self) -> bool:
        value = self.details.get("permanent", True)
        return value if isinstance(value, bool) else True

    @property
    def attempts(self) -> int | None:
        value = self.details.get("attempts")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


class MalformedResponseError(SiftError):
    """A successful response whose body does not follow the wire contract."""


class SiftConnectionError(SiftError):
    """The server could not be reached, or the connection failed mid-request."""


class SiftTimeoutError(SiftConnectionError):
    """The request timed out (it may still be running on the server)."""


def _parse_body(content: bytes, content_type: str) -> tuple[str | None, str | None, dict[str, Any]]:
    """(code, message, extra fields) from an error body; tolerant of every shape in §1.7."""
    text = content.decode("utf-8", errors="replace").strip()
    body: Any
    try:
        if "msgpack" in content_type:
            body = unpackb(content)
        elif text:
            body = json.loads(text)
        else:
            return None, None, {}
    except (ValueError, WireFormatError):
        return None, text or None, {}
    if not isinstance(body, dict):
        return None, text or None, {}
    for key in ("detail", "error"):
        envelope = body.get(key)
        if isinstance(envelope, dict):
            code = envelope.get("code")
            message = envelope.get("message")
            extra = {k: v for k, v in envelope.items() if k not in ("code", "message")}
            return (
                code if isinstance(code, str) and code else None,
                message if isinstance(message, str) else None,
                extra,
            )
    for key in ("detail", "error"):
        envelope = body.get(key)
        if isinstance(envelope, str):
            return None, envelope, {}
    detail = body.get("detail")
    if isinstance(detail, list):  # FastAPI validation errors
        messages = [str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in detail]
        return None, "; ".join(messages), {"errors": detail}
    return None, text or None, {}


def _error_class(status_code: int, code: str | None) -> type[SiftError]:
    if code == "MODEL_LOAD_FAILED":
        return ModelLoadFailedError
    if code == "INPUT_TOO_LONG" and 400 <= status_code < 500:
        return InputTooLongError
    if status_code == 401:
        return AuthenticationError
    if status_code == 404 and code == "MODEL_NOT_FOUND":
        return ModelNotFoundError
    if status_code == 429:
        return RateLimitError
    if status_code == 503:
        by_code: dict[str | None, type[SiftError]] = {
            "MODEL_LOADING": ModelLoadingError,
            "QUEUE_FULL": QueueFullError,
            "RESOURCE_EXHAUSTED": ResourceExhaustedError,
        }
        return by_code.get(code, ServerError)
    if status_code >= 500:
        return ServerError
    return RequestError


def error_from_response(status_code: int, headers: Mapping[str, str], content: bytes) -> SiftError:
    """Build the typed exception for a non-2xx response.

    The ``X-SIE-Error-Code`` header, when present and non-empty, wins over the body's code.
    ``headers`` should be case-insensitive (``httpx.Headers`` is).
    """
    body_code, message, extra = _parse_body(content, headers.get("content-type", ""))
    header_code = (headers.get("x-sie-error-code") or "").strip()
    code = header_code or body_code
    retry_after = parse_retry_after(headers.get("retry-after"))
    cls = _error_class(status_code, code)
    return cls(
        message or f"HTTP {status_code}",
        status_code=status_code,
        code=code,
        retry_after=retry_after,
        details=extra,
    )
