"""``sift bench floor``: the bare ASGI server that sets the floor under a request's
cost. On a fake adapter: its answers, its continuous batching (what queues while a
forward runs goes into the next one, together), readiness and its command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from sift_bench import cli as bench_cli
from sift_bench.tools.floor import App, Batcher, Message, make_app
from sift_server.adapters.base import EncodeTask
from sift_server.forward_io import Part, Prepared


class FakeAdapter:
    """Each text's vector is [its length, its forward's number]; the first forward
    waits until ``release`` is set, so that others can queue behind it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.forwards: list[list[str]] = []

    def prepare(self, task: EncodeTask) -> Prepared:
        return Prepared(item_costs=[len(t) for t in task.texts], compat_key=None, payload=list(task.texts))

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        number = len(self.forwards)
        self.forwards.append([text for part in parts for text in part.prepared.payload])
        self.started.set()
        self.release.wait(5)
        return [[np.array([len(text), number], dtype=np.float32) for text in part.prepared.payload] for part in parts]


async def call(app: App, method: str, body: bytes = b"") -> tuple[int, bytes]:
    sent: list[Message] = []
    messages: list[Message] = [{"type": "http.request", "body": body[:3], "more_body": True},
                               {"type": "http.request", "body": body[3:], "more_body": False}]  # fmt: skip

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": "/"}, receive, send)
    return int(sent[0]["status"]), b"".join(m.get("body", b"") for m in sent[1:])


def encode_body(*texts: str) -> bytes:
    return json.dumps({"items": [{"text": t} for t in texts]}).encode()


async def test_requests_queued_behind_a_forward_share_the_next_one() -> None:
    adapter = FakeAdapter()
    with ThreadPoolExecutor(max_workers=1) as executor:
        batcher = Batcher(adapter, executor)
        app = make_app(adapter, batcher)
        first = asyncio.create_task(call(app, "POST", encode_body("one")))
        await asyncio.to_thread(adapter.started.wait, 5)
        later = [asyncio.create_task(call(app, "POST", encode_body(t))) for t in ("three", "fourty")]
        await asyncio.sleep(0.01)  # both queued while the first forward still runs
        adapter.release.set()
        answers = [await first, *[await task for task in later]]
    assert adapter.forwards == [["one"], ["three", "fourty"]]
    assert batcher.forwards == 2
    assert [status for status, _ in answers] == [200, 200, 200]
    vectors = [json.loads(content)["items"][0]["dense"] for _, content in answers]
    assert vectors == [[3.0, 0.0], [5.0, 1.0], [6.0, 1.0]]


async def test_a_request_of_several_texts_gets_one_vector_each() -> None:
    adapter = FakeAdapter()
    adapter.release.set()
    with ThreadPoolExecutor(max_workers=1) as executor:
        status, content = await call(make_app(adapter, Batcher(adapter, executor)), "POST", encode_body("ab", "abcd"))
    assert status == 200
    assert [item["dense"] for item in json.loads(content)["items"]] == [[2.0, 0.0], [4.0, 0.0]]


async def test_a_failed_forward_fails_its_requests_and_the_next_forward_still_runs() -> None:
    class Failing(FakeAdapter):
        def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
            if not self.forwards:
                self.forwards.append(["failed"])
                raise RuntimeError("boom")
            return super().forward(parts)

    adapter = Failing()
    adapter.release.set()
    with ThreadPoolExecutor(max_workers=1) as executor:
        app = make_app(adapter, Batcher(adapter, executor))
        try:
            await call(app, "POST", encode_body("x"))
        except RuntimeError as exc:
            assert str(exc) == "boom"
        else:
            raise AssertionError("the failed forward's request did not fail")
        status, content = await call(app, "POST", encode_body("xy"))
    assert status == 200
    assert json.loads(content)["items"][0]["dense"] == [2.0, 1.0]


async def test_get_answers_readiness_without_a_forward() -> None:
    adapter = FakeAdapter()
    with ThreadPoolExecutor(max_workers=1) as executor:
        assert await call(make_app(adapter, Batcher(adapter, executor)), "GET") == (200, b"ok")
    assert adapter.forwards == []


def test_the_floor_is_a_bench_subcommand() -> None:
    parser = argparse.ArgumentParser(prog="sift bench")
    bench_cli.add_arguments(parser)
    bench_cli.add_subcommands(parser)
    args = parser.parse_args(["floor", "--catalog", "models", "--model", "tiny", "--port", "8123"])
    assert (args.bench_command, args.model, args.port, [str(c) for c in args.catalog]) == (
        "floor",
        "tiny",
        8123,
        ["models"],
    )
