"""The gateway's publish and wait, against a fake NATS connection (no processes):
the stream's ack is not awaited before the reply, and a refusal, a missing
stream or a missing ack still fails the request with 503 QUEUE_FULL. After a
break in the connection, a request whose message the stream no longer holds is
published again (cluster.resume), and one it holds is waited for."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from sift_server.cluster.codec import WorkReply, WorkRequest, pack_reply, unpack_request
from sift_server.cluster.gateway_client import Gateway
from sift_server.cluster.subjects import (
    ACK_PREFIX,
    DEADLINE_HEADER,
    MSG_ID_HEADER,
    REPLY_HEADER,
    heartbeat_key,
    work_subject,
)
from sift_server.errors import BodyTooLarge, QueueFull, QueueTimeout, ShuttingDown
from tests.cluster.fakes import bare_gateway

MODEL = "org/model"
WORK = WorkRequest("/v1/encode/org/model", [("content-type", "application/json")], b'{"items": []}')
REPLY = WorkReply(200, [("content-type", "application/json")], b"{}")
STORED = json.dumps({"stream": "SIFT_WORK", "seq": 7}).encode()
FULL = json.dumps({"error": {"code": 503, "err_code": 10077, "description": "maximum messages exceeded"}}).encode()


class FakeNats:
    """Records publishes; the test answers them by calling the gateway's callbacks."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes, str, dict[str, str]]] = []
        self.sent = asyncio.Event()
        self.is_reconnecting = self.is_closed = self.is_draining = False
        self.max_payload = 1_048_576  # what a nats-server's INFO says by default

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "", headers: Any = None) -> None:
        self.published.append((subject, payload, reply, dict(headers or {})))
        self.sent.set()


def _gateway(**options: Any) -> tuple[Gateway, FakeNats]:
    gateway = bare_gateway(**options)
    nc = FakeNats()
    gateway.nc = nc  # type: ignore[assignment]
    gateway.js = object()  # type: ignore[assignment]
    gateway.heartbeats.put(heartbeat_key(MODEL, "w1"), b"{}", time.monotonic())
    return gateway, nc


def _msg(subject: str, data: bytes = b"", headers: dict[str, str] | None = None) -> Msg:
    return Msg(_client=None, subject=subject, data=data, headers=headers)  # type: ignore[arg-type]


async def _published(gateway: Gateway, nc: FakeNats) -> tuple[str, str, str]:
    """Start nothing; wait for the call's publish: (its ack subject, reply subject, request id)."""
    await asyncio.wait_for(nc.sent.wait(), 5)
    subject, payload, ack, headers = nc.published[-1]
    assert subject == work_subject(MODEL)
    assert unpack_request(payload) == WORK
    assert ack.startswith(f"{ACK_PREFIX}.{gateway.gateway_id}.")
    assert headers[REPLY_HEADER].rsplit(".", 1)[1] == headers[MSG_ID_HEADER] == ack.rsplit(".", 1)[1]
    assert float(headers[DEADLINE_HEADER]) > 0
    return ack, headers[REPLY_HEADER], headers[MSG_ID_HEADER]


def _refused(gateway: Gateway) -> float:
    return gateway.refused._value.get()  # type: ignore[attr-defined,no-any-return]


def _duplicates(gateway: Gateway) -> float:
    return gateway.duplicates._value.get()  # type: ignore[attr-defined,no-any-return]


def test_the_reply_is_not_held_behind_the_ack() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, reply_to, _ = await _published(gateway, nc)
        # The reply overtakes the ack: the call answers at once.
        await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))
        assert await asyncio.wait_for(call, 1) == REPLY
        await gateway._on_ack(_msg(ack, STORED))  # late, harmless
        assert not gateway.pending and _refused(gateway) == 0 and _duplicates(gateway) == 0

    asyncio.run(run())


def test_a_request_over_the_servers_max_payload_is_a_413_before_publishing() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        nc.max_payload = 100
        big = WorkRequest(WORK.path, WORK.headers, b"x" * 200)
        with pytest.raises(BodyTooLarge, match="at most 100 bytes") as raised:
            await gateway.call(MODEL, big)
        assert raised.value.status == 413
        assert not nc.published and not gateway.pending

    asyncio.run(run())


