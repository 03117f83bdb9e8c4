"""Holding for a returning wave that one shared core reads slowly: deterministic,
on the scheduler itself with the times passed in (no clock, no threads)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace

from sift_server.engine.arrivals import ArrivalView
from sift_server.engine.policy import (
    AdaptivePolicy,
    Dispatch,
    LaneView,
    SchedulerState,
    TimedPolicy,
    WaitUntil,
    halves,
)
from sift_server.engine.scheduler import Batch, Scheduler, SchedulerConfig

MS = 0.001
FORWARD = 400 * MS  # a GLiClass-sized forward of 32 on one core
SPACING = 0.5 * MS  # the loop reads one request after the other: 32 arrive over 15.5 ms


def shared_core(**config: float) -> Scheduler:
    s = Scheduler(AdaptivePolicy(), SchedulerConfig(shared_core=True, **config))  # type: ignore[arg-type]
    s.seed_costs([(16, 0.020), (256, 0.130), (512, 0.240)])
    return s


class Loop:
    """A closed loop of clients around ``s``, driven by hand: the clients of a
    forward come back one header every ``spacing`` from 2 ms after it ended
    (the loop reads them one after the other), each admitted ``spacing`` / 2
    later; the scheduler decides at every admission, timer and forward end,
    as the worker does. Every forward takes ``FORWARD``."""

    def __init__(self, s: Scheduler, spacing: float = SPACING) -> None:
        self.s, self.spacing = s, spacing
        self.events: list[tuple[float, int, str]] = []
        self.timer: float | None = None
        self.running: tuple[Batch, float] | None = None
        self.forwards: list[tuple[float, Batch]] = []
        self.now = 0.0

    def send(self, at: float, rids: list[str]) -> None:
        for i, rid in enumerate(rids):
            header = at + 2 * MS + i * self.spacing
            heapq.heappush(self.events, (header, 1, rid))
            heapq.heappush(self.events, (header + self.spacing / 2, 2, rid))

    def run(self, until_forwards: int, returning: int | None = None) -> None:
        """Until ``until_forwards`` forwards started; ``returning``: how many
        clients of each forward come back (all by default). Stops early when nothing is left to happen."""
        while len(self.forwards) < until_forwards and (self.events or self.timer is not None):
            if self.timer is not None and (not self.events or self.timer <= self.events[0][0]):
                self.now, self.timer = self.timer, None
            else:
                self.now, kind, rid = heapq.heappop(self.events)
                if kind == 1:
                    self.s.header_arrived(self.now)
                    continue
                if kind == 2:
                    self.s.ingress_ended()
                    self.s.admit(rid, [16], self.now)
                else:
                    assert self.running is not None
                    batch, started = self.running
                    self.running = None
                    done = self.s.complete(batch, started, self.now).finished
                    back = done if returning is None else done[:returning]
                    self.send(self.now, [f"{rid.split('.')[0]}.{len(self.forwards)}" for rid in back])
            decision = self.s.decide(self.now)
            self.timer = None
            if isinstance(decision, Dispatch):
                batch = self.s.take(decision, self.now)
                assert batch is not None
                self.running = (batch, self.now)
                self.forwards.append((self.now, batch))
                heapq.heappush(self.events, (self.now + FORWARD, 0, ""))
            elif isinstance(decision, WaitUntil):
                self.timer = decision.deadline


def closed_loop(s: Scheduler, forwards: int, n: int = 32) -> Loop:
    loop = Loop(s)
    loop.send(0.0, [f"c{i}.start" for i in range(n)])
    loop.run(forwards)
    return loop


def burst(s: Scheduler, at: float, costs: list[int], prefix: str) -> None:
    """Requests read one after the other 0.1 ms apart from ``at``, each admitted as read."""
    for i, cost in enumerate(costs):
        s.header_arrived(at + i * 0.1 * MS)
        s.ingress_ended()
        s.admit(f"{prefix}.{i}", [cost], at + i * 0.1 * MS)


def take_when_due(s: Scheduler, now: float) -> tuple[Batch | None, float]:
    """Follow the policy's waits from ``now``; the batch it then dispatches (None if
    it goes idle), and when."""
    decision = s.decide(now)
    while isinstance(decision, WaitUntil):
        now = decision.deadline
        decision = s.decide(now)
    return (s.take(decision, now) if isinstance(decision, Dispatch) else None), now


def sizes(loop: Loop) -> list[int]:
    return [len(batch.slices) for _, batch in loop.forwards]


def test_a_slowly_read_wave_is_held_until_all_of_it_is_back() -> None:
    s = shared_core()
    loop = closed_loop(s, 16)
    assert s.waves.reliable and s.whole_waves
    # Once learned, every wave runs whole, though it takes 17.5 ms (more than max_hold) to come back.
    assert sizes(loop)[-6:] == [32] * 6


def test_with_a_fixed_ten_millisecond_bound_the_same_wave_is_cut() -> None:
    # The rule before the bound scaled with the forward: stragglers miss their wave.
    s = Scheduler(AdaptivePolicy(), SchedulerConfig(shared_core=True, wave_share=0.0))
    s.seed_costs([(16, 0.020), (256, 0.130), (512, 0.240)])
    loop = closed_loop(s, 16)
    assert all(size < 32 for size in sizes(loop)[-6:])


def test_the_hold_never_outlasts_a_tenth_of_the_forward() -> None:
    s = shared_core()
    loop = closed_loop(s, 16)
    assert s.whole_waves
    # From now on only 20 of each 32 come back: the worker runs the 20 no later
    # than 10 % of a forward after the last one ended.
    loop.run(17, returning=20)
    loop.run(18, returning=20)
    (previous, _), (start, batch) = loop.forwards[-2:]
    assert len(batch.slices) == 20
    assert start <= previous + FORWARD + 0.10 * FORWARD + 1e-9


def test_a_burst_after_idle_time_keeps_early_answers_while_waves_are_reliable() -> None:
    s = shared_core()
    loop = closed_loop(s, 16)
    loop.run(10**6, returning=0)  # the clients go away after the forward that runs now
    assert s.whole_waves
    later = loop.now + 2.0  # two seconds of idle time: nothing is returning, no loop restarting
    burst(s, later, [16] * 8, "burst")
    batch, _ = take_when_due(s, later + 1 * MS)
    assert batch is not None and len(batch.slices) == 8
    assert not batch.deliver_together


def test_a_lone_request_after_idle_time_still_runs_at_once() -> None:
    s = shared_core()
    loop = closed_loop(s, 16)
    loop.run(10**6, returning=0)
    later = loop.now + 1.0
    s.header_arrived(later)
    s.ingress_ended()
    s.admit("lone", [16], later)
    assert s.decide(later) == Dispatch("default", "lone")


def test_timed_drains_what_queued_behind_a_forward_of_several_requests() -> None:
    # The reference's batch former runs the backlog present when a batch ends at once.
    s = Scheduler(TimedPolicy(), SchedulerConfig())
    for i in range(4):
        s.admit(f"a{i}", [16], 0.0)
    decision = s.decide(3 * MS)
    assert decision == Dispatch("default", "window")
    batch = s.take(decision, 3 * MS)
    assert batch is not None
    s.admit("behind", [16], 10 * MS)
    s.complete(batch, 3 * MS, 20 * MS)
    assert s.decide(20 * MS) == Dispatch("default", "backlog")
    # After a forward of one request, the reference coalesces again (its idle path).
    lone = s.take(Dispatch("default", "backlog"), 20 * MS)
    assert lone is not None
    s.admit("next", [16], 29 * MS)
    s.complete(lone, 20 * MS, 30 * MS)
    assert s.decide(30 * MS) == WaitUntil(32 * MS)


def test_a_wave_slower_than_the_learned_ones_is_held_while_its_returns_keep_coming() -> None:
    s = shared_core()
    loop = closed_loop(s, 16)
    assert sizes(loop)[-1] == 32
    # The next wave is read at twice the spacing: past the learned allowance, but
    # arriving steadily, so it is still held whole (within 10 % of the forward).
    loop.spacing = 2 * SPACING
    loop.run(20)
    assert sizes(loop)[-3:] == [32] * 3


def test_past_its_allowance_a_wave_that_went_quiet_is_not_waited_for() -> None:
    s = shared_core()
    loop = closed_loop(s, 16)
    loop.run(17, returning=31)  # one client of the next wave never comes back
    loop.run(18)
    (previous, _), (start, batch) = loop.forwards[-2:]
    assert len(batch.slices) == 31
    # Dispatched once the returns went quiet (3 ms), long before the bound.
    last_admission = previous + FORWARD + 2 * MS + 30 * SPACING + SPACING / 2
    assert start < previous + FORWARD + 0.10 * FORWARD
    assert start <= last_admission + 3 * MS + 1e-9


def slow_client_loop(s: Scheduler, forwards: int, n: int = 32) -> Loop:
    # A client that handles its answers one by one: 32 returns over 110 ms, more than
    # a hold for them may last (a tenth of the forward; this loop's forwards all take
    # 400 ms, so the policy, which scales a half's forward to the whole loop, allows 80 ms).
    loop = Loop(s, spacing=3.5 * MS)
    loop.send(0.0, [f"c{i}.start" for i in range(n)])
    loop.run(forwards)
    return loop


def test_a_wave_too_slow_to_hold_runs_as_two_halves_that_stay_whole() -> None:
    s = shared_core()
    loop = slow_client_loop(s, 24)
    assert s.waves.reliable
    last = loop.forwards[-8:]
    assert [len(batch.slices) for _, batch in last] == [16] * 8
    assert {batch.reason for _, batch in last} == {"half"}
    # The halves alternate: each forward holds the clients of the one before the last.
    clients = [{rid.split(".")[0] for rid in batch.request_ids} for _, batch in last]
    assert all(clients[i] == clients[i + 2] and not clients[i] & clients[i + 1] for i in range(6))
    # In steady state the other half is back before this one ends: no wait between forwards.
    for (start, _), (next_start, _) in itertools.pairwise(last):
        assert abs(next_start - start - FORWARD) < 1e-9


def test_the_same_slow_wave_cut_at_the_hold_bound_splits_unevenly_without_halves() -> None:
    # The rule before halves (a policy without them): stragglers miss their wave, and
    # the loop drifts into groups of uneven size.
    class WithoutHalves(AdaptivePolicy):
        def decide(self, state, now):  # type: ignore[no-untyped-def]
            return super().decide(replace(state, wave_outstanding=0), now)

    s = Scheduler(WithoutHalves(), SchedulerConfig(shared_core=True))
    s.seed_costs([(16, 0.020), (256, 0.130), (512, 0.240)])
    loop = slow_client_loop(s, 24)
    assert len(set(sizes(loop)[-8:])) > 1


def test_a_half_waits_for_the_returning_clients_at_most_until_the_whole_wave_would_be_back() -> None:
    s = shared_core()
    loop = slow_client_loop(s, 24)
    span = s.waves.margin * s.waves.span(32)
    assert span > 0.10 * FORWARD
    # Now only 4 of each half come back: the worker runs them no later than the
    # learned span after the forward ended.
    loop.run(25, returning=4)
    loop.run(27, returning=4)
    (previous, _), (start, _) = loop.forwards[-2:]
    assert start <= previous + FORWARD + span + 1e-9


def test_clients_answered_early_by_a_burst_are_not_held_for_the_rest_of_its_wave() -> None:
    # The start of a closed loop of 32 after idle time: one burst, cut into a short and
    # a long sub-forward. The clients of the short one are answered early, come back
    # while the long one runs, and wait for it; held for the rest of the burst's wave they
    # would wait a second whole forward.
    s = shared_core()
    loop = closed_loop(s, 16)
    loop.run(10**6, returning=0)  # waves are learned; then the clients go away
    assert s.whole_waves
    idle = loop.now + 2.0
    burst(s, idle, [8] * 6 + [60] * 26, "b")
    batch, now = take_when_due(s, idle + 4 * MS)
    assert batch is not None and not batch.deliver_together and len(batch.chunks) == 2
    early = [batch.slices[k].pending.request_id for k in batch.answered(0)]
    s.answered_early(now + 50 * MS, len(early))
    for i, rid in enumerate(early):  # they come back while the long sub-forward runs
        s.header_arrived(now + 55 * MS + i * MS)
        s.ingress_ended()
        s.admit(f"{rid}.2", [8], now + 55 * MS + i * MS)
    end = now + FORWARD
    s.complete(batch, now, end)
    decision = s.decide(end)
    assert decision == Dispatch("default", "backlog")
    again = s.take(decision, end)
    assert again is not None and len(again.slices) == len(early)


def test_a_burst_soon_after_a_closed_loop_answers_together() -> None:
    # A closed loop starting again half a second after the last one ended: its first
    # batch answers every request when it ends, so no client answered early comes back
    # to wait for the rest of the batch and then a forward of its own.
    s = shared_core()
    loop = closed_loop(s, 16)
    loop.run(10**6, returning=0)
    later = loop.now + 0.5
    assert later - s.waves.last_return <= s.config.wave_memory
    burst(s, later, [8] * 6 + [60] * 26, "again")
    batch, _ = take_when_due(s, later + 4 * MS)
    assert batch is not None and len(batch.slices) == 32 and len(batch.chunks) == 2
    assert batch.deliver_together


def _halves_state(last_requests: int, last_seconds: float, span: float) -> tuple[SchedulerState, LaneView]:
    lane = LaneView("default", head_arrival=0.9, last_arrival=0.95, requests=4, fills_cap=False)
    state = SchedulerState(
        lanes=[lane],
        busy=False,
        last_forward_end=1.0,
        ingress_pending=0,
        arrivals=ArrivalView(),
        shared_core=True,
        last_forward_seconds=last_seconds,
        last_forward_requests=last_requests,
        wave_outstanding=4,
        wave_span=span,
        wave_allowance=1.5 * span,
    )
    return state, lane


def test_halves_stay_halves_when_one_half_runs_slow_and_whole_waves_stay_whole() -> None:
    # A loop of 8 whose wave comes back over 22 ms. Alternating halves of 4: one half's
    # slow forward (129 ms, so 258 ms for the loop) must not make the policy merge the
    # queued half, which waited that forward already, with the returning one.
    state, lane = _halves_state(last_requests=4, last_seconds=0.129, span=0.022)
    assert halves(state, lane, 1.0, max_hold=0.010, wave_share=0.10) == Dispatch("default", "half")
    # Running whole waves of 8 with the same span and forward: the wave is held whole.
    state, lane = _halves_state(last_requests=8, last_seconds=0.258, span=0.022)
    assert halves(state, lane, 1.0, max_hold=0.010, wave_share=0.10) is None


def test_a_burst_after_a_slow_clients_loop_still_runs_in_one_forward() -> None:
    # Once a slow client's loop taught the policy halves, a burst after idle time (its
    # requests still being read: in ingress) is no loop to halve.
    s = shared_core()
    loop = slow_client_loop(s, 24)
    loop.run(10**6, returning=0)
    assert s.waves.reliable
    later = loop.now + 0.25
    for i in range(8):
        s.header_arrived(later + i * 0.5 * MS)
    now = later + 4 * MS
    sizes_run = []
    for i in range(8):
        s.ingress_ended()
        s.admit(f"burst.{i}", [16], now + i * 0.5 * MS)
        decision = s.decide(now + i * 0.5 * MS)
        if isinstance(decision, Dispatch):
            batch = s.take(decision, now + i * 0.5 * MS)
            assert batch is not None
            sizes_run.append(len(batch.slices))
            s.complete(batch, now + i * 0.5 * MS, now + i * 0.5 * MS + FORWARD)
    rest, _ = take_when_due(s, now + 8 * MS)
    if rest is not None:
        sizes_run.append(len(rest.slices))
    assert sizes_run == [8]
