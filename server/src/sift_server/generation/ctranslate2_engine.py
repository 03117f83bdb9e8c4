"""CTranslate2's ``Translator`` (encoder-decoder models: madlad400, T5) as a
:class:`GenerationEngine`, in process at float32, greedy, as the reference server
serves madlad400.

One thread of its own runs the translator: it takes the requests waiting (up to
``max_batch_requests``, see :func:`take_batch`), decodes them in one
``translate_batch`` (static batching: requests arriving meanwhile wait for the next
batch, as in the reference's adapter) and streams each new token back to its
request's asyncio queue from the translator's per-token callback. The callback's
answer stops one sequence of the batch: a request that reached its own
``max_new_tokens``, was abandoned (a client gone, a stop sequence met) or whose model
is closing. The event loop never waits on the engine."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sift_server.errors import InferenceError, InvalidInput, ShuttingDown
from sift_server.generation.engine import FinishReason, Step
from sift_server.generation.params import Sampling

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_REQUESTS = 8


@dataclass(slots=True)
class _Request:
    source: list[str]  # the prompt's tokens, as the translator takes them
    max_new_tokens: int
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[Step | BaseException]
    made: int = 0
    finished: bool = False
    cancelled: bool = False


def take_batch(waiting: deque[Any], max_requests: int) -> list[Any]:
    """The next batch: the oldest ``max_requests`` waiting requests, dropping the
    abandoned ones (whatever has a true ``cancelled``) first."""
    batch: list[Any] = []
    while waiting and len(batch) < max_requests:
        request = waiting.popleft()
        if not request.cancelled:
            batch.append(request)
    return batch


def _post(request: _Request, item: Step | BaseException) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
        request.loop.call_soon_threadsafe(request.out.put_nowait, item)


def _on_token(batch: list[_Request], end_id: int, closing: threading.Event, step: Any) -> bool:
    """One new token of one sequence of ``batch``; True stops that sequence."""
    request: _Request = batch[int(step.batch_id)]
    if request.finished or request.cancelled or closing.is_set():
        return True
    token = int(step.token_id)
    if token == end_id:  # the translator hands the end token over too (return_end_token)
        request.finished = True
        _post(request, Step((), "stop"))
        return True
    request.made += 1
    finish: FinishReason | None = "length" if request.made >= request.max_new_tokens or step.is_last else None
    request.finished = finish is not None
    _post(request, Step((token,), finish))
    return request.finished


class CTranslate2Engine:
    def __init__(
        self,
        folder: Path,
        *,
        tokens_of: Callable[[list[int]], list[str]],
        end_id: int,
        threads: int,
        max_batch_requests: int = DEFAULT_MAX_BATCH_REQUESTS,
    ) -> None:
        import ctranslate2

        self._translator = ctranslate2.Translator(
            str(folder),
            device="cpu",
            compute_type="float32",
            inter_threads=1,
            intra_threads=max(0, threads),
        )
        self._tokens_of = tokens_of
        self._end_id = end_id
        self._max_batch = max(1, max_batch_requests)
        self._weights_bytes = (folder / "model.bin").stat().st_size
        self._inbox: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._broken: str | None = None
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ctranslate2", daemon=True)
        self._thread.start()

    # ---- the event loop's side ----------------------------------------------

    async def generate(self, prompt_ids: Sequence[int], sampling: Sampling) -> AsyncGenerator[Step, None]:
        if not sampling.greedy or sampling.grammar is not None:
            raise InvalidInput("This model decodes greedily and without a grammar.")
        if self._broken is not None:
            raise InferenceError(f"The generation engine failed: {self._broken}")
        if self._closing.is_set():
            raise ShuttingDown("The generation model was unloaded; retry.")
        request = _Request(
            self._tokens_of(list(prompt_ids)), sampling.max_new_tokens, asyncio.get_running_loop(), asyncio.Queue()
        )
        self._inbox.put(request)
        try:
            while True:
                item = await request.out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish is not None:
                    return
        finally:
            # Finished, or abandoned: the next callback for it stops its sequence.
            request.cancelled = True

    def memory_bytes(self) -> int:
        return int(self._weights_bytes)

    def close(self) -> None:
        self._closing.set()
        self._inbox.put(None)
        self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self._translator.unload_model()

    # ---- the engine thread --------------------------------------------------

    def _run(self) -> None:
        waiting: deque[_Request] = deque()
        while True:
            if not waiting:
                first = self._inbox.get()
                if first is None:
                    break
                waiting.append(first)
            stop = False
            while True:  # everything that arrived meanwhile joins the queue
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                waiting.append(item)
            if stop:
                break
            batch = take_batch(waiting, self._max_batch)
            if batch:
                self._translate(batch)
        # Closed (the model evicted, the server stopped past its grace): whoever still waits is told.
        for request in waiting:
            _post(request, ShuttingDown("The generation model was unloaded; retry."))

    def _translate(self, batch: list[_Request]) -> None:
        try:
            self._translator.translate_batch(
                [request.source for request in batch],
                beam_size=1,
                num_hypotheses=1,
                sampling_topk=1,
                # transformers' generate may end at the first step; CTranslate2's default is 1.
                min_decoding_length=0,
                max_decoding_length=max(request.max_new_tokens for request in batch),
                max_input_length=0,  # the prompt was checked against the model's context
                return_end_token=True,
                # Not a method: the callback must not hold the engine (and its translator), or the
                # translator could be freed from its own worker thread, which aborts the process.
                callback=functools.partial(_on_token, batch, self._end_id, self._closing),
            )
        except Exception as exc:  # this batch fails, the engine goes on
            log.error("the generation engine failed: %s", exc)
            for request in batch:
                if not request.finished:
                    _post(request, InferenceError(f"The generation engine failed: {exc}"))
            return
        for request in batch:
            if request.finished or request.cancelled:
                continue
            if self._closing.is_set():
                _post(request, ShuttingDown("The generation model was unloaded; retry."))
            else:  # ended without a callback for its end (an empty answer)
                _post(request, Step((), "stop"))
