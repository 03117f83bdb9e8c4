"""Dispatch policies: pure functions of the scheduler state and the time.

``decide(state, now)`` answers ``Dispatch`` (run a forward for a lane now, with
a reason), ``WaitUntil`` (decide again at that time, or earlier if an event
arrives) or ``Idle`` (nothing to do until an event). The engine shell and the
simulator drive the very same objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from sift_server.engine.arrivals import ArrivalView

# Share of a forward's duration that a hold for its returning wave may last, and
# that widens the horizon of sustained load after a slow forward (``hold_bound``,
# ``Scheduler._under_load``): the batching model's, not an operator's setting.
WAVE_SHARE = 0.10

Reason = Literal["lone", "burst-complete", "full", "window", "max-wait", "backlog", "wave", "half", "closing"]
REASONS: tuple[Reason, ...] = (
    "lone",
    "burst-complete",
    "full",
    "window",
    "max-wait",
    "backlog",
    "wave",
    "half",
    "closing",
)


@dataclass(frozen=True, slots=True)
class LaneView:
    """What a policy may know about one lane's queue."""

    lane: str
    head_arrival: float
    last_arrival: float
    requests: int
    # The head's compatible requests reach a cap of the batch the lane would take now.
    fills_cap: bool


@dataclass(frozen=True, slots=True)
class SchedulerState:
    lanes: Sequence[LaneView]
    busy: bool
    # End of the last forward: a head that arrived before it queued behind that forward.
    last_forward_end: float
    # Requests of this model whose headers arrived but that are not admitted yet.
    ingress_pending: int
    arrivals: ArrivalView
    # Shutting down: everything queued runs at once, nothing waits.
    closing: bool = False
    # The returning wave of the last forward (engine.returns): requests still
    # expected (already limited to what fits the batch), and by when.
    wave_expected: int = 0
    # Requests in ingress while a wave is returning (its arrivals, being read).
    wave_in_ingress: int = 0
    # Returns still missing from open waves within their horizon, past their allowance or not.
    wave_missing: int = 0
    wave_deadline: float = float("-inf")
    # All of a reliable wave has come back: what is queued now is that wave.
    wave_back: bool = False
    # Fixed seconds of a forward (engine.forward_cost); None while unknown.
    fixed_cost: float | None = None
    # The event loop that reads requests and the forward share one core.
    shared_core: bool = False
    # Seconds the last forward ran (0 before the first): bounds a hold for its wave.
    last_forward_seconds: float = 0.0
    # Requests the last forward answered (the reference's timed window drains after a batch).
    last_forward_requests: int = 0
    # The last forward answered some requests before it ended (a burst after idle time).
    last_forward_answered_early: bool = False
    # Returns not back yet from open waves (in ingress or still due), not limited to a batch's room.
    wave_outstanding: int = 0
    # Seconds a wave of the whole loop (queued, running and outstanding requests)
    # takes to come back in full after its forward, scaled by size from the
    # learned waves, and how long it may take (the return model's margin on the
    # slowest learned wave at least as large; engine.returns). 0 while unknown.
    wave_span: float = 0.0
    wave_allowance: float = 0.0
    # The scheduler's share of a forward a hold for its wave may last (``hold_bound``).
    wave_share: float = WAVE_SHARE
    # Arrivals are known not to follow answers (engine.returns: an open loop).
    independent_arrivals: bool = False


@dataclass(frozen=True, slots=True)
class Dispatch:
    lane: str
    reason: Reason


@dataclass(frozen=True, slots=True)
class WaitUntil:
    deadline: float


@dataclass(frozen=True, slots=True)
class Idle:
    pass


Decision = Dispatch | WaitUntil | Idle


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def decide(self, state: SchedulerState, now: float) -> Decision: ...


def _oldest_lane(state: SchedulerState) -> LaneView | None:
    """Oldest head first across lanes, so no LoRA queue starves."""
    candidates = [lane for lane in state.lanes if lane.requests > 0]
    if not candidates:
        return None
    return min(candidates, key=lambda lane: lane.head_arrival)


