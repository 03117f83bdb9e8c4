"""Run every (forward model, trace family, arm) combination.

An arm is a policy together with the scheduler's batch-forming rules. Besides
the three policies, ``adaptive-old`` replays the rules before the engine-core
rework (companions in cost order, no hold for a returning wave),
``adaptive-split`` the rules before whole waves (load caps and early answers
under returning waves too), and ``timed-whole`` the reference server's timed
window (no load caps, one forward per batch), so a run shows what they did
under sustained load next to what the server does now.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from sift_bench.simulate.engine_sim import EngineSim, PendingTime, SimPolicy
from sift_bench.simulate.forward_model import ForwardPreset
from sift_bench.simulate.metrics import Summary, summarize
from sift_bench.simulate.scenarios import Family, TraceConfig, closed_capacity_family, default_families
from sift_bench.simulate.traces import Lengths
from sift_server.engine.batch_queue import BatchQueue, Caps
from sift_server.engine.policy import POLICIES, make_policy
from sift_server.engine.scheduler import Scheduler, SchedulerConfig

OLD_RULES = "adaptive-old"
# The reference server's timed window: whole waves (no load caps), one forward each.
WHOLE_TIMED = "timed-whole"
# Adaptive as it was before whole waves: load caps and early answers under returning waves.
SPLIT_WAVES = "adaptive-split"
# Adaptive with the wave's horizon and hold bounded by a fixed max_hold (10 ms), as
# before they scaled with the forward: a wave read over a longer span is cut.
FIXED_HOLD = "adaptive-10ms"
# The open loops' ideal: a batch forms from whatever waits when the forward frees
# (no hold, no load caps, each sub-forward answered as it ends).
IDEAL = "ideal"
# Adaptive before the open-loop rule: independent users' backlog in batches at the load
# caps, answered together.
OPEN = "adaptive-open"
if TYPE_CHECKING:  # an older revision's sift_server (a --rev arm's) has no shared_loop: import it where used
    from sift_bench.simulate.shared_loop import SharedLoop

ARMS = (*POLICIES, OLD_RULES, WHOLE_TIMED, SPLIT_WAVES, FIXED_HOLD, OPEN, IDEAL)


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    policy: Callable[[], SimPolicy]
    queue: Callable[[str], BatchQueue] = BatchQueue
    wave_hold: bool = True
    load_caps: bool = True
    sub_forwards: bool = True
    whole_waves: bool = True
    # The open-loop rules (off on the server unless `sift serve --open-loop-rules`).
    open_backlog: bool = False
    # Share of a forward a hold for its wave may last (SchedulerConfig.wave_share); None: the default.
    wave_share: float | None = None

    def scheduler(self) -> Callable[..., Scheduler]:
        """The server's scheduler, or, where this arm turns rules off (or the open-loop rules
        on), the simulator's variant of it."""
        if self.wave_hold and self.sub_forwards and self.whole_waves and not self.open_backlog:
            return Scheduler
        from sift_bench.simulate.old_rules import ArmScheduler

        rules: dict[str, Any] = {
            "wave_hold": self.wave_hold,
            "sub_forwards": self.sub_forwards,
            "whole_waves": self.whole_waves,
            "open_backlog": self.open_backlog,
        }
        return partial(ArmScheduler, **rules)


