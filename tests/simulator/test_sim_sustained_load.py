"""Closed-loop callers with mixed lengths: the old rules starve long texts and
split returning waves into alternating halves; the scheduler's rules do not."""

from __future__ import annotations

from sift_bench.simulate.forward_model import CPU_GLICLASS, CPU_LIKE, CPU_TEXT, GPU_LIKE, ForwardPreset
from sift_bench.simulate.metrics import Summary
from sift_bench.simulate.report import MAIN_FIGURE, dominates
from sift_bench.simulate.runner import Matrix, make_arm, run_matrix
from sift_bench.simulate.scenarios import TraceConfig
from sift_server.engine.batch_queue import Caps

TRACES = TraceConfig(closed_per_client=40)


def runs(
    forward: ForwardPreset, family: str, arms: tuple[str, ...] = ("adaptive", "adaptive-old", "timed", "immediate")
) -> dict[str, Summary]:
    matrix = Matrix(
        forwards=[forward],
        arms=[make_arm(name) for name in arms],
        traces=TRACES,
        caps=Caps(),
        family_filter=[family],
    )
    return {s.policy: s for s in run_matrix(matrix) if s.family == family}


def test_old_rules_starve_long_texts_at_32_in_flight_and_the_scheduler_does_not() -> None:
    by_arm = runs(CPU_TEXT, "closed32-mixed")
    assert by_arm["adaptive-old"].tail_ratio > 4  # long texts passed over again and again
    assert by_arm["adaptive"].tail_ratio < 1.6
    assert by_arm["adaptive"].latency_max < 2 * by_arm["adaptive"].latency_p50


def test_old_rules_split_returning_waves_and_the_scheduler_fuses_them_where_it_pays() -> None:
    for clients in (8, 32):
        by_arm = runs(GPU_LIKE, f"closed{clients}")
        assert by_arm["adaptive-old"].mean_batch <= clients / 2  # two alternating halves
        assert by_arm["adaptive"].mean_batch > 0.9 * clients
        assert by_arm["adaptive"].throughput >= by_arm["timed"].throughput
        assert by_arm["adaptive"].throughput > by_arm["adaptive-old"].throughput


def test_no_hold_for_a_wave_where_the_forward_has_no_fixed_part_worth_it() -> None:
    # CPU-like: 0.6 ms fixed per forward, less than the callers' turnaround,
    # so alternating halves keep the worker busier than waiting would.
    by_arm = runs(CPU_LIKE, "closed32")
    assert by_arm["adaptive"].reasons.get("wave", 0) == 0
    assert by_arm["adaptive"].throughput >= 0.99 * by_arm["immediate"].throughput


def test_a_simulated_run_is_deterministic() -> None:
    first = runs(CPU_TEXT, "closed8-mixed")["adaptive"]
    again = runs(CPU_TEXT, "closed8-mixed")["adaptive"]
    assert first == again


def test_on_sentences_whole_waves_dominate_the_timed_window_and_split_waves_do_not() -> None:
    for clients in (8, 32):
        family = f"closed{clients}-sentences"
        by_arm = runs(CPU_TEXT, family, ("adaptive", "adaptive-split", "timed"))
        adaptive, timed = by_arm["adaptive"], by_arm["timed"]
        assert dominates(adaptive, timed, MAIN_FIGURE["closed"]), (adaptive, timed)
        assert adaptive.mean_batch > 0.9 * clients  # each wave in one batch
    # Before whole waves: a wave cut by the load caps left a request behind for a forward.
    assert by_arm["adaptive-split"].latency_max > 1.2 * timed.latency_max


def test_a_wave_read_slowly_on_a_shared_core_is_held_whole_and_dominates_the_reference_window() -> None:
    # GLiClass-sized forwards on one core that the loop reading the requests shares:
    # 32 returns reach the scheduler over about 10 ms, longer than the fixed 10 ms
    # bound allowed after the forward; the bound that scales with the forward waits for them.
    for clients in (8, 32):
        family = f"closed{clients}-sentences"
        by_arm = runs(CPU_GLICLASS, family, ("adaptive", "adaptive-10ms", "timed-whole"))
        adaptive, reference = by_arm["adaptive"], by_arm["timed-whole"]
        assert dominates(adaptive, reference, MAIN_FIGURE["closed"]), (adaptive, reference)
        # Whole waves, but for one forward at the start: the first burst's early answers
        # come back while it runs and go first (engine.policy, answered early).
        forwards = sum(adaptive.reasons.values())
        assert adaptive.mean_batch * forwards >= clients * (forwards - 1)
    # With the fixed bound the 32-wave comes back slower than a hold may last: the loop
    # runs as two alternating halves instead (before halves, its stragglers waited a
    # whole forward: the tail the bench saw). Whole waves are better where they can be held.
    fixed = by_arm["adaptive-10ms"]
    assert fixed.reasons.get("half", 0) > 0.9 * sum(fixed.reasons.values())
    assert fixed.mean_batch < 0.6 * clients
    assert dominates(fixed, reference, MAIN_FIGURE["closed"]), (fixed, reference)
    assert adaptive.latency_p99 < fixed.latency_p99
    assert adaptive.throughput > fixed.throughput


def test_a_slow_client_runs_the_loop_in_two_regular_halves_and_dominates_the_reference_window() -> None:
    # A client that handles its answers one by one (1.5 ms each) spreads a wave of 32
    # over ~50 ms, longer than a hold may last: the waves cannot be kept whole, and cut
    # at the bound they drifted into uneven groups whose stragglers waited a forward more.
    for clients in (8, 32):
        family = f"closed{clients}-sentences-slowclient"
        by_arm = runs(CPU_GLICLASS, family, ("adaptive", "timed-whole"))
        adaptive, reference = by_arm["adaptive"], by_arm["timed-whole"]
        assert dominates(adaptive, reference, MAIN_FIGURE["closed"]), (adaptive, reference)
        assert adaptive.mean_batch == clients / 2  # two halves, every forward whole
        assert adaptive.latency_max < 1.15 * adaptive.latency_p50
