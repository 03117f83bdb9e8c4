"""The generation engine in a child process Sift starts, watches and stops.

Why a process: OpenVINO GenAI's ``step()`` holds the GIL for the whole step, so in
the server's process every other thread (the event loop, the encode and score
forwards) waited out a step at each hand-over of the GIL: on one core an encode
took about 11x as long while a stream generated (docs/generation.md). In a child,
the server's side is two threads that hold the GIL only to move messages: a
writer that sends requests and cancellations down a pipe, and a reader that
waits on the other pipe without the GIL and hands each request's new token ids
to the event loop it came from. The child runs at a lower CPU priority than the
forward threads (catalog option ``engine_nice``).

Watching: a child that dies (killed, out of memory, a failed step) fails the
requests it was running with ``INFERENCE_ERROR``, and the next request starts a
fresh one. Stopping (the model evicted, the server past its grace): whoever still
waits gets ``SHUTTING_DOWN`` at once, then the child is told to exit (killed if it
does not). If the server dies, the child's input closes and it exits on its own."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sift_server.errors import InferenceError, ShuttingDown
from sift_server.generation.engine import FinishReason, Step
from sift_server.generation.params import Sampling

log = logging.getLogger(__name__)

# A cold child imports OpenVINO GenAI and compiles the model.
START_TIMEOUT_S = 300.0
# How long a stopped child may take to exit before it is killed.
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class EngineConfig:
    folder: Path
    threads: int
    kv_cache_gib: float
    max_sequences: int
    # Added to the server's nice value in the child: 0 shares the CPU with the forward
    # threads evenly, 19 gives way to them (docs/generation.md measures both).
    nice: int


@dataclass(slots=True)
class _Request:
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[Step | BaseException] = field(default_factory=asyncio.Queue)


class _Child:
    """One started child and the requests it is running."""

    def __init__(self, config: EngineConfig) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, _Request] = {}
        self.ended = False
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        settings = {
            "folder": str(config.folder),
            "threads": config.threads,
            "kv_cache_gib": config.kv_cache_gib,
            "max_sequences": config.max_sequences,
            "nice": config.nice,
        }
        module = "sift_server.generation.engine_child"
        command = [sys.executable, "-m", module, str(to_child_read), str(from_child_write), json.dumps(settings)]
        try:
            self.process = subprocess.Popen(
                command, pass_fds=(to_child_read, from_child_write), stdin=subprocess.DEVNULL
            )
        finally:
            os.close(to_child_read)
            os.close(from_child_write)
        self._send = Connection(to_child_write, readable=False)
        self._receive = Connection(from_child_read, writable=False)
        try:
            self._wait_ready()
            # What the loaded child holds (runtime, compiled model, weights as read), once.
            self.resident = resident_bytes(self.process.pid)
        except BaseException:
            self._send.close()
            self._end_process()
            self._receive.close()
            raise
        self._writer = threading.Thread(target=self._write, name="generation-engine-writer", daemon=True)
        self._reader = threading.Thread(target=self._read, name="generation-engine-reader", daemon=True)
        self._writer.start()
        self._reader.start()

    def _wait_ready(self) -> None:
        if not self._receive.poll(START_TIMEOUT_S):
            raise InferenceError(f"The generation engine did not start within {START_TIMEOUT_S:.0f} s.")
        try:
            status, value = self._receive.recv()
        except EOFError:
            code = self.process.wait()
            raise InferenceError(f"The generation engine exited while starting (exit code {code}).") from None
        if status != "ready":
            raise InferenceError(f"The generation engine failed to start: {value}")

    # ---- the event loop's side ----------------------------------------------

    def submit(self, request_id: int, request: _Request, prompt_ids: Sequence[int], sampling: Sampling) -> bool:
        """Hand a request to the child; False if it has ended (start another)."""
        with self._lock:
            if self.ended:
                return False
            self._running[request_id] = request
        self._outbox.put(("add", request_id, list(prompt_ids), sampling))
        return True

    def cancel(self, request_id: int) -> None:
        with self._lock:
            if self._running.pop(request_id, None) is None:
                return  # finished, or already failed
        self._outbox.put(("cancel", request_id))

    def stop(self) -> None:
        """Answer whoever waits with SHUTTING_DOWN now, then end the process."""
        self._end(ShuttingDown("The generation model was unloaded; retry."))
        self._outbox.put(None)
        self._writer.join(STOP_TIMEOUT_S)  # it closes the child's input: the child exits
        self._end_process()
        self._reader.join(STOP_TIMEOUT_S)

    # ---- the writer and reader threads ----------------------------------------

    def _write(self) -> None:
        try:
            while (message := self._outbox.get()) is not None:
                self._send.send(message)
        except OSError:  # the child is gone: the reader says so to whoever waits
            pass
        finally:
            self._send.close()

    def _read(self) -> None:
        broken: str | None = None
        while True:
            try:
                message = self._receive.recv()  # waits without the GIL
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "made":
                self._deliver(message[1])
            elif kind == "refused":
                self._fail(message[1], InferenceError(f"The engine refused the request: {message[2]}"))
            elif kind == "broken":
                broken = message[1]
        self._outbox.put(None)  # the writer ends too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STOP_TIMEOUT_S)
        if not self.ended:
            why = f"failed: {broken}" if broken else f"stopped (exit code {self.process.returncode})"
            log.error("the generation engine's process %s", why)
            self._end(InferenceError(f"The generation engine {why}; retry."))
        self._receive.close()

    def _deliver(self, made: list[tuple[int, tuple[int, ...], Any]]) -> None:
        # One wake-up of each event loop per step for all its requests, not one per request:
        # each call_soon_threadsafe writes to the loop's self-pipe and runs a loop iteration.
        posts: dict[asyncio.AbstractEventLoop, list[tuple[_Request, Step]]] = {}
        with self._lock:
            for request_id, ids, finish in made:
                request = self._running.get(request_id)
                if request is None:
                    continue
                if finish is not None:
                    del self._running[request_id]
                posts.setdefault(request.loop, []).append((request, Step(tuple(ids), finish)))
        for loop, items in posts.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                loop.call_soon_threadsafe(_put_all, items)

    def _fail(self, request_id: int, error: BaseException) -> None:
        with self._lock:
            request = self._running.pop(request_id, None)
        if request is not None:
            _post(request, error)

    def _end(self, error: BaseException) -> None:
        with self._lock:
            self.ended = True
            waiting, self._running = list(self._running.values()), {}
        for request in waiting:
            _post(request, error)

    def _end_process(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def resident_bytes(pid: int) -> int | None:
    """A process's resident memory (``VmRSS`` from Linux's ``/proc``); None where unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _put_all(items: list[tuple[_Request, Step]]) -> None:
    for request, step in items:
        request.out.put_nowait(step)


