"""The OpenVINO GenAI engine shell on its own: concurrent requests each get their own
greedy answer (the engine batches them), and closing the engine answers whoever still
waits instead of leaving them hanging."""

from __future__ import annotations

import asyncio

import pytest

from sift_server.errors import ShuttingDown
from sift_server.generation.openvino_engine import OpenVinoEngine
from sift_server.generation.params import Sampling
from tests.generation.conftest import Generator, Reference

PROMPTS = ["hello world", "The quick brown fox", "yes no yes", "no"]


async def answer(engine: OpenVinoEngine, ids: list[int], n: int) -> list[int]:
    out: list[int] = []
    async for step in engine.generate(ids, Sampling(max_new_tokens=n)):
        out.extend(step.ids)
    return out


async def test_concurrent_requests_get_their_own_greedy_answers(generator: Generator, reference: Reference) -> None:
    engine = OpenVinoEngine(generator.ov, threads=1, kv_cache_gib=1, max_sequences=8)
    try:
        prompts = [reference.ids_of(p) for p in PROMPTS]
        answers = await asyncio.gather(*(answer(engine, ids, 20) for ids in prompts))
        # transformers may end with the end-of-sequence id, which the engine does not hand out.
        expected = [reference.greedy(ids, 20)[1] for ids in prompts]
        eos = reference.tokenizer.convert_tokens_to_ids("<|im_end|>")
        assert answers == [[t for t in ids if t != eos] for ids in expected]
    finally:
        engine.close()


async def test_closing_the_engine_answers_whoever_waits(generator: Generator, reference: Reference) -> None:
    engine = OpenVinoEngine(generator.ov, threads=1, kv_cache_gib=1, max_sequences=8)
    steps = engine.generate(reference.ids_of("hello"), Sampling(max_new_tokens=60))
    await anext(steps)
    await asyncio.to_thread(engine.close)
    with pytest.raises((ShuttingDown, StopAsyncIteration)):
        while True:  # the rest of what was made before the close, then the refusal (or the end)
            await asyncio.wait_for(anext(steps), 30)
    with pytest.raises(ShuttingDown):
        await anext(engine.generate(reference.ids_of("hello"), Sampling(max_new_tokens=4)))
