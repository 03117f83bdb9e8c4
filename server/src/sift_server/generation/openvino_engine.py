"""OpenVINO GenAI's ``ContinuousBatchingPipeline`` as a :class:`GenerationEngine`.

The pipeline is driven from one thread of its own (its API is not for concurrent
callers): requests are handed to it through a queue, it calls ``step()`` while any
is unfinished (each step advances every running request: continuous batching over
a paged KV cache), and each new token batch is passed back to the request's
asyncio queue on the event loop. The event loop never waits on the engine, so a
long generation does not hold up encode or score traffic."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sift_server.errors import InferenceError, ShuttingDown
from sift_server.generation.engine import FinishReason, Step
from sift_server.generation.params import Sampling

log = logging.getLogger(__name__)

# Full precision: greedy answers then equal transformers' fp32 ``generate`` token for token.
FP32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
# StructuredOutputConfig's field for each kind of grammar.
_GRAMMAR_FIELDS = {"json_schema": "json_schema", "regex": "regex", "ebnf": "grammar"}


@dataclass(slots=True)
class _Request:
    prompt_ids: Sequence[int]
    sampling: Sampling
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[Step | BaseException]
    id: int
    handle: Any = None
    cancelled: bool = False
    sent: int = field(default=0)


class OpenVinoEngine:
    def __init__(self, folder: Path, *, threads: int, kv_cache_gib: float, max_sequences: int) -> None:
        import openvino_genai as og

        self._og = og
        scheduler = og.SchedulerConfig()
        scheduler.cache_size = max(1, round(kv_cache_gib))
        scheduler.max_num_seqs = max_sequences
        scheduler.enable_prefix_caching = False
        properties: dict[str, Any] = dict(FP32)
        if threads > 0:
            properties["INFERENCE_NUM_THREADS"] = threads
        self._pipe = og.ContinuousBatchingPipeline(str(folder), scheduler, "CPU", properties)
        self._defaults = self._pipe.get_config()
        self._kv_bytes = scheduler.cache_size * 2**30
        self._weights_bytes = sum(p.stat().st_size for p in folder.glob("openvino_model.bin"))
        self._inbox: queue.SimpleQueue[_Request | int | None] = queue.SimpleQueue()
        self._ids = itertools.count()
        self._running: dict[int, _Request] = {}
        self._broken: str | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="openvino-genai", daemon=True)
        self._thread.start()

    # ---- the event loop's side ----------------------------------------------

    async def generate(self, prompt_ids: Sequence[int], sampling: Sampling) -> AsyncGenerator[Step, None]:
        if self._broken is not None:
            raise InferenceError(f"The generation engine failed: {self._broken}")
        if self._closed:
            raise ShuttingDown("The generation model was unloaded; retry.")
        request = _Request(prompt_ids, sampling, asyncio.get_running_loop(), asyncio.Queue(), next(self._ids))
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
            # Finished, or abandoned (a client gone, a stop sequence met): the engine drops it.
            self._inbox.put(request.id)

    def memory_bytes(self) -> int:
        return int(self._weights_bytes + self._kv_bytes)

    def close(self) -> None:
        self._closed = True
        self._inbox.put(None)
        self._thread.join(timeout=30)

    # ---- the engine thread --------------------------------------------------

    def _config(self, sampling: Sampling) -> Any:
        og = self._og
        config = og.GenerationConfig()
        config.update_generation_config(**{"eos_token_id": self._defaults.eos_token_id})
        config.stop_token_ids = set(self._defaults.stop_token_ids)
        config.max_new_tokens = sampling.max_new_tokens
        config.do_sample = not sampling.greedy
        if not sampling.greedy:
            config.temperature = sampling.temperature
            config.top_p = sampling.top_p
            config.top_k = sampling.top_k if sampling.top_k > 0 else 2**31 - 1
            if sampling.seed is not None:
                config.rng_seed = sampling.seed & 0xFFFFFFFF
        if sampling.grammar is not None:
            field = _GRAMMAR_FIELDS[sampling.grammar.kind]
            config.structured_output_config = og.StructuredOutputConfig(**{field: sampling.grammar.text})
        return config

    def _admit(self, request: _Request) -> None:
        import numpy as np
        import openvino as ov

        ids = ov.Tensor(np.asarray([list(request.prompt_ids)], dtype=np.int64))
        request.handle = self._pipe.add_request(request.id, ids, self._config(request.sampling))
        self._running[request.id] = request

    def _post(self, request: _Request, item: Step | BaseException) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            request.loop.call_soon_threadsafe(request.out.put_nowait, item)

    def _drain(self, block: bool) -> bool:
        """Take what the event loop sent; False once the engine is to stop."""
        while True:
            try:
                message = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if message is None:
                return False
            if isinstance(message, int):
                request = self._running.pop(message, None)
                if request is not None and request.handle is not None:
                    request.handle.cancel()
                continue
            try:
                self._admit(message)
            except Exception as exc:  # refused by the engine: this request fails, the others go on
                self._post(message, InferenceError(f"The engine refused the request: {exc}"))

    def _run(self) -> None:
        og = self._og
        while self._drain(block=not self._running):
            try:
                if self._pipe.has_non_finished_requests():
                    self._pipe.step()
            except Exception as exc:
                # A failed step leaves the pipeline unusable: fail everything in it.
                self._broken = str(exc)
                log.error("the generation engine failed: %s", exc)
                for request in self._running.values():
                    self._post(request, InferenceError(f"The generation engine failed: {exc}"))
                self._running.clear()
                return
            for request in list(self._running.values()):
                self._collect(request, og)
        # Closed (the model evicted, the server stopped past its grace): whoever still waits is told.
        for request in self._running.values():
            self._post(request, ShuttingDown("The generation model was unloaded; retry."))
        self._running.clear()

    def _collect(self, request: _Request, og: Any) -> None:
        handle = request.handle
        status = handle.get_status()
        ids: list[int] = []
        finish: FinishReason | None = None
        if handle.can_read():
            for output in handle.read().values():
                ids.extend(output.generated_ids)
                if output.finish_reason == og.GenerationFinishReason.LENGTH:
                    finish = "length"
                elif output.finish_reason == og.GenerationFinishReason.STOP:
                    finish = "stop"
        if status != og.GenerationStatus.RUNNING and finish is None:
            finish = "length" if request.sent + len(ids) >= request.sampling.max_new_tokens else "stop"
        request.sent += len(ids)
        if ids or finish is not None:
            self._post(request, Step(tuple(ids), finish))
        if finish is not None:
            self._running.pop(request.id, None)
