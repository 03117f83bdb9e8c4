"""Retry policy: pure decisions, no IO.

The clients ask :class:`RetryPolicy` (through a per-call :class:`RetryBudget`) what to do after a
failed attempt and get back either a delay in seconds or ``None`` ("give up, raise"). Time, sleep
and randomness are injected so that the whole ladder is deterministic under test.

What is retried (API.md §1.7, §9.2):

* ``503`` with code ``MODEL_LOADING``, ``QUEUE_FULL`` or ``RESOURCE_EXHAUSTED``, and any ``429``:
  after ``Retry-After`` seconds when the server sent one, otherwise after an exponential backoff
  (``base_delay_s * 2**attempt``, capped at ``max_delay_s``, jittered down by up to
  ``jitter_fraction``).
* Connect-phase transport failures (the request never reached the server): the same backoff.

Everything else (every other 4xx, ``502 MODEL_LOAD_FAILED``, any other 5xx or 503 code, read
timeouts) is terminal. Retries stop once the call's deadline has passed; a delay never runs past it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

__all__ = ["RETRYABLE_503_CODES", "RetryBudget", "RetryPolicy", "parse_retry_after"]

#: 503 codes the server uses for transient conditions (cold model, full queue, GPU OOM).
RETRYABLE_503_CODES = frozenset({"MODEL_LOADING", "QUEUE_FULL", "RESOURCE_EXHAUSTED"})


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header: decimal seconds or an HTTP-date.

    Negative, non-finite or unparsable values give ``None``; ``0`` is kept ("retry now").
    ``now`` (epoch seconds) is only used for the HTTP-date form.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        reference = time.time() if now is None else now
        return max(0.0, when.timestamp() - reference)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff parameters. ``rand`` returns a float in ``[0, 1)`` (inject for determinism)."""

    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    jitter_fraction: float = 0.25
    rand: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def is_retryable(self, status_code: int, code: str | None) -> bool:
        """Whether this status/code pair is transient."""
        if status_code == 429:
            return True
        return status_code == 503 and code in RETRYABLE_503_CODES

    def backoff(self, attempt: int) -> float:
        """Exponential backoff for retry number ``attempt`` (0-based), jittered down."""
        delay = min(self.max_delay_s, self.base_delay_s * (2.0 ** min(attempt, 62)))
        return delay * (1.0 - self.jitter_fraction * self.rand())

    def decide(
        self,
        status_code: int,
        code: str | None,
        retry_after: float | None,
        attempt: int,
        remaining_s: float,
    ) -> float | None:
        """Delay before retrying an HTTP failure, or ``None`` to give up.

        ``attempt`` is the number of retries already made for this call and ``remaining_s``
        the time left until the call's retry deadline.
        """
        if not self.is_retryable(status_code, code):
            return None
        delay = retry_after if retry_after is not None else self.backoff(attempt)
        return self._within(delay, remaining_s)

    def decide_transport(self, attempt: int, remaining_s: float) -> float | None:
        """Delay before retrying a connect-phase transport failure, or ``None``."""
        return self._within(self.backoff(attempt), remaining_s)

    @staticmethod
    def _within(delay: float, remaining_s: float) -> float | None:
        if remaining_s <= 0:
            return None
        return max(0.0, min(delay, remaining_s))


class RetryBudget:
    """Retry state of one call: counts retries and measures the deadline with ``clock``."""

    def __init__(
        self,
        policy: RetryPolicy,
        deadline_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._deadline = clock() + deadline_s
        self.retries = 0

    def remaining(self) -> float:
        return self._deadline - self._clock()

    def after_status(self, status_code: int, code: str | None, retry_after: float | None) -> float | None:
        """Delay before the next attempt after an HTTP error, or ``None`` to give up."""
        delay = self._policy.decide(status_code, code, retry_after, self.retries, self.remaining())
        if delay is not None:
            self.retries += 1
        return delay

    def after_transport_error(self) -> float | None:
        """Delay before the next attempt after a connect failure, or ``None`` to give up."""
        delay = self._policy.decide_transport(self.retries, self.remaining())
        if delay is not None:
            self.retries += 1
        return delay
