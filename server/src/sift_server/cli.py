"""The ``sift`` command.

Serving:
  serve       serve models over HTTP on one machine
  models      list the catalog (or a running server's models with --url)
  gateway     the HTTP API with no model, sending work to workers over NATS JetStream
  worker      load models and serve their work from NATS JetStream
  cluster     a NATS server, a gateway and N workers on one machine, to try scale-out

Measuring:
  bench       compare batching policies or code revisions through the HTTP API
  simulate    replay arrival traces through the batching policies on a virtual clock
  overhead    cold start, memory and what the server adds to one request over the in-process forward
  primitives  score and extract through the server against the reference library's own batch call
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sift_server.engine.policy import POLICIES


def _add_serve(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="Serve models over HTTP (the default model loads before ready).")
    add_serve_arguments(p)
    p.set_defaults(handler=_serve)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``sift serve`` (``sift gateway`` and ``sift worker`` reuse them)."""
    p.add_argument("--host", help="Bind address (default 127.0.0.1).")
    p.add_argument("--port", type=int, help="Port (default 8080).")
    p.add_argument("--model", dest="default_model", help="Default model, loaded before /readyz turns ready.")
    p.add_argument("--preload", action="append", help="Another model to load at start (repeatable).")
    p.add_argument("--catalog", action="append", type=Path, help="Folder of extra catalog YAML files (repeatable).")
    p.add_argument("--api-key", help="Require 'Authorization: Bearer KEY' (or set SIFT_API_KEY).")
    p.add_argument("--policy", choices=POLICIES, help="Batching policy (default adaptive).")
    p.add_argument("--torch-threads", type=int, help="Intra-op threads per forward (default: one per available core).")
    p.add_argument(
        "--backend",
        type=_backend_arg,
        help="Run every model on this backend, overriding the catalog: auto, torch, onnx or openvino, "
        "optionally with :PRECISION (e.g. openvino:fp32, onnx:int8). Same as SIFT_BACKEND.",
    )
    p.add_argument(
        "--rechoose-backend",
        action="store_const",
        const=True,
        help="For every auto entry, time the backends again at load and record the new choice instead of "
        "reusing the recorded one (once per model per process). Same as SIFT_RECHOOSE_BACKEND=1.",
    )
    p.add_argument("--max-queue-items", type=int, help="Pending items per model before 503 QUEUE_FULL (default 512).")
    p.add_argument("--max-request-items", type=int, help="Items one request may carry, 400 beyond (default 512).")
    p.add_argument("--queue-timeout-s", type=float, help="A request queued longer gets 503 QUEUE_FULL (default 30).")
    p.add_argument("--memory-budget-mb", type=int, help="Evict least recently used models above this (default 8192).")
    p.add_argument(
        "--no-calibrate",
        dest="calibrate",
        action="store_const",
        const=False,
        help="Skip measuring each embedder's efficient batch size after load.",
    )
    p.add_argument("--trace-file", type=Path, help="Append one JSON line per forward (for benchmarks).")
    p.add_argument(
        "--otlp-endpoint",
        help="Send OpenTelemetry traces over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318 "
        "(or set SIFT_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT; needs the otel extra).",
    )
    p.add_argument(
        "--keep-alive-s",
        type=int,
        help="Close idle keep-alive connections after this (default 10; must exceed 5, the longest Retry-After).",
    )
    p.add_argument("--shutdown-grace-s", type=float, help="Time to finish queued work on SIGTERM (default 30).")
    p.add_argument(
        "--body-timeout-s", type=float, help="408 and close when a request body takes longer than this (default 60)."
    )
    p.add_argument("--log-level", help="debug, info, warning, error.")


def _backend_arg(text: str) -> str:
    from sift_server.adapters._backends import BACKENDS, PRECISIONS

    backend, _, precision = text.partition(":")
    if backend not in BACKENDS or (precision and precision not in PRECISIONS):
        raise argparse.ArgumentTypeError(
            f"expected BACKEND[:PRECISION] with BACKEND in {', '.join(BACKENDS)} "
            f"and PRECISION in {', '.join(PRECISIONS)}, got {text!r}"
        )
    return text


