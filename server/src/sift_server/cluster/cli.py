"""``sift gateway``, ``sift worker`` and ``sift cluster``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sift_server.cluster.worker import WorkerOptions
    from sift_server.config import Settings

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def _nats_url(args: argparse.Namespace) -> str:
    return str(args.nats_url or os.environ.get("SIFT_NATS_URL") or DEFAULT_NATS_URL)


def register(subparsers: Any) -> None:
    from sift_server.serve_args import add_serve_arguments

    g = subparsers.add_parser("gateway", help="Serve the HTTP API with no model: requests go to workers over NATS.")
    add_serve_arguments(g)
    g.add_argument(
        "--nats-url", help=f"NATS server(s), comma-separated (default $SIFT_NATS_URL or {DEFAULT_NATS_URL})."
    )
    g.add_argument("--request-timeout-s", type=float, default=60.0, help="Longest wait for a worker's reply (60).")
    g.add_argument("--stream-max-msgs", type=int, default=100_000, help="Work stream limit, all models (100000).")
    g.add_argument("--stream-max-bytes", type=int, default=1 << 30, help="Work stream limit in bytes (1 GiB).")
    g.add_argument("--stream-max-msgs-per-model", type=int, default=10_000, help="Queued per model (10000).")
    g.add_argument("--stream-storage", choices=("file", "memory"), default="file", help="Work stream storage.")
    g.set_defaults(handler=_gateway)

    w = subparsers.add_parser("worker", help="Load models and serve their work queues from NATS JetStream.")
    add_serve_arguments(w)
    w.add_argument(
        "--nats-url", help=f"NATS server(s), comma-separated (default $SIFT_NATS_URL or {DEFAULT_NATS_URL})."
    )
    w.add_argument(
        "--max-inflight",
        type=int,
        help="Messages held per model at once (default: two forwards' worth, 2 x the batch request cap, at most 64).",
    )
    w.add_argument(
        "--ack-wait-s",
        type=float,
        default=3.0,
        help="Redeliver a message unacknowledged this long: a dead worker's messages come back after it (3).",
    )
    w.add_argument(
        "--progress-interval-s",
        type=float,
        default=1.0,
        help="Extend the ack wait of held messages this often, from a keepalive thread (1; 0: off).",
    )
    w.add_argument("--worker-id", help="Name in heartbeats and the X-Sift-Worker header (default host-pid).")
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


_CLUSTER_KEYS = (
    "nats_url",
    "request_timeout_s",
    "stream_max_msgs",
    "stream_max_bytes",
    "stream_max_msgs_per_model",
    "stream_storage",
    "max_inflight",
    "ack_wait_s",
    "progress_interval_s",
    "worker_id",
)


def _gateway(args: argparse.Namespace) -> int:
    from sift_server.cluster.gateway import serve_gateway
    from sift_server.cluster.gateway_client import GatewayOptions
    from sift_server.cluster.subjects import StreamLimits
    from sift_server.registry.catalog import CatalogError
    from sift_server.serve_args import settings_from_args

    settings = settings_from_args(args, skip=_CLUSTER_KEYS)
    if settings is None:
        return 2
    options = GatewayOptions(
        nats_url=_nats_url(args),
        limits=StreamLimits(
            max_msgs=args.stream_max_msgs,
            max_bytes=args.stream_max_bytes,
            max_msgs_per_model=args.stream_max_msgs_per_model,
            storage=args.stream_storage,
        ),
        request_timeout_s=args.request_timeout_s,
    )
    try:
        serve_gateway(settings, options)
    except CatalogError as exc:
        print(f"sift: catalog error: {exc}", file=sys.stderr)
        return 2
    return 0


def worker_setup(args: argparse.Namespace) -> tuple[Settings, WorkerOptions] | None:
    """The settings and stream options of ``sift worker``'s parsed arguments (None
    when the settings are invalid; the reason is printed)."""
    from sift_server.cluster.worker import WorkerOptions
    from sift_server.serve_args import settings_from_args

    settings = settings_from_args(args, skip=_CLUSTER_KEYS)
    if settings is None:
        return None
    options = WorkerOptions(
        nats_url=_nats_url(args),
        max_inflight=args.max_inflight,
        ack_wait_s=args.ack_wait_s,
        progress_interval_s=args.progress_interval_s,
        worker_id=args.worker_id or "",
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
    cluster = start_local_cluster(args.workers, worker_only, gateway_args, folder=args.folder, port=args.port)
    print(
        f"sift cluster: gateway {cluster.url}, NATS {cluster.nats_url}, "
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
