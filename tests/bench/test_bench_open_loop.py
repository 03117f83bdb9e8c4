"""The bench's open-loop workload: arrival schedules fixed by their seed, a phase that
sends on schedule whatever the answers, and the report's open-loop table (no server)."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sift_bench.cli import add_arguments
from sift_bench.client.answer import Outcome
from sift_bench.report.analysis import run_phase_stats
from sift_bench.report.markdown import console_summary, open_rows
from sift_bench.run.join import join_requests
from sift_bench.run.phases import PhaseContext, PhasePlan, PhaseResult, open_loop, run_phases
from sift_bench.run.runner import finish, phase_to_dict
from sift_bench.workload.arrivals import open_schedule, parse_loads
from tests.bench.test_bench_report import Builder, make_results

# ---- arrival schedules ------------------------------------------------------


def test_a_schedule_is_fixed_by_its_seed() -> None:
    for kind in ("poisson", "bursty"):
        first = open_schedule(kind, 200.0, 5.0, seed=7)
        assert first == open_schedule(kind, 200.0, 5.0, seed=7)
        assert first != open_schedule(kind, 200.0, 5.0, seed=8)
        assert first == sorted(first) and first[0] >= 0 and first[-1] < 5.0


def test_both_kinds_offer_the_rate_asked_and_bursty_arrivals_come_in_clusters() -> None:
    rate, seconds = 100.0, 200.0
    poisson = open_schedule("poisson", rate, seconds, seed=1)
    bursty = open_schedule("bursty", rate, seconds, seed=1)
    assert len(poisson) / seconds == pytest.approx(rate, rel=0.05)
    assert len(bursty) / seconds == pytest.approx(rate, rel=0.1)

    def close_gaps(times: list[float]) -> float:
        """Share of gaps under 5 ms (Poisson at 100/s: 1 - exp(-0.5), about 0.39)."""
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return sum(1 for g in gaps if g < 0.005) / len(gaps)

    assert close_gaps(poisson) == pytest.approx(0.39, abs=0.03)
    assert close_gaps(bursty) > 0.65  # three of four arrivals follow another of their cluster


def test_bad_schedules_and_loads_are_refused() -> None:
    with pytest.raises(ValueError):
        open_schedule("poisson", 0.0, 1.0, seed=0)
    with pytest.raises(ValueError):
        open_schedule("trickle", 10.0, 1.0, seed=0)  # type: ignore[arg-type]
    assert parse_loads("0.5, 80%,0.95") == (0.5, 0.8, 0.95)
    for bad in ("", "0", "abc", "300%"):
        with pytest.raises(ValueError):
            parse_loads(bad)


def test_the_cli_reads_open_loop_options() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--open-loads", "50%,0.8", "--open-arrivals", "bursty", "--open-capacity", "120"])
    assert args.open_loads == (0.5, 0.8) and args.open_arrivals == ("bursty",) and args.open_capacity == 120.0
    assert parser.parse_args([]).open_loads == ()
    with pytest.raises(SystemExit):
        parser.parse_args(["--open-arrivals", "trickle"])


# ---- the phase --------------------------------------------------------------


class SlowTransport:
    """Answers every request after ``seconds``; records when each was sent."""

    kind = "fake"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.sent: list[float] = []

    async def send(self, request_id: str, texts: list[str]) -> Outcome:
        self.sent.append(time.perf_counter())
        await asyncio.sleep(self.seconds)
        return Outcome(True, 200)

    async def aclose(self) -> None:
        return None


class HeldTransport:
    """Answers nothing until ``n`` requests were sent: a phase that waited for an
    answer before sending the next request would never finish."""

    kind = "fake"

    def __init__(self, n: int) -> None:
        self.n = n
        self.sent = 0
        self.all_sent = asyncio.Event()

    async def send(self, request_id: str, texts: list[str]) -> Outcome:
        self.sent += 1
        if self.sent == self.n:
            self.all_sent.set()
        await self.all_sent.wait()
        return Outcome(True, 200)

    async def aclose(self) -> None:
        return None


def test_an_open_loop_sends_on_schedule_whatever_the_answers() -> None:
    times = [0.0, 0.01, 0.02, 0.03]
    ctx = PhaseContext(HeldTransport(len(times)), ["a", "b"], "t")
    phase = open_loop(ctx, "open80-poisson", times, arrivals="poisson", rate=100.0, load=0.8, seconds=0.04)
    result = asyncio.run(asyncio.wait_for(phase, timeout=10))
    assert result.kind == "open" and result.rate == 100.0 and result.load == 0.8
    assert len(result.requests) == 4 and all(r.ok for r in result.requests)
    offsets = [r.scheduled - result.start for r in result.requests if r.scheduled is not None]
    assert offsets == pytest.approx(times)
    assert all(r.send >= r.scheduled for r in result.requests if r.scheduled is not None)  # never early


def test_open_phases_follow_the_closed_loops_on_schedules_shared_by_the_arms_of_a_trial() -> None:
    plan = PhasePlan(sequential=0, burst_sizes=(), concurrencies=(), open_loads=(0.5, 0.8),
                     open_arrivals=("poisson",), open_seconds=0.2, warmup_sequential=0, warmup_closed_s=0,
                     settle_s=0.0)  # fmt: skip
    assert plan.phase_names() == ["sequential", "open50-poisson", "open80-poisson"]

    def schedules(trial: int) -> dict[str, list[float]]:
        measured: list[PhaseResult] = []
        ctx = PhaseContext(SlowTransport(0.001), ["a"], "t")
        asyncio.run(run_phases(ctx, plan, [], measured, capacity=100.0, seed=3, trial=trial))
        return {
            p.name: [round(r.scheduled - p.start, 9) for r in p.requests if r.scheduled is not None]
            for p in measured
            if p.kind == "open"
        }

    first = schedules(0)
    assert list(first) == ["open50-poisson", "open80-poisson"]
    assert first == schedules(0)  # the next arm of the trial
    assert first != schedules(1)
    with pytest.raises(ValueError):
        asyncio.run(run_phases(PhaseContext(SlowTransport(0.0), ["a"], "t"), plan, [], []))


# ---- the report ------------------------------------------------------------


def open_run(arm: str, slow: float) -> dict[str, object]:
    """A run of one open phase: 40 requests at 100/s, each ``slow`` times 20 ms."""
    b = Builder(arm)
    phase = PhaseResult("open80-poisson", "open", 0, start=b.t, arrivals="poisson", rate=100.0, load=0.8, seconds=0.4)
    for k in range(40):
        records = b.requests(1, -1, 0.0, 0.02 * slow * (3 if k == 39 else 1))
        phase.requests += [replace(r, scheduled=r.send - 0.001) for r in records]
    phase.end = max(r.recv for r in phase.requests)
    join = join_requests([r.request_id for r in phase.requests], b.records)
    return {"arm": arm, "trial": 0, "position": 0, "valid": True, "problems": [],
            "phases": {phase.name: phase_to_dict(phase, join)}, "requests": 40, "joined": 40,
            "forwards": len(b.records)}  # fmt: skip


def test_the_report_gives_each_arms_distribution_and_its_ratio_to_the_first(tmp_path: Path) -> None:
    stats = run_phase_stats(open_run("adaptive", 1.0)["phases"]["open80-poisson"])  # type: ignore[index]
    assert stats["offered_rate"] == 100.0 and stats["load"] == 0.8 and stats["sent_rate"] == 100.0
    assert stats["achieved_rate"] > 0 and stats["lag_ms"] == pytest.approx([1.0] * 40)
    assert stats["tail_ratio"] == pytest.approx(3.0, rel=0.1)

    results = make_results([open_run("adaptive", 1.0), open_run("timed", 2.0)], ["adaptive", "timed"])
    results["config"]["phases"] = ["open80-poisson"]
    results["config"]["plan"].update(open_loads=[0.8], open_arrivals=["poisson"], open_seconds=0.4)
    results["open_capacity"] = {"requests_per_s": 125.0, "measured": True, "arm": "adaptive", "concurrency": 8}
    results = finish(results, tmp_path, make_plots=False)
    headers, rows = open_rows(results)
    by_arm = {row[1]: dict(zip(headers, row, strict=True)) for row in rows}
    assert by_arm["adaptive"]["offered req/s"] == "100.0"
    ratios = [float(x) for x in by_arm["timed"]["/ adaptive (p50, p90, p99, max)"].split(", ")]
    for ratio, key in zip(ratios, ("p50 ms", "p90 ms", "p99 ms", "max ms"), strict=True):
        assert ratio == pytest.approx(float(by_arm["timed"][key]) / float(by_arm["adaptive"][key]), abs=0.01)
    assert 1.8 < ratios[0] < 2.0  # twice the forward, the same client and queue times
    report = (tmp_path / "report.md").read_text()
    assert "## Open loops" in report and "125.0 requests/s" in report
    assert "open loops" in console_summary(results)
