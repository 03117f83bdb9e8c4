"""The flags of ``sift serve``, shared by ``sift gateway`` and ``sift worker``, and
the settings they make."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sift_server.engine.policy import POLICIES


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
    from sift_server.adapters.backends.request import BACKENDS, PRECISIONS

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
