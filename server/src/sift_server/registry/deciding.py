"""``auto``'s decision made off the serving path: in a child process at the
lowest priority (nice 19 and, where Linux allows, ``SCHED_IDLE``), so exports
and timing rounds never hold the serving interpreter's GIL nor take its core
from a forward. The artifact cache is the hand-off: the child records the
decision (and the exports) there, the server then opens the recorded choice
(``load_recorded``) and switches to it.

Also the body of ``sift models prepare``, which decides ahead (at install time)
in the foreground.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sift_server.adapters.base import Adapter
from sift_server.registry.calibrate import CurveRecords
from sift_server.registry.catalog import ModelSpec
from sift_server.registry.loader import load_adapter, load_recorded

log = logging.getLogger(__name__)

# The nice of the deciding child: everything the server does comes first.
DECIDE_NICE = 19
CHILD = (sys.executable, "-m", "sift_server.registry.deciding")


def lowest_priority() -> None:
    """This process at nice 19 and, where available, under ``SCHED_IDLE`` (it runs
    only when a core has nothing else to do)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, DECIDE_NICE)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


@dataclass(slots=True)
class ChildDecisions:
    """The serving process's side: open a recorded decision, or have one made in a child."""

    torch_threads: int = 0
    backend_override: str | None = None
    rechoose_backend: bool = False
    cache_dir: Path | None = None
    # Whether the child also measures the chosen runtime's forward curve (calibrate.CurveRecords)
    # for the next start to reuse.
    calibrate: bool = False
    # The child's command line before its JSON argument (tests replace it).
    command: Sequence[str] = CHILD
    # Models whose decision this process asked for already: ``rechoose`` holds once.
    _decided: set[str] = field(default_factory=set)

    def recorded(self, spec: ModelSpec) -> Adapter | None:
        """``spec`` on its recorded decision (None: none, or asked to decide again)."""
        if self.rechoose_backend and spec.name not in self._decided:
            return None
        return load_recorded(spec, self.torch_threads, backend_override=self.backend_override, cache_dir=self.cache_dir)

    async def decide(self, spec: ModelSpec) -> Adapter:
        """Run the decision in a child; then open what it recorded. Raises when the
        child fails or records nothing."""
        job = {
            "spec": spec.model_dump(mode="json"),
            "torch_threads": self.torch_threads,
            "backend_override": self.backend_override,
            "rechoose_backend": self.rechoose_backend and spec.name not in self._decided,
            "cache_dir": None if self.cache_dir is None else str(self.cache_dir),
            "calibrate": self.calibrate,
            "parent": os.getpid(),
        }
        child = await asyncio.create_subprocess_exec(*self.command, json.dumps(job), stdin=asyncio.subprocess.DEVNULL)
        log.info("model %s: deciding its backend in child process %d at the lowest priority", spec.name, child.pid)
        try:
            status = await child.wait()
        finally:
            if child.returncode is None:  # cancelled (shutdown, eviction): do not leave it running
                child.kill()
                await child.wait()
        if status != 0:
            raise RuntimeError(f"the deciding child process exited with status {status} (its log is above)")
        self._decided.add(spec.name)
        adapter = await asyncio.to_thread(self.recorded, spec)
        if adapter is None:
            raise RuntimeError("the deciding child process recorded no decision")
        return adapter


def prepare(spec: ModelSpec, *, calibrate: bool = False, **settings: Any) -> dict[str, Any]:
    """Load ``spec`` as the server would (exporting and deciding where nothing is
    recorded), with ``calibrate`` measure and record its forward curve on the chosen
    runtime (the server's next start reads both), release it and return its runtime
    description."""
    adapter = load_adapter(spec, **settings)
    try:
        if calibrate:
            CurveRecords(settings.get("cache_dir"), bool(settings.get("rechoose_backend"))).curve(spec, adapter)
        return dict(adapter.info.runtime)
    finally:
        adapter.close()


def die_with_parent(parent: int) -> None:
    """End this child when the server that started it dies (Linux: ``PR_SET_PDEATHSIG``),
    so that a killed server leaves no decision running."""
    name = ctypes.util.find_library("c")
    if name is not None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the call above
        raise SystemExit(1)


def main(argv: Sequence[str] | None = None) -> int:
    """The child: one JSON argument (the entry, the load settings and the server's pid)."""
    job = json.loads((sys.argv[1:] if argv is None else argv)[0])
    if "parent" in job:
        die_with_parent(int(job["parent"]))
    lowest_priority()
    logging.basicConfig(level=logging.INFO, format="sift decide[%(process)d] %(levelname)s %(name)s: %(message)s")
    spec = ModelSpec.model_validate(job["spec"])
    cache_dir = job.get("cache_dir")
    runtime = prepare(
        spec,
        torch_threads=int(job.get("torch_threads") or 0),
        backend_override=job.get("backend_override"),
        rechoose_backend=bool(job.get("rechoose_backend")),
        cache_dir=None if cache_dir is None else Path(cache_dir),
        calibrate=bool(job.get("calibrate")),
    )
    log.info("model %s: decided %s %s", spec.name, runtime.get("backend"), runtime.get("precision"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
