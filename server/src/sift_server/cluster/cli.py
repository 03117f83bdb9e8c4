"""``sift gateway``, ``sift worker`` and ``sift cluster``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sift_server.cluster.scaler import ScalePolicy
    from sift_server.cluster.worker import WorkerOptions
    from sift_server.config import Settings


def register(subparsers: Any) -> None:
    from sift_server.config.flags import COMMAND_GROUPS, add_setting_flags

    g = subparsers.add_parser("gateway", help="Serve the HTTP API with no model: requests go to workers over NATS.")
    add_setting_flags(g, COMMAND_GROUPS["gateway"])
    g.set_defaults(handler=_gateway)

    w = subparsers.add_parser("worker", help="Load models and serve their work queues from NATS JetStream.")
    add_setting_flags(w, COMMAND_GROUPS["worker"])
    w.set_defaults(handler=_worker)

    c = subparsers.add_parser(
        "cluster",
        help="Try it on one machine: nats-server (JetStream, temp folder), a gateway and N workers.",
        description="Flags after '--' go to every worker (and --model/--catalog/--api-key also to the gateway).",
    )
    c.add_argument("--workers", type=int, default=2, help="Worker processes (2), without --max-workers.")
    c.add_argument(
        "--max-workers",
        type=int,
        help="Scale workers on the backlog of their models, up to this many (starts with --min-workers).",
    )
    c.add_argument("--min-workers", type=int, default=0, help="With --max-workers: the fewest workers (0).")
    c.add_argument(
        "--backlog-per-worker", type=int, default=32, help="With --max-workers: backlog per worker to add one (32)."
    )
    c.add_argument(
        "--scale-idle-s",
        type=float,
        default=60.0,
        help="With --max-workers: backlog-free time before scaling down (60).",
    )
    c.add_argument("--port", type=int, default=8080, help="Gateway port (8080).")
    c.add_argument("--folder", type=Path, help="Folder for NATS data and logs (default: a new temp folder).")
    c.add_argument("worker_args", nargs=argparse.REMAINDER, help="-- then sift worker flags.")
    c.set_defaults(handler=_cluster)


def _gateway(args: argparse.Namespace) -> int:
    from sift_server.cluster.gateway import serve_gateway
    from sift_server.cluster.gateway_client import GatewayOptions
    from sift_server.cluster.subjects import StreamLimits
    from sift_server.config.flags import COMMAND_GROUPS, settings_from_args
    from sift_server.registry.catalog import CatalogError

    settings = settings_from_args(args, COMMAND_GROUPS["gateway"])
    if settings is None:
        return 2
    options = GatewayOptions(
        nats_url=settings.nats_url,
        limits=StreamLimits(
            max_msgs=settings.stream_max_msgs,
            max_bytes=settings.stream_max_bytes,
            max_msgs_per_model=settings.stream_max_msgs_per_model,
            storage=settings.stream_storage,
        ),
        request_timeout_s=settings.request_timeout_s,
        hop_stamps=settings.hop_stamps,
    )
    try:
        serve_gateway(settings, options)
    except CatalogError as exc:
        print(f"sift: catalog error: {exc}", file=sys.stderr)
        return 2
    return 0


def worker_setup(
    args: argparse.Namespace, groups: Sequence[str] | None = None
) -> tuple[Settings, WorkerOptions] | None:
    """The settings and stream options of ``sift worker``'s parsed arguments (None
    when the settings are invalid; the reason is printed). ``groups``: the
    settings the command line offered (default: ``sift worker``'s)."""
    from sift_server.cluster.worker import WorkerOptions
    from sift_server.config.flags import COMMAND_GROUPS, settings_from_args

    settings = settings_from_args(args, groups or COMMAND_GROUPS["worker"])
    if settings is None:
        return None
    options = WorkerOptions(
        nats_url=settings.nats_url,
        max_inflight=settings.max_inflight,
        ack_wait_s=settings.ack_wait_s,
        progress_interval_s=settings.progress_interval_s,
        worker_id=settings.worker_id,
        hop_stamps=settings.hop_stamps,
    )
    return settings, options


def _worker(args: argparse.Namespace) -> int:
    from sift_server.cluster.worker import run_worker
    from sift_server.registry.catalog import CatalogError

    setup = worker_setup(args)
    if setup is None:
        return 2
    settings, options = setup
    try:
        run_worker(settings, options)
    except CatalogError as exc:
        print(f"sift: catalog error: {exc}", file=sys.stderr)
        return 2
    return 0


def _gateway_flags(worker_args: list[str]) -> list[str]:
    """The worker flags the gateway needs too: the catalog, the default model, the key."""
    shared = {"--catalog", "--model", "--api-key"}
    out: list[str] = []
    for index, flag in enumerate(worker_args):
        if flag in shared and index + 1 < len(worker_args):
            out += [flag, worker_args[index + 1]]
    return out


def _cluster(args: argparse.Namespace) -> int:
    from sift_server.cluster.local import start_local_cluster

    worker_args = [a for a in args.worker_args if a != "--"]
    # The key guards the gateway; workers are reached only through NATS.
    gateway_args = _gateway_flags(worker_args)
    worker_only = []
    skip = False
    for index, flag in enumerate(worker_args):
        if skip:
            skip = False
            continue
        if flag == "--api-key":
            skip = True
            continue
        worker_only.append(worker_args[index])
    # Returns once every worker serves: "ready" means answers, not a listening gateway.
    policy = _scale_policy(args)
    if isinstance(policy, str):
        print(f"sift: {policy}", file=sys.stderr)
        return 2
    workers = args.workers if policy is None else policy.min_workers
    cluster = start_local_cluster(workers, worker_only, gateway_args, folder=args.folder, port=args.port)
    scaler = None
    if policy is not None:
        from sift_server.cluster.autoscale import LocalScaler

        scaler = LocalScaler(cluster, _served_models(worker_only), policy)
    sizing = f"{workers} workers" if policy is None else f"{policy.min_workers}-{policy.max_workers} workers on backlog"
    print(f"sift cluster ready: gateway {cluster.url}, NATS {cluster.nats_url}, {sizing}; logs in {cluster.folder}")
    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ticked = 0.0
    try:
        while not stopping and cluster.gateway.alive():
            if scaler is not None and time.monotonic() - ticked >= SCALE_TICK_S:
                ticked = time.monotonic()
                scaler.tick()
            time.sleep(0.2)
    finally:
        if scaler is not None:
            scaler.close()
        cluster.stop()
    return 0


# How often the local scaler reads the backlog (KEDA's pollingInterval is 5 s in deploy/).
SCALE_TICK_S = 1.0


def _scale_policy(args: argparse.Namespace) -> ScalePolicy | str | None:
    """The scaler's policy from the flags (None: a fixed number of workers; a string: what is wrong)."""
    from sift_server.cluster.scaler import ScalePolicy

    if args.max_workers is None:
        return None
    try:
        return ScalePolicy(args.min_workers, args.max_workers, args.backlog_per_worker, args.scale_idle_s)
    except ValueError as exc:
        return f"sift cluster: {exc}"


def _served_models(worker_args: list[str]) -> list[str]:
    """The models the workers serve (their --model and --preload), as a worker reads its flags."""
    from sift_server.cluster.worker import served_models
    from sift_server.config.flags import COMMAND_GROUPS, add_setting_flags, settings_from_args

    parser = argparse.ArgumentParser(add_help=False)
    add_setting_flags(parser, COMMAND_GROUPS["worker"])
    settings = settings_from_args(parser.parse_known_args(worker_args)[0], COMMAND_GROUPS["worker"])
    return served_models(settings) if settings is not None else []
