"""Open loops (independent users, Poisson and bursty) at shares of the engine's
closed-loop capacity: the engine's schedule against the timed window, the ideal
(a batch of whatever waits when the forward frees) and its rules before the
open-loop backlog rule (the ``adaptive-open`` arm; off on the server, whose ``adaptive`` is the capped rules)."""

from __future__ import annotations

from sift_bench.simulate.forward_model import CPU_TEXT, GPU_LIKE, ForwardPreset
from sift_bench.simulate.metrics import Summary
from sift_bench.simulate.report import MAIN_FIGURE, dominates
from sift_bench.simulate.runner import Matrix, closed_capacity, make_arm, run_matrix
from sift_bench.simulate.scenarios import TraceConfig, default_families
from sift_server.engine.batch_queue import Caps

TRACES = TraceConfig(open_requests=1200)
PERCENTILES = MAIN_FIGURE["open"]


def runs(forward: ForwardPreset, family: str, arms: tuple[str, ...]) -> dict[str, Summary]:
    matrix = Matrix(forwards=[forward], arms=[make_arm(a) for a in arms], traces=TRACES, family_filter=[family])
    return {s.policy: s for s in run_matrix(matrix) if s.family == family}


def test_open_families_span_half_to_nearly_full_load_of_the_measured_closed_loop() -> None:
    names = [f.name for f in default_families(CPU_TEXT, Caps(), TRACES, closed_rate=lambda lengths: 50.0)]
    for kind in ("poisson", "bursty"):
        assert [n for n in names if n.startswith("open") and kind in n] == [
            f"open{load}-{kind}-sentences" for load in (50, 65, 80, 90, 95)
        ]
    assert not [f for f in default_families(CPU_TEXT, Caps(), TRACES) if f.kind == "open"]
    # The capacity is the engine's own closed loop of 32 callers on the same lengths.
    assert 45 < closed_capacity(Matrix([CPU_TEXT], [], TRACES), CPU_TEXT, "sentences") < 60


def test_near_capacity_the_backlog_rule_keeps_up_where_capped_batches_run_away() -> None:
    for family in ("open80-poisson-sentences", "open90-poisson-sentences"):
        by_arm = runs(CPU_TEXT, family, ("adaptive-open", "adaptive", "ideal"))
        adaptive, capped, ideal = by_arm["adaptive-open"], by_arm["adaptive"], by_arm["ideal"]
        assert dominates(adaptive, capped, PERCENTILES), (adaptive, capped)
        # As good as the ideal within the open loops' tolerance.
        assert dominates(adaptive, ideal, PERCENTILES, 0.1), (adaptive, ideal)
    # At 90 % the load caps leave the engine below the offered rate: the queue grows for the whole run.
    assert capped.latency_p50 > 2 * adaptive.latency_p50


def test_bursty_users_near_capacity_are_served_no_worse_than_by_capped_batches() -> None:
    # Bursty clusters that follow a forward look like returns to the return model, so
    # early answers stay off (engine.returns, clearly_independent): behind the ideal.
    for family in ("open80-bursty-sentences", "open90-bursty-sentences"):
        by_arm = runs(CPU_TEXT, family, ("adaptive-open", "adaptive"))
        adaptive, capped = by_arm["adaptive-open"], by_arm["adaptive"]
        assert dominates(adaptive, capped, PERCENTILES, 0.05), (adaptive, capped)
        assert adaptive.latency_p50 < 0.8 * capped.latency_p50


def test_on_a_gpu_like_forward_the_open_loops_are_served_as_the_ideal_and_better_than_the_timed_window() -> None:
    for family in ("open50-bursty", "open80-poisson", "open95-bursty"):
        by_arm = runs(GPU_LIKE, family, ("adaptive-open", "timed", "ideal"))
        assert dominates(by_arm["adaptive-open"], by_arm["timed"], PERCENTILES, 0.05), by_arm
        assert dominates(by_arm["adaptive-open"], by_arm["ideal"], PERCENTILES, 0.05), by_arm


def test_an_open_loop_run_is_deterministic() -> None:
    first = runs(CPU_TEXT, "open80-bursty-sentences", ("adaptive",))["adaptive"]
    assert first == runs(CPU_TEXT, "open80-bursty-sentences", ("adaptive",))["adaptive"]
