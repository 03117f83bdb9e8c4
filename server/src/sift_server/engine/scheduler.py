"""The scheduler of one model: queues, busy state, admission and signals.

Plain synchronous code over explicit state and the times the caller passes in,
in the spirit of vLLM v1's scheduler: it returns data and never waits. Two
shells drive the very same object: the model engine (``engine/model_engine.py``: asyncio,
the executor thread, futures) and the simulator (``sift_bench.simulate.engine_sim``:
a virtual clock). So what the simulator shows is what the server does.

It owns, and nothing else changes:

* one ``BatchQueue`` per (model, LoRA) lane, and which lane each admitted
  request sits in;
* the running batch (one forward at a time per model) and when the last one ended;
* the ingress count (headers arrived, not admitted yet) and the arrival,
  returning-wave and forward-cost models fed by those events;
* admission bookkeeping: the queue bound, the queue-time deadline, shutdown.

The caller asks ``decide(now)`` (the policy's answer on this state), hands a
``Dispatch`` to ``take`` to get a ``Batch``, runs it, and reports it with
``complete``. ``abort`` removes a request in any state; ``expire`` removes the
requests that waited past the deadline.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from sift_server.engine import padding
from sift_server.engine.arrivals import ArrivalModel
from sift_server.engine.batch_queue import BatchQueue, Caps, Pending, Slice
from sift_server.engine.forward_cost import ForwardCost
from sift_server.engine.padding import padded_tokens
from sift_server.engine.policy import WAVE_SHARE, Decision, Dispatch, Idle, LaneView, Policy, Reason, SchedulerState
from sift_server.engine.returns import ReturnModel
from sift_server.errors import QueueFull, ShuttingDown

DEFAULT_LANE = "default"


# Forwards an unseeded model runs before its cut by length is fixed (from the cost
# learned over them); until then batches are not cut.
CUT_WARMUP_FORWARDS = 16


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    caps: Caps = field(default_factory=Caps)
    # Caps under sustained load (the model's efficient batch, in tokens); None: ``caps``.
    load_caps: Caps | None = None
    # Items queued (not yet in a forward) beyond which new requests are refused.
    max_queue_items: int = 512
    # Seconds a request may wait for its first forward before it is refused (503).
    queue_timeout: float = 30.0
    # The batching model's constants below are the engine's own, tuned with the
    # simulator (docs/batching.md); no operator setting reaches them.
    # While waves came back this recently, a burst after idle time answers together too
    # (it is likely a closed loop starting again, whose clients answered early would wait).
    wave_memory: float = 1.0
    # Arrivals closer than this form one cluster; a cluster after this much quiet is isolated.
    link_gap: float = 0.002
    busy_link_gap: float = 0.050
    quiet_gap: float = 0.005
    # A head that arrived this soon after a forward ended is sustained load (load caps).
    return_horizon: float = 0.010
    # ... or this share of that forward's duration, if longer (a slow forward's wave takes longer
    # to return); also what a hold for a returning wave may last (policy.hold_bound).
    wave_share: float = WAVE_SHARE
    # The loop that reads requests and the forward thread share one core (the model engine sets it).
    shared_core: bool = False
    # The open-loop rules (``Scheduler.independent_arrivals``): off until measured cleanly live;
    # ``sift serve --open-loop-rules`` turns them on for that measurement.
    open_loop_rules: bool = False


@dataclass(frozen=True, slots=True)
class Batch:
    """One forward's worth of work, as the scheduler hands it out."""

    forward_id: int
    lane: str
    reason: Reason
    slices: Sequence[Slice]
    decided: float
    # Sub-forwards of similar length (engine.padding): (slice index, item index) pairs.
    chunks: Sequence[Sequence[tuple[int, int]]] = ()
    # Answer every request when the batch ends, not as its sub-forward ends.
    deliver_together: bool = False

    @property
    def request_ids(self) -> list[str]:
        return [s.pending.request_id for s in self.slices]

    @property
    def items(self) -> int:
        return sum(s.stop - s.start for s in self.slices)

    @property
    def cost(self) -> int:
        return sum(s.cost for s in self.slices)

    def item_cost(self, at: tuple[int, int]) -> int:
        return self.slices[at[0]].pending.item_costs[at[1]]

    def answered(self, chunk: int) -> list[int]:
        """Slices whose request is complete once sub-forward ``chunk`` has run
        (the last sub-forward holding one of their items, for a last slice)."""
        last: dict[int, int] = {}
        for index, part in enumerate(self.chunks):
            for k, _ in part:
                last[k] = index
        return [k for k, index in sorted(last.items()) if index == chunk and self.slices[k].is_last]

    @property
    def padded_cost(self) -> int:
        """Token slots the forward runs: each sub-forward padded to its longest item."""
        return sum(padded_tokens([self.item_cost(at) for at in chunk]) for chunk in self.chunks)


