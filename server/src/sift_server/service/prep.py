"""The one prep thread: ``adapter.prepare`` off the event loop for large requests
and for those with images to decode. Owned by ``ServerState`` (made in the
composition root, closed on shutdown), so no thread exists before a server does
and none outlives it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sift_server.adapters.base import Adapter, ExtractTask, Prepared, ScoreTask, TaskInput, TranscribeTask
from sift_server.errors import ShuttingDown

# Requests with at least this many characters to tokenize are prepared in the
# prep thread, so that at most a few milliseconds of tokenizing stay on the loop
# (docs/architecture.md, "Keeping the event loop free", has the figures).
OFFLOAD_CHARS = 4_096

# Turns a task into the one ``prepare`` reads, in the prep thread (images are decoded there).
DeferredDecode = Callable[[TaskInput], TaskInput]


def task_chars(task: TaskInput) -> int:
    """Characters a preparation tokenizes (the instruction and query go with every item)."""
    if isinstance(task, TranscribeTask):
        return 0  # audio is always decoded in the prep thread (a deferred decode)
    shared = len(task.instruction or "")
    if isinstance(task, ScoreTask):
        shared += len(task.query)
    if isinstance(task, ExtractTask):
        shared += sum(len(label) for label in task.labels)
    return sum(len(text) for text in task.texts) + shared * len(task.texts)


def _complete_and_prepare(adapter: Adapter, task: TaskInput, complete: DeferredDecode | None) -> Prepared:
    return adapter.prepare(complete(task) if complete is not None else task)


class PrepThread:
    """One thread, so preparations stay serial as on the loop (a fast tokenizer
    must not be used by two threads at once). While it holds any work, small
    requests queue behind it too, never run beside it on the loop. The thread
    starts at the first offloaded preparation."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sift-prep")
        self._held = 0  # preparations submitted and not finished
        self._closed = False

    async def prepare(self, adapter: Adapter, task: TaskInput, complete: DeferredDecode | None = None) -> Prepared:
        """``adapter.prepare`` on the loop when small and the thread is idle, else in
        the thread; always in the thread when the task is to be completed first
        (decoding images never runs on the loop)."""
        if complete is None and self._held == 0 and task_chars(task) < OFFLOAD_CHARS:
            return adapter.prepare(task)
        if self._closed:
            raise ShuttingDown("The server is shutting down.")
        self._held += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, _complete_and_prepare, adapter, task, complete)
        finally:
            self._held -= 1

    def close(self) -> None:
        """No new work; queued preparations are dropped, a running one finishes in
        its thread (which then ends). Idempotent."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
