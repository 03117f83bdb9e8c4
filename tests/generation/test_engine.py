"""The generation engine in its child process, on its own: concurrent requests each get
their own greedy answer (the engine batches them); the engine runs in another process,
below the server's CPU priority; a child that dies fails what it was running and the
next request starts a fresh one; closing the engine answers whoever still waits and
ends the child; a cancelled request is dropped by the engine."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

import pytest

from sift_server.errors import InferenceError, ShuttingDown
from sift_server.generation.engine_process import EngineConfig, ProcessEngine
from sift_server.generation.params import Sampling
from tests.generation.conftest import Generator, Reference

PROMPTS = ["hello world", "The quick brown fox", "yes no yes", "no"]


def engine_for(folder: Path, nice: int = 19) -> ProcessEngine:
    return ProcessEngine(EngineConfig(folder, threads=1, kv_cache_gib=1, max_sequences=8, nice=nice))


async def answer(engine: ProcessEngine, ids: list[int], n: int) -> list[int]:
    out: list[int] = []
    async for step in engine.generate(ids, Sampling(max_new_tokens=n)):
        out.extend(step.ids)
    return out


def greedy(reference: Reference, ids: list[int], n: int) -> list[int]:
    # transformers may end with the end-of-sequence id, which the engine does not hand out.
    eos = reference.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [t for t in reference.greedy(ids, n)[1] if t != eos]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) counts as gone.
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


async def test_concurrent_requests_get_their_own_greedy_answers(generator: Generator, reference: Reference) -> None:
    engine = engine_for(generator.ov)
    try:
        prompts = [reference.ids_of(p) for p in PROMPTS]
        answers = await asyncio.gather(*(answer(engine, ids, 20) for ids in prompts))
        assert answers == [greedy(reference, ids, 20) for ids in prompts]
    finally:
        engine.close()


def test_the_budget_counts_what_the_child_holds_and_its_kv_cache(generator: Generator) -> None:
    engine = engine_for(generator.ov)
    try:
        status = Path(f"/proc/{engine.pid}/status").read_text()
        resident = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024
        weights = (generator.ov / "openvino_model.bin").stat().st_size
        budget = engine.memory_bytes()
        assert budget > weights + 2**30  # the runtime the child loaded counts, not the weights alone
        assert abs(budget - (resident + 2**30)) < resident // 4  # as read after ready, give or take growth
    finally:
        engine.close()


async def test_the_engine_runs_in_a_child_below_the_servers_priority(generator: Generator) -> None:
    engine = engine_for(generator.ov, nice=7)
    try:
        assert engine.pid != os.getpid()
        assert os.getpriority(os.PRIO_PROCESS, engine.pid) == os.getpriority(os.PRIO_PROCESS, 0) + 7
    finally:
        engine.close()
    assert not alive(engine.pid)


async def test_a_dead_child_fails_its_requests_and_the_next_starts_a_new_one(
    generator: Generator, reference: Reference
) -> None:
    engine = engine_for(generator.ov)
    try:
        steps = engine.generate(reference.ids_of("hello"), Sampling(max_new_tokens=60))
        await anext(steps)
        first = engine.pid
        os.kill(first, signal.SIGKILL)
        with pytest.raises(InferenceError, match="exit code -9"):
            while True:  # what was made before the kill, then the failure
                await asyncio.wait_for(anext(steps), 30)
        ids = reference.ids_of("hello world")
        assert await answer(engine, ids, 12) == greedy(reference, ids, 12)
        assert engine.pid != first
        # The dead child's writer thread ended with it (and closed its pipe): one left, the new one's.
        for _ in range(100):
            if sum(t.name == "generation-engine-writer" for t in threading.enumerate()) == 1:
                break
            await asyncio.sleep(0.05)
        assert sum(t.name == "generation-engine-writer" for t in threading.enumerate()) == 1
    finally:
        engine.close()


async def test_closing_the_engine_answers_whoever_waits(generator: Generator, reference: Reference) -> None:
    engine = engine_for(generator.ov)
    steps = engine.generate(reference.ids_of("hello"), Sampling(max_new_tokens=60))
    await anext(steps)
    await asyncio.to_thread(engine.close)
    assert not alive(engine.pid)
    with pytest.raises((ShuttingDown, StopAsyncIteration)):
        while True:  # the rest of what was made before the close, then the refusal (or the end)
            await asyncio.wait_for(anext(steps), 30)
    with pytest.raises(ShuttingDown):
        await anext(engine.generate(reference.ids_of("hello"), Sampling(max_new_tokens=4)))


async def test_a_cancelled_request_leaves_the_others_exact(generator: Generator, reference: Reference) -> None:
    engine = engine_for(generator.ov)
    try:
        dropped = engine.generate(reference.ids_of("hello"), Sampling(max_new_tokens=60))
        await anext(dropped)
        await dropped.aclose()  # the engine drops it between steps
        ids = reference.ids_of("The quick brown fox")
        assert await answer(engine, ids, 20) == greedy(reference, ids, 20)
    finally:
        engine.close()


@pytest.mark.parametrize("nice", [-1, 20, 2.5, "low", True])
def test_engine_nice_out_of_range_is_refused_at_load(generator: Generator, nice: object) -> None:
    from sift_server.adapters.base import LoadContext
    from sift_server.generation.adapter import GenerationAdapter

    ctx = LoadContext(generator.ov, {"engine_nice": nice}, None, 1)
    with pytest.raises(ValueError, match="engine_nice"):
        GenerationAdapter.load(ctx)


def test_a_missing_engine_package_is_a_missing_dependency_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from sift_server.adapters.base import LoadContext
    from sift_server.generation.adapter import GenerationAdapter

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino_genai" else real(name))
    with pytest.raises(ImportError, match=r"sift-server\[generation\]"):
        GenerationAdapter.load(LoadContext(tmp_path, {}, None, 1))
