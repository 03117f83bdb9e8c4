"""The batch-forming rules before the scheduler's later ones, replayed by ``sift simulate``'s arms.

``CostOrderQueue``: companions of the head joined in ascending cost, to limit
padding, skipping any that would pass the cost cap. Under sustained load a long
text was then passed over by cheaper, newer requests until it became the head,
again and again; the simulator's ``adaptive-old`` arm shows it next to the
server's rule.

``ArmScheduler``: the server's scheduler with some of its later rules off (no
hold for a returning wave, no cut by length, no whole waves) or the open-loop rules on, so an arm shows
what each rule adds. The server runs all but the open-loop rules (``sift serve --open-loop-rules``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from sift_server.engine.batch_queue import BatchQueue, Caps, Pending
from sift_server.engine.policy import Policy
from sift_server.engine.scheduler import Scheduler, SchedulerConfig


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


class ArmScheduler(Scheduler):
    """The scheduler with rules turned off: ``wave_hold`` (hold for a returning wave
    where the forward's fixed cost says it pays), ``sub_forwards`` (cut batches into
    sub-forwards of similar length), ``whole_waves`` (under reliable returning waves,
    run each batch past the load caps and answer it together), ``open_backlog`` (once
    arrivals are known to be independent of answers, a batch under load takes all that
    waits, in sub-forwards of the efficient size, each answered as it ends, and no burst
    is held past ``max_hold``)."""

    def __init__(
        self,
        policy: Policy,
        config: SchedulerConfig = SchedulerConfig(),  # noqa: B008  (frozen: shared safely, as Scheduler's)
        *,
        queue_factory: Callable[[str], BatchQueue] = BatchQueue,
        wave_hold: bool = True,
        sub_forwards: bool = True,
        whole_waves: bool = True,
        open_backlog: bool = False,
    ) -> None:
        # The open-loop rules are the server's own, off by default (SchedulerConfig.open_loop_rules).
        config = dataclasses.replace(config, open_loop_rules=config.open_loop_rules or open_backlog)
        super().__init__(policy, config, queue_factory=queue_factory)
        self.wave_hold, self.sub_forwards, self.whole_wave_rule = wave_hold, sub_forwards, whole_waves

    @property
    def holds_for_waves(self) -> bool:
        return self.wave_hold and super().holds_for_waves

    @property
    def whole_waves(self) -> bool:
        return self.whole_wave_rule and super().whole_waves

    def _answers_together(self, queue: BatchQueue, now: float) -> bool:
        return self.whole_wave_rule and super()._answers_together(queue, now)

    @property
    def cut_fixed_tokens(self) -> float | None:
        return super().cut_fixed_tokens if self.sub_forwards else None
