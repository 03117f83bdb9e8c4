"""Each catalog model's backlog on the work stream, as the gateway's ``/metrics``
shows it: what waits for a worker (pending), what workers hold unacknowledged
(in flight), and how long the oldest of them has been in the stream.

The figures are those an autoscaler reads (KEDA's nats-jetstream scaler:
``num_pending + num_ack_pending`` of the model's durable consumer), read from
the consumer's info on a bounded interval by one task, never per request. The
shell (``BacklogWatch``) reads NATS and sets the gauges; what the figures are
and when to read again is decided by plain functions over explicit values.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from nats.js import JetStreamContext
from prometheus_client import CollectorRegistry, Gauge

from sift_server.cluster.subjects import STREAM, durable_name, work_subject

log = logging.getLogger(__name__)

# How often the gateway reads the consumers (as often as KEDA polls, 5 s in deploy/, is enough;
# more often costs one small request per model to NATS).
BACKLOG_POLL_S = 2.0


@dataclass(frozen=True, slots=True)
class Backlog:
    """One model's backlog at one moment."""

    pending: int  # published, not yet delivered to a worker
    in_flight: int  # delivered, not yet acknowledged (queued on a worker or in a forward)
    oldest_age_s: float  # age of the oldest message not yet acknowledged (0 when none)

    @property
    def total(self) -> int:
        """What an autoscaler scales on."""
        return self.pending + self.in_flight


EMPTY = Backlog(0, 0, 0.0)


def backlog_of(num_pending: int, num_ack_pending: int, oldest_stored_at: float | None, now: float) -> Backlog:
    """The backlog from a consumer's counts and the wall-clock time its oldest
    unacknowledged message was stored (None: none, or not read); a clock behind
    the server's never makes an age negative."""
    if num_pending + num_ack_pending == 0 or oldest_stored_at is None:
        return Backlog(num_pending, num_ack_pending, 0.0)
    return Backlog(num_pending, num_ack_pending, max(0.0, now - oldest_stored_at))


def next_poll_in(interval_s: float, took_s: float) -> float:
    """The wait before the next read: one read per interval, a slow read not followed at once."""
    return max(interval_s - took_s, interval_s / 4)


async def read_backlog(js: JetStreamContext, model: str) -> Backlog | None:
    """A model's backlog from its consumer (None: the consumer does not exist)."""
    try:
        info = await js.consumer_info(STREAM, durable_name(model))
    except Exception:
        return None
    pending, held = info.num_pending or 0, info.num_ack_pending or 0
    oldest: float | None = None
    if pending + held > 0:
        # WorkQueue retention deletes a message once acknowledged: the model's first
        # message after the ack floor is its oldest unacknowledged one.
        floor = info.ack_floor.stream_seq if info.ack_floor is not None and info.ack_floor.stream_seq else 0
        with contextlib.suppress(Exception):
            first = await js.get_msg(STREAM, seq=floor + 1, subject=work_subject(model), next=True)
            if first.time is not None:
                oldest = first.time.timestamp()
    return backlog_of(pending, held, oldest, time.time())


class BacklogWatch:
    """Keeps the backlog gauges of the given models current (one task, a bounded interval)."""

    def __init__(self, registry: CollectorRegistry, interval_s: float = BACKLOG_POLL_S) -> None:
        self.interval_s = interval_s
        self.latest: dict[str, Backlog] = {}
        self.pending = Gauge(
            "sift_gateway_backlog_pending",
            "Requests published for the model that no worker has taken yet.",
            ["model"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "sift_gateway_backlog_in_flight",
            "Requests workers hold unacknowledged (queued on a worker or in a forward).",
            ["model"],
            registry=registry,
        )
        self.oldest_age = Gauge(
            "sift_gateway_backlog_oldest_age_seconds",
            "Age of the model's oldest unacknowledged request in the stream (0 when none).",
            ["model"],
            registry=registry,
        )

    def show(self, model: str, backlog: Backlog) -> None:
        self.latest[model] = backlog
        self.pending.labels(model).set(backlog.pending)
        self.in_flight.labels(model).set(backlog.in_flight)
        self.oldest_age.labels(model).set(backlog.oldest_age_s)

    async def refresh(self, js: JetStreamContext, models: Sequence[str]) -> None:
        for model in models:
            backlog = await read_backlog(js, model)
            self.show(model, backlog if backlog is not None else EMPTY)

    async def run(self, js: JetStreamContext, models: Sequence[str]) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.refresh(js, models)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away for a moment: keep the last figures
                log.warning("backlog read failed: %r", exc)
            await asyncio.sleep(next_poll_in(self.interval_s, time.monotonic() - started))
