"""The serving core's one entry (``core.serve.handle``), as the cluster worker
calls it: no ASGI scope, typed errors that decide ack / nak / terminate."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgpack
import pytest

from sift_server.cluster import worker as worker_module
from sift_server.core.serve import Call, Reply
from sift_server.core.state import ServerState
from sift_server.errors import InvalidInput, RequestCancelled, ShuttingDown, SiftError
from tests.api.inprocess import ENCODE, Client
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

JSON = [("Content-Type", "application/json"), ("Accept", "application/json")]


async def _call(state: ServerState, path: str, body: bytes, headers: Any = JSON, deadline: float = float("inf")) -> Any:
    return await worker_module.call_core(state, path, headers, body, ingress=None, deadline=deadline)


async def test_a_message_runs_through_the_core_without_an_app(app_client: Client) -> None:
    _, state = app_client
    headers = [("Content-Type", "application/json"), ("X-Request-ID", "rid-7")]  # no Accept: msgpack
    reply = await _call(state, ENCODE, b'{"items": [{"text": "hello"}]}', headers)
    assert reply.status == 200
    named = dict(reply.headers)
    assert named["content-type"] == "application/msgpack" and named["x-request-id"] == "rid-7"
    assert all(name == name.lower() for name, _ in reply.headers)
    assert len(msgpack.unpackb(reply.body)["items"]) == 1


async def test_domain_errors_come_back_in_the_endpoints_envelope(app_client: Client) -> None:
    _, state = app_client
    bad = await _call(state, ENCODE, b"{")
    assert bad.status == 400 and ("x-sie-error-code", "INVALID_INPUT") in bad.headers
    assert bad.body.startswith(b'{"detail":{"code":"INVALID_INPUT"')
    missing = await _call(state, "/v1/encode/no/such-model", b'{"items": [{"text": "x"}]}')
    assert missing.status == 404 and b'"MODEL_NOT_FOUND"' in missing.body
    openai = await _call(state, "/v1/embeddings", b'{"model": "no/such-model", "input": "x"}')
    assert openai.status == 404 and b'"error":' in openai.body and b'"model_not_found"' in openai.body
    fine = await _call(state, "/v1/embeddings", f'{{"model": "{TINY_EMBEDDER}", "input": "x"}}'.encode())
    assert fine.status == 200 and b'"object":"list"' in fine.body
    nowhere = await _call(state, "/v1/nowhere", b"{}")
    assert nowhere.status == 404 and b'"NOT_FOUND"' in nowhere.body


@pytest.mark.parametrize("error", [RequestCancelled("gone"), ShuttingDown("stopping")])
async def test_cancelled_and_shutting_down_stay_typed_for_the_worker(
    app_client: Client, monkeypatch: pytest.MonkeyPatch, error: SiftError
) -> None:
    """The worker terminates a cancelled message and hands back one its engine
    refused while stopping: both reach it as exceptions, not as 499/503 replies."""
    _, state = app_client

    async def refuse(state: ServerState, call: Call) -> Reply:
        raise error

    monkeypatch.setattr(worker_module, "handle", refuse)
    with pytest.raises(type(error)):
        await _call(state, ENCODE, b'{"items": [{"text": "x"}]}')


async def test_other_errors_are_answered(app_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    _, state = app_client

    async def refuse(state: ServerState, call: Call) -> Reply:
        raise InvalidInput("no")

    monkeypatch.setattr(worker_module, "handle", refuse)
    reply = await _call(state, ENCODE, b"{}")
    assert reply.status == 400 and ("x-sie-error-code", "INVALID_INPUT") in reply.headers


async def test_nobody_waits_past_the_messages_deadline(app_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The core's disconnect watch fires at the message's deadline, not before."""
    _, state = app_client
    watched: list[bool] = []

    async def watch(state: ServerState, call: Call) -> Reply:
        assert call.disconnected is not None
        try:
            await asyncio.wait_for(call.disconnected(), 0.2)
            watched.append(True)
        except TimeoutError:
            watched.append(False)
        return Reply(200, {}, b"")

    monkeypatch.setattr(worker_module, "handle", watch)
    await _call(state, ENCODE, b"{}", deadline=time.time() - 1)
    await _call(state, ENCODE, b"{}", deadline=time.time() + 60)
    assert watched == [True, False]
