"""Error envelopes: ``{"detail": {code, message}}`` on native routes and
``{"error": {...}}`` on the OpenAI route (API.md §1.7, §5)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from sift_server.errors import SiftError

# OpenAI-route codes for our domain codes (API.md §5).
_OPENAI_CODES = {
    "MODEL_NOT_FOUND": "model_not_found",
    "INVALID_INPUT": "invalid_request",
    "QUEUE_FULL": "server_overloaded",
    "INFERENCE_ERROR": "inference_error",
}


def _headers(error: SiftError, runtime_instance: str | None) -> dict[str, str]:
    headers = {"X-SIE-Error-Code": error.code}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    if runtime_instance:
        headers["X-SIE-Runtime-Instance"] = runtime_instance
    return headers


def native_error(error: SiftError, runtime_instance: str | None = None) -> JSONResponse:
    detail: dict[str, Any] = {"code": error.code, "message": error.message, **error.extra}
    return JSONResponse({"detail": detail}, status_code=error.status, headers=_headers(error, runtime_instance))


def openai_error(error: SiftError, param: str | None = None) -> JSONResponse:
    code = _OPENAI_CODES.get(error.code, error.code)
    body: dict[str, Any] = {
        "message": error.message,
        "type": "invalid_request_error" if error.status < 500 else "server_error",
        "param": param if param is not None else error.extra.get("param"),
        "code": code,
        **{k: v for k, v in error.extra.items() if k != "param"},
    }
    headers = {}
    # The reference answers a full queue here without Retry-After.
    if error.retry_after is not None and error.code != "QUEUE_FULL":
        headers["Retry-After"] = str(error.retry_after)
    return JSONResponse({"error": body}, status_code=error.status, headers=headers)
