"""Fair model residency: which models hold the memory budget, and when one gives way.

Plain synchronous policy over explicit state and the caller's clock (``now`` in every
call); the registry is its shell. The shell reports what happened (a request served, a
load done or failed, memory released), asks ``plan`` which loads to start and which
models to unload, and asks ``refuse`` what to tell a client of a model that does not
serve yet.

The rules (docs/models.md, "Loading, memory and eviction"):

- A model is ``cold``, ``loading``, ``resident`` or ``unloading``. Loading and unloading
  models count against the budget (the memory is taken, or not yet given back).
- A wanted model that fits loads at once. One that does not fit waits, first come first
  served. A resident model gives its memory to the first waiter
  * at once when it has no clients: nothing running, queued or being read, no use within
    ``linger_s``, and no refused client still due back to it;
  * otherwise when its turn ends: ``max(min_turn_s, payback * its load time)`` after it
    loaded (and not before the clients told to come back to it have had their time).
    ``payback`` rate-limits swaps: under contention a model serves at least ``payback``
    times as long as its load took, so at most ``1 / (1 + payback)`` of the time goes
    to loading.
- Giving memory is unloading: the model admits nothing new, its queued and running
  forwards finish (the shell gives them ``drain_grace_s``), then the memory is released
  and the waiter loads.
- A waiting client hears what is happening: ``loading`` (its model loads, or the memory it
  needs is being released for it) or ``memory`` (it waits for memory held by a model that
  is serving, or by those ahead of it), with an estimate of when it will be served as
  Retry-After (whole seconds, 1 to ``max_retry_after_s``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sift_server.errors import MAX_WAIT_RETRY_AFTER_S

Phase = Literal["cold", "loading", "resident", "unloading"]
WaitKind = Literal["loading", "memory"]


@dataclass(frozen=True, slots=True)
class ResidencyConfig:
    # A contended model serves at least max(min_turn_s, payback x its load time) per turn.
    min_turn_s: float = 2.0
    payback: float = 1.0
    # A model used this recently still has clients (a closed loop's next request comes sooner).
    linger_s: float = 0.5
    # A client told to come back at t is expected by t + this.
    return_slack_s: float = 0.5
    # Load time assumed for a model that has not loaded yet in this process, when no other
    # model has either (otherwise the median of theirs).
    default_load_s: float = 2.0
    # Expected time for a model with clients to finish its running and queued forwards
    # (estimates only; the shell bounds the real drain with drain_grace_s).
    drain_s: float = 0.5
    drain_grace_s: float = 5.0
    # The longest Retry-After sent: a client asked to wait longer comes back for a new estimate.
    max_retry_after_s: int = MAX_WAIT_RETRY_AFTER_S
    # While a waiter depends on a busy model going idle (no event says when), re-plan this often.
    poll_s: float = 0.25


@dataclass(slots=True)
class ModelState:
    name: str
    bytes: int
    phase: Phase = "cold"
    # Last measured load time (None: not loaded in this process yet).
    load_s: float | None = None
    load_started: float = 0.0
    loaded_at: float = 0.0
    # Order of loads (ties of the clock): the latest load is the last to give way.
    load_order: int = 0
    last_used: float = -math.inf
    # The latest time a refused client of this model was told to come back.
    promised_until: float = -math.inf
    # When a client first asked for it while it could not serve (None: nobody waits).
    wanted_since: float | None = None
    # Order of arrival in the queue (ties of the clock).
    wanted_order: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    load: tuple[str, ...] = ()
    unload: tuple[str, ...] = ()
    # When to plan again without an event (None: only on events).
    wake_at: float | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    """What a client of a model that does not serve yet is told."""

    model: str
    kind: WaitKind
    retry_after_s: int
    # Estimated seconds until the model serves.
    eta_s: float
    # Models whose memory it waits for (or that load ahead of it).
    holders: tuple[str, ...]
    message: str


@dataclass(slots=True)
class _Claim:
    """The memory a waiter needs: who holds it and when it is expected free."""

    victims: list[ModelState] = field(default_factory=list)
    start_at: float = 0.0


class Residency:
    def __init__(self, budget_bytes: int, sizes: Mapping[str, int], config: ResidencyConfig | None = None) -> None:
        self.budget_bytes = budget_bytes
        self.config = config or ResidencyConfig()
        self.models = {name: ModelState(name, size) for name, size in sizes.items()}
        self.loads = 0
        self.unloads = 0
        self._loaded_count = 0
        self._wanted_count = 0

    # ---- events --------------------------------------------------------------

    def set_bytes(self, name: str, size: int) -> None:
        self.models[name].bytes = size

    def used(self, name: str, now: float) -> None:
        """A request was admitted to the resident model."""
        self.models[name].last_used = now

    def want(self, name: str, now: float) -> None:
        """A client asked for a model that does not serve: it joins the queue."""
        model = self.models[name]
        if model.phase in ("cold", "unloading") and model.wanted_since is None:
            model.wanted_since = now
            self._wanted_count += 1
            model.wanted_order = self._wanted_count

    def withdraw(self, name: str) -> None:
        """Nobody waits for it any more (a preload that does not fit gives up)."""
        self.models[name].wanted_since = None

    def begin_unload(self, name: str) -> None:
        """The shell unloads a model on its own (an explicit eviction)."""
        model = self.models[name]
        if model.phase == "resident":
            model.phase = "unloading"
            self.unloads += 1

    def loaded(self, name: str, now: float, load_s: float, size: int) -> None:
        model = self.models[name]
        model.phase, model.loaded_at, model.load_s, model.bytes = "resident", now, load_s, size
        self._loaded_count += 1
        model.load_order = self._loaded_count
        # Loading counts as a use: a model just preloaded is not evicted in the same breath.
        model.last_used = now

    def load_failed(self, name: str) -> None:
        model = self.models[name]
        model.phase, model.wanted_since = "cold", None

    def released(self, name: str) -> None:
        self.models[name].phase = "cold"

    # ---- questions -----------------------------------------------------------

    def held_bytes(self) -> int:
        return sum(m.bytes for m in self.models.values() if m.phase != "cold")

    def turn_s(self, model: ModelState) -> float:
        return max(self.config.min_turn_s, self.config.payback * self._load_estimate(model))

    def has_clients(self, model: ModelState, now: float, busy: Collection[str]) -> bool:
        return (
            model.name in busy
            or now < model.promised_until + self.config.return_slack_s
            or now < model.last_used + self.config.linger_s
        )

    def free_at(self, model: ModelState, now: float, busy: Collection[str]) -> float:
        """When a resident (or loading) model may start giving its memory away."""
        if model.phase == "unloading":
            return now
        if model.phase == "resident" and not self.has_clients(model, now, busy):
            return now
        loaded_at = model.loaded_at if model.phase == "resident" else self._load_end(model, now)
        turn_end = max(loaded_at + self.turn_s(model), model.promised_until + self.config.return_slack_s)
        return max(now, turn_end)

    def waiters(self) -> list[ModelState]:
        """Models somebody waits for, first come first served."""
        waiting = [m for m in self.models.values() if m.wanted_since is not None and m.phase in ("cold", "unloading")]
        return sorted(waiting, key=lambda m: (m.wanted_since or 0.0, m.wanted_order))

    # ---- the plan ------------------------------------------------------------

    def plan(self, now: float, busy: Collection[str]) -> Plan:
        """Loads to start and models to unload now (their phases change here), and
        when to plan again. ``busy``: resident models with work running, queued or
        being read."""
        unload = self._over_budget(now, busy)
        load: list[str] = []
        wake_at: float | None = None
        for waiter in self.waiters():
            if waiter.phase == "unloading":
                continue  # it loads again only after its memory is back and its turn comes
            claim = self._claim(waiter, now, busy)
            if not claim.victims:
                waiter.phase, waiter.load_started, waiter.wanted_since = "loading", now, None
                self.loads += 1
                load.append(waiter.name)
                continue
            movable = [v for v in claim.victims if v.phase == "resident"]
            if all(v.phase != "loading" for v in claim.victims) and all(
                self.free_at(v, now, busy) <= now for v in movable
            ):
                for victim in movable:
                    victim.phase = "unloading"
                    self.unloads += 1
                    unload.append(victim.name)
            else:
                # Blocked by a model's turn or by one still loading; a busy model going
                # idle frees the memory sooner, and no event says when.
                wake_at = min(claim.start_at, now + self.config.poll_s)
            break  # first come, first served: the others wait behind this one
        return Plan(tuple(load), tuple(unload), wake_at)

    def _over_budget(self, now: float, busy: Collection[str]) -> list[str]:
        """A load that came out larger than expected: unload residents without clients."""
        unload: list[str] = []
        excess = self.held_bytes() - self.budget_bytes
        idle = sorted(
            (m for m in self.models.values() if m.phase == "resident" and not self.has_clients(m, now, busy)),
            # Least recently used first; of equals, the longest resident (not the load that came out large).
            key=lambda m: (m.last_used, m.load_order),
        )
        for model in idle:
            if excess <= 0:
                break
            model.phase = "unloading"
            self.unloads += 1
            unload.append(model.name)
            excess -= model.bytes
        return unload

    def _claim(self, waiter: ModelState, now: float, busy: Collection[str]) -> _Claim:
        """The models whose memory ``waiter`` needs (none: it fits now), and when
        they are expected to have released it."""
        # A model requested again while it unloads gets its own memory back first.
        own = waiter.bytes if waiter.phase == "unloading" else 0
        held = self.held_bytes() - own
        free = self.budget_bytes - held
        if waiter.bytes <= free or held == 0:
            return _Claim([], self._release_at(waiter, now, busy) if own else now)
        need = waiter.bytes - free
        holders = [m for m in self.models.values() if m is not waiter and m.phase != "cold"]
        # Memory already on its way back first, then the models whose turn ends first.
        holders.sort(key=lambda m: (m.phase != "unloading", self.free_at(m, now, busy), m.last_used, m.load_order))
        claim = _Claim()
        freed = 0
        for holder in holders:
            if freed >= need:
                break
            claim.victims.append(holder)
            freed += holder.bytes
        claim.start_at = max(self._release_at(v, now, busy) for v in claim.victims)
        return claim

    def _release_at(self, model: ModelState, now: float, busy: Collection[str]) -> float:
        """When ``model`` is expected to have given its memory back (an estimate,
        for Retry-After): a busy model at its turn's end, after a drain; an idle one
        once its lingering use and the clients told to come back are over."""
        if model.phase == "unloading":
            # An idle model's release is a collection; a busy one's waits for its forwards.
            return now + (self.config.drain_s if model.name in busy else 0.0)
        if model.phase == "resident" and not self.has_clients(model, now, busy):
            return now
        turn_end = self.free_at(model, now, busy)
        if model.name in busy:
            return turn_end + self.config.drain_s
        last_use = self._load_end(model, now) if model.phase == "loading" else model.last_used
        expected = max(last_use + self.config.linger_s, model.promised_until + self.config.return_slack_s)
        return max(now, min(turn_end, expected))

    # ---- what a waiting client hears -----------------------------------------

    def refuse(self, name: str, now: float, busy: Collection[str], *, promise: bool = True) -> Wait:
        """The answer to a client of ``name``, which does not serve now. With
        ``promise``, the client is expected back at its Retry-After (a model is
        not unloaded before the clients told to come back to it have had their time)."""
        model = self.models[name]
        if model.phase in ("loading", "resident"):
            eta = max(0.0, self._load_end(model, now) - now) if model.phase == "loading" else 0.0
            wait = self._wait(model, "loading", eta, ())
        else:
            wait = self._queued_wait(model, now, busy)
        if promise:
            model.promised_until = max(model.promised_until, now + wait.retry_after_s)
        return wait

    def _queued_wait(self, model: ModelState, now: float, busy: Collection[str]) -> Wait:
        queue = self.waiters()
        if model not in queue:
            queue.append(model)
        head = queue[0]
        claim = self._claim(head, now, busy)
        ready = claim.start_at + self._load_estimate(head)
        ahead: list[str] = [v.name for v in claim.victims]
        previous = head
        for waiter in queue[1 : queue.index(model) + 1]:
            # It needs the memory of the one before it: expected back as an idle holder's
            # is (its clients come back, are served and go), at the latest after its turn.
            ahead.append(previous.name)
            expected = max(ready + self.config.linger_s, previous.promised_until + self.config.return_slack_s)
            ready = min(ready + self.turn_s(previous), expected) + self._load_estimate(waiter)
            previous = waiter
        swapping = model is head and model.phase == "cold" and all(v.phase == "unloading" for v in claim.victims)
        holders = tuple(dict.fromkeys(n for n in ahead if n != model.name))
        return self._wait(model, "loading" if swapping else "memory", max(0.0, ready - now), holders)

    def _wait(self, model: ModelState, kind: WaitKind, eta: float, holders: tuple[str, ...]) -> Wait:
        retry_after = min(self.config.max_retry_after_s, max(1, math.ceil(eta)))
        return Wait(model.name, kind, retry_after, eta, holders, self._message(model, kind, eta, holders))

    def _message(self, model: ModelState, kind: WaitKind, eta: float, holders: tuple[str, ...]) -> str:
        name, named = model.name, _names(holders)
        if kind == "loading" and not holders:
            return f"Model '{name}' is loading (about {eta:.0f} s left); retry after Retry-After."
        if kind == "loading":
            return (
                f"Model '{name}' is loading: {named} {_is(holders)} finishing {_its(holders)} running work to give "
                f"back the memory, then '{name}' loads (about {eta:.0f} s in all); retry after Retry-After."
            )
        budget_mb = self.budget_bytes / 2**20
        return (
            f"Model '{name}' is waiting for memory: the memory budget ({budget_mb:.0f} MiB) is held by {named}, "
            f"serving {_its(holders)} turn; '{name}' loads when it ends (served in about {eta:.0f} s); "
            "retry after Retry-After."
        )

    def _load_estimate(self, model: ModelState) -> float:
        if model.load_s is not None:
            return model.load_s
        known = sorted(m.load_s for m in self.models.values() if m.load_s is not None)
        return known[len(known) // 2] if known else self.config.default_load_s

    def _load_end(self, model: ModelState, now: float) -> float:
        return max(now, model.load_started + self._load_estimate(model))


def _names(names: Iterable[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    if not quoted:
        return "other models"
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _is(names: Collection[str]) -> str:
    return "is" if len(names) == 1 else "are"


def _its(names: Collection[str]) -> str:
    return "its" if len(names) == 1 else "their"