def joined(first: Step, waiting: asyncio.Queue[Step | BaseException]) -> tuple[Step, BaseException | None]:
    """``first`` and the steps already waiting behind it, as one step: a consumer that fell
    behind the engine (a busy core) then decodes and sends them once, not once per step.
    An error met behind them is handed back, to be raised after the joined step."""
    if first.finish is not None or waiting.empty():
        return first, None
    ids = list(first.ids)
    finish: FinishReason | None = None
    while finish is None and not waiting.empty():
        item = waiting.get_nowait()
        if isinstance(item, BaseException):
            return Step(tuple(ids), None), item
        ids.extend(item.ids)
        finish = item.finish
    return Step(tuple(ids), finish), None


def _post(request: _Request, item: Step | BaseException) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
        request.loop.call_soon_threadsafe(request.out.put_nowait, item)


class ProcessEngine:
    """A :class:`GenerationEngine` whose decoding runs in a child process."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._ids = itertools.count()
        self._start_lock = threading.Lock()
        self._closed = False
        self._weights_bytes = sum(p.stat().st_size for p in config.folder.glob("openvino_model.bin"))
        self._kv_bytes = max(1, round(config.kv_cache_gib)) * 2**30
        self._child: _Child = _Child(config)

    @property
    def pid(self) -> int:
        """The running child's process id."""
        return self._child.process.pid

    def _current(self) -> _Child:
        """The running child, a fresh one if the last has ended (started in the caller's thread)."""
        with self._start_lock:
            if self._closed:
                raise ShuttingDown("The generation model was unloaded; retry.")
            if self._child.ended:
                log.warning("starting the generation engine's process again")
                self._child = _Child(self.config)
            return self._child

    async def generate(self, prompt_ids: Sequence[int], sampling: Sampling) -> AsyncGenerator[Step, None]:
        request = _Request(asyncio.get_running_loop())
        request_id = next(self._ids)
        child = self._child
        while not child.submit(request_id, request, prompt_ids, sampling):
            child = await asyncio.to_thread(self._current)
        finished = False
        behind: BaseException | None = None
        try:
            while True:
                item = behind if behind is not None else await request.out.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                item, behind = joined(item, request.out)
                finished = item.finish is not None
                yield item
                if finished:
                    return
        finally:
            if not finished:  # abandoned (a client gone, a stop sequence met): the engine drops it
                child.cancel(request_id)

    def memory_bytes(self) -> int:
        """The child as loaded (its resident memory after it said ready: the runtime, the
        compiled model and its weights; at least the weights' file where that cannot be read)
        and the KV cache the pipeline may grow to (``kv_cache_gib``, taken as it runs)."""
        loaded = max(self._child.resident or 0, self._weights_bytes)
        return int(loaded + self._kv_bytes)

    def close(self) -> None:
        with self._start_lock:
            self._closed = True
        self._child.stop()
