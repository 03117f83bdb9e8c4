"""The gateway's view of live workers: heartbeats heard through a watch, and the
model's consumer on the work stream when no heartbeat is current.

A live worker must never be taken for gone: with 32 clients and a worker
killed, a late heartbeat (or a bucket read that missed an entry,
nats-io/nats.py#842) once turned 1,600+ requests into 503 NO_WORKER while the
other worker answered."""

from __future__ import annotations

import asyncio
import datetime
import time
from dataclasses import dataclass

from sift_server.cluster.gateway_client import Gateway
from sift_server.cluster.liveness import Heartbeats, consumer_has_worker
from sift_server.cluster.subjects import durable_name, heartbeat_key, model_token
from tests.cluster.fakes import bare_gateway

MODEL = "org/model"
TOKEN = model_token(MODEL)


def test_a_heartbeat_counts_for_its_ttl_and_until_deleted() -> None:
    beats = Heartbeats(ttl_s=6.0)
    beats.put(heartbeat_key(MODEL, "w1"), b"{}", now=100.0)
    beats.put(heartbeat_key("org/other", "w2"), b"{}", now=100.0)
    assert beats.live_keys(TOKEN, 105.9) == [heartbeat_key(MODEL, "w1")]
    assert not beats.serves(TOKEN, 106.1)  # expired by age: no message says so
    beats.put(heartbeat_key(MODEL, "w1"), b"{}", now=110.0)
    assert beats.serves(TOKEN, 110.5)
    beats.remove(heartbeat_key(MODEL, "w1"))  # deleted by a worker that left
    assert not beats.serves(TOKEN, 110.5)
    assert beats.value(heartbeat_key(MODEL, "w1")) is None


def test_a_consumer_shows_a_worker_by_a_pull_request_or_a_recent_ack_while_holding() -> None:
    assert consumer_has_worker(num_waiting=1, num_held=0, last_ack_age_s=None, window_s=6.0)
    assert consumer_has_worker(num_waiting=0, num_held=4, last_ack_age_s=2.0, window_s=6.0)
    assert not consumer_has_worker(num_waiting=0, num_held=4, last_ack_age_s=60.0, window_s=6.0)
    assert not consumer_has_worker(num_waiting=0, num_held=4, last_ack_age_s=None, window_s=6.0)
    # Drained and gone: it acked everything it held, just now.
    assert not consumer_has_worker(num_waiting=0, num_held=0, last_ack_age_s=0.5, window_s=6.0)


@dataclass
class _Seq:
    last_active: datetime.datetime | None


@dataclass
class _Info:
    num_waiting: int
    ack_floor: _Seq
    num_ack_pending: int = 0


class FakeStream:
    """consumer_info of one model's consumer (None: the consumer does not exist)."""

    def __init__(self, info: _Info | None) -> None:
        self.info = info
        self.asked: list[tuple[str, str]] = []

    async def consumer_info(self, stream: str, durable: str) -> _Info:
        self.asked.append((stream, durable))
        if self.info is None:
            raise LookupError("consumer not found")
        return self.info


def _gateway(info: _Info | None) -> tuple[Gateway, FakeStream]:
    gateway = bare_gateway(liveness_poll_s=0.5)
    js = FakeStream(info)
    gateway.js = js  # type: ignore[assignment]
    return gateway, js


def _ago(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)


def test_a_live_heartbeat_needs_no_consumer_read() -> None:
    gateway, js = _gateway(None)
    gateway.heartbeats.put(heartbeat_key(MODEL, "w1"), b"{}", time.monotonic())
    assert asyncio.run(gateway.has_worker(MODEL))
    assert js.asked == []


def test_no_heartbeat_but_a_worker_pulling_queues_rather_than_refuses() -> None:
    gateway, js = _gateway(_Info(num_waiting=3, ack_floor=_Seq(None)))
    assert asyncio.run(gateway.has_worker(MODEL))
    assert js.asked == [("SIFT_WORK", durable_name(MODEL))]


def test_no_heartbeat_but_a_busy_worker_acking_queues_rather_than_refuses() -> None:
    gateway, _ = _gateway(_Info(num_waiting=0, ack_floor=_Seq(_ago(1.0)), num_ack_pending=8))
    assert asyncio.run(gateway.has_worker(MODEL))


def test_no_heartbeat_and_an_idle_consumer_means_no_worker() -> None:
    gateway, _ = _gateway(_Info(num_waiting=0, ack_floor=_Seq(_ago(120.0)), num_ack_pending=8))
    assert not asyncio.run(gateway.has_worker(MODEL))


def test_no_consumer_means_no_worker_and_the_answer_is_reused_briefly() -> None:
    gateway, js = _gateway(None)

    async def twice() -> tuple[bool, bool]:
        return await gateway.has_worker(MODEL), await gateway.has_worker(MODEL)

    assert asyncio.run(twice()) == (False, False)
    assert len(js.asked) == 1  # one read per liveness_poll_s, not one per request