def settings_from_args(args: argparse.Namespace, skip: Sequence[str] = ()) -> Any:
    """Settings from the serve flags that were given (None: invalid, reported).
    ``--backend`` and ``--rechoose-backend`` go to the environment as SIFT_BACKEND and
    SIFT_RECHOOSE_BACKEND, where the model loader reads them."""
    import os

    from pydantic import ValidationError

    from sift_server.config import Settings

    overrides = {
        key: value
        for key, value in vars(args).items()
        if key not in ("handler", "command", "backend", "rechoose_backend", *skip) and value is not None
    }
    if getattr(args, "backend", None):
        os.environ["SIFT_BACKEND"] = args.backend
    if getattr(args, "rechoose_backend", None):
        os.environ["SIFT_RECHOOSE_BACKEND"] = "1"
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        print(f"sift: invalid setting: {exc}", file=sys.stderr)
        return None


def _serve(args: argparse.Namespace) -> int:
    from sift_server.registry.catalog import CatalogError
    from sift_server.server import serve

    settings = settings_from_args(args)
    if settings is None:
        return 2
    try:
        serve(settings)
    except CatalogError as exc:
        print(f"sift: catalog error: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_models(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="List catalog models (or a running server's with --url).")
    p.add_argument("--catalog", action="append", type=Path, default=[], help="Extra catalog folder (repeatable).")
    p.add_argument("--url", help="Ask a running server instead, e.g. http://127.0.0.1:8080.")
    p.add_argument("--json", action="store_true", help="Print JSON.")
    p.set_defaults(handler=_models)


def _models(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]]
    if args.url:
        import urllib.request

        # The standard library suffices for one GET; the server install carries no HTTP client.
        request = urllib.request.Request(args.url.rstrip("/") + "/v1/models", headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            listing = json.loads(response.read())
        rows = [
            {"name": m["name"], "tasks": ",".join(m.get("tasks", m["outputs"])), "state": m["state"]}
            for m in listing["models"]
        ]
    else:
        from sift_server.registry.catalog import Catalog, CatalogError

        try:
            catalog = Catalog.from_dirs(args.catalog, check_weights=False)
        except CatalogError as exc:
            print(f"sift: catalog error: {exc}", file=sys.stderr)
            return 2
        rows = [
            {"name": s.name, "tasks": ",".join(s.tasks), "adapter": s.adapter, "source": _source(s.source)}
            for s in catalog.specs.values()
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if rows:
        keys = list(rows[0])
        widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
        print("  ".join(k.upper().ljust(widths[k]) for k in keys))
        for row in rows:
            print("  ".join(str(row[k]).ljust(widths[k]) for k in keys))
    return 0


def _source(source: Any) -> str:
    if source.package:
        return f"package:{source.package}"
    if source.path:
        return f"path:{source.path}"
    return f"hf:{source.hf}"


# Subcommands other distributions add through this entry-point group: each entry
# point is named after its command and loads a ``register(subparsers)``.
COMMAND_GROUP = "sift.commands"
# Commands of the benchmark distribution, named here so that a server-only
# install answers ``sift bench`` with what to install instead of "invalid choice".
BENCH_COMMANDS = ("bench", "overhead", "primitives", "simulate")


def _add_plugins(subparsers: Any) -> None:
    from importlib.metadata import entry_points

    found = set()
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        entry.load()(subparsers)
        found.add(entry.name)
    for name in BENCH_COMMANDS:
        if name not in found:
            p = subparsers.add_parser(name, help="(needs the sift-bench distribution: pip install ./bench)")
            p.set_defaults(handler=_needs_bench)


def _needs_bench(args: argparse.Namespace) -> int:
    print(
        f"sift {args.command}: part of the benchmark harness, a separate distribution; "
        "install it with `pip install ./bench` from a Sift checkout (`make setup` does).",
        file=sys.stderr,
    )
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sift", description="Sift inference server.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_serve(subparsers)
    _add_models(subparsers)
    from sift_server.cluster.cli import register as register_cluster

    register_cluster(subparsers)
    _add_plugins(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    # A bench command on a server-only install takes any flags: it only says what to install.
    if unknown and args.handler is not _needs_bench:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