def _common(state: SchedulerState) -> Decision | LaneView:
    """Rules every policy shares; returns the lane to think about otherwise."""
    if state.busy:
        return Idle()
    lane = _oldest_lane(state)
    if lane is None:
        return Idle()
    if state.closing:
        return Dispatch(lane.lane, "closing")
    if lane.fills_cap:
        return Dispatch(lane.lane, "full")
    return lane


def _is_backlog(state: SchedulerState, lane: LaneView) -> bool:
    """The head queued behind a forward (continuous batching: it waited already)."""
    return lane.head_arrival <= state.last_forward_end


def hold_bound(state: SchedulerState, max_hold: float, wave_share: float) -> float:
    """Latest end of a hold for the returning wave: ``max_hold`` after the
    forward ended, or ``wave_share`` of that forward's own duration if longer.

    A slow forward's clients come back over a longer span (on one shared core
    the loop reads them one by one), and a straggler cut off waits a whole
    forward: the bound scales with the forward, so the worst a hold can cost is
    ``wave_share`` of the core's time, never more."""
    return state.last_forward_end + max(max_hold, wave_share * state.last_forward_seconds)


def wave_hold(
    state: SchedulerState, lane: LaneView, now: float, max_hold: float, wave_share: float = 0.0, quiet: float = 0.0
) -> WaitUntil | None:
    """Wait for the rest of a returning wave, where that pays.

    On one shared core (the loop that reads requests and the forward): while
    the wave's requests are being read or still due (its learned allowance),
    the hold costs little: reading them is work the core does anyway, and the
    forward it would start now would run slower beside it. A straggler cut off
    waits a whole forward. So hold until the wave is back, its allowance has
    passed, or ``hold_bound``.

    Elsewhere, closed-loop clients split into two halves keep the engine busy
    (each half comes back while the other runs), so a cycle costs ``F(q) +
    F(r) = 2a + b(q + r)``; waiting ``d`` seconds for the rest of the wave and
    running one forward costs ``a + b(q + r) + d``. Holding pays exactly when
    the forward's fixed part ``a`` exceeds the wait ``d``.

    Only requests already in ingress may be waited for past the allowance
    (their admission wakes the engine), and on a shared core a wave whose
    returns are still coming in (the last one less than ``quiet`` ago: a
    slower wave than the learned ones); nothing waits past ``hold_bound``."""
    bound = hold_bound(state, max_hold, wave_share)
    if state.shared_core and state.wave_missing > 0 and state.wave_expected <= 0 and not state.wave_in_ingress:
        until = min(state.arrivals.last_arrival + quiet, bound)
        return WaitUntil(until) if now < until else None
    if state.wave_expected <= 0 and not state.wave_in_ingress:
        return None
    if state.wave_expected > 0:
        until = min(state.wave_deadline, bound)
        wait = until - now
    else:
        # Only requests being read are missing: their admission wakes the engine long before ``bound``.
        until, wait = bound, 0.0
    if now >= until:
        return None
    if not state.shared_core and (state.fixed_cost is None or state.fixed_cost <= wait):
        return None
    return WaitUntil(until)


def halves(state: SchedulerState, lane: LaneView, now: float, max_hold: float, wave_share: float) -> Decision | None:
    """Closed-loop clients whose wave comes back too slowly to hold for: run
    the loop as two halves.

    A hold for a returning wave may last ``hold_bound`` (a tenth of the forward
    the wave comes from). A client that handles its answers one by one (an
    HTTP client library in Python) spreads a wave of 32 over more than that;
    cut at the bound, the wave's stragglers wait a whole forward more, and the
    loop drifts into uneven groups. Two halves that alternate keep the core
    busy, and every request waits the same cycle, the other half's forward
    then its own, as long as the halves stay whole: so a half runs once at
    least half of the loop is queued (in steady state the other half came back
    while this one ran), and while fewer are queued the engine waits for the
    returning ones, at most until the whole wave would be back.

    Used where the whole loop's wave (queued, running and returning requests)
    took longer to come back than ``hold_bound`` allows for the forward of the
    whole loop; only on a shared core, only with waves that come back reliably."""
    if not state.shared_core or not state.wave_span:
        return None
    loop = lane.requests + state.wave_outstanding
    whole_forward = state.last_forward_seconds * loop / max(1, state.last_forward_requests)
    if 2 * state.last_forward_requests <= loop:
        # Already alternating: the estimate of the loop's forward varies with each
        # half's, and leaving halves on a slow one merges a half that waited a
        # forward already with the returning one. Leave only well within the bound.
        whole_forward /= 2
    if state.wave_span <= max(max_hold, wave_share * whole_forward):
        return None
    if 2 * lane.requests >= loop:
        return Dispatch(lane.lane, "half")
    until = max(lane.head_arrival + max_hold, state.last_forward_end + state.wave_allowance)
    return WaitUntil(until) if now < until else Dispatch(lane.lane, "half")


