"""The pure retry policy (no IO)."""

from __future__ import annotations

import pytest

from sift_sdk import RetryPolicy
from sift_sdk._retry import RetryBudget, parse_retry_after


def policy(rand: float = 0.0) -> RetryPolicy:
    return RetryPolicy(base_delay_s=1.0, max_delay_s=8.0, jitter_fraction=0.25, rand=lambda: rand)


@pytest.mark.parametrize("code", ["MODEL_LOADING", "QUEUE_FULL", "RESOURCE_EXHAUSTED"])
def test_retryable_503_codes_honour_retry_after(code: str) -> None:
    assert policy().decide(503, code, 2.5, attempt=0, remaining_s=100) == 2.5


def test_429_is_retried_whatever_the_code() -> None:
    assert policy().decide(429, None, 0.5, attempt=3, remaining_s=100) == 0.5


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "INVALID_INPUT"),
        (400, "INPUT_TOO_LONG"),
        (401, None),
        (404, "MODEL_NOT_FOUND"),
        (500, "INFERENCE_ERROR"),
        (502, "MODEL_LOAD_FAILED"),
        (503, "MODEL_NOT_LOADED"),
        (503, "LORA_LOADING"),
        (503, None),
        (504, None),
        (200, "MODEL_LOADING"),
        (502, "MODEL_LOADING"),
    ],
)
def test_terminal_statuses_are_never_retried(status: int, code: str | None) -> None:
    assert policy().decide(status, code, 1.0, attempt=0, remaining_s=100) is None


def test_exponential_backoff_without_retry_after() -> None:
    delays = [policy().decide(503, "QUEUE_FULL", None, attempt=n, remaining_s=100) for n in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_jitter_only_shortens_the_delay() -> None:
    assert policy(rand=0.999999).backoff(0) == pytest.approx(0.75, abs=1e-5)
    assert policy(rand=0.5).backoff(2) == pytest.approx(4.0 * 0.875)


def test_retry_after_zero_means_now() -> None:
    assert policy().decide(503, "MODEL_LOADING", 0.0, attempt=0, remaining_s=10) == 0.0


def test_delay_is_capped_at_the_remaining_deadline() -> None:
    assert policy().decide(503, "MODEL_LOADING", 5.0, attempt=0, remaining_s=2.0) == 2.0


def test_gives_up_once_the_deadline_has_passed() -> None:
    assert policy().decide(503, "MODEL_LOADING", 1.0, attempt=0, remaining_s=0.0) is None
    assert policy().decide_transport(attempt=0, remaining_s=-1.0) is None


def test_transport_backoff() -> None:
    assert policy().decide_transport(attempt=2, remaining_s=100) == 4.0


def test_budget_counts_retries_and_tracks_the_clock() -> None:
    now = [0.0]
    budget = RetryBudget(policy(), deadline_s=3.0, clock=lambda: now[0])
    assert budget.after_status(503, "QUEUE_FULL", 2.0) == 2.0
    now[0] = 2.0
    assert budget.after_status(503, "QUEUE_FULL", 2.0) == 1.0
    now[0] = 3.0
    assert budget.after_status(503, "QUEUE_FULL", 2.0) is None
    assert budget.retries == 2
    assert budget.after_status(404, "MODEL_NOT_FOUND", None) is None
    assert budget.retries == 2


def test_budget_transport_retries_use_backoff() -> None:
    budget = RetryBudget(policy(), deadline_s=100.0, clock=lambda: 0.0)
    assert [budget.after_transport_error() for _ in range(3)] == [1.0, 2.0, 4.0]
    assert budget.retries == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("5", 5.0),
        (" 1.25 ", 1.25),
        ("0", 0.0),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
    ],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date() -> None:
    # Wed, 21 Oct 2015 07:28:00 GMT == 1445412480
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
