"""Mapping error responses to typed exceptions (API.md §1.7)."""

from __future__ import annotations

import json

import httpx
import msgpack
import pytest

from sift_sdk import (
    AuthenticationError,
    InputTooLongError,
    ModelLoadFailedError,
    ModelLoadingError,
    ModelNotFoundError,
    QueueFullError,
    RateLimitError,
    RequestError,
    ResourceExhaustedError,
    ServerError,
    SiftError,
)
from sift_sdk.errors import error_from_response


def _json(status: int, body: object, **headers: str) -> SiftError:
    hdrs = httpx.Headers({"content-type": "application/json", **headers})
    return error_from_response(status, hdrs, json.dumps(body).encode())


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "INVALID_INPUT", RequestError),
        (400, "INPUT_TOO_LONG", InputTooLongError),
        (413, "INPUT_TOO_LONG", InputTooLongError),
        (401, None, AuthenticationError),
        (401, "UNAUTHORIZED", AuthenticationError),
        (403, "FORBIDDEN", RequestError),
        (404, "MODEL_NOT_FOUND", ModelNotFoundError),
        (404, None, RequestError),
        (429, "RATE_LIMIT", RateLimitError),
        (500, "INFERENCE_ERROR", ServerError),
        (502, "MODEL_LOAD_FAILED", ModelLoadFailedError),
        (503, "MODEL_LOADING", ModelLoadingError),
        (503, "QUEUE_FULL", QueueFullError),
        (503, "RESOURCE_EXHAUSTED", ResourceExhaustedError),
        (503, "MODEL_NOT_LOADED", ServerError),
        (503, None, ServerError),
        (504, None, ServerError),
    ],
)
def test_status_and_code_map_to_exception_class(status: int, code: str | None, cls: type[SiftError]) -> None:
    err = _json(status, {"detail": {"code": code, "message": "msg here"}})
    assert type(err) is cls
    assert err.status_code == status
    assert err.code == code
    assert err.message == "msg here"


def test_hierarchy() -> None:
    client_side: list[type[SiftError]] = [
        AuthenticationError,
        ModelNotFoundError,
        InputTooLongError,
        RateLimitError,
    ]
    server_side: list[type[SiftError]] = [
        ModelLoadingError,
        QueueFullError,
        ModelLoadFailedError,
        ResourceExhaustedError,
    ]
    assert all(issubclass(cls, RequestError) for cls in client_side)
    assert all(issubclass(cls, ServerError) for cls in server_side)
    assert issubclass(RequestError, SiftError)
    assert issubclass(ServerError, SiftError)


def test_detail_envelope_extra_fields_and_str() -> None:
    err = _json(
        502,
        {
            "detail": {
                "code": "MODEL_LOAD_FAILED",
                "message": "gated repo",
                "error_class": "GATED",
                "attempts": 2,
                "permanent": True,
            }
        },
    )
    assert isinstance(err, ModelLoadFailedError)
    assert err.error_class == "GATED"
    assert err.attempts == 2
    assert err.permanent is True
    assert err.details == {"error_class": "GATED", "attempts": 2, "permanent": True}
    assert str(err) == "[502 MODEL_LOAD_FAILED] gated repo"


def test_error_envelope() -> None:
    err = _json(404, {"error": {"code": "MODEL_NOT_FOUND", "message": "nope", "param": None}})
    assert isinstance(err, ModelNotFoundError)
    assert err.message == "nope"
    assert err.details == {"param": None}


def test_string_detail_has_no_code() -> None:
    err = _json(404, {"detail": "Not Found"})
    assert type(err) is RequestError
    assert err.code is None
    assert err.message == "Not Found"


def test_draining_body_uses_string_fields() -> None:
    err = _json(
        503,
        {"error": "Service shutting down", "detail": "draining"},
        **{"Retry-After": "5"},
    )
    assert type(err) is ServerError
    assert err.code is None
    assert err.message == "draining"
    assert err.retry_after == 5.0


def test_non_json_body_becomes_message() -> None:
    hdrs = httpx.Headers({"content-type": "text/plain"})
    err = error_from_response(500, hdrs, b"Internal Server Error")
    assert type(err) is ServerError
    assert err.code is None
    assert err.message == "Internal Server Error"


def test_empty_body_gets_generic_message() -> None:
    err = error_from_response(500, httpx.Headers(), b"")
    assert err.message == "HTTP 500"
    assert err.code is None


def test_msgpack_error_body() -> None:
    hdrs = httpx.Headers({"content-type": "application/msgpack"})
    body = msgpack.packb({"detail": {"code": "QUEUE_FULL", "message": "busy"}}, use_bin_type=True)
    err = error_from_response(503, hdrs, body)
    assert isinstance(err, QueueFullError)
    assert err.message == "busy"


def test_header_code_wins_over_body_code() -> None:
    err = _json(
        503,
        {"detail": {"code": "SOMETHING_ELSE", "message": "m"}},
        **{"X-SIE-Error-Code": "QUEUE_FULL"},
    )
    assert isinstance(err, QueueFullError)
    assert err.code == "QUEUE_FULL"


def test_header_code_used_when_body_has_none() -> None:
    err = _json(404, {"detail": "gone"}, **{"X-SIE-Error-Code": "MODEL_NOT_FOUND"})
    assert isinstance(err, ModelNotFoundError)


def test_validation_error_list() -> None:
    err = _json(422, {"detail": [{"loc": ["body"], "msg": "field required", "type": "missing"}]})
    assert type(err) is RequestError
    assert err.message == "field required"


@pytest.mark.parametrize(("header", "expected"), [("1.5", 1.5), ("0", 0.0), ("-3", None), ("x", None)])
def test_retry_after_is_parsed(header: str, expected: float | None) -> None:
    err = _json(
        503,
        {"detail": {"code": "MODEL_LOADING", "message": "m"}},
        **{"Retry-After": header},
    )
    assert err.retry_after == expected