@dataclass(frozen=True, slots=True)
class ImmediatePolicy:
    """Dispatch whatever is queued the moment the executor is free."""

    name: str = "immediate"

    def decide(self, state: SchedulerState, now: float) -> Decision:
        lane = _common(state)
        if not isinstance(lane, LaneView):
            return lane
        if _is_backlog(state, lane):
            return Dispatch(lane.lane, "backlog")
        return Dispatch(lane.lane, "lone" if lane.requests == 1 else "burst-complete")


@dataclass(frozen=True, slots=True)
class TimedPolicy:
    """The reference (sie-server 0.10.1's batch former): whenever the engine is
    free, wait until arrivals are quiet for ``idle_coalesce`` seconds, bounded
    by ``max_wait`` after the head; work that queued behind a multi-request
    forward runs at once (its drain). That is how the reference collects a
    returning wave into one forward. Its ``max_wait`` is moved by a controller
    between 15 and 50 ms and sits at 50 ms under a closed loop (latency stays
    under its 1.5 x forward target), so that is the default here."""

    idle_coalesce: float = 0.003
    max_wait: float = 0.050
    name: str = "timed"

    def decide(self, state: SchedulerState, now: float) -> Decision:
        lane = _common(state)
        if not isinstance(lane, LaneView):
            return lane
        if state.last_forward_requests > 1 and _is_backlog(state, lane):
            return Dispatch(lane.lane, "backlog")
        quiet_at = lane.last_arrival + self.idle_coalesce
        cap_at = lane.head_arrival + self.max_wait
        if now >= cap_at:
            return Dispatch(lane.lane, "max-wait")
        if now >= quiet_at:
            return Dispatch(lane.lane, "window")
        return WaitUntil(min(quiet_at, cap_at))


