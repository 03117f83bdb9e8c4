"""``sift simulate``: replay trace families through the batching policies."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sift_bench.simulate.forward_model import PRESETS, ForwardPreset, load_fitted
from sift_bench.simulate.report import (
    summary_table,
    verdict_table,
    verdicts,
    write_json,
)
from sift_bench.simulate.runner import ARMS, Matrix, make_arm, run_matrix
from sift_bench.simulate.scenarios import TraceConfig, system_capacity
from sift_server.engine.batch_queue import Caps

HELP = "replay arrival traces through the batching policies on a virtual clock"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--forward", action="append", choices=sorted(PRESETS), help="forward-time preset (repeatable; default: all)"
    )
    parser.add_argument(
        "--fit", type=Path, metavar="FILE", help='measured {"batch_seconds": {"1": s, ...}}: adds a fitted model'
    )
    parser.add_argument(
        "--policy",
        action="append",
        choices=ARMS,
        help="policy, or adaptive-old for the rules before the engine-core rework (repeatable; default: all)",
    )
    parser.add_argument("--out", type=Path, metavar="DIR", help="write results.json and PNG figures here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", action="append", default=[], metavar="TEXT", help="only families containing TEXT")
    parser.add_argument("--ingress-ms", type=float, default=0.15, help="server time to ingest one request")
    parser.add_argument(
        "--pending-time",
        choices=("admission", "arrival"),
        default="admission",
        help="what a queued request's arrival stamp holds (the worker stores the admission time)",
    )
    parser.add_argument("--max-requests", type=int, default=Caps().max_requests)
    parser.add_argument("--max-cost", type=int, default=Caps().max_cost)
    parser.add_argument("--max-hold-ms", type=float, default=10.0, help="adaptive: longest hold of a head")
    parser.add_argument("--idle-coalesce-ms", type=float, default=3.0, help="timed: quiet window")
    parser.add_argument("--max-wait-ms", type=float, default=15.0, help="timed: longest wait of a head")
    parser.add_argument("--quick", action="store_true", help="short traces (smoke test)")
    parser.add_argument("--check", action="store_true", help="exit 1 when adaptive loses a family")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``simulate`` to an ``argparse`` sub-parser set; its handler is ``args.handler(args)``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate", help=HELP, description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)
    return parser


def _forwards(args: argparse.Namespace) -> list[ForwardPreset]:
    names = args.forward or ([] if args.fit else sorted(PRESETS, reverse=True))
    if args.forward is None and args.fit:
        names = sorted(PRESETS, reverse=True)
    forwards: list[ForwardPreset] = [PRESETS[name] for name in dict.fromkeys(names)]
    if args.fit:
        forwards.append(load_fitted(args.fit))
    return forwards


def _traces(args: argparse.Namespace) -> TraceConfig:
    config = TraceConfig(seed=args.seed, ingress=args.ingress_ms / 1000)
    if args.quick:
        config = replace(
            config,
            sequential_n=40,
            burst_count=8,
            poisson_duration=0.3,
            poisson_warmup=0.05,
            then_open_per_client=5,
            then_open_seconds=0.5,
        )
    return config


def run(args: argparse.Namespace) -> int:
    forwards = _forwards(args)
    policies = list(dict.fromkeys(args.policy or ARMS))
    arms = [
        make_arm(
            name, max_hold_ms=args.max_hold_ms, idle_coalesce_ms=args.idle_coalesce_ms, max_wait_ms=args.max_wait_ms
        )
        for name in policies
    ]
    matrix = Matrix(
        forwards=forwards,
        arms=arms,
        traces=_traces(args),
        caps=Caps(max_requests=args.max_requests, max_cost=args.max_cost),
        pending_time=args.pending_time,
        family_filter=args.family,
    )
    started = time.perf_counter()
    summaries = run_matrix(matrix)
    elapsed = time.perf_counter() - started
    results = verdicts(summaries)

    for forward in forwards:
        capacity = system_capacity(forward, matrix.caps, matrix.traces.ingress)
        print(
            forward.describe(),
            f"(forward capacity {forward.capacity(matrix.caps.max_requests):.0f} req/s at the cap;",
            f"Poisson loads are relative to {capacity:.0f} req/s, ingress included)",
        )
    print()
    print(summary_table(summaries))
    if results:
        print()
        print("Verdict: adaptive at least as good as the better of timed and immediate (closed loops: dominates timed)")
        print(verdict_table(results))
        losses = sum(1 for v in results if not v.ok)
        print(f"\n{len(results) - losses}/{len(results)} families ok")
    print(f"\n{len(summaries)} runs in {elapsed:.1f} s")

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        config: dict[str, object] = {
            "forwards": [asdict(f) for f in forwards],
            "policies": policies,
            "caps": asdict(matrix.caps),
            "traces": asdict(matrix.traces),
            "pending_time": matrix.pending_time,
            "policy_options": {
                "max_hold_ms": args.max_hold_ms,
                "idle_coalesce_ms": args.idle_coalesce_ms,
                "max_wait_ms": args.max_wait_ms,
            },
        }
        write_json(args.out / "results.json", config, summaries, results)
        # matplotlib costs ~0.7 s to import: only when plotting, not for every `sift` command.
        from sift_bench.simulate import plots

        plots.plot_overview(summaries, args.out / "overview.png")
        for forward in forwards:
            plots.plot_main(summaries, results, forward.name, args.out / f"main-{forward.name}.png")
        print(f"wrote {args.out}/results.json, overview.png, main-*.png")
    return 1 if args.check and any(not v.ok for v in results) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sift_bench.simulate",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
