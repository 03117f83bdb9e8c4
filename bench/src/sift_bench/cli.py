"""``sift bench``: compare batching arms (policies, code revisions) through the real HTTP API."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_bench.arms.arm import REFERENCE_ARM, REFERENCE_RELEASE
from sift_bench.arms.server import default_cpus
from sift_bench.workload.arrivals import ARRIVAL_KINDS, ArrivalKind, parse_loads
from sift_bench.workload.heads import HEADS
from sift_bench.workload.request import OUTPUT_TYPES, PRIMITIVES, RequestSpec
from sift_bench.workload.texts import WORKLOADS
from sift_server.config import DEFAULT_MODEL
from sift_server.engine.policy import POLICIES

if TYPE_CHECKING:
    from sift_bench.arms.arm import Arm

# Test heads are built once per machine (tens of seconds) and reused.
HEADS_CACHE = Path.home() / ".cache" / "sift" / "bench-heads"

HELP = "measure the batching engine: compare policies and code revisions through the HTTP API"

# Phase sizes of a full run and of --quick (explicit options win over both).
FULL = {"sequential": 200, "bursts": 24, "closed_seconds": 15.0, "warmup_sequential": 20, "warmup_closed_s": 2.0,
        "ceiling_seconds": 0.5, "replay_seconds": 3.0, "open_seconds": 10.0}  # fmt: skip
QUICK = {"sequential": 40, "bursts": 6, "closed_seconds": 3.0, "warmup_sequential": 10, "warmup_closed_s": 1.0,
         "ceiling_seconds": 0.2, "replay_seconds": 1.5, "open_seconds": 3.0}  # fmt: skip


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _loads(text: str) -> tuple[float, ...]:
    try:
        return parse_loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _kinds(text: str) -> tuple[ArrivalKind, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ARRIVAL_KINDS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"arrivals are {', '.join(ARRIVAL_KINDS)}; got {text!r}")
    return tuple(k for k in ARRIVAL_KINDS if k in kinds)


def _arm(text: str) -> str:
    from sift_bench.arms.arm import OPEN_LOOP_ARM, is_backend_arm, is_gateway_arm

    if text in (*POLICIES, OPEN_LOOP_ARM) or is_backend_arm(text) or is_gateway_arm(text) or text == REFERENCE_ARM:
        return text
    raise argparse.ArgumentTypeError(
        f"not a policy ({', '.join(POLICIES)}), {OPEN_LOOP_ARM}, a backend arm, a gateway arm nor "
        f"{REFERENCE_ARM}: {text!r}"
    )


def _make_arm(name: str) -> Arm:
    from sift_bench.arms.arm import (
        OPEN_LOOP_ARM,
        backend_arm,
        gateway_arm,
        is_gateway_arm,
        open_loop_arm,
        policy_arm,
        reference_arm,
    )

    if name in POLICIES:
        return policy_arm(name)
    if name == OPEN_LOOP_ARM:
        return open_loop_arm()
    if name == REFERENCE_ARM:
        return reference_arm()
    return gateway_arm(name) if is_gateway_arm(name) else backend_arm(name)


def add_arguments(p: argparse.ArgumentParser) -> None:
    arms = p.add_argument_group("arms")
    arms.add_argument("--arm", action="append", type=_arm, metavar="ARM",
                      help=f"a policy of the current tree ({', '.join(POLICIES)}), adaptive-open (adaptive with "
                      "--open-loop-rules) or a backend arm "
                      "(torch, onnx, openvino, auto, optionally :PRECISION, e.g. openvino:fp32) "
                      "or gateway[:POLICY] (through nats-server, a gateway and one worker) "
                      f"or {REFERENCE_ARM} (the released SIE server, {REFERENCE_RELEASE}; "
                      "set up once with `sift bench reference-setup`) "
                      "(repeatable); default: all three policies unless --rev is given")  # fmt: skip
    arms.add_argument("--rev", action="append", default=[], metavar="REF",
                      help="a git revision, archived and run with --rev-policy (repeatable)")  # fmt: skip
    arms.add_argument("--rev-policy", choices=POLICIES, default="adaptive", help="policy of --rev arms")
    arms.add_argument("--rev-backend", action="append", default=[], metavar="BACKEND",
                      help="run every --rev arm once per backend given (torch, onnx, openvino, auto[:PRECISION]; "
                           "repeatable); default: each revision's own default")  # fmt: skip
    arms.add_argument("--repo", type=Path, help="git repository of --rev (default: the one sift_server is in)")
    arms.add_argument("--keep-revs", action="store_true", help="keep the archived revision folders")

    runs = p.add_argument_group("runs")
    runs.add_argument("--trials", type=int, default=3, help="trials; each runs every arm once, on a fresh server")
    runs.add_argument("--model", default=DEFAULT_MODEL, help="catalog model to serve")
    runs.add_argument("--catalog", action="append", type=Path, default=[], help="extra catalog folder (repeatable)")
    runs.add_argument("--sequential", type=int, help="sequential requests (default 200; quick 40)")
    runs.add_argument("--bursts", type=int, help="bursts of each size (default 24; quick 6)")
    runs.add_argument("--burst-sizes", type=_sizes, default=(8, 32), metavar="N,N", help="default 8,32")
    runs.add_argument("--burst-gap-ms", type=float, default=250.0, help="idle time before each burst")
    runs.add_argument("--concurrency", type=_sizes, default=(8, 32), metavar="N,N",
                      help="requests in flight of the closed-loop phases (default 8,32)")  # fmt: skip
    runs.add_argument("--closed-seconds", type=float, help="length of each closed-loop phase (default 15; quick 3)")
    runs.add_argument("--open-loads", type=_loads, default=(), metavar="L,L",
                      help="open-loop phases after the closed loops: independent users at these shares of the "
                      "closed-loop capacity (e.g. 0.5,0.8,0.95 or 50%%,80%%); default none")  # fmt: skip
    runs.add_argument("--open-arrivals", type=_kinds, default=ARRIVAL_KINDS, metavar="KIND,KIND",
                      help=f"arrivals of the open loops: {', '.join(ARRIVAL_KINDS)} (default both)")  # fmt: skip
    runs.add_argument("--open-seconds", type=float, help="length of each open-loop phase (default 10; quick 3)")
    runs.add_argument("--open-capacity", type=float, metavar="REQ_PER_S",
                      help="the capacity the open-loop loads are shares of (default: a closed loop at the largest "
                      "--concurrency on the first arm, measured once before the trials)")  # fmt: skip
    runs.add_argument("--fresh-cache", action="store_true",
                      help="give every Sift server start an empty artifact cache (SIFT_CACHE_DIR a new folder, "
                      "removed after): each run is a model's first start after install, `auto` deciding "
                      "while it serves")  # fmt: skip
    runs.add_argument("--client", choices=("sdk", "httpx", "raw"), default="sdk",
                      help="load generator client: the SDK, bare httpx, or raw (lean HTTP/1.1, "
                      "a fraction of a millisecond per request)")  # fmt: skip
    runs.add_argument("--torch-threads", type=int, default=1, help="intra-op threads of each server")
    runs.add_argument("--server-cpus", metavar="LIST",
                      help="taskset CPU list of the servers and the ceiling ('none' to unpin; "
                      "default: the first available CPU when there are two or more)")  # fmt: skip
    runs.add_argument("--client-cpus", metavar="LIST",
                      help="CPU list of this load generator ('none' to unpin; default: the second CPU)")  # fmt: skip
    runs.add_argument("--quick", action="store_true", help="short phases: a smoke run of a few minutes")
    runs.add_argument("--seed", type=int, default=0, help="seed of the input texts")
    runs.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="short",
        help="short: 8-24 word sentences; sentences: 5-40 words; mixed: 5-40 words with 1 in 20 near the model's limit",
    )
    runs.add_argument(
        "--primitive",
        choices=PRIMITIVES,
        default="encode",
        help="what each request asks: encode, score (one query against its texts) or extract",
    )
    runs.add_argument("--output-type", choices=OUTPUT_TYPES, default="dense", help="encode: the output to ask for")
    runs.add_argument("--labels", help="extract: comma-separated labels (default person,location,organization,date)")
    runs.add_argument(
        "--head",
        choices=HEADS,
        help="serve a MiniLM-sized test head, built offline once: zero-shot extract heads on the packaged "
        "all-MiniLM-L6-v2 weights (gliclass, gliner) or random models of MiniLM's size in a retrieval "
        "family's layout (decoder: Qwen3-Embedding, dense encode of documents; llm-reranker: "
        "Qwen3-Reranker, score; bge-m3: dense, sparse and multivector encode); sets the request",
    )
    runs.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for a server's /readyz")

    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, help="output folder (default bench-results/<timestamp>)")
    out.add_argument("--no-ceiling", action="store_true", help="skip the in-process ceiling")
    out.add_argument("--ceiling-seconds", type=float, help="time per batch size of the ceiling (default 0.5)")
    out.add_argument(
        "--no-replay",
        action="store_true",
        help="skip the in-process replay of each run's closed-loop forwards (on with the ceiling)",
    )
    out.add_argument("--replay-seconds", type=float,
                     help="server forward time replayed per closed loop, at most (default 3; quick 1.5)")  # fmt: skip
    out.add_argument("--no-plots", action="store_true")
    out.add_argument("--no-progress", action="store_true", help="no progress bars")
    out.add_argument("--report", type=Path, metavar="RESULTS_JSON",
                     help="only rebuild report.md, plots and the summary from an existing results.json "
                     "(or .json.gz; an archived one rebuilds report.md from its stored analysis)")  # fmt: skip


def _reference_setup(args: argparse.Namespace) -> int:
    from sift_bench.arms.reference.server import reference_venv
    from sift_bench.arms.reference.setup import SetupError, setup_reference

    target = args.venv or reference_venv()
    try:
        setup_reference(target, lambda line: print(f"reference-setup: {line}", file=sys.stderr), python=args.python)
    except SetupError as exc:
        print(f"sift bench reference-setup: {exc}", file=sys.stderr)
        return 1
    return 0


def add_subcommands(parser: argparse.ArgumentParser) -> None:
    """``sift bench SUBCOMMAND``: tools beside the bench itself (no subcommand: run the bench)."""
    from sift_bench.cluster.cli import add_cluster
    from sift_bench.report.distribution import add_distribution
    from sift_bench.tools.floor import add_floor

    commands = parser.add_subparsers(
        dest="bench_command", metavar="{reference-setup,archive,distribution,cluster,floor}"
    )
    setup = commands.add_parser(
        "reference-setup",
        help=f"create the reference arm's environment ({REFERENCE_RELEASE}, CPU PyTorch)",
        description="Create the virtual environment the reference arm runs (once; several minutes).",
    )
    setup.add_argument(
        "--venv",
        type=Path,
        help="where (default: $SIFT_BENCH_REFERENCE_VENV or ~/.cache/sift/reference-venv)",
    )
    setup.add_argument("--python", help="the interpreter of the environment (default: this one)")
    setup.set_defaults(handler=_reference_setup)
    archive = commands.add_parser(
        "archive",
        help="slim and gzip results files for the repository (per-request columns dropped)",
        description="Write RESULTS as NAME.json.gz without per-request columns; `sift bench --report` reads it.",
    )
    archive.add_argument("results", type=Path, nargs="+", metavar="RESULTS", help="results.json or results.json.gz")
    archive.add_argument("--remove", action="store_true", help="remove each source file afterwards")
    archive.set_defaults(handler=_archive)
    add_distribution(commands)
    add_cluster(commands)
    add_floor(commands)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bench`` to the ``sift`` sub-commands; its handler is ``args.handler(args)``."""
    parser: argparse.ArgumentParser = subparsers.add_parser("bench", help=HELP, description=__doc__)
    add_arguments(parser)
    parser.set_defaults(handler=main)
    add_subcommands(parser)
    return parser


