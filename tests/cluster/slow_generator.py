"""A test-only generation adapter: the real OpenVINO GenAI engine, its steps paced
(a token every ``step_ms``) so that a test can act in the middle of a stream, and each
run the engine did not finish (closed early: a cancellation) written down in
``marker`` as the number of steps it had made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

from sift_server.adapters.base import LoadContext
from sift_server.generation.adapter import GenerationAdapter
from sift_server.generation.engine import GenerationEngine, Step
from sift_server.generation.params import Sampling

SLOW_GENERATOR_ADAPTER = "test-slow-genai"


class PacedEngine:
    def __init__(self, engine: GenerationEngine, step_s: float, marker: Path | None) -> None:
        self.engine = engine
        self.step_s = step_s
        self.marker = marker

    async def generate(self, prompt_ids: Sequence[int], sampling: Sampling) -> AsyncGenerator[Step, None]:
        steps = self.engine.generate(prompt_ids, sampling)
        made, finished = 0, False
        try:
            async for step in steps:
                # One token per step_s: a step may join several the engine made while this
                # slept (engine_process.joined); they are handed on one by one, paced.
                for token_step in _one_by_one(step):
                    await asyncio.sleep(self.step_s)
                    made += 1
                    finished = token_step.finish is not None
                    yield token_step
        finally:
            await steps.aclose()
            if not finished and self.marker is not None:
                with self.marker.open("a") as out:
                    out.write(f"{made}\n")

    def memory_bytes(self) -> int:
        return self.engine.memory_bytes()

    def close(self) -> None:
        self.engine.close()


def _one_by_one(step: Step) -> list[Step]:
    if len(step.ids) <= 1:
        return [step]
    last = len(step.ids) - 1
    return [Step((token,), step.finish if i == last else None) for i, token in enumerate(step.ids)]


class SlowGenerationAdapter(GenerationAdapter):
    @classmethod
    def load(cls, ctx: LoadContext) -> GenerationAdapter:
        adapter = GenerationAdapter.load(ctx)
        marker = ctx.options.get("marker")
        step_s = float(ctx.options.get("step_ms", 20)) / 1000
        paced = PacedEngine(adapter.engine, step_s, Path(marker) if marker else None)
        return cls(adapter.tokenizer, paced, adapter.limits, adapter.info.runtime)


def register() -> None:
    from sift_server.adapters.records import AdapterRecord
    from sift_server.adapters.records import register as register_record

    register_record(
        AdapterRecord(
            name=SLOW_GENERATOR_ADAPTER,
            target="tests.cluster.slow_generator:SlowGenerationAdapter",
            tasks=frozenset({"generate"}),
            backends=frozenset({"openvino"}),
        )
    )
