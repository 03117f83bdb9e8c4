"""Trials: every arm once per trial in a balanced order, a fresh server per
run, the phases through the HTTP API, the join with the server's trace; then
the in-process ceiling, the analysis and the report files."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sift_bench.arms.arm import (
    INSTRUMENT,
    Arm,
    changed_files,
    hash_tree,
    tree_digest,
    verify_manifest,
    worktree_state,
    write_manifest,
)
from sift_bench.arms.cpu import CpuSampler
from sift_bench.arms.gateway import ClusterServer
from sift_bench.arms.reference.server import ReferenceServer
from sift_bench.arms.server import ArmServer, ServerProcess, ServerSpec, ServerStartError
from sift_bench.client.transports import fetch_dims, fetch_runtime, make_transport
from sift_bench.report import plots
from sift_bench.report.analysis import analyze, batch_sizes_seen
from sift_bench.report.dominance import verdicts
from sift_bench.report.markdown import markdown
from sift_bench.report.targets import evaluate
from sift_bench.run.ceiling import run_ceiling
from sift_bench.run.config import BenchConfig
from sift_bench.run.join import JoinResult, burst_pattern, join_requests
from sift_bench.run.ordering import trial_orders
from sift_bench.run.phases import PhaseAborted, PhaseContext, PhasePlan, PhaseResult, run_phases
from sift_bench.run.replay import describe, replay_for_run
from sift_bench.workload.texts import texts_for
from sift_server.engine.trace import ForwardRecord, read_trace

SCHEMA = "sift-bench/1"
# Connections the client may open for the open-loop phases, beyond the closed loops' own.
OPEN_CONNECTIONS = 256


# ---- progress -------------------------------------------------------------


class Progress:
    """Two tqdm bars (runs; requests of the current phase) and log lines."""

    def __init__(self, runs: int, enabled: bool | None) -> None:
        from tqdm import tqdm

        self._tqdm = tqdm
        disable = None if enabled is None else not enabled
        self.runs = tqdm(total=runs, desc="runs", unit="run", position=0, disable=disable, file=sys.stderr)
        self.requests = tqdm(total=None, desc="requests", unit="req", position=1, leave=False, disable=disable,
                             file=sys.stderr)  # fmt: skip

    def log(self, message: str) -> None:
        self._tqdm.write(message, file=sys.stderr)

    def phase(self, label: str, total: int | None) -> None:
        self.requests.reset()
        self.requests.total = total  # reset(total=None) would keep the old total
        self.requests.set_description(label)

    def tick(self, n: int = 1) -> None:
        self.requests.update(n)

    def close(self) -> None:
        self.requests.close()
        self.runs.close()


def _expected(plan: PhasePlan, phase: str) -> int | None:
    if phase == "sequential":
        return plan.sequential
    if phase.startswith("burst"):
        return int(phase.removeprefix("burst")) * (plan.bursts + 1)
    return None


# ---- one run --------------------------------------------------------------


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _run_async(coro: Coroutine[Any, Any, None]) -> None:
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(coro)


def _span_ms(values: Sequence[float]) -> float | None:
    return (max(values) - min(values)) * 1000 if len(values) > 1 else (0.0 if values else None)


def phase_to_dict(phase: PhaseResult, join: JoinResult) -> dict[str, Any]:
    """Raw columns of one measured phase (one entry per request), joined to the trace."""
    reqs = phase.requests
    hits = [join.get(r.request_id) for r in reqs]
    out: dict[str, Any] = {
        "name": phase.name,
        "kind": phase.kind,
        "size": phase.size,
        "window_start": phase.start,
        "window_end": phase.end,
        "request_ids": [r.request_id for r in reqs],
        "group": [r.group for r in reqs],
        "send": [r.send for r in reqs],
        "issued": [r.issued for r in reqs],
        "recv": [r.recv for r in reqs],
        "ok": [r.ok for r in reqs],
        "status": [r.status for r in reqs],
        "errors": [[i, r.error] for i, r in enumerate(reqs) if r.error],
        "joined": [h is not None for h in hits],
    }
    if phase.kind == "open":
        out.update({"arrivals": phase.arrivals, "offered_rate": phase.rate, "load": phase.load,
                    "schedule_seconds": phase.seconds, "scheduled": [r.scheduled for r in reqs]})  # fmt: skip
    for column in ("forward_id", "forward_requests", "forward_items", "forwards", "reason",
                   "arrival", "admitted", "decided", "start", "end"):  # fmt: skip
        out[column] = [getattr(h, column) if h is not None else None for h in hits]
    if phase.kind == "burst":
        bursts = []
        for ids in phase.groups:
            pattern = burst_pattern(ids, join)
            arrivals = [h.arrival for h in (join.get(i) for i in ids) if h is not None]
            members = set(ids)
            issued = [r.issued for r in reqs if r.request_id in members and r.issued is not None]
            bursts.append(
                {
                    "ids": ids,
                    "pattern": list(pattern.sizes),
                    "missing": pattern.missing,
                    "one_forward": pattern.one_forward,
                    "label": pattern.label,
                    "arrival_span_ms": _span_ms(arrivals),
                    "issue_span_ms": _span_ms(issued),
                }
            )
        out["bursts"] = bursts
    return out


def _invalid_summary(phases: Sequence[PhaseResult]) -> list[str]:
    bad = [(p.name, r) for p in phases for r in p.invalid]
    if not bad:
        return []
    name, first = bad[0]
    return [f"{len(bad)} invalid responses (first: {first.request_id} in {name}: {first.error})"]


def run_one(
    config: BenchConfig,
    arm: Arm,
    trial: int,
    position: int,
    progress: Progress,
    baseline: Mapping[str, str] | None = None,
    capacity: float | None = None,
    tag: str | None = None,
) -> dict[str, Any]:
    """One fresh server for ``arm``: warmup and phases, then the join. ``baseline``:
    the current tree's files at the start of the bench (changes are recorded);
    ``capacity``: the requests/s the open loops are shares of."""
    tag = tag or f"t{trial}-p{position}-{_safe(arm.name)}"
    out = config.out_dir
    run: dict[str, Any] = {
        "arm": arm.name,
        "trial": trial,
        "position": position,
        "valid": False,
        "problems": [],
        "log_file": f"logs/{tag}.log",
        "trace_file": f"traces/{tag}.jsonl",
        "phases": {},
    }
    problems: list[str] = run["problems"]
    if arm.manifest is not None and arm.folder is not None:
        changed = verify_manifest(arm.manifest, arm.folder)
        if changed:
            problems.append(f"revision folder differs from its manifest: {', '.join(changed[:5])}")
            return run
        run["code_digest"] = arm.manifest["digest"]
    else:
        import sift_server

        files = hash_tree(Path(sift_server.__file__).parent, INSTRUMENT)
        run["code_digest"] = tree_digest(files)
        run["code_changes"] = changed_files(baseline, files)[:50] if baseline is not None else []

    spec = ServerSpec(
        model=config.model,
        policy=arm.policy,
        log_path=out / run["log_file"],
        trace_path=out / run["trace_file"],
        catalogs=config.catalogs,
        torch_threads=config.torch_threads,
        cpus=config.server_cpus,
        pythonpath=arm.pythonpath,
        ready_timeout_s=config.ready_timeout_s,
        extra_args=arm.server_args,
        cache_dir=fresh_cache_dir(out, tag) if config.fresh_cache and arm.kind != "reference" else None,
    )
    # A gateway arm: the same phases through nats-server, a gateway and one worker.
    server: ArmServer
    if arm.kind == "gateway":
        server = ClusterServer(spec)
    elif arm.kind == "reference":
        server = ReferenceServer(spec, launcher=arm.launcher) if arm.launcher else ReferenceServer(spec)
    else:
        server = ServerProcess(spec)
    sampler: CpuSampler | None = None
    # The load generator's own CPU use: a lean client leaves the server's figures its own.
    client_sampler = CpuSampler(os.getpid()).start()
    warm: list[PhaseResult] = []
    measured: list[PhaseResult] = []
    texts = texts_for(config.workload, seed=config.seed)
    try:
        progress.phase(f"{arm.name}: starting server", None)
        server.start()
        assert server.process is not None
        sampler = CpuSampler(server.process.pid).start()
        run["server"] = {"port": server.port, "startup_s": server.startup_s, "command": server.command}
        progress.log(f"trial {trial + 1} · {arm.name}: server ready in {server.startup_s:.1f} s")
        dense = config.request.dense_only
        dims = fetch_dims(server.url, config.model) if dense else None
        run["dims"] = dims
        if dims is None and dense:
            problems.append("the server did not report the model's dense dims")

        async def drive() -> None:
            transport = make_transport(
                config.client, server.url, config.model, dims,
                # An open loop may have many requests in flight: never queue them in the client.
                max_connections=max((*config.plan.burst_sizes, *config.plan.concurrencies, 1)) * 2
                + (OPEN_CONNECTIONS if config.plan.open_loads else 0),
                spec=config.request,
                # The reference server does not echo X-Request-ID (nor write a trace to join).
                echo_required=arm.kind != "reference",
            )  # fmt: skip
            ctx = PhaseContext(
                transport, texts, tag, items_per_request=config.items_per_request, progress=progress.tick
            )

            def on_phase(name: str) -> None:
                progress.phase(f"{arm.name}: {name}", _expected(config.plan, name))

            try:
                await run_phases(
                    ctx, config.plan, warm, measured, on_phase, capacity=capacity, seed=config.seed, trial=trial
                )
            finally:
                await transport.aclose()

        _run_async(drive())
        if not server.alive():
            problems.append("the server exited during the run")
        elif arm.kind != "reference":
            # At the end: ``auto`` may have switched backends while the run went on.
            run["server_runtime"] = fetch_runtime(server.url, config.model)
    except ServerStartError as exc:
        problems.append(f"server did not start: {str(exc).splitlines()[0]}")
    except PhaseAborted as exc:
        problems.append(str(exc))
    finally:
        if sampler is not None:
            sampler.stop()
        client_sampler.stop()
        server.stop()
        if "server" in run:
            run["server"]["returncode"] = server.returncode
        if spec.cache_dir is not None:
            # Exports run to hundreds of MB a model; the next start gets its own folder.
            shutil.rmtree(spec.cache_dir, ignore_errors=True)

    records: list[ForwardRecord] = read_trace(spec.trace_path) if spec.trace_path.is_file() else []
    measured_ids = [r.request_id for p in measured for r in p.requests]
    join = join_requests(measured_ids, records)
    run["forwards"] = len(records)
    run["warmup_requests"] = sum(len(p.requests) for p in warm)
    run["requests"] = len(measured_ids)
    run["joined"] = len(join.joined)
    run["missing"] = join.missing[:50]
    run["phases"] = {p.name: phase_to_dict(p, join) for p in measured}
    for p in measured:
        # Cores the server used during the phase (CPU time / wall time).
        run["phases"][p.name]["server_cores"] = sampler.cores_used(p.start, p.end) if sampler else None
        run["phases"][p.name]["client_cores"] = client_sampler.cores_used(p.start, p.end)
    problems += _invalid_summary([*warm, *measured])
    expected = config.plan.phase_names()
    if not problems and [p.name for p in measured] != expected:
        problems.append("not every phase ran")
    run["valid"] = not problems
    if run["valid"] and config.ceiling and config.replay and records:
        progress.phase(f"{arm.name}: in-process replay of the closed loops' forwards", None)
        run["replay"] = replay_for_run(config, arm, records, warm, measured, tag)
        progress.log(f"trial {trial + 1} · {arm.name}: {describe(run['replay'])}")
    return run


def fresh_cache_dir(out: Path, tag: str) -> Path:
    """An empty artifact cache for one server start (``--fresh-cache``)."""
    folder = out / "caches" / tag
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# ---- the whole bench ------------------------------------------------------


@contextlib.contextmanager
def _pinned(cpus: set[int] | None) -> Iterator[None]:
    """Pin this process (the load generator) to ``cpus`` for the duration."""
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _meta(config: BenchConfig) -> dict[str, Any]:
    import sift_server

    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus_available": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "command_line": config.command_line,
        "worktree": worktree_state(Path(sift_server.__file__).parent),
    }
    try:
        import sift_sdk

        meta["sift_sdk"] = sift_sdk.__version__
    except ImportError:
        meta["sift_sdk"] = None
    return meta


def _config_dict(config: BenchConfig) -> dict[str, Any]:
    return {
        "model": config.model,
        "catalogs": [str(c) for c in config.catalogs],
        "trials": config.trials,
        "client": config.client,
        "server_cpus": sorted(config.server_cpus) if config.server_cpus else None,
        "client_cpus": sorted(config.client_cpus) if config.client_cpus else None,
        "torch_threads": config.torch_threads,
        "items_per_request": config.items_per_request,
        "seed": config.seed,
        "workload": config.workload,
        "request": asdict(config.request),
        "plan": asdict(config.plan),
        "phases": config.plan.phase_names(),
        "ceiling": config.ceiling,
        "replay": config.replay,
        "replay_cap_s": config.replay_cap_s,
        "open_capacity": config.open_capacity,
        "fresh_cache": config.fresh_cache,
        "event_loop": "uvloop" if _loop_factory() is not None else "asyncio",
    }


def write_results(results: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, separators=(",", ":")), encoding="utf-8")
    tmp.replace(path)
    return path


def finish(results: dict[str, Any], out_dir: Path, *, make_plots: bool = True) -> dict[str, Any]:
    """Analysis, targets, and the files (results.json, report.md, PNGs)."""
    analysis = analyze(results)
    results["analysis"] = analysis
    references = [a["name"] for a in results["arms"] if a["kind"] == "reference"]
    found = verdicts(analysis["summary"], references, results["config"]["phases"])
    results["dominance"] = [v.as_dict() for v in found]
    results["targets"] = evaluate(
        analysis,
        results.get("ceiling"),
        results["config"]["phases"],
        int(results["config"].get("items_per_request", 1)),
        results["dominance"],
    )
    results["files"] = {"results": "results.json", "report": "report.md"}
    if make_plots:
        results["files"]["plots"] = [p.name for p in plots.write_plots(results, out_dir)]
    write_results(results, out_dir)
    (out_dir / "report.md").write_text(markdown(results), encoding="utf-8")
    return results


def measure_capacity(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """The requests/s the open loops are shares of: ``config.open_capacity`` if
    given, else a closed loop at the largest concurrency on a fresh server of the
    first arm (its warmup first), before the trials, so every arm of every trial
    sees the same rates."""
    if config.open_capacity is not None:
        return {"requests_per_s": config.open_capacity, "measured": False}
    arm = config.arms[0]
    concurrency = max(config.plan.concurrencies or (32,))
    plan = replace(config.plan, sequential=0, burst_sizes=(), concurrencies=(concurrency,), open_loads=())
    run = run_one(replace(config, plan=plan, ceiling=False), arm, 0, 0, progress, tag=f"capacity-{_safe(arm.name)}")
    phase = run["phases"].get(f"closed{concurrency}")
    if not run["valid"] or phase is None:
        raise RuntimeError(f"the capacity run of {arm.name} failed: {'; '.join(run['problems']) or 'no closed loop'}")
    span = phase["window_end"] - phase["window_start"]
    rate = sum(phase["ok"]) / span if span > 0 else 0.0
    if rate <= 0:
        raise RuntimeError(f"the capacity run of {arm.name} answered nothing")
    return {"requests_per_s": rate, "measured": True, "arm": arm.name, "concurrency": concurrency,
            "seconds": span, "log_file": run["log_file"]}  # fmt: skip


def run_bench(config: BenchConfig) -> dict[str, Any]:
    """Run every trial and write the results; returns the results dict."""
    names = [arm.name for arm in config.arms]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"arm names must be unique and non-empty: {names}")
    out = config.out_dir
    out.mkdir(parents=True, exist_ok=True)
    for arm in config.arms:
        if arm.manifest is not None:
            write_manifest(arm, out / "manifests")
    orders = trial_orders(config.arms, config.trials)
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "meta": _meta(config),
        "config": _config_dict(config),
        "arms": [arm.as_dict() for arm in config.arms],
        "orders": [[arm.name for arm in order] for order in orders],
        "runs": [],
        "ceiling": None,
        "warnings": [],
    }
    if config.server_cpus and config.client_cpus and config.server_cpus & config.client_cpus:
        results["warnings"].append("server and client CPUs overlap: figures blend both")
    progress = Progress(len(orders) * len(config.arms), config.progress)
    try:
        with _pinned(config.client_cpus):
            capacity: float | None = None
            if config.plan.open_loads:
                progress.phase("open-loop capacity", None)
                results["open_capacity"] = measure_capacity(config, progress)
                capacity = results["open_capacity"]["requests_per_s"]
                progress.log(f"open loops: capacity {capacity:.1f} requests/s")
            for trial, order in enumerate(orders):
                for position, arm in enumerate(order):
                    run = run_one(
                        config, arm, trial, position, progress, results["meta"]["worktree"]["files"], capacity
                    )
                    results["runs"].append(run)
                    if "error" in run.get("replay", {}):
                        results["warnings"].append(f"trial {trial + 1} {arm.name}: {run['replay']['error']}")
                    write_results(results, out)
                    state = "valid" if run["valid"] else "INVALID: " + "; ".join(run["problems"])
                    progress.log(
                        f"trial {trial + 1} · {arm.name}: {run.get('requests', 0)} requests, "
                        f"{run.get('joined', 0)} joined, {state}"
                    )
                    progress.runs.update(1)
        end_state = worktree_state(Path(results["meta"]["worktree"]["package_dir"]))
        changes = sorted({name for r in results["runs"] for name in r.get("code_changes", [])})
        changes += changed_files(results["meta"]["worktree"]["files"], end_state["files"])
        results["meta"]["worktree_end"] = {k: v for k, v in end_state.items() if k != "files"}
        if changes:
            changed = ", ".join(sorted(set(changes))[:10])
            results["warnings"].append(
                f"the current tree changed during the bench ({changed}): policy arms may have run different code"
            )
        if config.ceiling:
            progress.phase("in-process ceiling", None)
            grid = config.ceiling_grid
            sizes = sorted(set(grid) | {s for s in batch_sizes_seen(results) if s <= max(grid)})
            try:
                results["ceiling"] = run_ceiling(
                    config.model, config.catalogs, sizes,
                    cpus=config.server_cpus, torch_threads=config.torch_threads,
                    min_time_s=config.ceiling_min_time_s, seed=config.seed, log_path=out / "logs" / "ceiling.log",
                    workload=config.workload, request=config.request,
                )  # fmt: skip
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                results["warnings"].append(f"ceiling not measured: {exc}")
    finally:
        progress.close()
    results["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results["meta"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return finish(results, out, make_plots=config.plots)
