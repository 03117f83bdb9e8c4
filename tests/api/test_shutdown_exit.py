"""The process exits shortly after the grace period even while a forward still
runs in its (non-daemon) executor thread (issue 10, shutdown)."""

from __future__ import annotations

import logging
import threading

import pytest

from sift_server.server import exit_after_drain, hard_exit, lingering_threads


def test_a_running_forward_thread_does_not_hold_the_exit() -> None:
    release = threading.Event()
    forward = threading.Thread(target=release.wait, name="forward-test", daemon=False)
    forward.start()
    exits: list[int] = []
    try:
        assert forward in lingering_threads()
        exit_after_drain(exits.append)
        assert exits == [0]
    finally:
        release.set()
        forward.join()


def test_hard_exit_names_the_threads_it_does_not_wait_for(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    forward = threading.Thread(target=release.wait, name="forward-slow", daemon=False)
    forward.start()
    exits: list[int] = []
    try:
        with caplog.at_level(logging.INFO, logger="sift"):
            hard_exit("grace over", exits.append)
        assert exits == [0]
        assert any("forward-slow" in r.getMessage() for r in caplog.records)
    finally:
        release.set()
        forward.join()
