"""Bad input in-process (httpx ASGI transport, no sockets): every case gets the
contract's status and envelope, never a 500 (issue 10, first section)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgpack
import pytest

from sift_server.api.errors import openai_error
from sift_server.errors import InputTooLong, ModelLoadFailed, ModelLoading
from tests.api.inprocess import (
    ENCODE,
    JSON_HEADERS,
    NATIVE_ROUTES,
    Client,
    MakeClient,
    assert_native,
    assert_openai,
)
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

DEPTH = 100_000

# ---- deep nesting --------------------------------------------------------------


def deep_json() -> bytes:
    return b'{"items":[{"text":"a","metadata":{"x":' + b"[" * DEPTH + b"]" * DEPTH + b"}}]}"


def deep_msgpack() -> bytes:
    # {"items": [[[[...]]]]} with DEPTH nested one-element arrays.
    return b"\x81\xa5items" + b"\x91" * DEPTH + b"\x90"


@pytest.mark.parametrize("route", NATIVE_ROUTES)
async def test_deeply_nested_json_is_a_400_on_native_routes(app_client: Client, route: str) -> None:
    client, _ = app_client
    assert_native(await client.post(route, content=deep_json(), headers=JSON_HEADERS), 400, "INVALID_INPUT")


@pytest.mark.parametrize("route", NATIVE_ROUTES)
async def test_deeply_nested_msgpack_is_a_400_on_native_routes(app_client: Client, route: str) -> None:
    client, _ = app_client
    headers = {"Content-Type": "application/msgpack"}
    assert_native(await client.post(route, content=deep_msgpack(), headers=headers), 400, "INVALID_INPUT")


async def test_deeply_nested_json_is_a_400_on_openai(app_client: Client) -> None:
    client, _ = app_client
    body = b'{"model":"m","input":' + b"[" * DEPTH + b"]" * DEPTH + b"}"
    assert_openai(await client.post("/v1/embeddings", content=body, headers=JSON_HEADERS), 400, "invalid_request")


# ---- /v1/embeddings schema errors: OpenAI envelope, 400 ----------------------------

OPENAI_BAD_BODIES: list[tuple[str, bytes, dict[str, str]]] = [
    ("malformed JSON", b'{"model": ', JSON_HEADERS),
    ("empty body", b"", JSON_HEADERS),
    ("empty object", b"{}", JSON_HEADERS),
    ("missing model", b'{"input": "a"}', JSON_HEADERS),
    ("input is a number", f'{{"model": "{TINY_EMBEDDER}", "input": 5}}'.encode(), JSON_HEADERS),
    (
        "bad encoding_format",
        f'{{"model": "{TINY_EMBEDDER}", "input": "a", "encoding_format": "hex"}}'.encode(),
        JSON_HEADERS,
    ),
    ("user is a number", f'{{"model": "{TINY_EMBEDDER}", "input": "a", "user": 5}}'.encode(), JSON_HEADERS),
    ("dimensions NaN", f'{{"model": "{TINY_EMBEDDER}", "input": "a", "dimensions": NaN}}'.encode(), JSON_HEADERS),
    (
        "dimensions Infinity",
        f'{{"model": "{TINY_EMBEDDER}", "input": "a", "dimensions": Infinity}}'.encode(),
        JSON_HEADERS,
    ),
    ("dimensions 1e400", f'{{"model": "{TINY_EMBEDDER}", "input": "a", "dimensions": 1e400}}'.encode(), JSON_HEADERS),
    ("dimensions a float", f'{{"model": "{TINY_EMBEDDER}", "input": "a", "dimensions": 1.5}}'.encode(), JSON_HEADERS),
    ("lone surrogate", f'{{"model": "{TINY_EMBEDDER}", "input": "abc\\ud800def"}}'.encode(), JSON_HEADERS),
    ("lone surrogate in a list", f'{{"model": "{TINY_EMBEDDER}", "input": ["x", "\\udc00"]}}'.encode(), JSON_HEADERS),
    ("invalid UTF-8", b'{"model": "m", "input": "\xff\xfe"}', JSON_HEADERS),
    ("msgpack garbage", bytes(range(256)), {"Content-Type": "application/msgpack"}),
    ("msgpack valid", msgpack.packb({"model": TINY_EMBEDDER, "input": "a"}), {"Content-Type": "application/msgpack"}),
    ("text/plain", f'{{"model": "{TINY_EMBEDDER}", "input": "a"}}'.encode(), {"Content-Type": "text/plain"}),
    ("a JSON list", b"[1, 2]", JSON_HEADERS),
    ("model is a number", b'{"model": 5, "input": "a"}', JSON_HEADERS),
]


@pytest.mark.parametrize(("name", "body", "headers"), OPENAI_BAD_BODIES, ids=[c[0] for c in OPENAI_BAD_BODIES])
async def test_openai_bad_bodies_get_the_openai_envelope(
    app_client: Client, name: str, body: bytes, headers: dict[str, str]
) -> None:
    client, _ = app_client
    assert_openai(await client.post("/v1/embeddings", content=body, headers=headers), 400, "invalid_request")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"input": "a"}', "model"),
        (f'{{"model": "{TINY_EMBEDDER}", "input": "a", "dimensions": 1.5}}'.encode(), "dimensions"),
        (f'{{"model": "{TINY_EMBEDDER}", "input": "a", "encoding_format": "hex"}}'.encode(), "encoding_format"),
    ],
)
async def test_openai_schema_errors_name_the_field(app_client: Client, body: bytes, param: str) -> None:
    client, _ = app_client
    response = await client.post("/v1/embeddings", content=body, headers=JSON_HEADERS)
    assert_openai(response, 400, "invalid_request")
    assert response.json()["error"]["param"] == param


async def test_openai_json_without_content_type_still_works(app_client: Client) -> None:
    client, _ = app_client
    body = f'{{"model": "{TINY_EMBEDDER}", "input": ["a", "b"], "user": "u"}}'.encode()
    response = await client.post("/v1/embeddings", content=body)
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 2


async def test_openai_wrong_method_is_a_405_in_the_openai_envelope(app_client: Client) -> None:
    client, _ = app_client
    assert_openai(await client.get("/v1/embeddings"), 405, "method_not_allowed")


async def test_openai_codes_are_lower_case() -> None:
    for error, code in [
        (ModelLoading("loading"), "model_loading"),
        (InputTooLong("long"), "input_too_long"),
        (ModelLoadFailed("failed", error_class="OOM", attempts=1, permanent=True), "model_load_failed"),
    ]:
        body = openai_error(error).body
        assert f'"code":"{code}"'.encode() in body


async def test_openapi_still_documents_the_embeddings_body(app_client: Client) -> None:
    client, _ = app_client
    spec = (await client.get("/openapi.json")).json()
    body = spec["paths"]["/v1/embeddings"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert {"model", "input"} <= set(schema.get("properties", {})) or "$ref" in schema


# ---- body size ------------------------------------------------------------------


async def test_openai_body_over_the_limit_with_content_length_is_a_413(make_client: MakeClient) -> None:
    client, _ = await make_client(max_body_bytes=1000)
    body = f'{{"model": "{TINY_EMBEDDER}", "input": "{"a" * 2000}"}}'.encode()
    assert_openai(await client.post("/v1/embeddings", content=body, headers=JSON_HEADERS), 413, "input_too_long")


async def test_openai_chunked_body_over_the_limit_is_a_413(make_client: MakeClient) -> None:
    client, _ = await make_client(max_body_bytes=1000)

    async def chunks() -> AsyncIterator[bytes]:
        yield f'{{"model": "{TINY_EMBEDDER}", "input": "'.encode()
        for _ in range(10):
            yield b"a" * 500
        yield b'"}'

    response = await client.post("/v1/embeddings", content=chunks(), headers=JSON_HEADERS)
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert_openai(response, 413, "input_too_long")


# ---- drain and auth envelopes ------------------------------------------------------


async def test_drain_refusal_uses_each_familys_envelope(app_client: Client) -> None:
    client, state = app_client
    state.draining = True
    native = await client.post(ENCODE, json={"items": [{"text": "x"}]})
    assert_native(native, 503, "SHUTTING_DOWN")
    assert native.headers["Retry-After"] == "5"
    oa = await client.post("/v1/embeddings", json={"model": TINY_EMBEDDER, "input": "x"})
    assert_openai(oa, 503, "shutting_down")
    assert oa.headers["Retry-After"] == "5"
    assert (await client.get("/healthz")).status_code == 200


async def test_unauthorized_carries_the_error_code_header(make_client: MakeClient) -> None:
    client, _ = await make_client(api_key="secret")
    native = await client.post(ENCODE, json={"items": [{"text": "x"}]})
    assert_native(native, 401, "UNAUTHORIZED")
    oa = await client.post("/v1/embeddings", json={"model": TINY_EMBEDDER, "input": "x"})
    assert_openai(oa, 401, "unauthorized")
    assert oa.headers["X-SIE-Error-Code"] == "UNAUTHORIZED"


def test_lone_surrogate_in_an_item_is_invalid_input_not_a_crash() -> None:
    from sift_server.errors import InvalidInput
    from sift_server.service.common import Limits, item_text
    from sift_server.wire.schemas import Item

    with pytest.raises(InvalidInput, match="surrogate"):
        item_text(Item(text="abc\ud800def"), 0, Limits(max_item_bytes=1000, max_items=10))


# ---- an oversized model name: refused before the body is decoded ---------------------


@pytest.mark.parametrize("size", [300, 2_000_000], ids=["small body", "sliced body"])
async def test_openai_model_name_longer_than_any_model_is_a_400_naming_model(app_client: Client, size: int) -> None:
    client, _ = app_client
    body = b'{"model": "' + b"m" * size + b'", "input": "a"}'
    response = await client.post("/v1/embeddings", content=body, headers=JSON_HEADERS)
    assert_openai(response, 400, "invalid_request")
    error = response.json()["error"]
    assert error["param"] == "model"
    assert "length <= 256" in error["message"]
    assert len(response.content) < 1000  # the name is not echoed