def test_a_refused_publish_is_queue_full_while_waiting_for_the_reply() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, _, _ = await _published(gateway, nc)
        await gateway._on_ack(_msg(ack, FULL))
        with pytest.raises(QueueFull, match="maximum messages exceeded") as raised:
            await asyncio.wait_for(call, 1)
        assert not isinstance(raised.value, QueueTimeout)
        assert _refused(gateway) == 1 and not gateway.pending

    asyncio.run(run())


def test_no_stream_is_queue_full() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, _, _ = await _published(gateway, nc)
        await gateway._on_ack(_msg(ack, b"", {"Status": "503"}))
        with pytest.raises(QueueFull, match="unavailable"):
            await asyncio.wait_for(call, 1)
        assert _refused(gateway) == 0

    asyncio.run(run())


def test_no_ack_in_time_is_queue_full() -> None:
    async def run() -> None:
        gateway, nc = _gateway(publish_timeout_s=0.05)
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        await _published(gateway, nc)
        with pytest.raises(QueueFull, match="no ack in time"):
            await asyncio.wait_for(call, 5)
        assert not gateway.pending

    asyncio.run(run())


def test_an_acknowledged_request_waits_past_the_publish_timeout() -> None:
    async def run() -> None:
        gateway, nc = _gateway(publish_timeout_s=0.05)
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, reply_to, _ = await _published(gateway, nc)
        await gateway._on_ack(_msg(ack, STORED))
        await asyncio.sleep(0.15)  # three publish timeouts: a long forward
        assert not call.done()
        await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))
        assert await asyncio.wait_for(call, 1) == REPLY

    asyncio.run(run())


def test_no_reply_in_time_is_queue_timeout_and_a_late_reply_is_dropped() -> None:
    async def run() -> None:
        gateway, nc = _gateway(request_timeout_s=0.05)
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, reply_to, _ = await _published(gateway, nc)
        await gateway._on_ack(_msg(ack, STORED))
        with pytest.raises(QueueTimeout):
            await asyncio.wait_for(call, 5)
        await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))
        assert _duplicates(gateway) == 1

    asyncio.run(run())


def test_a_drain_relays_replies_in_the_grace_period_and_answers_the_rest_shutting_down() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        answered = asyncio.ensure_future(gateway.call(MODEL, WORK))
        _, answered_reply, _ = await _published(gateway, nc)
        nc.sent.clear()
        stuck = asyncio.ensure_future(gateway.call(MODEL, WORK))
        await _published(gateway, nc)
        draining = asyncio.ensure_future(gateway.drain(0.3))
        await asyncio.sleep(0.05)
        await gateway._on_reply(_msg(answered_reply, pack_reply(REPLY)))  # within the grace period
        assert await asyncio.wait_for(answered, 1) == REPLY
        await asyncio.wait_for(draining, 2)
        with pytest.raises(ShuttingDown):
            await asyncio.wait_for(stuck, 1)
        assert not gateway.pending

    asyncio.run(run())


def test_request_ids_differ() -> None:
    async def run() -> set[str]:
        gateway, nc = _gateway()
        ids = set()
        for _ in range(3):
            nc.sent.clear()
            call = asyncio.ensure_future(gateway.call(MODEL, WORK))
            _, reply_to, request_id = await _published(gateway, nc)
            await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))
            await call
            ids.add(request_id)
        return ids

    assert len(asyncio.run(run())) == 3


def test_only_the_routes_headers_are_forwarded_with_the_request_id() -> None:
    from sift_server.api.work import scope_headers
    from sift_server.cluster.gateway import _forwarded
    from sift_server.core.endpoints import ENCODE
    from sift_server.core.serve import Call

    scope = {
        "headers": [
            (b"content-type", b"application/json"),
            (b"authorization", b"Bearer s3cret"),
            (b"x-request-id", b"from-the-client"),
            (b"accept", b"application/msgpack"),
            (b"user-agent", b"t\xe9st"),
        ],
    }
    call = Call(ENCODE, "org/model", scope_headers(scope), b"")
    assert sorted(_forwarded(call, "rid-1")[:-1]) == [
        ("accept", "application/msgpack"),
        ("content-type", "application/json"),
        ("user-agent", "t\xe9st"),
    ]
    assert _forwarded(call, "rid-1")[-1] == ("x-request-id", "rid-1")


