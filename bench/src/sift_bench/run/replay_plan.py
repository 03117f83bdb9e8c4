"""Which forwards a per-trial replay runs: the server's own batches, from its trace.

Pure code. For each closed-loop phase of a run, the forwards that ran the
phase's requests are taken from the trace in the order they started, and each
becomes a list of parts, one per request, holding the texts that request had
in that forward (the bench knows which texts it sent under which request id).

How a request's texts are shared out over forwards: a request named together
with others in a forward ran whole there (the batch queue only fuses whole
requests); a request split over several forwards ran alone in each, so each of
its forwards takes the next ``items`` of its texts, in order. The general rule
below (each request in a forward takes its remaining texts, never more than
the forward has items left) gives both. Items a forward reports that no known
text fills are counted as ``unmatched``; a request of the phase that no forward
names (a missing trace line) is counted and not replayed; a part whose request
the bench did not send in this run is counted as ``unknown`` and left out.

The replay is capped: when the phase's forwards took more than ``cap_s`` of
server forward time, every ``stride``-th forward is kept (so the sample spans
the whole phase, its ramp-up and its steady state, in order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sift_server.engine.trace import ForwardRecord

CAP_S = 3.0
MAX_FORWARDS = 500


@dataclass(frozen=True, slots=True)
class ReplayForward:
    """One server forward as the replay runs it: per request, its texts in it."""

    forward_id: int
    parts: tuple[tuple[str, ...], ...]
    server_s: float  # the server's forward start to end, from the trace
    chunks: int  # sub-forwards the server ran it as

    @property
    def items(self) -> int:
        return sum(len(p) for p in self.parts)


@dataclass(slots=True)
class PhaseReplayPlan:
    phase: str
    forwards: list[ReplayForward] = field(default_factory=list)
    total_forwards: int = 0  # forwards of the phase in the trace
    total_items: int = 0
    busy_s: float = 0.0  # server forward time of all of them
    window_s: float = 0.0
    stride: int = 1
    not_in_trace: int = 0
    unknown_parts: int = 0
    unmatched_items: int = 0

    @property
    def items(self) -> int:
        return sum(f.items for f in self.forwards)

    @property
    def server_s(self) -> float:
        return math.fsum(f.server_s for f in self.forwards)

    def child_input(self) -> list[dict[str, Any]]:
        """What the replay child needs of each forward: its parts' texts and
        the number of sub-forwards the server cut it into."""
        return [
            {"forward_id": f.forward_id, "parts": [list(p) for p in f.parts], "chunks": f.chunks} for f in self.forwards
        ]

    def summary(self) -> dict[str, Any]:
        """The plan's figures for results.json (no texts)."""
        items = self.items
        return {
            "forwards": len(self.forwards),
            "items": items,
            "total_forwards": self.total_forwards,
            "total_items": self.total_items,
            "stride": self.stride,
            "server_s": self.server_s,
            "server_ms_per_item": self.server_s * 1000 / items if items else None,
            "server_chunks": sum(f.chunks for f in self.forwards),
            "busy_s": self.busy_s,
            "window_s": self.window_s,
            "busy_fraction": self.busy_s / self.window_s if self.window_s > 0 else None,
            "not_in_trace": self.not_in_trace,
            "unknown_parts": self.unknown_parts,
            "unmatched_items": self.unmatched_items,
        }


def _order(record: ForwardRecord) -> tuple[float, int]:
    return (record.start, record.forward_id)


def phase_forwards(
    records: Sequence[ForwardRecord], request_ids: Sequence[str], texts_of: Mapping[str, Sequence[str]]
) -> PhaseReplayPlan:
    """Every forward (without error) that ran a request of ``request_ids``, in
    start order, with its parts' texts (see the module's rule)."""
    wanted = set(request_ids)
    plan = PhaseReplayPlan("")
    cursor: dict[str, int] = {}
    named: set[str] = set()
    for record in sorted(records, key=_order):
        if record.error is not None or not wanted.intersection(record.request_ids):
            continue
        left = record.items
        parts: list[tuple[str, ...]] = []
        for request_id in record.request_ids:
            named.add(request_id)
            texts = texts_of.get(request_id)
            if texts is None:
                plan.unknown_parts += 1
                continue
            start = cursor.get(request_id, 0)
            taken = tuple(texts[start : start + max(0, left)])
            cursor[request_id] = start + len(taken)
            left -= len(taken)
            if taken:
                parts.append(taken)
        plan.unmatched_items += max(0, left)
        plan.total_forwards += 1
        plan.total_items += record.items
        took = record.end - record.start
        plan.busy_s += took
        if parts:
            plan.forwards.append(ReplayForward(record.forward_id, tuple(parts), took, record.chunks))
    plan.not_in_trace = len(wanted - named)
    return plan


def cap(forwards: Sequence[ReplayForward], cap_s: float, max_forwards: int) -> tuple[list[ReplayForward], int]:
    """Every ``stride``-th forward, the smallest stride whose sample stays within
    ``cap_s`` of server forward time and ``max_forwards`` forwards."""
    total = math.fsum(f.server_s for f in forwards)
    stride = max(1, math.ceil(total / cap_s) if cap_s > 0 else 1, math.ceil(len(forwards) / max_forwards))
    return list(forwards[::stride]), stride


def plan_phase(
    name: str,
    records: Sequence[ForwardRecord],
    request_ids: Sequence[str],
    texts_of: Mapping[str, Sequence[str]],
    window_s: float,
    *,
    cap_s: float = CAP_S,
    max_forwards: int = MAX_FORWARDS,
) -> PhaseReplayPlan:
    """The replay of one phase: its forwards, capped."""
    plan = phase_forwards(records, request_ids, texts_of)
    plan.phase = name
    plan.window_s = window_s
    plan.forwards, plan.stride = cap(plan.forwards, cap_s, max_forwards)
    return plan
