"""The in-process replay of the forwards a server formed, run after each trial.

The ceiling (``sift_bench.run.ceiling``) times a grid of batch sizes once, after
every trial; the host's speed drifts over minutes and a maximum over a noisy
grid is biased upward. The replay instead runs, right after each run's server
has stopped, on the same CPUs with the same threads, the very batches that
server formed in each closed-loop phase (``replay_plan``: same texts, same
groups, same order), each prepared beforehand and run as the server runs it
(cut into sub-forwards by ``engine.padding`` with the fixed cost measured here
the way the ceiling measures it, or, where that cost cuts a forward into
another number of sub-forwards than the trace records, with the nearest one
that gives the server's number: ``server_cut``). Two timed passes follow an untimed warm-up
of the first forwards; the figure is the median of the passes (with two, their
mean). Served items/s over replayed items/s of the same batches is then a
ratio that host drift between trials cannot bias.

Child: ``python -m sift_bench.run.replay INPUT.json`` (JSON on stdout). Parent:
``replay_run``, which writes the input, starts the child pinned like the
server, with the arm's code and backend, and returns the per-phase figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sift_bench
from sift_bench.arms.server import child_env, pin_prefix, run_json_child
from sift_bench.report.stats import median
from sift_bench.run.replay_plan import CAP_S, PhaseReplayPlan, plan_phase
from sift_bench.workload.request import ENCODE_DENSE, RequestSpec

if TYPE_CHECKING:
    from sift_bench.arms.arm import Arm
    from sift_bench.run.config import BenchConfig
    from sift_bench.run.phases import PhaseResult
    from sift_server.engine.trace import ForwardRecord

PASSES = 2
WARM_FORWARDS = 5


# Fixed costs (tokens) tried when the child's own does not cut a forward into as
# many sub-forwards as the server did: the server learns its fixed cost online,
# so on a drifting host its cut can differ from one made with the child's.
_CANDIDATE_FIXED = (None, 0.0, *(2.0**k for k in range(14)))


def server_cut(costs: Sequence[int], fixed_tokens: float | None, chunks: int | None) -> tuple[list[list[int]], str]:
    """``padding.plan``'s groups for ``costs`` with the child's fixed cost, or
    (when that gives another number of sub-forwards than the server's ``chunks``)
    with the candidate fixed cost nearest to it that gives the server's number.
    The second value: ``own``, ``matched`` (a candidate reproduced the count)
    or ``differs`` (none did; the child's own cut is used)."""
    from sift_server.engine import padding

    groups = padding.plan(costs, fixed_tokens)
    if chunks is None or len(groups) == chunks:
        return groups, "own"
    own = fixed_tokens or 0.0

    def distance(candidate: float | None) -> float:
        return float("inf") if candidate is None else abs(math.log1p(candidate) - math.log1p(own))

    for candidate in sorted(_CANDIDATE_FIXED, key=distance):
        other = padding.plan(costs, candidate)
        if len(other) == chunks:
            return other, "matched"
    return groups, "differs"


def build_forward(
    prepare: Callable[[list[str]], Any],
    parts: Sequence[Sequence[str]],
    fixed_tokens: float | None,
    chunks: int | None = None,
) -> tuple[list[list[Any]], str]:
    """One server forward as the adapter calls it: one prepared request per
    part; several sub-forwards of similar length (one item per part, shortest
    first) when the cut (``server_cut``) makes several, else one call over whole
    parts. ``chunks``: the server's number of sub-forwards, when known."""
    from sift_server.adapters.base import Part

    prepared = [prepare(list(texts)) for texts in parts]
    items = [(k, i) for k, p in enumerate(prepared) for i in range(len(p.item_costs))]
    costs = [prepared[k].item_costs[i] for k, i in items]
    groups, how = server_cut(costs, fixed_tokens, chunks)
    if len(groups) <= 1:
        return [[Part(p, 0, len(p.item_costs)) for p in prepared]], how
    return [[Part(prepared[items[j][0]], items[j][1], items[j][1] + 1) for j in group] for group in groups], how


def replay_phase(
    adapter: Any,
    forwards: Sequence[Sequence[Sequence[str]]],
    prepare: Callable[[list[str]], Any],
    fixed_tokens: float | None,
    *,
    chunks: Sequence[int | None] = (),
    passes: int = PASSES,
    warm: int = WARM_FORWARDS,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Time ``forwards`` (per forward, per part, its texts) in order: items,
    forwards, sub-forwards, seconds per pass and the median pass. ``chunks``:
    per forward, the server's number of sub-forwards (empty: the child's cut)."""
    cuts = list(chunks) or [None] * len(forwards)
    built, how = [], []
    for parts, count in zip(forwards, cuts, strict=True):
        forward, kind = build_forward(prepare, parts, fixed_tokens, count)
        built.append(forward)
        how.append(kind)
    items = sum(len(texts) for parts in forwards for texts in parts)

    def run(calls: list[list[Any]]) -> float:
        t0 = clock()
        for call in calls:
            adapter.forward(call)
        return clock() - t0

    for calls in built[:warm]:
        run(calls)  # not timed: first calls at these shapes
    pass_s = [sum(run(calls) for calls in built) for _ in range(passes)]
    seconds = median(pass_s) if pass_s else 0.0
    return {
        "items": items,
        "forwards": len(built),
        "sub_forwards": sum(len(calls) for calls in built),
        "cuts": {kind: how.count(kind) for kind in ("own", "matched", "differs")},
        "pass_s": pass_s,
        "seconds": seconds,
        "items_per_s": items / seconds if seconds > 0 else None,
        "ms_per_item": seconds * 1000 / items if items else None,
    }


def quiet_collector() -> None:
    """The garbage collector as a server has it once its model is loaded: the
    heap frozen (registry, after a load) and the server's own thresholds
    (``server.tune_collector``), so collections never scan the model's objects
    in the middle of a timed forward."""
    from sift_server.server import tune_collector

    gc.collect()
    gc.freeze()
    tune_collector()


def _main(argv: Sequence[str] | None = None) -> int:
    from sift_bench.run.ceiling import fixed_tokens_of, load_model, preparer, runtime_of
    from sift_bench.workload.texts import texts_for

    parser = argparse.ArgumentParser(description="Replay a run's forwards in-process (JSON on stdout).")
    parser.add_argument("input", type=Path, help="the plan written by replay_run")
    args = parser.parse_args(argv)
    spec = json.loads(args.input.read_text(encoding="utf-8"))
    started = time.perf_counter()
    adapter = load_model(spec["model"], [Path(c) for c in spec["catalogs"]], spec["torch_threads"])
    load_s = time.perf_counter() - started
    quiet_collector()
    prepare = preparer(adapter, RequestSpec.from_fields(dict(spec["request"])))
    fixed_tokens = fixed_tokens_of(adapter, prepare, texts_for(spec["workload"], seed=spec["seed"]))
    phases: dict[str, Any] = {}
    for name, forwards in spec["phases"].items():
        parts = [f["parts"] for f in forwards]
        # Older inputs have no server cut: the child's own then.
        chunks = [f.get("chunks") for f in forwards]
        phases[name] = replay_phase(adapter, parts, prepare, fixed_tokens, chunks=chunks, passes=spec["passes"])
        print(f"replay: {name} done ({len(parts)} forwards)", file=sys.stderr, flush=True)
    result = {"runtime": runtime_of(adapter), "load_s": load_s, "fixed_tokens": fixed_tokens, "phases": phases}
    print(json.dumps(result), flush=True)
    return 0


@dataclass(frozen=True, slots=True)
class ReplaySetup:
    """How the replay child loads the model: as the run's server did."""

    model: str
    catalogs: Sequence[Path]
    torch_threads: int
    cpus: set[int] | None
    workload: str
    seed: int
    request: RequestSpec = ENCODE_DENSE
    passes: int = PASSES
    # The arm's code (a revision's server/src) and backend (``sift serve --backend``).
    pythonpath: Path | None = None
    backend: str | None = None
    timeout_s: float = 600.0


def replay_env(setup: ReplaySetup) -> dict[str, str]:
    """The arm's server code first, then this bench's own sources (the child
    runs this module even when the installed bench is another checkout's).
    The arm's backend, else whatever ``SIFT_BACKEND`` this process has: a
    server started without ``--backend`` inherits it too."""
    bench_src = Path(sift_bench.__file__).resolve().parent.parent
    paths = [str(p) for p in (setup.pythonpath, bench_src) if p is not None]
    env = child_env(None, {"PYTHONPATH": os.pathsep.join(paths)})
    if setup.backend:
        env["SIFT_BACKEND"] = setup.backend
    return env


def replay_run(setup: ReplaySetup, plans: Sequence[PhaseReplayPlan], folder: Path, tag: str) -> dict[str, Any]:
    """Replay ``plans`` in a pinned child; per phase the plan's figures and the
    replay's (``replay``). Raises ``RuntimeError`` when the child fails."""
    folder.mkdir(parents=True, exist_ok=True)
    input_path = folder / f"replay-{tag}.json"
    log_path = folder / f"replay-{tag}.log"
    spec = {
        "model": setup.model,
        "catalogs": [str(c) for c in setup.catalogs],
        "torch_threads": setup.torch_threads,
        "workload": setup.workload,
        "seed": setup.seed,
        "request": asdict(setup.request),
        "passes": setup.passes,
        "phases": {plan.phase: plan.child_input() for plan in plans if plan.forwards},
    }
    input_path.write_text(json.dumps(spec), encoding="utf-8")
    command = [*pin_prefix(setup.cpus), sys.executable, "-m", "sift_bench.run.replay", str(input_path)]
    measured = run_json_child(command, replay_env(setup), log_path, setup.timeout_s, "replay")
    return combine(plans, measured)


def replay_trial(
    setup: ReplaySetup,
    records: Sequence[ForwardRecord],
    measured: Sequence[PhaseResult],
    texts_of: Mapping[str, Sequence[str]],
    folder: Path,
    tag: str,
    cap_s: float = CAP_S,
) -> dict[str, Any]:
    """Plan and replay the closed-loop phases of ``measured`` (one run's phases;
    ``texts_of``: what the bench sent under each request id; ``records``: the
    run's trace)."""
    plans = [
        plan_phase(p.name, records, [r.request_id for r in p.requests], texts_of, p.end - p.start, cap_s=cap_s)
        for p in measured
        if p.kind == "closed"
    ]
    if not any(plan.forwards for plan in plans):
        raise RuntimeError("no forward of a closed-loop phase in the trace")
    return replay_run(setup, plans, folder, tag)


def replay_for_run(
    config: BenchConfig,
    arm: Arm,
    records: Sequence[ForwardRecord],
    warm: Sequence[PhaseResult],
    measured: Sequence[PhaseResult],
    tag: str,
) -> dict[str, Any]:
    """A bench run's measured closed-loop forwards replayed on the server's CPUs
    with the arm's code and backend; ``{"error": ...}`` when that fails (the run
    stays valid)."""
    setup = ReplaySetup(
        model=config.model, catalogs=config.catalogs, torch_threads=config.torch_threads, cpus=config.server_cpus,
        workload=config.workload, seed=config.seed, request=config.request, pythonpath=arm.pythonpath,
        backend=arm.backend,
    )  # fmt: skip
    texts_of = {r.request_id: r.texts for p in (*warm, *measured) for r in (*p.requests, *p.unmeasured)}
    try:
        return replay_trial(setup, records, measured, texts_of, config.out_dir / "logs", tag, config.replay_cap_s)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return {"error": f"in-process replay failed: {exc}"}


def describe(block: Mapping[str, Any]) -> str:
    """One progress line for a run's replay block."""
    if "error" in block:
        return str(block["error"]).splitlines()[0]
    rates = [
        f"{name} {p['replay']['items_per_s']:.1f} items/s ({p['forwards']} forwards)"
        for name, p in block["phases"].items()
        if p.get("replay") and p["replay"].get("items_per_s")
    ]
    return "in-process replay: " + (", ".join(rates) or "nothing replayed")


def combine(plans: Sequence[PhaseReplayPlan], measured: Mapping[str, Any]) -> dict[str, Any]:
    """The per-trial block of results.json: per phase, what was replayed and how fast."""
    phases = {}
    for plan in plans:
        phases[plan.phase] = {**plan.summary(), "replay": measured["phases"].get(plan.phase)}
    return {
        "runtime": measured.get("runtime"),
        "load_s": measured.get("load_s"),
        "fixed_tokens": measured.get("fixed_tokens"),
        "phases": phases,
    }


if __name__ == "__main__":
    raise SystemExit(_main())
