"""The work routes (api/work.py): one raw-ASGI endpoint per entry of the endpoint
table, answered by the handler given (sift serve's serving core here; the
gateway's publish in tests/cluster/test_fast_paths.py), in front of FastAPI,
which serves everything else and documents the work routes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from sift_server.api.middleware import front_door
from sift_server.api.work import WorkRoutes
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.core import endpoints, serve
from sift_server.core.serve import Call, Reply
from sift_server.core.state import ServerState
from sift_server.engine.trace import ForwardRecord, JsonlTrace
from sift_server.metrics import Metrics
from tests.api.inprocess import Client, MakeClient
from tests.fixtures.tiny_embedder import TINY_EMBEDDER


@pytest.fixture
async def app_client(make_client: MakeClient) -> Client:
    return await make_client(calibrate=False)


class _Spy:
    """An ASGI app (FastAPI's place behind the work routes) that records what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append((scope["type"], scope.get("path", "")))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})


async def test_work_routes_send_the_tables_paths_to_the_handler_and_the_rest_on() -> None:
    calls: list[tuple[str, str, bytes]] = []

    async def handler(call: Call) -> Reply:
        calls.append((call.endpoint.name, call.model, bytes(call.body)))
        return Reply(200, {"X-Handled": call.endpoint.name}, b"done")

    spy = _Spy()
    app = WorkRoutes(build_state(Settings(calibrate=False)), handler, default=spy)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sift") as client:
        for path in ("/v1/encode/org/m:p", "/v1/score/m", "/v1/extract/m", "/v1/embeddings"):
            response = await client.post(path, content=b"{}")
            assert (response.status_code, response.content) == (200, b"done")
            assert response.headers["content-length"] == "4"
        other = await client.put("/v1/score/m")
        assert other.status_code == 405 and other.headers["allow"] == "POST"
        assert other.json()["detail"]["code"] == "METHOD_NOT_ALLOWED"
        assert (await client.get("/v1/embeddings")).json()["error"]["code"] == "method_not_allowed"
        for path in ("/v1/models", "/v1/encode", "/healthz"):
            assert (await client.post(path)).status_code == 204
    assert calls == [
        ("encode", "org/m:p", b"{}"), ("score", "m", b"{}"), ("extract", "m", b"{}"), ("embeddings", "", b"{}"),
    ]  # fmt: skip
    assert spy.seen == [("http", "/v1/models"), ("http", "/v1/encode"), ("http", "/healthz")]


async def test_a_streamed_reply_is_sent_chunk_by_chunk_without_a_length() -> None:
    async def chunks() -> Any:
        for part in (b"data: 1\n\n", b"", b"data: 2\n\n"):
            yield part

    async def handler(call: Call) -> Reply:
        return Reply(200, {}, chunks(), "text/event-stream")

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    app = WorkRoutes(build_state(Settings(calibrate=False)), handler, default=_Spy())
    scope = {"type": "http", "method": "POST", "path": "/v1/encode/m", "headers": []}
    await app(scope, receive, send)
    assert [name for name, _ in sent[0]["headers"]] == [b"content-type"]
    assert [(m.get("body"), m.get("more_body", False)) for m in sent[1:]] == [
        (b"data: 1\n\n", True), (b"data: 2\n\n", True), (b"", False),
    ]  # fmt: skip


def test_every_endpoint_of_the_table_has_its_service() -> None:
    assert set(serve.SERVING) == {endpoint.name for endpoint in endpoints.ENDPOINTS}


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


async def test_the_front_door_passes_work_posts_to_the_app_behind_it() -> None:
    """The layers only refuse (drain, key, size) or count; the app behind them
    answers (the work routes, or FastAPI)."""
    spy = _Spy()
    app = front_door(spy, build_state(Settings(calibrate=False)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sift") as client:
        response = await client.post("/v1/encode/some/model", json={"items": [{"text": "x"}]})
    assert response.status_code == 204 and spy.seen == [("http", "/v1/encode/some/model")]


async def test_openapi_describes_the_work_routes_from_the_table(app_client: Client) -> None:
    client, _ = app_client
    spec = (await client.get("/openapi.json")).json()
    for endpoint in endpoints.ENDPOINTS:
        operation = spec["paths"][endpoint.template]["post"]
        assert operation["summary"] == endpoint.summary
        body = operation["requestBody"]["content"][endpoint.media_type]["schema"]
        name = body["$ref"].rsplit("/", 1)[1]
        assert name == endpoint.schema.__name__ and name in spec["components"]["schemas"]
    assert "/v1/models" in spec["paths"]  # FastAPI's own routes stay documented