@dataclass(frozen=True, slots=True)
class Completion:
    # Requests whose last items ran in this batch.
    finished: list[str]
    # Requests of a failed batch: none of their remaining items will run.
    failed: list[str]


class Scheduler:
    def __init__(
        self,
        policy: Policy,
        config: SchedulerConfig = SchedulerConfig(),
        *,
        queue_factory: Callable[[str], BatchQueue] = BatchQueue,
    ) -> None:
        self.policy = policy
        self.config = config
        # One queue per lane (the simulator passes another companion rule).
        self._new_queue = queue_factory
        self.arrivals = ArrivalModel(
            link_gap=config.link_gap, busy_link_gap=config.busy_link_gap, quiet_gap=config.quiet_gap
        )
        self.waves = ReturnModel(horizon=config.return_horizon, share=config.wave_share)
        self.costs = ForwardCost()
        # The fixed cost the cut by length uses, frozen once known: from the seeded
        # curve, else the first estimate after CUT_WARMUP_FORWARDS forwards. A cut that
        # followed the live estimate would cut the same batch differently as forward
        # times vary, and a different cut pads differently and changes the last bits.
        self._cut_fixed_tokens: float | None = None
        self.queues: dict[str, BatchQueue] = {}
        self._lane_of: dict[str, str] = {}
        self.running: Batch | None = None
        self.last_forward_end = float("-inf")
        self.last_forward_seconds = 0.0
        self.last_forward_requests = 0
        # The last batch answered some requests before it ended (its sub-forwards).
        self.last_forward_answered_early = False
        self._running_answered_early = False
        self.ingress_pending = 0
        self.closing = False
        self.forwards_run = 0
        self._forward_ids = itertools.count()

    # ---- signals ---------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.running is not None

    @property
    def queued_requests(self) -> int:
        return sum(len(q) for q in self.queues.values())

    @property
    def queued_items(self) -> int:
        return sum(q.total_items for q in self.queues.values())

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing running."""
        return not self.busy and not self.queued_requests

    def header_arrived(self, now: float) -> None:
        """A request's headers arrived; it is in ingress until admitted or refused."""
        in_flight = self.ingress_pending > 0 or not self.idle
        self.arrivals.observe(now, in_flight=in_flight, returning=self.waves.awaiting(now))
        self.waves.observe(now)
        self.ingress_pending += 1

    def ingress_ended(self) -> None:
        self.ingress_pending = max(0, self.ingress_pending - 1)

    # ---- admission -------------------------------------------------------

    def admit(
        self,
        request_id: str,
        item_costs: Sequence[int],
        now: float,
        *,
        lane: str | None = None,
        compat_key: Hashable = None,
    ) -> None:
        """Queue one request (its size was checked against the per-request cap
        at the API). Refused while closing, or while the queue is full: a
        request larger than the room left still enters once there is any room,
        so a large request waits its turn instead of starving behind small ones."""
        if self.closing:
            raise ShuttingDown("The server is shutting down and admits no new work.")
        queued = self.queued_items
        if queued >= self.config.max_queue_items:
            raise QueueFull(
                f"The model has {queued} items queued (limit {self.config.max_queue_items}); retry shortly."
            )
        if request_id in self._lane_of:
            raise ValueError(f"request {request_id!r} is already admitted")
        name = lane or DEFAULT_LANE
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = self._new_queue(name)
        queue.add(Pending(request_id, list(item_costs), now, compat_key))
        self._lane_of[request_id] = name

    def abort(self, request_id: str) -> bool:
        """Forget a request in any state (client gone, earlier slice failed):
        none of its remaining items will run. True if it was still known."""
        name = self._lane_of.pop(request_id, None)
        if name is None:
            return False
        queue = self.queues.get(name)
        if queue is not None:
            queue.remove(request_id)
        return True

    def expire(self, now: float) -> list[str]:
        """Remove and return requests that waited past the queue deadline
        without starting (a split request that started always finishes)."""
        cutoff = now - self.config.queue_timeout
        expired: list[str] = []
        for queue in self.queues.values():
            for pending in queue.older_than(cutoff):
                queue.remove(pending.request_id)
                self._lane_of.pop(pending.request_id, None)
                expired.append(pending.request_id)
        return expired

    def next_expiry(self) -> float | None:
        """When the oldest request that has not started reaches the deadline."""
        oldest = [p.arrival for q in self.queues.values() for p in q.pending if p.next_item == 0]
        return min(oldest) + self.config.queue_timeout if oldest else None

    def close(self) -> None:
        """Admit nothing more; what is queued runs at once (reason ``closing``)."""
        self.closing = True

    @property
    def cut_fixed_tokens(self) -> float | None:
        """The fixed cost (in tokens) that cuts a batch by length; None: no cut."""
        return self._cut_fixed_tokens

    def seed_costs(self, points: Sequence[tuple[int, float]]) -> None:
        """Forward times measured outside serving (tokens, seconds), e.g. after load."""
        for tokens, seconds in points:
            self.costs.observe(tokens, seconds)
        self._cut_fixed_tokens = self.costs.fixed_tokens

    # ---- deciding --------------------------------------------------------

    def _under_load(self, queue: BatchQueue) -> bool:
        head = queue.head
        horizon = max(self.config.return_horizon, self.config.wave_share * self.last_forward_seconds)
        return head is not None and head.arrival <= self.last_forward_end + horizon

    @property
    def whole_waves(self) -> bool:
        """Closed-loop clients come back in waves: each batch runs without the
        load caps and answers its requests together when it ends.

        A wave cut by the load caps leaves some of its requests behind for a
        whole forward, and a sub-forward that answers early sends its clients
        back while the rest of the batch still runs, so they queue behind it and
        split the next wave: both spread the latencies of a closed loop and
        neither adds items/s (the engine is busy either way; the cut by length
        still runs, so rows stay short). Only for a batch under load
        (``_whole_wave``): a burst after idle time keeps early answers."""
        return self.holds_for_waves

    @property
    def holds_for_waves(self) -> bool:
        """Returning waves are reliable: hold for the rest of one where the forward's
        fixed cost says it pays (the simulator's arms turn this rule off)."""
        return self.waves.reliable

    def _whole_wave(self, queue: BatchQueue) -> bool:
        """The lane's next batch is a returning wave: its head came back from the
        last forward (a burst after idle time is not, even while waves are reliable)."""
        return self.whole_waves and self._under_load(queue)

    def _answers_together(self, queue: BatchQueue, now: float) -> bool:
        """The lane's next batch answers every request when it ends, not as its
        sub-forwards end: a whole wave; any batch under load, even before waves
        are known to come back (early answers send clients back mid-forward and
        fragment the loop); and a burst after idle time while waves came back
        within ``wave_memory`` (a closed loop starting again: the clients of
        its early answers would come back and wait for the rest of the burst,
        then for a forward of their own). Otherwise a burst keeps early answers."""
        if self._whole_wave(queue):
            return True
        if self._under_load(queue):
            # Independent users gain nothing from waiting for the rest of the batch; a
            # closed loop whose waves are not learned yet would fragment (the stricter test).
            return not self.open_backlog_rule
        return self.whole_waves and now - self.waves.last_return <= self.config.wave_memory

    @property
    def independent_arrivals(self) -> bool:
        """Whether the open-loop rules apply: arrivals known not to follow answers
        (``ReturnModel.independent``) make a batch under load take everything waiting
        (within ``caps``) in sub-forwards of at most the load caps' tokens
        (``_chunk_budget``), and the policy hold a burst being read at most one forward.
        Off by default (``SchedulerConfig.open_loop_rules``): the simulator favours them,
        the one live run was confounded (docs/batching.md, "Seventh round")."""
        return self.config.open_loop_rules and self.waves.independent

    @property
    def open_backlog_rule(self) -> bool:
        """Each sub-forward of an open loop's batch answers as it ends, where arrivals
        are clearly independent (``ReturnModel.clearly_independent``): the stricter test,
        since a closed loop taken for an open one before its waves are learned would
        fragment. Off with ``independent_arrivals``."""
        return self.config.open_loop_rules and self.waves.clearly_independent

    def _open_backlog(self, queue: BatchQueue) -> bool:
        """The lane's next batch is independent users' backlog, not a returning wave."""
        return not self._whole_wave(queue) and self._under_load(queue) and self.independent_arrivals

    def _caps_for(self, queue: BatchQueue) -> Caps:
        if self._whole_wave(queue):
            return self.config.caps
        if self.config.load_caps is not None and not self.closing and self._under_load(queue):
            # Independent users' backlog: capped batches leave the rest waiting a
            # whole forward more, and near capacity the queue runs away (the cap is
            # reached on every forward); the cap bounds each sub-forward instead.
            return self.config.caps if self.independent_arrivals else self.config.load_caps
        return self.config.caps

    def _chunk_budget(self, queue: BatchQueue) -> int | None:
        """Token slots a sub-forward may hold (the efficient batch), for independent users' backlog."""
        if self.config.load_caps is None or self.closing or not self._open_backlog(queue):
            return None
        return self.config.load_caps.max_cost

    def _room(self, queue: BatchQueue) -> int:
        """About how many more requests the lane's next batch could take."""
        group = queue.compatible_with_head()
        caps = self._caps_for(queue)
        room = caps.max_requests - len(group)
        cost = sum(p.remaining_cost for p in group)
        if group and cost:
            room = min(room, int((caps.max_cost - cost) / (cost / len(group))))
        return max(0, room)

    def state(self, now: float) -> SchedulerState:
        lanes = [
            LaneView(
                lane=q.lane,
                head_arrival=q.pending[0].arrival,
                last_arrival=q.pending[-1].arrival,
                requests=q.compatible_count(),
                fills_cap=q.would_fill(self._caps_for(q)),
            )
            for q in self.queues.values()
            if q.pending
        ]
        returning = self.holds_for_waves
        expected = self.waves.expected(now) if returning else 0
        outside = missing = self.waves.missing(now) if returning else 0
        in_ingress = self.ingress_pending if returning else 0
        if (expected or missing or in_ingress) and lanes:
            oldest = min(lanes, key=lambda lane: lane.head_arrival)
            room = self._room(self.queues[oldest.lane])
            in_ingress = min(in_ingress, room)
            expected = min(expected, room - in_ingress)
            missing = min(missing, room - in_ingress)
        # The loop's returns not yet queued, not limited to the batch's room; only while a
        # wave is out: requests in ingress are then its returns being read (a burst after
        # idle time has requests in ingress too, and no wave out).
        outstanding = outside + self.ingress_pending if outside else 0
        loop = sum(lane.requests for lane in lanes) + outstanding
        return SchedulerState(
            lanes=lanes,
            busy=self.busy,
            last_forward_end=self.last_forward_end,
            ingress_pending=self.ingress_pending,
            arrivals=self.arrivals.view(),
            closing=self.closing,
            wave_expected=expected,
            wave_in_ingress=in_ingress,
            wave_missing=missing,
            wave_deadline=self.waves.deadline(now),
            wave_back=returning and self.waves.back(now),
            fixed_cost=self.costs.fixed,
            shared_core=self.config.shared_core,
            last_forward_seconds=self.last_forward_seconds,
            last_forward_requests=self.last_forward_requests,
            last_forward_answered_early=self.last_forward_answered_early,
            wave_outstanding=outstanding,
            wave_span=self.waves.scaled_span(loop) if outstanding else 0.0,
            wave_allowance=self.waves.margin * self.waves.span(loop) if outstanding else 0.0,
            wave_share=self.config.wave_share,
            independent_arrivals=self.independent_arrivals,
        )

    def decide(self, now: float) -> Decision:
        if self.running is not None:
            # One forward at a time: nothing starts before it ends, whatever the policy
            # (each one answers Idle while busy). Building the state would be wasted work
            # on the busiest path, an arrival during a forward.
            return Idle()
        return self.policy.decide(self.state(now), now)

    def take(self, decision: Dispatch, now: float) -> Batch | None:
        """Start the batch a ``Dispatch`` asked for (None if its lane is empty)."""
        if self.running is not None:
            raise RuntimeError("a forward is already running")
        queue = self.queues.get(decision.lane)
        if queue is None or not queue.pending:
            return None
        together = self._answers_together(queue, now)
        budget = self._chunk_budget(queue)
        slices = queue.take(self._caps_for(queue))
        items = [(k, i) for k, piece in enumerate(slices) for i in range(piece.start, piece.stop)]
        costs = [slices[k].pending.item_costs[i] for k, i in items]
        groups = padding.plan(costs, self.cut_fixed_tokens)
        if budget is not None:
            groups = [piece for group in groups for piece in padding.within(group, costs, budget)]
        chunks = [[items[j] for j in group] for group in groups]
        batch = Batch(next(self._forward_ids), decision.lane, decision.reason, slices, now, chunks, together)
        self.running = batch
        self._running_answered_early = False
        return batch

    def complete(self, batch: Batch, started: float, ended: float, *, ok: bool = True) -> Completion:
        """The running batch ended (``ok=False``: its forward failed)."""
        if self.running is not batch:
            raise RuntimeError(f"forward {batch.forward_id} is not the running one")
        self.running = None
        self.last_forward_end = ended
        self.last_forward_seconds = max(0.0, ended - started)
        self.last_forward_requests = len(batch.slices)
        self.last_forward_answered_early = self._running_answered_early
        self.forwards_run += 1
        finished: list[str] = []
        failed: list[str] = []
        for piece in batch.slices:
            rid = piece.pending.request_id
            if rid not in self._lane_of:
                continue  # aborted while its forward ran
            if not ok:
                self.abort(rid)
                failed.append(rid)
            elif piece.is_last:
                del self._lane_of[rid]
                finished.append(rid)
        if ok:
            self.costs.observe(batch.padded_cost, ended - started)
            if self._cut_fixed_tokens is None and self.forwards_run >= CUT_WARMUP_FORWARDS:
                self._cut_fixed_tokens = self.costs.fixed_tokens
        self.waves.forward_ended(ended, self._answered_at_end(batch, finished), ended - started)
        return Completion(finished, failed)

    def answered_early(self, now: float, requests: int) -> None:
        """A sub-forward before the last one of the running batch answered
        ``requests`` requests at ``now``: their clients' return is a wave of its own."""
        started = self.running.decided if self.running is not None else now
        self.waves.forward_ended(now, requests, now - started)
        self._running_answered_early = True

    @staticmethod
    def _answered_at_end(batch: Batch, finished: Sequence[str]) -> int:
        """How many of ``finished`` were answered when the batch ended: the
        clients answered by an earlier sub-forward (``answered_early``) come
        back while it runs, and are no part of the wave that returns after it."""
        if batch.deliver_together or len(batch.chunks) <= 1:
            return len(finished)
        last = {batch.slices[k].pending.request_id for k in batch.answered(len(batch.chunks) - 1)}
        return sum(1 for rid in finished if rid in last)
