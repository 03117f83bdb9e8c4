"""The fair residency policy (registry/residency.py), deterministically: explicit
state, a number for the clock, no asyncio."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import pytest

from sift_server.registry.residency import Residency, ResidencyConfig

MB = 2**20
CONFIG = ResidencyConfig(min_turn_s=2.0, payback=1.0, linger_s=1.0, return_slack_s=1.0, drain_s=0.5)


def two_models(load_s: float = 2.0, config: ResidencyConfig = CONFIG) -> Residency:
    """a and b, 60 MB each, a budget of 100 MB: one at a time; both loaded once before."""
    policy = Residency(100 * MB, {"a": 60 * MB, "b": 60 * MB}, config)
    for model in policy.models.values():
        model.load_s = load_s
    return policy


def make_resident(policy: Residency, name: str, now: float) -> None:
    policy.want(name, now)
    assert name in policy.plan(now, frozenset()).load
    policy.loaded(name, now, policy.models[name].load_s or 2.0, policy.models[name].bytes)


def test_a_cold_model_that_fits_loads_at_once_and_its_clients_hear_it_is_loading() -> None:
    policy = Residency(100 * MB, {"a": 60 * MB}, CONFIG)
    policy.want("a", 0.0)
    assert policy.plan(0.0, frozenset()).load == ("a",)
    wait = policy.refuse("a", 0.5, frozenset())
    assert wait.kind == "loading" and wait.retry_after_s == 2  # 1.5 s left of the assumed 2 s
    assert "is loading" in wait.message


def test_a_busy_model_keeps_its_memory_for_its_turn_and_the_waiter_hears_when_it_will_be_served() -> None:
    policy = two_models()
    make_resident(policy, "a", 100.0)
    policy.want("b", 100.5)
    plan = policy.plan(100.5, {"a"})
    assert plan.unload == () and plan.load == ()
    assert plan.wake_at is not None and plan.wake_at <= 102.0
    wait = policy.refuse("b", 100.5, {"a"})
    # a's turn ends at 102 (2 s after it loaded), drains 0.5 s, b loads 2 s: 4.0 s from now.
    assert wait.kind == "memory" and wait.holders == ("a",)
    assert wait.eta_s == pytest.approx(4.0) and wait.retry_after_s == 4
    assert "waiting for memory" in wait.message and "'a'" in wait.message
    # Its turn over, a busy model gives way: it drains, and the swap is under way.
    plan = policy.plan(102.0, {"a"})
    assert plan.unload == ("a",) and policy.models["a"].phase == "unloading"
    wait = policy.refuse("b", 102.0, {"a"})
    assert wait.kind == "loading" and "'a' is finishing" in wait.message
    assert policy.plan(102.2, {"a"}).load == ()  # not before the memory is back
    policy.released("a")
    assert policy.plan(102.6, frozenset()).load == ("b",)


def test_a_model_without_clients_gives_way_at_once() -> None:
    policy = two_models()
    make_resident(policy, "a", 100.0)
    policy.want("b", 101.5)  # a was loaded 1.5 s ago, nobody used it since (linger 1 s)
    assert policy.plan(101.5, frozenset()).unload == ("a",)
    wait = policy.refuse("b", 101.5, frozenset())
    assert wait.kind == "loading" and wait.eta_s == pytest.approx(2.0)  # an idle release is quick: b's load


def test_a_model_used_within_linger_keeps_its_turn_and_gives_way_when_it_ends() -> None:
    policy = two_models()
    make_resident(policy, "a", 100.0)
    policy.used("a", 101.0)  # idle now, but its closed-loop clients may be back within linger
    policy.want("b", 101.5)
    assert policy.plan(101.5, frozenset()).unload == ()
    policy.used("a", 101.9)
    assert policy.plan(102.0, frozenset()).unload == ("a",)  # its turn (2 s) is over


def test_a_model_just_loaded_is_kept_for_the_clients_told_to_come_back() -> None:
    policy = two_models()
    policy.want("a", 0.0)
    policy.plan(0.0, frozenset())
    assert policy.refuse("a", 0.0, frozenset()).retry_after_s == 2  # they come back at 2 s
    policy.loaded("a", 1.5, 1.5, 60 * MB)
    policy.want("b", 2.6)
    assert policy.plan(2.6, frozenset()).unload == ()  # its clients are due by 2 + slack 1 s
    assert policy.plan(3.0, frozenset()).unload == ("a",)  # nobody came: it gives way


def test_retry_after_is_whole_seconds_between_one_and_the_cap() -> None:
    config = ResidencyConfig(max_retry_after_s=15)
    policy = Residency(100 * MB, {"a": 60 * MB, "b": 60 * MB}, config)
    policy.models["a"].load_s = 0.01
    policy.models["b"].load_s = 40.0
    make_resident(policy, "b", 0.0)
    policy.want("a", 0.0)
    policy.plan(0.0, {"b"})
    wait = policy.refuse("a", 0.0, {"b"})
    assert wait.eta_s > 40 and wait.retry_after_s == 15  # b's turn is 40 s (payback 1)
    policy.models["b"].phase = "cold"
    policy.models["a"].phase = "loading"
    policy.models["a"].load_started = 0.0
    assert policy.refuse("a", 0.5, frozenset()).retry_after_s == 1  # overdue: never 0


def test_turns_are_rate_limited_by_load_time() -> None:
    # A model that takes 6 s to load serves 6 s per turn (payback 1), not min_turn_s.
    policy = two_models(load_s=6.0)
    make_resident(policy, "a", 0.0)
    policy.want("b", 0.5)
    assert policy.plan(5.9, {"a"}).unload == ()
    assert policy.plan(6.0, {"a"}).unload == ("a",)


def test_waiters_are_served_first_come_first_served() -> None:
    policy = Residency(100 * MB, {"a": 60 * MB, "b": 60 * MB, "c": 60 * MB}, CONFIG)
    for model in policy.models.values():
        model.load_s = 2.0
    make_resident(policy, "a", 0.0)
    policy.want("c", 0.1)
    policy.want("b", 0.2)
    c_wait = policy.refuse("c", 0.2, {"a"})
    b_wait = policy.refuse("b", 0.2, {"a"})
    assert b_wait.eta_s > c_wait.eta_s and b_wait.holders == ("a", "c")
    assert policy.plan(2.0, {"a"}).unload == ("a",)
    policy.released("a")
    assert policy.plan(2.5, frozenset()).load == ("c",)  # c asked first


def test_a_load_larger_than_expected_pushes_out_an_idle_model_not_itself() -> None:
    policy = Residency(100 * MB, {"a": 60 * MB, "b": 10 * MB}, CONFIG)
    make_resident(policy, "a", 0.0)
    make_resident(policy, "b", 5.0)  # 10 MB expected: fits next to a
    policy.set_bytes("b", 60 * MB)  # measured after its load
    assert policy.plan(5.0, frozenset()).unload == ("a",)


def test_a_model_larger_than_the_budget_loads_alone() -> None:
    policy = Residency(100 * MB, {"a": 60 * MB, "huge": 300 * MB}, CONFIG)
    make_resident(policy, "a", 0.0)
    policy.want("huge", 5.0)
    assert policy.plan(5.0, frozenset()).unload == ("a",)
    policy.released("a")
    assert policy.plan(5.5, frozenset()).load == ("huge",)


def test_a_model_asked_for_while_it_unloads_waits_for_the_next_turn() -> None:
    policy = two_models()
    make_resident(policy, "a", 0.0)
    policy.want("b", 3.0)
    assert policy.plan(3.0, {"a"}).unload == ("a",)
    policy.want("a", 3.1)
    wait = policy.refuse("a", 3.1, {"a"})
    # b: drain 0.5 + load 2; then b is expected idle after linger (1 s; its turn, 2 s, bounds
    # it); a's load 2 s: 5.5 s from now.
    assert wait.kind == "memory" and wait.eta_s == pytest.approx(5.5) and "'b'" in wait.message
    # b's clients are told to come back in 3 s (2.5 rounded up): b is kept for them (+ slack 1 s).
    assert policy.refuse("b", 3.1, {"a"}).retry_after_s == 3
    assert policy.refuse("a", 3.1, {"a"}).eta_s == pytest.approx(3.0 + 1.0 + 2.0)


# ---- the issue's run, in simulated time ------------------------------------------------------


@dataclass
class World:
    """The registry's part in simulated time: loads take ``load_s``, a drain ``drain_s``,
    a forward ``forward_s``; the policy decides everything else."""

    policy: Residency
    load_s: float
    forward_s: float = 0.02
    drain_s: float = 0.1
    events: list[tuple[float, int, str, str]] = field(default_factory=list)
    serving_until: dict[str, float] = field(default_factory=dict)
    loading_since: dict[str, float] = field(default_factory=dict)
    seq: int = 0
    log: list[str] = field(default_factory=list)

    def at(self, when: float, kind: str, name: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, name))

    def busy(self, now: float) -> frozenset[str]:
        return frozenset(n for n, until in self.serving_until.items() if until > now)

    def apply(self, now: float) -> None:
        plan = self.policy.plan(now, self.busy(now))
        for name in plan.unload:
            done = max(now, self.serving_until.get(name, now)) + self.drain_s
            self.at(done, "released", name)
            self.log.append(f"{now:6.2f} unload {name}")
        for name in plan.load:
            self.loading_since[name] = now
            self.at(now + self.load_s, "loaded", name)
            self.log.append(f"{now:6.2f} load {name}")
        if plan.wake_at is not None:
            self.at(plan.wake_at, "wake", "")

    def event(self, now: float, kind: str, name: str) -> None:
        if kind == "loaded":
            self.policy.loaded(name, now, self.load_s, self.policy.models[name].bytes)
        elif kind == "released":
            self.serving_until.pop(name, None)
            self.policy.released(name)
        self.apply(now)


@dataclass
class RunResult:
    first_request: dict[str, float]
    first_answer: dict[str, float]
    share: float
    gave_up: int
    codes: dict[str, int]
    lying: list[str]
    log: list[str]


def run_alternating_clients(
    *, clients: int = 8, seconds: float = 60.0, load_s: float = 2.0, give_up_s: float = 30.0
) -> RunResult:
    """``clients`` closed-loop clients alternate between a and b; a refused request
    is retried after its Retry-After until answered (the SDK's way)."""
    world = World(two_models(config=ResidencyConfig()), load_s=load_s)  # the defaults
    for state in world.policy.models.values():
        state.load_s = None  # never loaded: the policy assumes its default
    # (client, model, began) per pending request; clients start on alternating models.
    pending = {c: ("ab"[c % 2], 0.0) for c in range(clients)}
    for c in range(clients):
        world.at(0.0, "ask", str(c))
    first_request: dict[str, float] = {}
    first_answer: dict[str, float] = {}
    answered = gave_up = 0
    codes: dict[str, int] = {}
    lying: list[str] = []
    while world.events:
        now, _, kind, name = heapq.heappop(world.events)
        if now >= seconds:
            break
        if kind != "ask":
            world.event(now, kind, name)
            continue
        c = int(name)
        model, began = pending[c]
        first_request.setdefault(model, began)
        if world.policy.models[model].phase == "resident":
            world.policy.used(model, now)
            done = max(now, world.serving_until.get(model, now)) + world.forward_s
            world.serving_until[model] = done
            first_answer.setdefault(model, done)
            answered += 1
            nxt = "b" if model == "a" else "a"
            pending[c] = (nxt, done)
            world.at(done, "ask", name)
            continue
        if now - began > give_up_s:
            gave_up += 1
            nxt = "b" if model == "a" else "a"
            pending[c] = (nxt, now)
            world.at(now, "ask", name)
            continue
        world.policy.want(model, now)
        world.apply(now)
        if world.policy.models[model].phase == "resident":
            world.at(now, "ask", name)
            continue
        wait = world.policy.refuse(model, now, world.busy(now))
        codes[wait.kind] = codes.get(wait.kind, 0) + 1
        # "loading" must name something happening: its load, or memory released for it.
        swapping = any(m.phase == "unloading" for m in world.policy.models.values())
        if wait.kind == "loading" and world.policy.models[model].phase != "loading" and not swapping:
            lying.append(f"{now:.2f} {model} told loading")
        world.at(now + wait.retry_after_s, "ask", name)
    cut_off = clients  # each client has one request pending at the end
    return RunResult(
        first_request,
        first_answer,
        answered / (answered + gave_up + cut_off),
        gave_up,
        codes,
        lying,
        world.log,
    )


def test_the_issues_run_in_simulated_time_serves_both_models_fairly() -> None:
    result = run_alternating_clients()
    for model in "ab":
        waited = result.first_answer[model] - result.first_request[model]
        assert waited <= 2.0 + 5.0, (model, waited, result.log)
    assert result.share >= 0.8 and result.gave_up == 0
    assert result.lying == []
    assert set(result.codes) == {"loading", "memory"}


def test_swaps_are_rate_limited_when_both_models_always_have_work() -> None:
    # Two models whose clients never pause: every swap costs a load, so each turn
    # lasts at least payback x the load time, and a waiter is served within one turn.
    load_s = 3.0
    policy = two_models(load_s=load_s)
    now = 0.0
    make_resident(policy, "a", now)
    loads: list[tuple[float, str]] = [(0.0, "a")]
    waited_since: dict[str, float] = {"b": 0.0}
    worst_wait = 0.0
    step = 0.05
    while now < 120.0:
        now = round(now + step, 6)
        resident = [n for n, m in policy.models.items() if m.phase == "resident"]
        busy = frozenset(resident)  # always work in flight on the resident model
        for name in resident:
            policy.used(name, now)
        for name, model in policy.models.items():
            if model.phase in ("cold", "unloading"):
                policy.want(name, now)
                waited_since.setdefault(name, now)
        plan = policy.plan(now, busy)
        for name in plan.unload:
            policy.released(name)  # drained in this step
        plan = policy.plan(now, frozenset())
        for name in plan.load:
            policy.loaded(name, now + load_s, load_s, policy.models[name].bytes)
            loads.append((now, name))
            worst_wait = max(worst_wait, now + load_s - waited_since.pop(name))
            now += load_s
    assert len(loads) >= 10
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(loads[1:])]
    # Between two loads: the load itself, then a turn of at least payback x load time.
    assert min(gaps) >= load_s + CONFIG.payback * load_s - 1e-6
    assert {name for _, name in loads} == {"a", "b"}
    # Each waiter was served within the other's turn plus its own load (and a step).
    assert worst_wait <= load_s + max(CONFIG.min_turn_s, CONFIG.payback * load_s) + load_s + 2 * step
