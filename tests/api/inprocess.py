"""Shared by the in-process API tests: an app factory and envelope checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx

from sift_server.core.state import ServerState
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

ENCODE = f"/v1/encode/{TINY_EMBEDDER}"
NATIVE_ROUTES = (ENCODE, f"/v1/score/{TINY_EMBEDDER}", f"/v1/extract/{TINY_EMBEDDER}")
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}

Client = tuple[httpx.AsyncClient, ServerState]
# make_client(**setting_overrides) -> a client on a fresh in-process app.
MakeClient = Callable[..., Awaitable[Client]]


def assert_native(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["detail"]["code"] == code
    assert response.headers["X-SIE-Error-Code"] == code


def assert_openai(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error, dict), error
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
