"""The batch-forming rule before the scheduler rework, replayed by ``sift simulate``.

Companions of the head joined in ascending cost, to limit padding, skipping
any that would pass the cost cap. Under sustained load a long text was then
passed over by cheaper, newer requests until it became the head, again and
again; the simulator's ``adaptive-old`` arm shows it next to the server's rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from sift_server.engine.batch_queue import BatchQueue, Caps, Pending


class CostOrderQueue(BatchQueue):
    """A ``BatchQueue`` whose companions join cheapest first."""

    def _companions(self, head: Pending, others: Sequence[Pending], caps: Caps) -> list[Pending]:
        chosen: list[Pending] = []
        cost = head.remaining_cost
        for candidate in sorted(others, key=lambda p: p.remaining_cost):
            if 1 + len(chosen) >= caps.max_requests:
                break
            if cost + candidate.remaining_cost > caps.max_cost:
                continue
            chosen.append(candidate)
            cost += candidate.remaining_cost
        return chosen
