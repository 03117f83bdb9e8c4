"""The backlog figures and the held request's 503, decided from explicit values."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.errors import NotFoundError

from sift_server.cluster.backlog import Backlog, BacklogWatch, backlog_of, next_poll_in
from sift_server.cluster.gateway_client import RETRY_BUSY_S, RETRY_WAKING_S, held_too_long
from sift_server.cluster.jetstream import ensure_consumers_exist
from sift_server.cluster.subjects import durable_name
from sift_server.errors import QueueTimeout
from tests.cluster.fakes import bare_gateway


def test_the_backlog_is_what_waits_plus_what_is_held_and_the_oldest_age() -> None:
    assert backlog_of(3, 2, oldest_stored_at=100.0, now=112.5) == Backlog(3, 2, 12.5)
    assert backlog_of(3, 2, 100.0, 112.5).total == 5


def test_an_empty_backlog_has_no_age_and_a_clock_behind_the_server_none_negative() -> None:
    assert backlog_of(0, 0, oldest_stored_at=100.0, now=500.0).oldest_age_s == 0.0  # a stale read
    assert backlog_of(1, 0, oldest_stored_at=None, now=500.0) == Backlog(1, 0, 0.0)
    assert backlog_of(1, 0, oldest_stored_at=501.0, now=500.0).oldest_age_s == 0.0


def test_reads_are_one_per_interval_and_a_slow_read_is_not_followed_at_once() -> None:
    assert next_poll_in(2.0, took_s=0.1) == pytest.approx(1.9)
    assert next_poll_in(2.0, took_s=5.0) == 0.5


def test_the_gauges_show_the_latest_backlog_of_each_model() -> None:
    gateway = bare_gateway()
    watch: BacklogWatch = gateway.backlog
    watch.show("org/a", Backlog(4, 1, 7.0))
    watch.show("org/b", Backlog(0, 0, 0.0))
    registry = gateway.state.metrics.registry
    assert registry.get_sample_value("sift_gateway_backlog_pending", {"model": "org/a"}) == 4
    assert registry.get_sample_value("sift_gateway_backlog_in_flight", {"model": "org/a"}) == 1
    assert registry.get_sample_value("sift_gateway_backlog_oldest_age_seconds", {"model": "org/a"}) == 7
    assert registry.get_sample_value("sift_gateway_backlog_pending", {"model": "org/b"}) == 0


def test_a_held_request_that_timed_out_says_whether_a_worker_is_running() -> None:
    busy = held_too_long("org/a", 60.0, worker_live=True)
    waking = held_too_long("org/a", 60.0, worker_live=False)
    assert isinstance(busy, QueueTimeout) and busy.status == 503 and busy.code == "QUEUE_FULL"
    assert (busy.retry_after, waking.retry_after) == (RETRY_BUSY_S, RETRY_WAKING_S)
    assert "none is running" in waking.message and "none is running" not in busy.message


class FakeConsumers:
    """consumer_info and add_consumer over a set of existing durable names."""

    def __init__(self, existing: set[str]) -> None:
        self.existing = existing
        self.added: list[str] = []

    async def consumer_info(self, stream: str, durable: str) -> object:
        if durable not in self.existing:
            raise NotFoundError()
        return object()

    async def add_consumer(self, stream: str, config: object) -> object:
        self.added.append(config.durable_name)  # type: ignore[attr-defined]
        return object()


def test_the_gateway_creates_missing_consumers_and_leaves_existing_ones_alone() -> None:
    js = FakeConsumers({durable_name("org/served")})
    asyncio.run(ensure_consumers_exist(js, ["org/served", "org/cold"]))  # type: ignore[arg-type]
    assert js.added == [durable_name("org/cold")]  # the served one keeps its workers' ack wait
