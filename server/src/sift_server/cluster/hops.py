"""Where a request's time goes on the queue path, as response headers (pure).

The gateway stamps each message with its publish time (wall clock, so that the
worker, possibly on another machine, can read it); the worker reports the time
from publish to delivery and from delivery to its reply; the gateway adds its
own total. The client then sees the whole hop split in four: HTTP to the
gateway, the queue, the worker, the reply's way back.
"""

from __future__ import annotations

import contextlib

PUBLISHED_HEADER = "Sift-Published"  # on the NATS message: epoch seconds at publish
QUEUE_TIME = "X-Sift-Queue-Time"  # ms, the gateway's publish to the worker's delivery
WORKER_TIME = "X-Sift-Worker-Time"  # ms, the worker's delivery to its reply
GATEWAY_TIME = "X-Sift-Gateway-Time"  # ms, the gateway's route start to the reply's arrival


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def stamp(now: float) -> str:
    return f"{now:.6f}"


def worker_headers(published: str | None, delivered: float, replied: float) -> list[tuple[str, str]]:
    """The worker's two figures (wall-clock seconds); no queue time without a stamp."""
    out = [(WORKER_TIME, _ms(replied - delivered))]
    if published:
        with contextlib.suppress(ValueError):
            out.append((QUEUE_TIME, _ms(delivered - float(published))))
    return out


def gateway_header(started: float, answered: float) -> tuple[str, str]:
    return (GATEWAY_TIME, _ms(answered - started))
