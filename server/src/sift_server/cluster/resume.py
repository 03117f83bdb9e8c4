"""What the gateway does with a request it waits on when its NATS connection
comes back after a break (NATS restarted, a network cut).

Replies travel on core NATS: one a worker published while this gateway was
away was delivered to nobody, and the worker acknowledged the message after it,
so the stream no longer holds it. A publish whose stream ack did not arrive
before the break may or may not be stored. The stream is the witness: a
request whose message it still holds will be run and its reply will reach the
gateway, now subscribed again; any other is published again, under a new
message id (the stream would drop the old one as a duplicate), to the same
reply subject. At worst a request runs twice, and the gateway answers the
first reply and drops the other (encode, score and extract have no side
effects). Plain functions over explicit values; the shell is
cluster.gateway_client.
"""

from __future__ import annotations

from enum import Enum

# A request is published again at most this many times (one per break it lived through).
MAX_REPUBLISHES = 3


class Resume(Enum):
    WAIT = "wait"  # the stream holds it (or we cannot tell yet): its reply will come
    REPUBLISH = "republish"  # its reply may be lost: publish it again


def after_reconnect(stored: bool | None, republished: int) -> Resume:
    """The fate of a request published before the break and not yet answered.

    ``stored``: whether the stream still holds its message (None: it could not be
    asked, e.g. the connection broke again; the next reconnect asks again)."""
    if stored is None or stored or republished >= MAX_REPUBLISHES:
        return Resume.WAIT
    return Resume.REPUBLISH


def republished_id(request_id: str, count: int) -> str:
    """The message id of a request's ``count``-th republish (its reply subject keeps the request id)."""
    return f"{request_id}.r{count}"