def _rebuild(path: Path, make_plots: bool) -> int:
    from sift_bench.report.archive import is_slim, load_results
    from sift_bench.report.markdown import console_summary, markdown
    from sift_bench.run.runner import finish

    results = load_results(path)
    if is_slim(results):
        # No per-request columns left: the stored analysis is the report's source.
        (path.parent / "report.md").write_text(markdown(results), encoding="utf-8")
    else:
        finish(results, path.parent, make_plots=make_plots)
    print(console_summary(results))
    print(f"\nreport: {path.parent / 'report.md'}")
    return 0


def _archive(args: argparse.Namespace) -> int:
    from sift_bench.report.archive import load_results, write_archive

    for path in args.results:
        name = path.name.removesuffix(".gz").removesuffix(".json")
        target = path.parent / f"{name}.json.gz"
        write_archive(load_results(path), target)
        print(f"{path} -> {target} ({target.stat().st_size // 1024} KiB)")
        if args.remove and path != target:
            path.unlink()
    return 0


def main(args: argparse.Namespace) -> int:
    from sift_bench.arms.arm import (
        ArmError,
        check_rev_imports,
        prepare_rev_arm,
        repo_root,
        rev_backend_arms,
    )
    from sift_bench.client.transports import sdk_available
    from sift_bench.report.markdown import console_summary
    from sift_bench.run.config import BenchConfig
    from sift_bench.run.phases import PhasePlan
    from sift_bench.run.runner import run_bench

    if args.report is not None:
        return _rebuild(args.report, not args.no_plots)
    preset = QUICK if args.quick else FULL
    if args.trials < 1:
        print("sift bench: --trials must be at least 1", file=sys.stderr)
        return 2
    client = args.client
    if client == "sdk" and not sdk_available():
        print("sift bench: sift_sdk is not importable; using --client httpx", file=sys.stderr)
        client = "httpx"
    plan = PhasePlan(
        sequential=args.sequential if args.sequential is not None else int(preset["sequential"]),
        bursts=args.bursts if args.bursts is not None else int(preset["bursts"]),
        burst_sizes=args.burst_sizes,
        closed_seconds=args.closed_seconds if args.closed_seconds is not None else preset["closed_seconds"],
        concurrencies=args.concurrency,
        burst_gap_s=args.burst_gap_ms / 1000,
        warmup_sequential=int(preset["warmup_sequential"]),
        warmup_closed_s=preset["warmup_closed_s"],
        open_loads=args.open_loads,
        open_arrivals=args.open_arrivals,
        open_seconds=args.open_seconds if args.open_seconds is not None else preset["open_seconds"],
    )
    if args.open_capacity is not None and args.open_capacity <= 0:
        print("sift bench: --open-capacity must be positive", file=sys.stderr)
        return 2
    server_cpus, client_cpus = default_cpus(args.server_cpus, args.client_cpus)
    out_dir = args.out or Path("bench-results") / time.strftime("%Y%m%d-%H%M%S")
    model, catalogs = args.model, list(args.catalog)
    request = RequestSpec(args.primitive, args.output_type)
    if args.labels:
        request = replace(request, labels=tuple(label.strip() for label in args.labels.split(",") if label.strip()))
    if args.head:
        from sift_bench.workload import heads

        print(f"sift bench: building the {args.head} test head (once; cached under {HEADS_CACHE})", file=sys.stderr)
        model, head_catalog, request = heads.build(args.head, HEADS_CACHE)
        catalogs.append(head_catalog)

    policies = args.arm or ([] if args.rev else list(POLICIES))
    arms: list[Arm] = [_make_arm(p) for p in dict.fromkeys(policies)]
    rev_root: Path | None = None
    try:
        if args.rev:
            import sift_server

            repo = args.repo or repo_root(Path(sift_server.__file__).parent)
            rev_root = Path(tempfile.mkdtemp(prefix="sift-bench-revs-"))
            for ref in dict.fromkeys(args.rev):
                arm = prepare_rev_arm(repo, ref, args.rev_policy, rev_root)
                check_rev_imports(arm)
                moved = arm.manifest.get("ref_moved_to") if arm.manifest else None
                note = f" (the ref has since moved to {moved[:12]}; measuring {arm.commit})" if moved else ""
                print(f"sift bench: {arm.name} = {arm.commit}{note}", file=sys.stderr)
                arms.extend(rev_backend_arms(arm, args.rev_backend))
        config = BenchConfig(
            arms=arms,
            out_dir=out_dir,
            trials=args.trials,
            model=model,
            catalogs=catalogs,
            workload=args.workload,
            request=request,
            plan=plan,
            client=client,
            server_cpus=server_cpus,
            client_cpus=client_cpus,
            torch_threads=args.torch_threads,
            ceiling=not args.no_ceiling,
            ceiling_min_time_s=args.ceiling_seconds if args.ceiling_seconds is not None else preset["ceiling_seconds"],
            replay=not args.no_replay,
            replay_cap_s=args.replay_seconds if args.replay_seconds is not None else preset["replay_seconds"],
            seed=args.seed,
            ready_timeout_s=args.ready_timeout,
            plots=not args.no_plots,
            progress=False if args.no_progress else None,
            command_line=["sift", *sys.argv[1:]],
            open_capacity=args.open_capacity,
            fresh_cache=args.fresh_cache,
        )
        print(f"sift bench: arms {', '.join(a.name for a in arms)}; {args.trials} trial(s); output {out_dir}",
              file=sys.stderr)  # fmt: skip
        results = run_bench(config)
    except (ArmError, ValueError) as exc:
        print(f"sift bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nsift bench: interrupted; finished runs are in {out_dir / 'results.json'}", file=sys.stderr)
        return 130
    finally:
        if rev_root is not None and not args.keep_revs:
            shutil.rmtree(rev_root, ignore_errors=True)
    print(console_summary(results))
    print(f"\nreport: {out_dir / 'report.md'}\nresults: {out_dir / 'results.json'}")
    return 0 if all(r["valid"] for r in results["runs"]) else 1


def run(argv: Sequence[str]) -> int:
    """``sift bench`` with these arguments (for scripts and tests)."""
    parser = argparse.ArgumentParser(prog="sift bench")
    add_arguments(parser)
    parser.set_defaults(handler=main)
    add_subcommands(parser)
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)
