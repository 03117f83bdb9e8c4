"""The native POST routes answered straight from the ASGI middleware
(``api.native.serve_native``): the same answers, headers, errors and metrics as
through FastAPI's router, which still serves the routes' OpenAPI entries and
other methods."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from sift_server.api import native
from sift_server.api.state import ServerState
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.core import endpoints, serve
from sift_server.engine.trace import ForwardRecord, JsonlTrace
from sift_server.metrics import Metrics
from tests.api.inprocess import Client, MakeClient
from tests.fixtures.tiny_embedder import TINY_EMBEDDER


@pytest.fixture
async def app_client(make_client: MakeClient) -> Client:
    return await make_client(calibrate=False)


async def test_fast_path_answers_like_the_route(
    app_client: tuple[httpx.AsyncClient, ServerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = app_client
    body = msgpack.packb({"items": [{"id": "a", "text": "hello world"}]})
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack", "X-Request-ID": "rid-1"}
    fast = await client.post(f"/v1/encode/{TINY_EMBEDDER}", content=body, headers=headers)
    # The same request through FastAPI's router (the fast path declines everything).
    original = native.serve_native

    async def decline(*args: object) -> bool:
        return False

    monkeypatch.setattr("sift_server.api.middleware.serve_native", decline)
    routed = await client.post(f"/v1/encode/{TINY_EMBEDDER}", content=body, headers=headers)
    monkeypatch.setattr("sift_server.api.middleware.serve_native", original)
    assert fast.status_code == routed.status_code == 200
    assert fast.headers["content-type"] == routed.headers["content-type"] == "application/msgpack"
    timing_headers = {
        "x-queue-time", "x-tokenization-time", "x-inference-time", "x-postprocessing-time", "x-total-time",
        "content-length",
    }  # fmt: skip
    assert {k: v for k, v in fast.headers.items() if k not in timing_headers} == {
        k: v for k, v in routed.headers.items() if k not in timing_headers
    }
    fast_body, routed_body = msgpack.unpackb(fast.content), msgpack.unpackb(routed.content)
    assert fast_body["items"] == routed_body["items"] and fast_body["model"] == routed_body["model"]
    assert fast.headers["x-request-id"] == "rid-1"


async def test_errors_and_other_methods_keep_their_envelopes(app_client: tuple[httpx.AsyncClient, ServerState]) -> None:
    client, _ = app_client
    bad = await client.post(f"/v1/encode/{TINY_EMBEDDER}", content=b"{", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["detail"]["code"] == "INVALID_INPUT"
    missing = await client.post("/v1/score/no/such-model", json={"query": {"text": "q"}, "items": [{"text": "x"}]})
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "MODEL_NOT_FOUND"
    wrong_method = await client.get(f"/v1/encode/{TINY_EMBEDDER}")
    assert wrong_method.status_code == 405 and wrong_method.json()["detail"]["code"] == "METHOD_NOT_ALLOWED"
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/v1/encode/{model}", "/v1/score/{model}", "/v1/extract/{model}"} <= set(paths)


async def test_fast_path_counts_requests_in_metrics(app_client: tuple[httpx.AsyncClient, ServerState]) -> None:
    client, _ = app_client
    for _ in range(3):
        assert (await client.post(f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "x"}]})).status_code == 200
    await client.post(f"/v1/encode/{TINY_EMBEDDER}", json={"items": []})
    metrics = (await client.get("/metrics")).text
    assert f'sie_requests_total{{endpoint="encode",model="{TINY_EMBEDDER}",status="200"}} 3.0' in metrics
    assert f'sie_requests_total{{endpoint="encode",model="{TINY_EMBEDDER}",status="400"}} 1.0' in metrics


def test_the_endpoint_table_reads_the_model_from_the_rest_of_the_path() -> None:
    assert endpoints.native_route("/v1/encode/org/name:profile") == (endpoints.ENCODE, "org/name:profile")
    assert endpoints.native_route("/v1/extract/x") == (endpoints.EXTRACT, "x")
    assert endpoints.native_route("/v1/models/x") is None
    assert endpoints.native_route("/v1/encode") is None
    assert endpoints.native_route("/v1/embeddings") is None
    assert endpoints.route("/v1/embeddings") == (endpoints.EMBEDDINGS, "")
    assert endpoints.route("/v1/score/m") == (endpoints.SCORE, "m")


def test_generated_request_ids_are_unique_lowercase_hex() -> None:
    ids = {serve.new_request_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


def test_metrics_children_are_reused_and_count_separately() -> None:
    metrics = Metrics(frozenset({"m"}))
    metrics.count("m", "encode", 200, 0.01)
    metrics.count("m", "encode", 200, 0.02)
    metrics.count("other", "encode", 503)
    assert metrics.requests.labels("m", "encode", "200")._value.get() == 2
    assert metrics.requests.labels("(other)", "encode", "503")._value.get() == 1
    assert metrics.duration.labels("m", "encode", "total")._sum.get() == pytest.approx(0.03)


def test_trace_line_is_the_record_as_json(tmp_path: Path) -> None:
    record = ForwardRecord(
        model="m", lane="", forward_id=3, reason="wave", request_ids=["a", "b"], arrivals=[1.5, 2.25],
        admitted=[1.75, 2.5], items=2, cost=17, decided=3.0, start=3.125, end=3.5, extra={"k": [1, "v"]},
    )  # fmt: skip
    trace = JsonlTrace(tmp_path / "t.jsonl")
    trace.write(record)
    trace.close()
    line = (tmp_path / "t.jsonl").read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    assert ForwardRecord(**json.loads(line)) == record


async def test_front_door_without_the_fast_path_leaves_native_posts_to_the_app() -> None:
    """The cluster gateway puts the front door before its own native routes
    (forwarding to workers): there they must not be answered from a local registry."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from sift_server.api.middleware import install_front_door

    reached: list[str] = []

    async def forward(request: Request) -> Response:
        reached.append(request.url.path)
        return Response(status_code=204)

    app = Starlette(routes=[Route("/v1/encode/{model:path}", forward, methods=["POST"])])
    install_front_door(app, build_state(Settings(calibrate=False)), answer_native=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sift") as client:
        response = await client.post("/v1/encode/some/model", json={"items": [{"text": "x"}]})
    assert response.status_code == 204 and reached == ["/v1/encode/some/model"]


async def test_openai_posts_take_the_fast_path_with_the_routes_answers(
    app_client: tuple[httpx.AsyncClient, ServerState], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = app_client
    taken: list[str] = []
    original = native.serve_native

    async def spy(scope: Any, receive: Any, send: Any, state: Any) -> bool:
        answered = await original(scope, receive, send, state)
        if answered:
            taken.append(scope["path"])
        return answered

    monkeypatch.setattr("sift_server.api.middleware.serve_native", spy)
    good = {"model": TINY_EMBEDDER, "input": ["a", "b"], "encoding_format": "base64"}
    bad = {"model": TINY_EMBEDDER, "input": []}
    fast = [await client.post("/v1/embeddings", json=body) for body in (good, bad)]
    assert taken == ["/v1/embeddings", "/v1/embeddings"]

    async def decline(*args: object) -> bool:
        return False

    monkeypatch.setattr("sift_server.api.middleware.serve_native", decline)
    routed = [await client.post("/v1/embeddings", json=body) for body in (good, bad)]
    for one, other in zip(fast, routed, strict=True):
        assert (one.status_code, one.json()) == (other.status_code, other.json())
        assert one.headers["content-type"] == other.headers["content-type"] == "application/json"
    assert fast[0].status_code == 200 and len(fast[0].json()["data"]) == 2
    assert fast[1].status_code == 400 and fast[1].json()["error"]["code"] == "invalid_request"
