"""The ``reference`` arm's process: the released SIE server (``sie-server
serve``) from its own virtual environment, on the CPU, offline, pinned like a
Sift arm, serving the bench's model from a models folder written per run."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import httpx

from sift_bench.arms.reference.models import write_models_dir
from sift_bench.arms.server import ArmServer, child_env, pin_prefix, prepare_logs
from sift_server.processes import ProcessStartError, free_port, spawn, wait_ready

# Where ``sift bench reference-setup`` puts the reference's virtual environment.
DEFAULT_VENV = Path.home() / ".cache" / "sift" / "reference-venv"
VENV_ENV = "SIFT_BENCH_REFERENCE_VENV"
# What its log says when the model did not load (its /readyz is 200 all the same).
_PRELOAD_FAILED = "Preload complete: 0/"


def reference_venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)


def reference_launcher(venv: Path | None = None) -> list[str]:
    """The command that runs the reference server's CLI."""
    return [str((venv or reference_venv()) / "bin" / "sie-server")]


def serve_command(
    launcher: Sequence[str], port: int, models_dir: Path, models: Sequence[str], cache: Path
) -> list[str]:
    """``sie-server serve`` on the CPU and offline, with ``models`` (names in
    ``models_dir``) preloaded: the bench's arm and the parity recorders start it so."""
    names = ",".join(models)
    return [
        *launcher, "serve",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--device", "cpu",
        "--models-dir", str(models_dir),
        "--models", names,
        "--preload", names,
        "--local-cache", str(cache),
        "--no-hf-fallback",
    ]  # fmt: skip


def model_loaded(url: str, model: str) -> bool:
    """Whether the reference server at ``url`` reports ``model`` loaded."""
    try:
        response = httpx.get(f"{url}/v1/models/{model}", timeout=5.0)
        return response.status_code == 200 and response.json().get("loaded") is True
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


@dataclass(slots=True)
class ReferenceServer(ArmServer):
    """One ``sie-server serve`` with the run's model preloaded."""

    launcher: Sequence[str] = field(default_factory=reference_launcher)

    def start(self) -> Self:
        spec = self.spec
        if not Path(self.launcher[0]).exists():
            raise ProcessStartError(
                f"no reference server at {self.launcher[0]}: run `sift bench reference-setup` first"
            )
        self.port = free_port()
        run_dir = spec.log_path.parent / (spec.log_path.stem + "-reference")
        models = write_models_dir(run_dir / "models", spec.model, spec.catalogs)
        self.command = [
            *pin_prefix(spec.cpus),
            *serve_command(self.launcher, self.port, models, [spec.model], run_dir / "cache"),
        ]
        threads = str(spec.torch_threads)
        env = child_env(extra={"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "SIE_LOG_LEVEL": "WARNING"})
        started = time.perf_counter()
        prepare_logs(spec, self.command)
        self.primary = spawn("sie-server", self.command, spec.log_path, env=env, own_session=True, append=True)
        try:
            # Its /readyz answers before the preload has succeeded, and after it has failed.
            wait_ready(self.url, [self.primary], spec.ready_timeout_s, also=self._loaded)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _loaded(self) -> bool:
        if _PRELOAD_FAILED in self.log_tail(200):
            raise ProcessStartError(f"the reference server could not load {self.spec.model}:\n{self.log_tail()}")
        return model_loaded(self.url, self.spec.model)