class FakeStream:
    """The stream's messages by sequence, as ``js.get_msg`` answers for them."""

    def __init__(self, held: dict[int, str]) -> None:
        self.held = held  # seq -> the message id stored there

    async def get_msg(self, stream: str, seq: int) -> Any:
        if seq not in self.held:
            raise NotFoundError
        return Msg(_client=None, subject="x", headers={MSG_ID_HEADER: self.held[seq]})  # type: ignore[arg-type]


async def _break_and_resume(gateway: Gateway, nc: FakeNats, held: dict[int, str]) -> None:
    gateway.js = FakeStream(held)  # type: ignore[assignment]
    nc.sent.clear()
    await gateway._on_disconnected()
    await gateway._on_reconnected()
    assert gateway._resuming is not None
    await asyncio.wait_for(gateway._resuming, 2)


def _republished(gateway: Gateway) -> float:
    return gateway.republished._value.get()  # type: ignore[attr-defined,no-any-return]


def test_after_a_break_a_request_gone_from_the_stream_is_published_again_and_answered_once() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, reply_to, request_id = await _published(gateway, nc)
        await gateway._on_ack(_msg(ack, STORED))
        # Its worker replied while the gateway was away (the reply went to nobody) and
        # acknowledged it: the stream no longer holds seq 7.
        await _break_and_resume(gateway, nc, held={})
        subject, payload, again_ack, headers = nc.published[-1]
        assert len(nc.published) == 2 and _republished(gateway) == 1
        assert (subject, payload, again_ack) == (work_subject(MODEL), nc.published[0][1], ack)
        assert headers[REPLY_HEADER] == reply_to  # answered to the same waiting request
        assert headers[MSG_ID_HEADER] != request_id  # the stream would drop the old id as a duplicate
        await gateway._on_ack(_msg(ack, json.dumps({"stream": "SIFT_WORK", "seq": 9}).encode()))
        await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))
        assert await asyncio.wait_for(call, 1) == REPLY
        await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))  # the first copy's, if it ran after all
        assert _duplicates(gateway) == 1

    asyncio.run(run())


def test_after_a_break_a_request_the_stream_still_holds_is_waited_for() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, reply_to, request_id = await _published(gateway, nc)
        await gateway._on_ack(_msg(ack, STORED))
        await _break_and_resume(gateway, nc, held={7: request_id})
        assert len(nc.published) == 1 and _republished(gateway) == 0
        await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))
        assert await asyncio.wait_for(call, 1) == REPLY

    asyncio.run(run())


def test_after_a_break_a_stream_recreated_empty_does_not_pass_for_ours() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, _, _ = await _published(gateway, nc)
        await gateway._on_ack(_msg(ack, STORED))
        # A server that lost its store numbers from 1 again: seq 7 is another request.
        await _break_and_resume(gateway, nc, held={7: "someone-else"})
        assert len(nc.published) == 2
        call.cancel()

    asyncio.run(run())


def test_a_publish_unacknowledged_at_the_break_is_published_again_and_no_ack_timer_fires_meanwhile() -> None:
    async def run() -> None:
        gateway, nc = _gateway(publish_timeout_s=0.3)
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        ack, reply_to, _ = await _published(gateway, nc)
        nc.is_reconnecting = True  # the publish (or its ack) sits in a broken connection
        await asyncio.sleep(0.6)  # two publish timeouts
        assert not call.done()
        nc.is_reconnecting = False
        await _break_and_resume(gateway, nc, held={})
        assert len(nc.published) == 2
        await gateway._on_ack(_msg(ack, STORED))
        await gateway._on_reply(_msg(reply_to, pack_reply(REPLY)))
        assert await asyncio.wait_for(call, 1) == REPLY

    asyncio.run(run())


def test_a_request_published_after_the_break_is_left_alone() -> None:
    async def run() -> None:
        gateway, nc = _gateway()
        await gateway._on_disconnected()
        call = asyncio.ensure_future(gateway.call(MODEL, WORK))
        await _published(gateway, nc)  # buffered by the client, sent with the reconnect
        gateway.js = FakeStream({})  # type: ignore[assignment]
        await gateway._on_reconnected()
        assert gateway._resuming is not None
        await asyncio.wait_for(gateway._resuming, 2)
        assert len(nc.published) == 1
        call.cancel()

    asyncio.run(run())
