"""Where a request's time goes on the queue path, as response headers (pure).

The gateway stamps each message with its publish time (wall clock, so that the
worker, possibly on another machine, can read it); the worker reports the time
from publish to delivery and from delivery to its reply; the gateway adds its
own total. The client then sees the whole hop split in four: HTTP to the
gateway, the queue, the worker, the reply's way back.

With the ``hop_stamps`` setting on the gateway and the worker (``--hop-stamps``, ``SIFT_HOP_STAMPS=1``;
benchmarks only: ``sift bench cluster latency --interleave``), each
answer also carries ``X-Sift-Stamps``: the monotonic clock (``time.perf_counter``,
the same clock for every process of one machine) at each stage of the hop, so a
benchmark on one machine can place every fraction of a millisecond.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

PUBLISHED_HEADER = "Sift-Published"  # on the NATS message: epoch seconds at publish
QUEUE_TIME = "X-Sift-Queue-Time"  # ms, the gateway's publish to the worker's delivery
WORKER_TIME = "X-Sift-Worker-Time"  # ms, the worker's delivery to its reply
GATEWAY_TIME = "X-Sift-Gateway-Time"  # ms, the gateway's route start to the reply's arrival
STAMPS = "X-Sift-Stamps"  # "stage=seconds;..." (perf_counter), only with hop_stamps on

# The stages, in the order a request passes them (what each stamp marks):
STAGES = (
    "g_start",  # gateway: the route starts (HTTP head and body read by uvicorn)
    "g_publish",  # gateway: body checked and packed, about to publish
    "g_published",  # gateway: the publish is handed to the NATS client
    "g_acked",  # gateway: the stream's publish ack is read
    "w_receive",  # worker: the message reaches its subscription callback
    "w_app",  # worker: the route starts running the message
    "w_app_end",  # worker: the route has answered (forward included)
    "w_reply",  # worker: about to publish the reply
    "g_reply",  # gateway: the reply reaches its subscription callback
    "g_resume",  # gateway: the waiting route resumes with the reply
    "g_answer",  # gateway: the HTTP answer is built, about to be sent
)


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


def format_stamps(stamps: Iterable[tuple[str, float]]) -> str:
    return ";".join(f"{name}={at:.6f}" for name, at in stamps)


def parse_stamps(value: str | None) -> dict[str, float]:
    """The stamps of one or several ``X-Sift-Stamps`` values joined by ';'; junk is skipped."""
    out: dict[str, float] = {}
    for part in (value or "").split(";"):
        name, _, at = part.partition("=")
        with contextlib.suppress(ValueError):
            out[name.strip()] = float(at)
    return out
