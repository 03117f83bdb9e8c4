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
    c.add_argument("--workers", type=int, default=2, help="Worker processes (2).")
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
    cluster = start_local_cluster(args.workers, worker_only, gateway_args, folder=args.folder, port=args.port)
    print(
        f"sift cluster ready: gateway {cluster.url}, NATS {cluster.nats_url}, "
        f"{args.workers} workers; logs in {cluster.folder}"
    )
    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stopping and cluster.gateway.alive():
            time.sleep(0.2)
    finally:
        cluster.stop()
    return 0
