"""A streamed answer (a generation's server-sent events) through the queue: how
its pieces are named on the reply subject, and the gateway's judgement of each
one (pure: the clock is passed in).

A worker whose answer is streamed publishes, on the request's reply subject
(core NATS, one connection, so in order):

* the head (``Sift-Seq: 0``): the answer's status and headers, msgpack as a
  whole reply, with ``Sift-Cancel``, the subject that stops the run;
* each chunk as it is made (``Sift-Seq: 1, 2, ...``), its bytes as they are;
* the end (the next ``Sift-Seq`` and ``Sift-End``: ``done``, or ``failed`` when
  the answer broke off with an error the answer itself could not carry);

every message carries ``Sift-Run`` (this run of the request: a redelivered
message runs again under another). While the run lasts the worker's keepalive
thread also sends ``Sift-Tick`` messages (no sequence) every ``TICK_S``: a
stream silent for ``SILENT_S`` has lost its worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

SEQ_HEADER = "Sift-Seq"
RUN_HEADER = "Sift-Run"
END_HEADER = "Sift-End"
TICK_HEADER = "Sift-Tick"
CANCEL_HEADER = "Sift-Cancel"
CANCEL_PREFIX = "_SIFT.cancel"

ENDED_DONE = "done"
ENDED_FAILED = "failed"

# How often a running stream's worker says it is alive, and how long the gateway
# waits without a chunk or a tick before it takes the worker for dead.
TICK_S = 1.0
SILENT_S = 5.0


def cancel_subject(run: str) -> str:
    return f"{CANCEL_PREFIX}.{run}"


class Verdict(Enum):
    CHUNK = "chunk"  # relay it
    DONE = "done"  # the answer is complete
    FAILED = "failed"  # the worker says the answer broke off
    GAP = "gap"  # a piece is missing: the answer can no longer be whole
    OTHER_RUN = "other run"  # another run of the request (its message was redelivered)
    TICK = "tick"  # the worker is alive


@dataclass(slots=True)
class StreamOrder:
    """One stream as the gateway follows it: the run it relays and the next sequence."""

    run: str
    heard: float  # when the last piece or tick came (a monotonic clock)
    next_seq: int = 1

    def judge(self, run: str, seq: int | None, ended: str | None, now: float) -> Verdict:
        """What a message of the request means. Another run's message says the
        message was redelivered, so this run's worker was taken for dead by the
        queue: the stream cannot continue where it was."""
        if run != self.run:
            return Verdict.OTHER_RUN
        self.heard = now
        if seq is None:
            return Verdict.TICK
        if seq != self.next_seq:
            return Verdict.GAP
        self.next_seq += 1
        if ended is None:
            return Verdict.CHUNK
        return Verdict.DONE if ended == ENDED_DONE else Verdict.FAILED

    def silent(self, now: float, limit_s: float = SILENT_S) -> bool:
        """Neither a piece nor a tick for ``limit_s``: the worker is gone."""
        return now - self.heard > limit_s
