"""An embedder whose forward sleeps a fixed time (no CPU used), for the cluster
tests and measurements: several workers on one small machine do not compete,
and each forward's start can be seen from outside (a marker file per forward,
named by the pid)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput, TranscribeTask

SLEEPER_ADAPTER = "test-sleeper"
DIMS = 4
ALLOC_STEP_MB = 16


class SleeperAdapter(Adapter):
    transformers_models = False  # no torch, no transformers: a worker starts in about a second

    def __init__(self, sleep_s: float, marker_dir: Path | None, alloc_mb: int = 0) -> None:
        self.info = AdapterInfo(tasks=frozenset({"encode"}), outputs=("dense",), dims={"dense": DIMS})
        self.sleep_s = sleep_s
        self.marker_dir = marker_dir
        # Memory each forward takes (and touches) before it sleeps: a forward that
        # outgrows its memory limit, for the OOM-kill test.
        self.alloc_mb = alloc_mb
        self.forwards = 0

    @classmethod
    def load(cls, ctx: LoadContext) -> Adapter:
        marker = ctx.options.get("marker_dir")
        time.sleep(float(ctx.options.get("load_ms", 0)) / 1000)  # a model's load time, if asked for
        sleep_s = float(ctx.options.get("sleep_ms", 50)) / 1000
        return cls(sleep_s, Path(marker) if marker else None, int(ctx.options.get("alloc_mb", 0)))

    def prepare(self, task: TaskInput) -> Prepared:
        texts = [] if isinstance(task, TranscribeTask) else list(task.texts)
        return Prepared(item_costs=[max(1, len(t.split())) for t in texts], compat_key="s", payload=texts)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        self.forwards += 1
        if self.marker_dir is not None:
            self.marker_dir.mkdir(parents=True, exist_ok=True)
            (self.marker_dir / f"{os.getpid()}-{self.forwards}").write_text("")
        taken = [bytearray(ALLOC_STEP_MB << 20) for _ in range(self.alloc_mb // ALLOC_STEP_MB)]  # zero-filled: touched
        time.sleep(self.sleep_s)
        del taken
        out: list[list[Any]] = []
        for part in parts:
            texts = part.prepared.payload[part.start : part.stop]
            out.append([np.array([len(t), 1.0, 0.0, 0.0], dtype=np.float32) for t in texts])
        return out


def register() -> None:
    """Make the adapter known to this process's catalog (tests and measurements only)."""
    from sift_server.adapters.records import AdapterRecord
    from sift_server.adapters.records import register as register_record

    register_record(
        AdapterRecord(
            name=SLEEPER_ADAPTER,
            target="sift_bench.cluster.sleeper:SleeperAdapter",
            tasks=frozenset({"encode"}),
            encode_outputs=("dense",),
        )
    )


def write_sleeper_entry(
    catalog_dir: Path,
    name: str,
    sleep_ms: float,
    marker_dir: Path | None = None,
    load_ms: float = 0,
    alloc_mb: int = 0,
) -> Path:
    catalog_dir.mkdir(parents=True, exist_ok=True)
    weights = catalog_dir / "sleeper-weights"
    weights.mkdir(exist_ok=True)
    (weights / "model.safetensors").write_bytes(b"")  # the catalog wants a weights file; nothing reads it
    lines = [
        f"name: {name}",
        f"adapter: {SLEEPER_ADAPTER}",
        "source:",
        f"  path: {weights}",
        "tasks: [encode]",
        "options:",
        f"  sleep_ms: {sleep_ms}",
    ]
    if marker_dir is not None:
        lines.append(f"  marker_dir: {marker_dir}")
    if load_ms:
        lines.append(f"  load_ms: {load_ms}")
    if alloc_mb:
        lines.append(f"  alloc_mb: {alloc_mb}")
    path = catalog_dir / (name.replace("/", "_") + ".yaml")
    path.write_text("\n".join(lines) + "\n")
    return path
