"""The batch-forming rules before the scheduler's later ones, replayed by ``sift simulate``'s arms.

``CostOrderQueue``: companions of the head joined in ascending cost, to limit
padding, skipping any that would pass the cost cap. Under sustained load a long
text was then passed over by cheaper, newer requests until it became the head,
again and again; the simulator's ``adaptive-old`` arm shows it next to the
server's rule.

``ArmScheduler``: the server's scheduler with some of its later rules off (no
hold for a returning wave, no cut by length, no whole waves, no open-loop backlog rule), so an arm shows
what each rule adds. The server always runs all of them.
"""

from __future__ import annotations

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
        super().__init__(policy, config, queue_factory=queue_factory)
        self.wave_hold, self.sub_forwards, self.whole_wave_rule = wave_hold, sub_forwards, whole_waves
        self.open_rules = open_backlog

    @property
    def independent_arrivals(self) -> bool:
        # The open-loop rules, off on the server (Scheduler.independent_arrivals says why).
        return self.open_rules and self.waves.independent

    @property
    def open_backlog_rule(self) -> bool:
        return self.open_rules and self.waves.clearly_independent

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