@dataclass(frozen=True, slots=True)
class AdaptivePolicy:
    """Dispatch a lone request at once; hold an idle engine only while a burst
    is expected, and dispatch once the expected burst is complete and quiet
    for ``follow_gap`` (the next burst may be bigger than the learned one).

    In order, for the oldest head (after the shared rules): run work that
    came back from the last batch's early answers (``backlog``); run the loop
    as two halves where its wave is too slow to hold for (``halves``); hold for the rest
    of a returning wave where that pays (``wave_hold``); run a wave that is
    back (``wave``); run work that queued behind a forward (``backlog``; on a
    shared core, first let requests being read and a returning wave go quiet,
    within ``max_hold``); then, on an idle engine, hold while the arrival model
    expects a burst (requests in ingress, or predicted followers until
    ``follow_gap`` after the latest arrival: ``window``), bounded by
    ``max_hold`` (``max_burst_hold`` for a learned burst still arriving:
    ``max-wait``); otherwise ``lone`` / ``burst-complete``.

    Followers are counted by the arrival model, never by comparing a cluster's
    size with the lane (part of it may have run already). Random traffic never
    looks like a burst, so it is dispatched as ``immediate`` would: fusing a
    chance follower pays only on a forward with a large fixed cost. The rules'
    reasons and measurements are in docs/batching.md.
    """

    max_hold: float = 0.010
    # Upper bound of a hold for a learned burst whose arrivals keep coming.
    max_burst_hold: float = 0.500
    # Shared core, work queued behind a forward: arrivals this recent are a wave
    # still coming back; wait until they are quiet (bounded by max_hold).
    backlog_quiet: float = 0.003
    name: str = "adaptive"

    def decide(self, state: SchedulerState, now: float) -> Decision:
        lane = _common(state)
        if not isinstance(lane, LaneView):
            return lane
        if state.last_forward_answered_early and _is_backlog(state, lane):
            # Clients answered early by the last batch (a burst after idle time, the start of a
            # closed loop) came back while it ran and waited most of a forward already: hold
            # nothing for them. Held for the rest of the burst's wave, they waited two forwards.
            return Dispatch(lane.lane, "backlog")
        if state.wave_outstanding:
            paced = halves(state, lane, now, self.max_hold, state.wave_share)
            if paced is not None:
                return paced
        held = wave_hold(state, lane, now, self.max_hold, state.wave_share, self.backlog_quiet)
        if held is not None:
            return held
        if state.wave_back and lane.requests > 1:
            return Dispatch(lane.lane, "wave")
        if _is_backlog(state, lane):
            until = hold_bound(state, self.max_hold, state.wave_share)
            if state.shared_core and now < until:
                # On one shared core, requests being read would interleave with the
                # forward and slow both: let them join this batch (admission wakes us),
                # and the ones still arriving too, until arrivals are quiet.
                if state.ingress_pending > 0:
                    return WaitUntil(until)
                quiet_at = max(lane.last_arrival, state.arrivals.last_arrival) + self.backlog_quiet
                if now < quiet_at:
                    return WaitUntil(min(quiet_at, until))
            return Dispatch(lane.lane, "backlog")
        arrivals = state.arrivals
        # A burst that is known to be coming may trickle in slowly (a slow
        # client spreads 32 requests over a hundred milliseconds): while its
        # arrivals keep coming within ``follow_gap`` of each other, only
        # ``max_burst_hold`` bounds the hold.
        # Independent users' clusters never stop "arriving" at a high rate: where arrivals are
        # known independent (engine.returns), the arrival model's prediction of a burst holds no
        # longer than ``max_hold``, and requests whose headers are in (``unseen_followers``) at
        # most about one forward's time, so a concurrent burst after idle time still runs in one
        # forward where a forward costs more than reading it (a CPU) and not much longer elsewhere.
        predicted = arrivals.expects_burst and not state.independent_arrivals
        expecting = arrivals.unseen_followers > 0 or predicted
        bound = self.max_hold
        if expecting:
            bound = max(
                self.max_hold,
                state.last_forward_seconds if not predicted and state.independent_arrivals else self.max_burst_hold,
            )
        hold_until = lane.head_arrival + bound
        if now >= hold_until:
            return Dispatch(lane.lane, "max-wait")
        if state.ingress_pending > 0 and arrivals.expects_burst:
            # Followers are already being read and decoded: wait for them (an
            # admission or a failed ingress wakes the engine).
            return WaitUntil(hold_until)
        if arrivals.unseen_followers > 0:
            # Until the burst goes quiet, or falls behind the pace of the learned ones (its next
            # follower overdue: the traffic is not that burst).
            quiet_at = min(max(lane.last_arrival, arrivals.last_arrival) + arrivals.follow_gap, arrivals.follower_due)
            if now >= quiet_at:
                # The burst is complete, or came out smaller than predicted.
                return Dispatch(lane.lane, "burst-complete" if arrivals.at_learned_size else "window")
            return WaitUntil(min(quiet_at, hold_until))
        return Dispatch(lane.lane, "lone" if lane.requests == 1 else "burst-complete")


POLICIES = ("adaptive", "timed", "immediate")


def make_policy(
    name: str,
    *,
    max_hold_ms: float = AdaptivePolicy().max_hold * 1000,
    max_burst_hold_ms: float = AdaptivePolicy().max_burst_hold * 1000,
    idle_coalesce_ms: float = TimedPolicy().idle_coalesce * 1000,
    max_wait_ms: float = TimedPolicy().max_wait * 1000,
) -> Policy:
    """A policy by name; the defaults are the policies' own."""
    if name == "adaptive":
        return AdaptivePolicy(max_hold=max_hold_ms / 1000, max_burst_hold=max_burst_hold_ms / 1000)
    if name == "timed":
        return TimedPolicy(idle_coalesce=idle_coalesce_ms / 1000, max_wait=max_wait_ms / 1000)
    if name == "immediate":
        return ImmediatePolicy()
    raise ValueError(f"unknown batching policy {name!r}; choose one of {', '.join(POLICIES)}")