def make_arm(name: str, **policy_options: float) -> Arm:
    """An arm by name (``ARMS``); options go to ``make_policy``."""
    if name == OLD_RULES:
        # Imported here: registering ``sift simulate`` must not need this tree's
        # simulator, or an older revision's ``sift serve`` (a ``--rev`` arm, which
        # loads the installed commands) cannot start.
        from sift_bench.simulate.old_rules import CostOrderQueue

        return Arm(name, lambda: make_policy("adaptive", **policy_options), queue=CostOrderQueue, wave_hold=False)
    if name == WHOLE_TIMED:
        return Arm(name, lambda: make_policy("timed", **policy_options), load_caps=False, sub_forwards=False)
    if name == SPLIT_WAVES:
        return Arm(name, lambda: make_policy("adaptive", **policy_options), whole_waves=False)
    if name == OPEN:
        return Arm(name, lambda: make_policy("adaptive", **policy_options), open_backlog=True)
    if name == IDEAL:
        return Arm(name, lambda: make_policy("immediate", **policy_options), load_caps=False, whole_waves=False)
    if name == FIXED_HOLD:
        return Arm(name, lambda: make_policy("adaptive", **policy_options), wave_share=0.0)
    return Arm(name, lambda: make_policy(name, **policy_options))


@dataclass(frozen=True, slots=True)
class Matrix:
    forwards: Sequence[ForwardPreset]
    arms: Sequence[Arm]
    traces: TraceConfig
    caps: Caps = field(default_factory=Caps)
    pending_time: PendingTime = "admission"
    family_filter: Sequence[str] = ()


def families_for(matrix: Matrix, forward: ForwardPreset) -> list[Family]:
    families = default_families(
        forward, matrix.caps, matrix.traces, closed_rate=partial(closed_capacity, matrix, forward)
    )
    if matrix.family_filter:
        families = [f for f in families if any(key in f.name for key in matrix.family_filter)]
    return families


def scheduler_config(matrix: Matrix, forward: ForwardPreset, arm: Arm) -> SchedulerConfig:
    """The server's scheduler settings, with this matrix's caps and the arm's rules."""
    efficient = getattr(forward, "efficient_tokens", None)
    load_caps = replace(matrix.caps, max_cost=min(matrix.caps.max_cost, efficient)) if efficient else None
    config = SchedulerConfig(
        caps=matrix.caps,
        load_caps=load_caps if arm.load_caps else None,
        shared_core=shared_loop(forward) is not None,
    )
    return config if arm.wave_share is None else replace(config, wave_share=arm.wave_share)


_CAPACITY: dict[tuple[object, ...], float] = {}


def closed_capacity(matrix: Matrix, forward: ForwardPreset, lengths: Lengths) -> float:
    """Requests/s of the engine (the ``adaptive`` arm, the server's rules) under a
    closed loop of ``open_capacity_clients`` callers on ``lengths``: what the open
    loops' loads are shares of, as ``sift bench`` scales them to a measured closed loop."""
    key = (forward, matrix.caps, matrix.traces, matrix.pending_time, lengths)
    if key not in _CAPACITY:
        arm = make_arm("adaptive")
        sim = EngineSim(
            arm.policy(),
            forward,
            closed_capacity_family(matrix.traces, lengths),
            config=scheduler_config(matrix, forward, arm),
            pending_time=matrix.pending_time,
            loop=shared_loop(forward),
        )
        _CAPACITY[key] = summarize(sim.run()).throughput
    return _CAPACITY[key]


def shared_loop(forward: ForwardPreset) -> SharedLoop | None:
    """A fresh loop for one run where the preset's server reads requests on the forward's core."""
    read, write = getattr(forward, "loop_read", 0.0), getattr(forward, "loop_write", 0.0)
    from sift_bench.simulate.shared_loop import SharedLoop

    return SharedLoop(read, write) if read or write else None


def run_matrix(matrix: Matrix) -> list[Summary]:
    summaries = []
    for forward in matrix.forwards:
        for family in families_for(matrix, forward):
            for arm in matrix.arms:
                sim = EngineSim(
                    arm.policy(),
                    forward,
                    family.make(),
                    config=scheduler_config(matrix, forward, arm),
                    pending_time=matrix.pending_time,
                    forward_name=forward.name,
                    arm=arm.name,
                    queue_factory=arm.queue,
                    loop=shared_loop(forward),
                    scheduler=arm.scheduler(),
                )
                summaries.append(summarize(sim.run()))
    return summaries
