"""OpenVINO GenAI's ``ContinuousBatchingPipeline``, driven one step at a time.

Runs inside the engine's child process (engine_child.py), never in the server:
``step()`` holds the GIL for the whole step (its Python binding does not release
it), so in the server it would stall every other thread for a step at each hand-over
(docs/generation.md, "Encode latency during a long generation"). Plain synchronous
code: requests in, each step's new token ids out; the process around it does the I/O."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sift_server.generation.engine import FinishReason
from sift_server.generation.params import Sampling

# Full precision: greedy answers then equal transformers' fp32 ``generate`` token for token.
FP32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
# StructuredOutputConfig's field for each kind of grammar.
_GRAMMAR_FIELDS = {"json_schema": "json_schema", "regex": "regex", "ebnf": "grammar"}

# One request's news after a step: (request id, new token ids, finish reason or None).
Made = tuple[int, tuple[int, ...], FinishReason | None]


class _Running:
    __slots__ = ("handle", "max_new_tokens", "sent")

    def __init__(self, handle: Any, max_new_tokens: int) -> None:
        self.handle = handle
        self.max_new_tokens = max_new_tokens
        self.sent = 0


class PipelineDriver:
    """The pipeline and the requests it is running (its API is for one caller at a time)."""

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
        self._running: dict[int, _Running] = {}

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def add(self, request_id: int, prompt_ids: Sequence[int], sampling: Sampling) -> None:
        """Admit a request (it joins the batch at the next step); raises if the engine refuses it."""
        import numpy as np
        import openvino as ov

        ids = ov.Tensor(np.asarray([list(prompt_ids)], dtype=np.int64))
        handle = self._pipe.add_request(request_id, ids, self._config(sampling))
        self._running[request_id] = _Running(handle, sampling.max_new_tokens)

    def cancel(self, request_id: int) -> None:
        """Drop a request (unknown or finished ones are ignored)."""
        running = self._running.pop(request_id, None)
        if running is not None:
            running.handle.cancel()

    def step(self) -> list[Made]:
        """One step of every running request; what each made. Raises if the pipeline fails
        (it is then unusable)."""
        if self._pipe.has_non_finished_requests():
            self._pipe.step()
        made: list[Made] = []
        for request_id, running in list(self._running.items()):
            news = self._collect(running)
            if news is not None:
                made.append((request_id, *news))
                if news[1] is not None:
                    del self._running[request_id]
        return made

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

    def _collect(self, running: _Running) -> tuple[tuple[int, ...], FinishReason | None] | None:
        og = self._og
        handle = running.handle
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
            finish = "length" if running.sent + len(ids) >= running.max_new_tokens else "stop"
        running.sent += len(ids)
        if ids or finish is not None:
            return tuple(ids), finish
        return None
