"""The queue path's timing headers (pure functions), and the setting that turns the stamps on."""

from __future__ import annotations

import pytest

from sift_server.cluster.hops import (
    GATEWAY_TIME,
    QUEUE_TIME,
    WORKER_TIME,
    format_stamps,
    gateway_header,
    parse_stamps,
    stamp,
    worker_headers,
)


def test_worker_reports_queue_and_worker_time_in_ms() -> None:
    headers = dict(worker_headers(stamp(100.0), 100.0025, 100.0125))
    assert headers == {QUEUE_TIME: "2.50", WORKER_TIME: "10.00"}


def test_no_queue_time_without_a_readable_stamp() -> None:
    assert dict(worker_headers(None, 1.0, 1.5)) == {WORKER_TIME: "500.00"}
    assert dict(worker_headers("soon", 1.0, 1.5)) == {WORKER_TIME: "500.00"}


def test_gateway_time() -> None:
    assert gateway_header(2.0, 2.001) == (GATEWAY_TIME, "1.00")


def test_stamps_round_trip_and_join() -> None:
    worker = format_stamps([("w_receive", 10.0000014), ("w_reply", 10.25)])
    gateway = format_stamps([("g_start", 9.5), ("g_answer", 10.5)])
    assert parse_stamps(f"{worker};{gateway}") == {
        "w_receive": 10.000001,
        "w_reply": 10.25,
        "g_start": 9.5,
        "g_answer": 10.5,
    }


def test_unreadable_stamps_are_skipped() -> None:
    assert parse_stamps(None) == {}
    assert parse_stamps("a=1;b=soon;;c") == {"a": 1.0}


def test_stamps_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from sift_server.cli import build_parser
    from sift_server.cluster.cli import worker_setup

    monkeypatch.delenv("SIFT_HOP_STAMPS", raising=False)
    for env, flags, expected in (
        (None, [], False),
        ("0", [], False),
        ("1", [], True),
        ("1", ["--no-hop-stamps"], False),
        (None, ["--hop-stamps"], True),
    ):
        if env is not None:
            monkeypatch.setenv("SIFT_HOP_STAMPS", env)
        setup = worker_setup(build_parser().parse_args(["worker", *flags]))
        assert setup is not None
        assert setup[1].hop_stamps is expected, (env, flags)
