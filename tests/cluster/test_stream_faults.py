"""A gateway relaying a streamed answer from a worker that misbehaves. The test
stands in for the worker (it takes the message off the model's consumer and
publishes the stream's messages itself, as cluster.streams names them), so each
fault is exact: a missing piece, another run of the same request, a worker that
says the answer broke off. Each ends the client's stream with the answer's
error event and [DONE], never a silent cut, and the runs are cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator

import httpx
import nats
import pytest

from sift_server.cluster.codec import WorkReply, pack_reply
from sift_server.cluster.local import LocalCluster
from sift_server.cluster.streams import (
    CANCEL_HEADER,
    CANCEL_PREFIX,
    END_HEADER,
    ENDED_DONE,
    ENDED_FAILED,
    RUN_HEADER,
    SEQ_HEADER,
    cancel_subject,
)
from sift_server.cluster.subjects import REPLY_HEADER, STREAM, durable_name, work_subject
from sift_server.processes import start_nats
from tests.cluster.conftest import start_cluster
from tests.cluster.sleeper import write_sleeper_entry

MODEL = "test/streamed"
GRACE_S = 2
# A piece is (run, seq, end, body); seq 0 is a head.
Piece = tuple[str, int, str | None, bytes]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("stream-faults")
    write_sleeper_entry(root / "catalog", MODEL, 1)
    # No worker: the test takes the messages itself.
    gateway = ["--catalog", str(root / "catalog"), "--shutdown-grace-s", str(GRACE_S)]
    running = start_cluster(root / "cluster", 0, [], gateway)
    try:
        yield running
    finally:
        running.stop()


def event(n: int) -> bytes:
    return b"data: " + json.dumps({"n": n}).encode() + b"\n\n"


async def relay(
    cluster: LocalCluster, pieces: list[Piece], then: Callable[[], None] | None = None
) -> tuple[list[str], list[str]]:
    """One streamed request through the gateway, answered with ``pieces``: the
    client's data lines and the cancel subjects the gateway published to;
    ``then`` runs after the pieces are sent."""
    nc = await nats.connect(cluster.nats_url)
    cancels: list[str] = []

    async def on_cancel(msg: nats.aio.msg.Msg) -> None:
        cancels.append(msg.subject)

    try:
        await nc.subscribe(f"{CANCEL_PREFIX}.>", cb=on_cancel)
        queue = await nc.jetstream().pull_subscribe(work_subject(MODEL), durable=durable_name(MODEL), stream=STREAM)

        async def client() -> list[str]:
            async with (
                httpx.AsyncClient(timeout=60) as http,
                http.stream("POST", f"{cluster.url}/v1/encode/{MODEL}", json={"items": [{"text": "x"}]}) as response,
            ):
                assert response.status_code == 200
                assert response.headers["content-type"] == "text/event-stream"
                return [line[len("data: ") :] async for line in response.aiter_lines() if line.startswith("data: ")]

        reading = asyncio.ensure_future(client())
        msg = await this_request(queue)
        reply_to = (msg.headers or {})[REPLY_HEADER]
        head = pack_reply(WorkReply(200, [("content-type", "text/event-stream"), ("x-request-id", "rid-1")], b""))
        for run, seq, end, body in pieces:
            headers = {RUN_HEADER: run, SEQ_HEADER: str(seq)}
            if seq == 0:
                headers[CANCEL_HEADER] = cancel_subject(run)
                body = head
            if end is not None:
                headers[END_HEADER] = end
            await nc.publish(reply_to, body, headers=headers)
            await nc.flush()
        if then is not None:
            then()
        lines = await asyncio.wait_for(reading, 30)
        with contextlib.suppress(Exception):  # the connection may be back only now
            await msg.ack()
        await asyncio.sleep(0.3)  # the cancels go out after the client's last line
        return lines, cancels
    finally:
        with contextlib.suppress(ConnectionError):  # a connection the test's restart broke
            await nc.close()


async def this_request(queue: nats.js.JetStreamContext.PullSubscription) -> nats.aio.msg.Msg:
    """The next message delivered for the first time. An earlier test's message
    comes back when its ack was lost (the connection-break test acks while NATS
    restarts); answering it would leave this test's request unanswered."""
    while True:
        (msg,) = await queue.fetch(1, timeout=30)
        if msg.metadata.num_delivered == 1:
            return msg
        await msg.term()


