"""Run every (forward model, trace family, policy) combination."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sift_server.engine.batch_queue import Caps
from sift_server.simulator.engine_sim import EngineSim, PendingTime, SimPolicy
from sift_server.simulator.forward_model import LinearForward
from sift_server.simulator.metrics import Summary, summarize
from sift_server.simulator.scenarios import Family, TraceConfig, default_families


@dataclass(frozen=True, slots=True)
class Matrix:
    forwards: Sequence[LinearForward]
    policies: Sequence[Callable[[], SimPolicy]]
    traces: TraceConfig
    caps: Caps = field(default_factory=Caps)
    pending_time: PendingTime = "admission"
    family_filter: Sequence[str] = ()


def families_for(matrix: Matrix, forward: LinearForward) -> list[Family]:
    families = default_families(forward, matrix.caps, matrix.traces)
    if matrix.family_filter:
        families = [f for f in families if any(key in f.name for key in matrix.family_filter)]
    return families


def run_matrix(matrix: Matrix) -> list[Summary]:
    summaries = []
    for forward in matrix.forwards:
        for family in families_for(matrix, forward):
            for make_policy in matrix.policies:
                sim = EngineSim(
                    make_policy(),
                    forward,
                    family.make(),
                    caps=matrix.caps,
                    pending_time=matrix.pending_time,
                    forward_name=forward.name,
                )
                summaries.append(summarize(sim.run()))
    return summaries
