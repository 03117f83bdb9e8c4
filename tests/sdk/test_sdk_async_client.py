"""The asyncio client against a scripted fake server (async httpx.MockTransport)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest

from sift_sdk import (
    AsyncSiftClient,
    ExtractResult,
    ModelLoadFailedError,
    ModelNotFoundError,
    QueueFullError,
    RequestError,
    ScoreEntry,
    SiftConnectionError,
)

MODEL = "BAAI/bge-small-en-v1.5"
VECS = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)


@pytest.mark.asyncio
async def test_encode_list_and_single(make_async_client: Any, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS), wire.encode(VECS[:1]))
    async with make_async_client() as client:
        matrix = await client.encode(MODEL, ["a", "b"], is_query=True)
        vector = await client.encode(MODEL, "c")
    assert server.body(0) == {
        "items": [{"text": "a"}, {"text": "b"}],
        "params": {"options": {"is_query": True}},
    }
    assert server.body(1) == {"items": [{"text": "c"}]}
    assert matrix.shape == (2, 2) and matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix, VECS)
    assert vector.shape == (2,)
    assert server.paths == [f"/v1/encode/{MODEL}"] * 2
    assert server.requests[0].headers["content-type"] == "application/msgpack"
    assert server.requests[0].headers["accept"] == "application/msgpack"


@pytest.mark.asyncio
async def test_encode_full(make_async_client: Any, server: Any, wire: Any) -> None:
    server.reply(wire.encode(VECS, ids=["x", None]))
    async with make_async_client() as client:
        result = await client.encode_full(MODEL, [{"id": "x", "text": "a"}, "b"])
    assert [item.get("id") for item in result.items] == ["x", None]
    assert result.timing is not None and result.timing["inference_ms"] == 1.0


@pytest.mark.asyncio
async def test_score(make_async_client: Any, server: Any, wire: Any) -> None:
    server.reply(
        wire.msgpack(
            {
                "model": MODEL,
                "query_id": None,
                "scores": [
                    {"item_id": "item-1", "score": 0.9, "rank": 0},
                    {"item_id": "item-0", "score": 0.1, "rank": 1},
                ],
            }
        )
    )
    async with make_async_client() as client:
        result = await client.score(MODEL, "q", ["a", "b"], instruction="rank")
    assert server.body() == {
        "query": {"text": "q"},
        "items": [{"text": "a"}, {"text": "b"}],
        "instruction": "rank",
    }
    assert result.scores == [ScoreEntry("item-1", 0.9, 0), ScoreEntry("item-0", 0.1, 1)]
    assert result.query_id is None


@pytest.mark.asyncio
async def test_extract_single_and_list(make_async_client: Any, server: Any, wire: Any) -> None:
    server.reply(
        wire.msgpack({"model": MODEL, "items": [{"id": "item-0", "classifications": []}]}),
        wire.msgpack({"model": MODEL, "items": [{"id": "a"}, {"id": "item-1"}]}),
    )
    async with make_async_client() as client:
        one = await client.extract(MODEL, "t", labels=["x"])
        many = await client.extract(MODEL, [{"id": "a", "text": "t"}, "u"])
    assert one == ExtractResult(id="item-0")
    assert [r.id for r in many] == ["a", "item-1"]
    assert server.body(0) == {"items": [{"text": "t"}], "params": {"labels": ["x"]}}


@pytest.mark.asyncio
async def test_models(make_async_client: Any, server: Any, wire: Any) -> None:
    server.reply(wire.json({"models": [{"name": MODEL}]}), wire.json({"name": MODEL}))
    async with make_async_client(api_key="k") as client:
        assert await client.models() == [{"name": MODEL}]
        assert await client.model(MODEL) == {"name": MODEL}
    assert server.paths == ["/v1/models", f"/v1/models/{MODEL}"]
    assert all(r.headers["accept"] == "application/json" for r in server.requests)
    assert all(r.headers["authorization"] == "Bearer k" for r in server.requests)


@pytest.mark.asyncio
async def test_model_loading_retry_then_success(make_async_client: Any, server: Any, wire: Any, clock: Any) -> None:
    server.reply(wire.error(503, "MODEL_LOADING", retry_after="3"), wire.encode(VECS[:1]))
    async with make_async_client() as client:
        vector = await client.encode(MODEL, "x")
        assert client.last_retry_count == 1
    assert vector.shape == (2,)
    assert clock.sleeps == [3.0]


@pytest.mark.asyncio
async def test_queue_full_until_deadline(make_async_client: Any, server: Any, wire: Any, clock: Any) -> None:
    server.reply(wire.error(503, "QUEUE_FULL", retry_after="1"))
    async with make_async_client(retry_deadline_s=3) as client:
        with pytest.raises(QueueFullError):
            await client.score(MODEL, "q", ["d"])
        assert client.last_retry_count == 3
    assert clock.sleeps == [1.0, 1.0, 1.0]
    assert len(server.requests) == 4


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "INVALID_INPUT", RequestError),
        (404, "MODEL_NOT_FOUND", ModelNotFoundError),
        (502, "MODEL_LOAD_FAILED", ModelLoadFailedError),
    ],
)
async def test_no_retry_on_terminal_errors(
    make_async_client: Any,
    server: Any,
    wire: Any,
    clock: Any,
    status: int,
    code: str,
    cls: type[Exception],
) -> None:
    server.reply(wire.error(status, code), wire.encode(VECS[:1]))
    async with make_async_client() as client:
        with pytest.raises(cls):
            await client.encode(MODEL, "x")
        assert client.last_retry_count == 0
    assert len(server.requests) == 1
    assert clock.sleeps == []


@pytest.mark.asyncio
async def test_connect_error_retried_then_raised(make_async_client: Any, server: Any, clock: Any) -> None:
    server.reply(httpx.ConnectError("refused"))
    async with make_async_client(retry_deadline_s=2) as client:
        with pytest.raises(SiftConnectionError):
            await client.encode(MODEL, "x")
    assert clock.sleeps == [1.0, 1.0]  # backoff 1 s, then 2 s cut to the 1 s left


@pytest.mark.asyncio
async def test_retry_counts_are_per_task(server: Any, wire: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        server.requests.append(request)
        text = server.body()["items"][0]["text"]
        calls = sum(1 for r in server.requests if r.content == request.content)
        if text == "slow" and calls == 1:
            loading: httpx.Response = wire.error(503, "MODEL_LOADING", retry_after="0")
            return loading
        ok: httpx.Response = wire.encode(VECS[:1])
        return ok

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))

    async def noop(_: float) -> None:
        await asyncio.sleep(0)

    client = AsyncSiftClient("http://x.test", http_client=http, sleep=noop)

    async def run(text: str) -> int:
        await client.encode(MODEL, text)
        return client.last_retry_count

    assert list(await asyncio.gather(run("slow"), run("fast"))) == [1, 0]
    await http.aclose()


@pytest.mark.asyncio
async def test_async_context_manager_closes_owned_client() -> None:
    async with AsyncSiftClient() as client:
        http = client._http
    assert http.is_closed
