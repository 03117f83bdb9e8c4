"""The queue path's timing headers (pure functions)."""

from __future__ import annotations

from sift_server.cluster.hops import GATEWAY_TIME, QUEUE_TIME, WORKER_TIME, gateway_header, stamp, worker_headers


def test_worker_reports_queue_and_worker_time_in_ms() -> None:
    headers = dict(worker_headers(stamp(100.0), 100.0025, 100.0125))
    assert headers == {QUEUE_TIME: "2.50", WORKER_TIME: "10.00"}


def test_no_queue_time_without_a_readable_stamp() -> None:
    assert dict(worker_headers(None, 1.0, 1.5)) == {WORKER_TIME: "500.00"}
    assert dict(worker_headers("soon", 1.0, 1.5)) == {WORKER_TIME: "500.00"}


def test_gateway_time() -> None:
    assert gateway_header(2.0, 2.001) == (GATEWAY_TIME, "1.00")
