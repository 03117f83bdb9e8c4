"""Error envelopes: ``{"detail": {code, message}}`` on native routes and
``{"error": {...}}`` on the OpenAI route (API.md §1.7, §5).

Both families also carry ``X-SIE-Error-Code`` (the domain code, upper case) so
that logs and proxies can read the code without parsing the body. The builders
return plain data, so the HTTP front door, the routes and the cluster worker
render exactly the same envelopes.
"""

from __future__ import annotations

import json
from typing import Any

from sift_server.errors import SiftError

# OpenAI-route codes for our domain codes (API.md §5); every other code is the
# domain code in lower case, so the route's codes are lower case throughout.
_OPENAI_CODES = {
    "MODEL_NOT_FOUND": "model_not_found",
    "INVALID_INPUT": "invalid_request",
    "QUEUE_FULL": "server_overloaded",
    "INFERENCE_ERROR": "inference_error",
}

Envelope = tuple[int, dict[str, Any], dict[str, str]]


def native_envelope(error: SiftError, runtime_instance: str | None = None) -> Envelope:
    detail: dict[str, Any] = {"code": error.code, "message": error.message, **error.extra}
    headers = {"X-SIE-Error-Code": error.code}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    if runtime_instance:
        headers["X-SIE-Runtime-Instance"] = runtime_instance
    if error.close_connection:
        headers["Connection"] = "close"
    return error.status, {"detail": detail}, headers


def openai_envelope(error: SiftError, param: str | None = None) -> Envelope:
    body: dict[str, Any] = {
        "message": error.message,
        "type": "invalid_request_error" if error.status < 500 else "server_error",
        "param": param if param is not None else error.extra.get("param"),
        "code": _OPENAI_CODES.get(error.code, error.code.lower()),
        **{k: v for k, v in error.extra.items() if k != "param"},
    }
    headers = {"X-SIE-Error-Code": error.code}
    # The reference answers a full queue here without Retry-After.
    if error.retry_after is not None and error.code != "QUEUE_FULL":
        headers["Retry-After"] = str(error.retry_after)
    if error.close_connection:
        headers["Connection"] = "close"
    return error.status, {"error": body}, headers


def render_json(body: dict[str, Any]) -> bytes:
    """An envelope's bytes, compact, as Starlette's JSONResponse writes them."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
