"""Pending requests of one model and one LoRA lane, and how a batch is taken from them.

Pure code: no asyncio, no torch, no clock. A request carries its prepared items
and their real token costs; extraction takes whole requests in arrival order
under a request cap and a token-cost cap, so a request with ``k`` requests
queued ahead of it in its lane runs in one of the next ``k + 1`` forwards of
the lane, whatever the lengths around it. A request is split across forwards
only when it alone exceeds the cost cap.

Other companion rules (the simulator replays an earlier one) override
``_companions``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Pending:
    """One admitted request waiting for a forward."""

    request_id: str
    item_costs: Sequence[int]
    arrival: float
    # Requests fuse only with others of the same key (labels, threshold, ...).
    compat_key: Hashable = None
    payload: Any = None
    # Index of the first item not yet handed to a forward (for split requests).
    next_item: int = 0

    @property
    def remaining_items(self) -> int:
        return len(self.item_costs) - self.next_item

    @property
    def remaining_cost(self) -> int:
        return sum(self.item_costs[self.next_item :])


@dataclass(frozen=True, slots=True)
class Slice:
    """Items [start, stop) of one pending request, as they go into a forward."""

    pending: Pending
    start: int
    stop: int

    @property
    def cost(self) -> int:
        return sum(self.pending.item_costs[self.start : self.stop])

    @property
    def is_last(self) -> bool:
        return self.stop == len(self.pending.item_costs)


@dataclass(frozen=True, slots=True)
class Caps:
    max_requests: int = 64
    max_cost: int = 16_384

    def __post_init__(self) -> None:
        if self.max_requests < 1 or self.max_cost < 1:
            raise ValueError("batch caps must be positive")


@dataclass(slots=True)
class BatchQueue:
    """FIFO of pending requests for one lane, with cap-aware extraction."""

    lane: str
    pending: list[Pending] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, request: Pending) -> None:
        self.pending.append(request)

    def remove(self, request_id: str) -> Pending | None:
        """Drop a request, started or not: its client went away, or a slice of
        it failed, so its remaining items must not run."""
        for index, request in enumerate(self.pending):
            if request.request_id == request_id:
                return self.pending.pop(index)
        return None

    def older_than(self, cutoff: float) -> list[Pending]:
        """Requests admitted before ``cutoff`` that have not started."""
        return [p for p in self.pending if p.arrival < cutoff and p.next_item == 0]

    @property
    def head(self) -> Pending | None:
        return self.pending[0] if self.pending else None

    @property
    def total_items(self) -> int:
        # Read on every admission (the queue cap): the fields directly, in a list
        # rather than a generator, costs half of ``remaining_items`` per request.
        return sum([len(p.item_costs) - p.next_item for p in self.pending])

    def compatible_with_head(self) -> list[Pending]:
        head = self.head
        if head is None:
            return []
        return [p for p in self.pending if p.compat_key == head.compat_key]

    def would_fill(self, caps: Caps) -> bool:
        """True when the compatible requests already reach a cap."""
        group = self.compatible_with_head()
        return len(group) >= caps.max_requests or sum(p.remaining_cost for p in group) >= caps.max_cost

    def compatible_count(self) -> int:
        return len(self.compatible_with_head())

    def take(self, caps: Caps) -> list[Slice]:
        """Remove and return the next batch.

        The head is always served (a partly served head first, so a split
        request finishes before new work). Other compatible requests join in
        arrival order until a cap is reached.
        """
        head = self.head
        if head is None:
            return []
        if head.next_item > 0 or head.remaining_cost > caps.max_cost:
            return [self._take_prefix_of(head, caps)]
        others = [p for p in self.pending[1:] if p.compat_key == head.compat_key and p.next_item == 0]
        chosen = [head, *self._companions(head, others, caps)]
        taken = {id(p) for p in chosen}
        self.pending = [p for p in self.pending if id(p) not in taken]
        slices = [Slice(p, 0, len(p.item_costs)) for p in chosen]
        for p in chosen:
            p.next_item = len(p.item_costs)
        # Cost order inside the forward groups similar lengths together.
        slices.sort(key=lambda s: s.cost)
        return slices

    def _companions(self, head: Pending, others: Sequence[Pending], caps: Caps) -> list[Pending]:
        """Who joins the head: the compatible requests behind it in arrival
        order, up to the first that would pass a cap (no newer request passes
        an older one, which bounds every wait)."""
        chosen: list[Pending] = []
        cost = head.remaining_cost
        for candidate in others:
            if 1 + len(chosen) >= caps.max_requests or cost + candidate.remaining_cost > caps.max_cost:
                break
            chosen.append(candidate)
            cost += candidate.remaining_cost
        return chosen

    def _take_prefix_of(self, request: Pending, caps: Caps) -> Slice:
        """The largest prefix of one request's remaining items under the cost cap
        (at least one item: a single oversized item runs alone)."""
        start = request.next_item
        stop = start
        cost = 0
        while stop < len(request.item_costs):
            item_cost = request.item_costs[stop]
            if stop > start and cost + item_cost > caps.max_cost:
                break
            cost += item_cost
            stop += 1
        request.next_item = stop
        if stop == len(request.item_costs):
            self.pending.remove(request)
        return Slice(request, start, stop)
