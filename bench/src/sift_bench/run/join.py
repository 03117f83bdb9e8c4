"""Join client requests to the forwards that ran them, through the server's
trace (one ``ForwardRecord`` per forward, naming its requests' ids)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sift_server.engine.trace import ForwardRecord


@dataclass(frozen=True, slots=True)
class JoinedRequest:
    """Server-side times of one request (perf_counter seconds) and its forward."""

    request_id: str
    forward_id: int  # the first forward that ran (part of) it
    forwards: int  # forwards it took part in (more than one only when its items were split)
    forward_requests: int  # requests in that first forward
    forward_items: int
    reason: str
    arrival: float  # headers received
    admitted: float  # prepared and queued
    decided: float  # the policy chose to run the forward
    start: float  # forward started
    end: float  # last forward ended

    @property
    def queue_s(self) -> float:
        """Admission to forward start (what the server reports as queue time)."""
        return self.start - self.admitted

    @property
    def wait_s(self) -> float:
        """Headers received to forward start (ingress + queue)."""
        return self.start - self.arrival

    @property
    def ingress_s(self) -> float:
        """Headers received to admission (body read, decode, tokenize)."""
        return self.admitted - self.arrival


@dataclass(slots=True)
class JoinResult:
    joined: dict[str, JoinedRequest] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def get(self, request_id: str) -> JoinedRequest | None:
        return self.joined.get(request_id)


def _order(record: ForwardRecord) -> tuple[float, int]:
    return (record.start, record.forward_id)


def index_trace(records: Iterable[ForwardRecord]) -> dict[str, list[tuple[ForwardRecord, int]]]:
    """request id → [(forward, position of the request in it)], in forward order."""
    index: dict[str, list[tuple[ForwardRecord, int]]] = {}
    for record in sorted(records, key=_order):
        for position, request_id in enumerate(record.request_ids):
            index.setdefault(request_id, []).append((record, position))
    return index


def join_requests(request_ids: Iterable[str], records: Sequence[ForwardRecord]) -> JoinResult:
    """Each id's forward(s); ids the trace does not name are listed as missing."""
    index = index_trace(records)
    result = JoinResult()
    for request_id in request_ids:
        hits = index.get(request_id)
        if not hits:
            result.missing.append(request_id)
            continue
        first, position = hits[0]
        result.joined[request_id] = JoinedRequest(
            request_id=request_id,
            forward_id=first.forward_id,
            forwards=len(hits),
            forward_requests=len(first.request_ids),
            forward_items=first.items,
            reason=first.reason,
            arrival=first.arrivals[position],
            admitted=first.admitted[position],
            decided=first.decided,
            start=first.start,
            end=hits[-1][0].end,
        )
    return result


@dataclass(frozen=True, slots=True)
class BurstPattern:
    """How one burst was run: requests per forward in forward order, e.g. (1, 7),
    plus requests that the trace does not name."""

    sizes: tuple[int, ...]
    missing: int = 0

    @property
    def one_forward(self) -> bool:
        return self.missing == 0 and len(self.sizes) == 1

    @property
    def label(self) -> str:
        text = "[" + ", ".join(str(s) for s in self.sizes) + "]"
        return text + (f" +{self.missing} missing" if self.missing else "")


def burst_pattern(request_ids: Sequence[str], join: JoinResult) -> BurstPattern:
    """Group a burst's requests by the forward that ran them (their first one)."""
    counts: dict[tuple[float, int], int] = {}
    missing = 0
    for request_id in request_ids:
        hit = join.get(request_id)
        if hit is None:
            missing += 1
            continue
        key = (hit.start, hit.forward_id)
        counts[key] = counts.get(key, 0) + 1
    return BurstPattern(tuple(counts[key] for key in sorted(counts)), missing)
