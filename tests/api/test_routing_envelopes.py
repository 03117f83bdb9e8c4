"""Routing errors (404 on an unknown path, 405 on a known path with the wrong
method) answer in the contract's envelope, not FastAPI's ``{"detail": "..."}``
(issue 23, item 4)."""

from __future__ import annotations

import pytest

from tests.api.inprocess import ENCODE, NATIVE_ROUTES, Client, assert_native, assert_openai


@pytest.mark.parametrize("route", [*NATIVE_ROUTES, "/v1/models", "/healthz", "/metrics"])
async def test_wrong_method_on_a_known_route_is_a_405_in_the_native_envelope(app_client: Client, route: str) -> None:
    client, _ = app_client
    response = await client.request("PUT" if route in NATIVE_ROUTES else "DELETE", route)
    assert_native(response, 405, "METHOD_NOT_ALLOWED")
    assert "allow" in response.headers  # which methods the path takes
    assert response.json()["detail"]["message"]


@pytest.mark.parametrize("path", ["/nope", "/v1/nope", "/v1/encoder/m", "/v2/encode/m"])
async def test_unknown_path_is_a_404_in_the_native_envelope(app_client: Client, path: str) -> None:
    client, _ = app_client
    for method in ("GET", "POST"):
        assert_native(await client.request(method, path), 404, "NOT_FOUND")


async def test_openai_route_routing_errors_use_the_openai_envelope(app_client: Client) -> None:
    client, _ = app_client
    assert_openai(await client.get("/v1/embeddings"), 405, "method_not_allowed")
    assert_openai(await client.delete("/v1/embeddings"), 405, "method_not_allowed")


async def test_routing_errors_under_the_native_fast_path_are_enveloped(app_client: Client) -> None:
    client, _ = app_client
    assert_native(await client.get(ENCODE), 405, "METHOD_NOT_ALLOWED")
