"""A runner's price of one more call, in tokens (``backends.call_cost``): the
arithmetic on exact timings, and the timing loop on a fake clock."""

from __future__ import annotations

import pytest

from sift_server.adapters.backends import call_cost

FIXED_S = 60e-6
PER_TOKEN_S = 3e-6


class FakeRuntime:
    """A call costs ``FIXED_S + PER_TOKEN_S * tokens`` of a fake clock, plus
    ``stall_s`` on the calls listed in ``stalls`` (other work on the core)."""

    def __init__(self, stalls: frozenset[int] = frozenset(), stall_s: float = 1e-3) -> None:
        self.now = 0.0
        self.calls = 0
        self.stalls = stalls
        self.stall_s = stall_s

    def clock(self) -> float:
        return self.now

    def run(self, rows: int, length: int) -> None:
        self.now += FIXED_S + PER_TOKEN_S * rows * length
        if self.calls in self.stalls:
            self.now += self.stall_s
        self.calls += 1


def test_exact_timings_give_the_fixed_part_over_the_per_token_part() -> None:
    full = FIXED_S + PER_TOKEN_S * 8 * 16
    half = FIXED_S + PER_TOKEN_S * 4 * 16
    assert call_cost.from_timings(full, half, 8, 16) == 20
    # Odd rows: the half call has rows // 2 rows.
    assert call_cost.from_timings(FIXED_S + PER_TOKEN_S * 7 * 10, FIXED_S + PER_TOKEN_S * 3 * 10, 7, 10) == 20


def test_a_half_call_no_cheaper_than_the_full_one_is_no_answer() -> None:
    assert call_cost.from_timings(1e-3, 1e-3, 8, 16) is None
    assert call_cost.from_timings(1e-3, 2e-3, 8, 16) is None


def test_no_fixed_part_is_no_answer_and_a_huge_one_is_capped() -> None:
    # No fixed part at all (or less than none: noise) would split at every length.
    assert call_cost.from_timings(8 * 16e-6, 4 * 16e-6, 8, 16) is None
    assert call_cost.from_timings(8 * 16e-6, 3 * 16e-6, 8, 16) is None
    # A tiny per-token part under a large fixed one.
    assert call_cost.from_timings(1.0 + 128e-9, 1.0 + 64e-9, 8, 16) == call_cost.MAX_CALL_COST
    assert call_cost.from_timings(0.0, 1e-4, 8, 16) is None


def test_measure_keeps_the_least_time_of_each_shape() -> None:
    # The first timed full call and the second timed half call are stalled: the
    # minimum over the repeats still sees the runtime's own cost.
    runtime = FakeRuntime(stalls=frozenset({2, 5}))
    assert call_cost.measure(runtime.run, clock=runtime.clock) == 20


def test_a_stall_in_every_repeat_of_a_shape_shows() -> None:
    runtime = FakeRuntime(stalls=frozenset(range(3, 200, 2)), stall_s=PER_TOKEN_S * 32)
    # Every half call pays 32 tokens' time more: the fit halves the per-token part
    # (32 tokens apart, not 64) and reads a fixed part of 20 + 64 tokens of it.
    assert call_cost.measure(runtime.run, rows=8, length=16, clock=runtime.clock) == (20 + 64) * 2


def test_measure_repeats_while_the_budget_lasts() -> None:
    short = FakeRuntime()
    call_cost.measure(short.run, clock=short.clock, budget_s=0.0)
    assert short.calls == 2 + 2 * call_cost.MIN_REPEATS
    long = FakeRuntime()
    call_cost.measure(long.run, clock=long.clock, budget_s=10.0)
    assert long.calls == 2 + 2 * call_cost.MAX_REPEATS


def test_measure_rejects_shapes_it_cannot_halve() -> None:
    with pytest.raises(ValueError, match="rows"):
        call_cost.measure(FakeRuntime().run, rows=1)
    with pytest.raises(ValueError, match="length"):
        call_cost.measure(FakeRuntime().run, length=0)
