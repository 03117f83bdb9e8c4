"""Serve first, decide in the background.

A first start with ``backend: auto`` used to export the model to ONNX and
OpenVINO and time every candidate before the first request was served. Now,
where the load plan names a first backend (``backends.plan_load``: the
reference, PyTorch fp32, exact and loaded in seconds), the registry loads the
entry on it, serves through a :class:`SwitchingAdapter`, and has the ``auto``
choice made off the serving path (:class:`Decisions`: ``deciding`` runs it in a
child process at the lowest priority; without one, a background thread at a
raised nice); when that is ready the adapter switches between two forwards and
the first copy is released (``release_memory``). With the decision already
recorded there is no first copy: the registry opens the chosen runtime alone.
Which backends exist is the adapters' business: nothing here names one.

Why a request prepared before the switch may run after it: ``prepare`` depends
on the model folder and the entry's options only (tokenization), never on the
backend, for every adapter; both sides of the switch are the same adapter class
over the same folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import dataclasses
import gc
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sift_server.adapters.base import Adapter, LoadContext, Part, Prepared, TaskInput
from sift_server.registry.catalog import ModelSpec
from sift_server.registry.loader import load_plan

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# Nice of the thread that exports and times candidates: the serving threads come first.
DECIDE_NICE = 19


class Decisions(Protocol):
    """Where ``auto``'s decisions are opened and made (``deciding.ChildDecisions``)."""

    def recorded(self, spec: ModelSpec) -> Adapter | None:
        """``spec`` opened on its recorded decision; None where none is recorded."""

    async def decide(self, spec: ModelSpec) -> Adapter:
        """Have the decision made (off the serving path) and open it."""


def release_memory() -> None:
    """Give what a released model held back as far as the runtime allows: collect
    its reference cycles (loads freeze the heap: thaw first) and hand the freed
    heap pages back to the system (glibc's ``malloc_trim``). PyTorch's own module
    stays imported: Python cannot unload an extension."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    name = ctypes.util.find_library("c")
    if name is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)


def first_spec(spec: ModelSpec, backend_override: str | None = None) -> ModelSpec | None:
    """The entry as it serves until ``auto``'s decision in the background (the
    reference the plan names), or None where the load is the only one: not
    ``auto``, overridden, with LoRAs, or of an adapter that runs on one runtime."""
    first = load_plan(spec, backend_override).first
    if first is None:
        return None
    return spec.model_copy(update={"backend": first.backend, "precision": first.precision})


def lower_priority(nice: int = DECIDE_NICE) -> None:
    """Raise the calling thread's nice (Linux: a thread is a schedulable task)."""
    # Not Linux, or not permitted: decide at normal priority.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


class SwitchingAdapter(Adapter):
    """One model's adapter that may be replaced by another between forwards.

    ``pending`` describes a decision still running (None once switched); it is
    shown in ``/v1/models`` under ``runtime.pending``."""

    def __init__(self, current: Adapter, pending: str | None = None) -> None:
        self._current = current
        self._lock = threading.Lock()
        self.pending = pending
        self.switches = 0
        self._describe()

    @classmethod
    def load(cls, ctx: LoadContext) -> Adapter:
        raise NotImplementedError("a SwitchingAdapter wraps an adapter loaded by the registry")

    @property
    def current(self) -> Adapter:
        return self._current

    def _describe(self) -> None:
        info = self._current.info
        if self.pending is not None:
            info = dataclasses.replace(info, runtime={**info.runtime, "pending": self.pending})
        self.info = info
        self.supports_lora = self._current.supports_lora

    def prepare(self, task: TaskInput) -> Prepared:
        return self._current.prepare(task)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        with self._lock:
            return self._current.forward(parts)

    def switch(self, new: Adapter) -> Adapter:
        """Serve through ``new`` from the next forward on (waits for a running one);
        returns the adapter it replaced, for the caller to close."""
        with self._lock:
            old, self._current = self._current, new
            self.pending = None
            self.switches += 1
            self._describe()
        return old

    def settle(self, outcome: str) -> None:
        """The decision ended without a switch (it failed): say so instead of pending."""
        self.pending = None
        self._describe()
        self.info = dataclasses.replace(self.info, runtime={**self.info.runtime, "decision": outcome})

    def memory_bytes(self) -> int:
        return self._current.memory_bytes()

    def load_lora(self, name: str, path: Path) -> None:
        self._current.load_lora(name, path)

    def unload_lora(self, name: str) -> None:
        self._current.unload_lora(name)

    def close(self) -> None:
        self._current.close()


def serving_on(adapter: Adapter) -> str:
    """``backend precision`` of what runs ``adapter``'s forwards, as its runtime says."""
    runtime = adapter.info.runtime
    return f"{runtime.get('backend', '?')} {runtime.get('precision', '')}".strip()


def pending(first: Adapter) -> str:
    """``runtime.pending`` while the decision runs."""
    return f"auto: exporting and timing the candidates in the background; serving on {serving_on(first)} meanwhile"


def describe_switch(model: str, old: Adapter, new: Adapter) -> str:
    before, after = old.info.runtime, new.info.runtime
    return (
        f"model {model}: switched from {before.get('backend', '?')} {before.get('precision', '')} "
        f"to {after.get('backend', '?')} {after.get('precision', '')} ({after.get('selected_by', 'auto')}) "
        "between forwards"
    )


def in_low_priority_thread(function: Callable[[T], R], argument: T) -> asyncio.Future[R]:
    """``function(argument)`` in a new daemon thread at ``DECIDE_NICE`` (daemon: a
    decision still exporting must not hold the process past its shutdown grace)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()

    def settle(result: R | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        lower_priority()
        try:
            result = function(argument)
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="decide-backend", daemon=True).start()
    return future
