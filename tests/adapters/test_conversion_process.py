"""adapters/conversion_process.py: a child process with a deadline per call, killed past it
and started again for the next call (a tiny child: tests/fixtures/echo_child.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sift_server.adapters.conversion_process import ConversionCrashed, ConversionProcess, ConversionTimeout

CHILD = "tests.fixtures.echo_child"


@pytest.fixture
def process() -> Iterator[ConversionProcess]:
    started = ConversionProcess(CHILD, {}, start_timeout_s=60)
    yield started
    started.stop()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A killed child that its parent reaped is gone; one not yet reaped is a zombie.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] == "Z"


def test_answers_come_back_from_one_child(process: ConversionProcess) -> None:
    first = process.call({"n": 1}, timeout_s=30)
    second = process.call({"n": 2}, timeout_s=30)
    assert first[0] == "ok" and first[1]["n"] == 1 and second[1]["n"] == 2
    assert first[1]["pid"] == second[1]["pid"] == process.pid != os.getpid()
    assert process.starts == 1


def test_a_call_past_its_deadline_kills_the_child_and_the_next_starts_another(process: ConversionProcess) -> None:
    pid = process.call({}, timeout_s=30)[1]["pid"]
    with pytest.raises(ConversionTimeout, match=r"longer than 0\.2 s"):
        process.call({"sleep": 30}, timeout_s=0.2)
    assert _gone(pid)
    status, answer = process.call({"n": 3}, timeout_s=30)
    assert (status, answer["n"]) == ("ok", 3) and answer["pid"] != pid
    assert process.starts == 2


def test_a_child_that_dies_is_an_error_of_that_call_only(process: ConversionProcess) -> None:
    with pytest.raises(ConversionCrashed, match="exit code 9"):
        process.call({"exit": 9}, timeout_s=30)
    assert process.call({"n": 4}, timeout_s=30)[1]["n"] == 4


def test_a_child_that_cannot_start_says_why() -> None:
    failing = ConversionProcess(CHILD, {"fail": True}, start_timeout_s=60)
    with pytest.raises(RuntimeError, match="failed to start: no library here"):
        failing.start()