def error_of(lines: list[str]) -> dict[str, object]:
    assert lines[-1] == "[DONE]", lines
    last: dict[str, object] = json.loads(lines[-2])
    return last


def test_a_whole_stream_is_relayed_in_order_and_nothing_cancelled(cluster: LocalCluster) -> None:
    pieces: list[Piece] = [("t.1", 0, None, b""), ("t.1", 1, None, event(1)), ("t.1", 2, None, event(2))]
    lines, cancels = asyncio.run(relay(cluster, [*pieces, ("t.1", 3, ENDED_DONE, b"")]))
    assert [json.loads(line) for line in lines] == [{"n": 1}, {"n": 2}]
    assert cancels == []


def test_a_missing_piece_ends_the_stream_with_the_error_event(cluster: LocalCluster) -> None:
    pieces: list[Piece] = [("t.2", 0, None, b""), ("t.2", 1, None, event(1)), ("t.2", 3, None, event(3))]
    lines, cancels = asyncio.run(relay(cluster, pieces))
    assert json.loads(lines[0]) == {"n": 1}
    error = error_of(lines)
    assert error["request_id"] == "rid-1"
    assert error["error"]["code"] == "INFERENCE_ERROR"  # type: ignore[index]
    assert len(lines) == 3  # nothing after the gap was relayed
    assert cancel_subject("t.2") in cancels


def test_another_run_of_the_request_ends_the_stream_and_both_runs_are_cancelled(cluster: LocalCluster) -> None:
    pieces: list[Piece] = [("t.3", 0, None, b""), ("t.3", 1, None, event(1)), ("t.4", 0, None, b"")]
    lines, cancels = asyncio.run(relay(cluster, pieces))
    assert json.loads(lines[0]) == {"n": 1}
    assert error_of(lines)["error"]["code"] == "INFERENCE_ERROR"  # type: ignore[index]
    assert {cancel_subject("t.3"), cancel_subject("t.4")} <= set(cancels)


def test_a_worker_that_says_the_answer_broke_off_ends_it_with_the_error_event(cluster: LocalCluster) -> None:
    pieces: list[Piece] = [("t.5", 0, None, b""), ("t.5", 1, None, event(1)), ("t.5", 2, ENDED_FAILED, b"")]
    lines, _ = asyncio.run(relay(cluster, pieces))
    assert json.loads(lines[0]) == {"n": 1}
    assert error_of(lines)["error"]["code"] == "INFERENCE_ERROR"  # type: ignore[index]


def test_a_break_in_the_gateways_connection_ends_the_stream_with_the_error_event(cluster: LocalCluster) -> None:
    # What the worker sent during the break went to nobody: the answer cannot be whole.
    def restart() -> None:
        port = int(cluster.nats_url.rsplit(":", 1)[1])
        cluster.nats.stop()
        time.sleep(1.0)
        cluster.nats, _ = start_nats(cluster.folder, port)

    pieces: list[Piece] = [("t.7", 0, None, b""), ("t.7", 1, None, event(1))]
    lines, _ = asyncio.run(relay(cluster, pieces, then=restart))
    assert json.loads(lines[0]) == {"n": 1}
    assert error_of(lines)["error"]["code"] == "INFERENCE_ERROR"  # type: ignore[index]
    assert len(lines) == 3


def test_a_draining_gateway_ends_a_stream_still_running_after_its_grace_period(cluster: LocalCluster) -> None:
    # Last in this module: it stops the gateway.
    pieces: list[Piece] = [("t.6", 0, None, b""), ("t.6", 1, None, event(1))]
    lines, cancels = asyncio.run(
        relay(cluster, pieces, then=lambda: cluster.gateway.process.send_signal(signal.SIGTERM))
    )
    assert json.loads(lines[0]) == {"n": 1}
    assert error_of(lines)["error"]["code"] == "SHUTTING_DOWN"  # type: ignore[index]
    assert cancel_subject("t.6") in cancels
    assert cluster.gateway.process.wait(GRACE_S + 5) is not None
