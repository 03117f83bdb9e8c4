"""No request stalls the event loop (issue 10): inputs are cut to what the model
reads before tokenizing, instructions count in the per-item limit, large
preparation runs off the loop, and slow or vanishing clients are bounded."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sift_server.adapters.base import Prepared, TaskInput
from sift_server.errors import InvalidInput
from sift_server.service.common import CHARS_PER_TOKEN_BOUND, Limits, item_texts, shared_bytes
from sift_server.wire.schemas import Item
from tests.api.inprocess import ENCODE, Client, MakeClient, assert_native
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

JSON = {"Accept": "application/json"}


class PrepareSpy:
    """Wraps the adapter's prepare: records the task and the thread it ran on,
    and can hold it until released."""

    def __init__(self, state: Any, *, hold: bool = False) -> None:
        record = state.registry.records[TINY_EMBEDDER]
        self.adapter = record.adapter
        self.inner = self.adapter.prepare
        self.tasks: list[TaskInput] = []
        self.threads: list[threading.Thread] = []
        self.hold = hold
        self.started = threading.Event()
        self.release = threading.Event()
        self.released_in_time: bool | None = None
        self.adapter.prepare = self

    def __call__(self, task: TaskInput) -> Prepared:
        self.tasks.append(task)
        self.threads.append(threading.current_thread())
        if self.hold:
            self.started.set()
            # Bounded: if prepare ran on the loop, healthz could never release it.
            self.released_in_time = self.release.wait(20)
        result: Prepared = self.inner(task)
        return result

    def restore(self) -> None:
        self.adapter.prepare = self.inner


async def test_instruction_counts_in_the_per_item_limit(make_client: MakeClient) -> None:
    client, _ = await make_client(max_item_bytes=1000)
    body = {"items": [{"text": "x" * 10}], "params": {"instruction": "i" * 995}}
    response = await client.post(ENCODE, json=body, headers=JSON)
    assert_native(response, 400, "INVALID_INPUT")
    assert "instruction" in response.json()["detail"]["message"]


def test_shared_strings_count_in_every_items_limit() -> None:
    # Score reads the query with every candidate; extract reads the labels with every text.
    limits = Limits(max_item_bytes=1000, max_items=10)
    items = [Item(text="d" * 600)]
    assert item_texts(items, limits, shared_bytes=shared_bytes("i" * 100)) == ["d" * 600]
    with pytest.raises(InvalidInput, match="instruction/query/labels"):
        item_texts(items, limits, shared_bytes=shared_bytes("q" * 300, *["label"] * 30))


async def test_long_texts_and_instructions_are_cut_before_tokenizing(app_client: Client) -> None:
    client, state = app_client
    spy = PrepareSpy(state)
    max_tokens = state.registry.records[TINY_EMBEDDER].adapter.info.max_sequence_length
    cap = max_tokens * CHARS_PER_TOKEN_BOUND
    body = {"items": [{"text": "word " * 100_000}, {"text": "short"}], "params": {"instruction": "do " * 100_000}}
    response = await client.post(ENCODE, json=body, headers=JSON)
    spy.restore()
    assert response.status_code == 200, response.text
    (task,) = spy.tasks
    assert [len(t) for t in task.texts] == [cap, 5]  # type: ignore[union-attr]
    assert task.instruction is not None and len(task.instruction) == cap


async def test_overlong_text_with_overflow_error_is_input_too_long_without_tokenizing(app_client: Client) -> None:
    client, state = app_client
    spy = PrepareSpy(state)
    body = {"items": [{"text": "word " * 100_000}], "params": {"options": {"overflow_policy": "error"}}}
    response = await client.post(ENCODE, json=body, headers=JSON)
    spy.restore()
    assert_native(response, 400, "INPUT_TOO_LONG")
    assert spy.tasks == []


async def test_large_preparation_runs_off_the_event_loop_small_stays_on_it(app_client: Client) -> None:
    client, state = app_client
    spy = PrepareSpy(state)
    loop_thread = threading.current_thread()
    small = await client.post(ENCODE, json={"items": [{"text": "hello"}]}, headers=JSON)
    large = await client.post(ENCODE, json={"items": [{"text": "word " * 2000}] * 64}, headers=JSON)
    spy.restore()
    assert small.status_code == 200 and large.status_code == 200
    assert spy.threads[0] is loop_thread
    assert spy.threads[1] is not loop_thread


async def test_a_few_thousand_characters_are_prepared_off_the_loop(app_client: Client) -> None:
    # A megabyte of text is cut to max_sequence_length x 32 characters (8,192 for a
    # 256-token model); tokenizing that took 8-11 ms on the loop (issue 10 probe).
    # The tiny model cuts at 2,048: three texts that long.
    client, state = app_client
    spy = PrepareSpy(state)
    response = await client.post(ENCODE, json={"items": [{"text": "word " * 400}] * 3}, headers=JSON)
    spy.restore()
    assert response.status_code == 200
    assert spy.threads[0] is not threading.current_thread()


async def test_healthz_answers_while_a_large_request_is_being_prepared(app_client: Client) -> None:
    client, state = app_client
    spy = PrepareSpy(state, hold=True)
    big = asyncio.ensure_future(client.post(ENCODE, json={"items": [{"text": "word " * 2000}] * 64}, headers=JSON))
    try:
        assert await asyncio.to_thread(spy.started.wait, 20)
        health = await client.get("/healthz")
        assert health.status_code == 200 and health.text == "ok"
        spy.release.set()
        assert (await big).status_code == 200
    finally:
        spy.release.set()
        spy.restore()
    # Healthz was answered while prepare was still held: it did not block the loop.
    assert spy.released_in_time is True


# ---- slow and vanishing clients ---------------------------------------------------------


async def test_a_stalled_body_gets_a_408_and_the_connection_closed(make_client: MakeClient) -> None:
    client, _ = await make_client(body_timeout_s=0.2)
    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b'{"items": [{"text": "'
        await never.wait()
        yield b'"}]}'

    for route in (ENCODE, "/v1/embeddings"):
        response = await client.post(route, content=stalled(), headers={"Content-Type": "application/json"})
        assert response.status_code == 408, response.text
        assert response.headers["X-SIE-Error-Code"] == "REQUEST_TIMEOUT"
        assert response.headers["Connection"] == "close"


async def test_a_client_that_hangs_up_mid_body_is_a_499_with_one_log_line(
    app_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    _, state = app_client
    app = state_app(app_client)
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"items": [{"te', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": ENCODE,
        "raw_path": ENCODE.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    with caplog.at_level(logging.INFO):
        await app(scope, receive, send)
    disconnect_logs = [r for r in caplog.records if "disconnected mid-body" in r.getMessage()]
    assert len(disconnect_logs) == 1 and disconnect_logs[0].exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    metrics = state.metrics.requests.labels(TINY_EMBEDDER, "encode", "499")._value.get()
    assert metrics == 1


def state_app(app_client: Client) -> Any:
    client, _ = app_client
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app
