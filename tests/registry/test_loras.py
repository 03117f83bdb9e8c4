"""LoRA states of a loaded model, with a fake adapter whose loads the test releases:
503 LORA_LOADING while loading (encode), waiting (score/extract), 400 for an
unknown LoRA or one that does not fit, 500 for a failed load, LRU unloading,
and no effect of one LoRA's failure on another."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sift_server.adapters._lora import LoraDoesNotFit
from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.errors import InferenceError, InvalidInput, LoraLoading
from sift_server.registry.catalog import ModelSpec
from sift_server.registry.loras import LoraSet


class FakeLoraAdapter(Adapter):
    info = AdapterInfo(tasks=frozenset({"encode"}), outputs=("dense",), dims={"dense": 2})
    supports_lora = True

    def __init__(self) -> None:
        self.gates: dict[str, threading.Event] = {}
        self.loaded: list[str] = []
        self.failures: dict[str, Exception] = {}

    @classmethod
    def load(cls, ctx: LoadContext) -> FakeLoraAdapter:
        raise NotImplementedError

    def prepare(self, task: TaskInput) -> Prepared:
        return Prepared([1], None, None)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        return [[0] * (p.stop - p.start) for p in parts]

    def load_lora(self, name: str, path: Path) -> None:
        self.gates.setdefault(name, threading.Event()).wait(10)
        if name in self.failures:
            raise self.failures[name]
        self.loaded.append(name)

    def unload_lora(self, name: str) -> None:
        self.loaded.remove(name)

    def release(self, *names: str) -> None:
        for name in names:
            self.gates.setdefault(name, threading.Event()).set()


def make(tmp_path: Path, names: Sequence[str], **extra: Any) -> tuple[LoraSet, FakeLoraAdapter]:
    for name in names:
        (tmp_path / name).mkdir(exist_ok=True)
    spec = ModelSpec.model_validate(
        {
            "name": "tiny/embedder",
            "adapter": "sentence-embedder",
            "source": {"path": str(tmp_path)},
            "tasks": ["encode"],
            "loras": {name: {"path": str(tmp_path / name)} for name in names},
            **extra,
        }
    )
    adapter = FakeLoraAdapter()
    ticks = iter(range(1000))
    return LoraSet(spec, adapter, clock=lambda: float(next(ticks))), adapter


async def settle(loras: LoraSet, name: str) -> None:
    task = loras.entries[name].task
    assert task is not None
    await task


async def test_first_request_gets_lora_loading_then_the_lane(tmp_path: Path) -> None:
    loras, adapter = make(tmp_path, ["a"])
    with pytest.raises(LoraLoading) as caught:
        await loras.lane("a", wait=False)
    assert caught.value.status == 503 and caught.value.retry_after == 1 and "'a'" in caught.value.message
    with pytest.raises(LoraLoading):  # still loading: no second load
        await loras.lane("a", wait=False)
    adapter.release("a")
    await settle(loras, "a")
    assert await loras.lane("a", wait=False) == "lora:a"
    assert adapter.loaded == ["a"]


async def test_score_and_extract_wait_for_the_load(tmp_path: Path) -> None:
    loras, adapter = make(tmp_path, ["a"])
    waiting = asyncio.ensure_future(loras.lane("a", wait=True))
    await asyncio.sleep(0)
    assert not waiting.done()
    adapter.release("a")
    assert await waiting == "lora:a"


async def test_unknown_lora_and_bad_values_are_400_naming_them(tmp_path: Path) -> None:
    loras, _ = make(tmp_path, ["a"])
    with pytest.raises(InvalidInput, match="'nope'"):
        await loras.lane("nope", wait=False)
    for bad in (3, "", None):
        with pytest.raises(InvalidInput, match="lora"):
            await loras.lane(bad, wait=False)


async def test_lora_that_does_not_fit_is_400_and_a_failed_load_is_500(tmp_path: Path) -> None:
    loras, adapter = make(tmp_path, ["wide", "broken", "good"])
    adapter.failures = {"wide": LoraDoesNotFit("size mismatch"), "broken": OSError("disk")}
    for name in ("wide", "broken", "good"):
        with pytest.raises(LoraLoading):
            await loras.lane(name, wait=False)
    adapter.release("wide", "broken", "good")
    for name in ("wide", "broken", "good"):
        await settle(loras, name)
    with pytest.raises(InvalidInput, match="'wide'"):
        await loras.lane("wide", wait=False)
    with pytest.raises(InferenceError, match="'broken'") as caught:
        await loras.lane("broken", wait=False)
    assert caught.value.status == 500
    assert await loras.lane("good", wait=False) == "lora:good"


async def test_missing_folder_is_400(tmp_path: Path) -> None:
    loras, adapter = make(tmp_path, ["a"])
    (tmp_path / "a").rmdir()
    adapter.release("a")
    with pytest.raises(InvalidInput, match="'a'"):
        await loras.lane("a", wait=True)


async def test_least_recently_used_lora_is_unloaded(tmp_path: Path) -> None:
    loras, adapter = make(tmp_path, ["a", "b", "c"], max_loaded_loras=2)
    adapter.release("a", "b", "c")
    for name in ("a", "b"):
        assert await loras.lane(name, wait=True) == f"lora:{name}"
    await loras.lane("a", wait=True)  # a is now more recent than b
    await loras.lane("c", wait=True)
    assert sorted(adapter.loaded) == ["a", "c"]
    with pytest.raises(LoraLoading):  # b loads again on demand
        await loras.lane("b", wait=False)


async def test_adapter_without_lora_support(tmp_path: Path) -> None:
    loras, adapter = make(tmp_path, ["a"])
    adapter.supports_lora = False
    with pytest.raises(InvalidInput, match="does not support LoRA"):
        await loras.lane("a", wait=False)
