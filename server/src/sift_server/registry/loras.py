"""LoRA adapters of a loaded model: which are loaded, loading or failed, and the
engine lane of each (``lora:<name>``: the engine keeps one batch queue per lane,
so every forward runs one LoRA).

The first request for a LoRA that is not loaded starts a background load and
is told to come back (503 LORA_LOADING, Retry-After: 1): the SIE SDK retries
that on encode. It does not on score and extract, so those wait for the load
(up to ``WAIT_S``) and then run. At most ``max_loaded_loras`` stay loaded per
model; loading one more drops the least recently used.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sift_server.adapters._lora import LANE_PREFIX, LoraDoesNotFit
from sift_server.adapters.base import Adapter
from sift_server.errors import InferenceError, InvalidInput, LoraLoading, SiftError
from sift_server.registry.catalog import LoraSource, ModelSpec

log = logging.getLogger(__name__)

# How long score and extract wait for a LoRA to load before answering 503.
WAIT_S = 30.0

State = Literal["loading", "loaded", "failed"]


def lora_folder(spec: ModelSpec, source: LoraSource) -> Path:
    """The LoRA's local folder: a path (relative to the catalog file) or a hub snapshot."""
    if source.path is not None:
        folder = source.path
        if not folder.is_absolute() and spec.file is not None:
            folder = spec.file.parent / folder
        if not folder.is_dir():
            raise FileNotFoundError(f"LoRA folder {folder} does not exist")
        return folder
    assert source.hf is not None
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(source.hf, revision=source.revision))


@dataclass(slots=True)
class LoraEntry:
    state: State
    task: asyncio.Task[None] | None = None
    error: SiftError | None = None
    last_used: float = 0.0


@dataclass(slots=True)
class LoraSet:
    """The LoRA states of one loaded adapter (a new adapter starts with none)."""

    spec: ModelSpec
    adapter: Adapter
    clock: Callable[[], float] = time.monotonic
    entries: dict[str, LoraEntry] = field(default_factory=dict)

    async def lane(self, name: object, *, wait: bool) -> str:
        """The lane of LoRA ``name``, loaded; raises the contract's error otherwise."""
        model = self.spec.name
        if not isinstance(name, str) or not name:
            raise InvalidInput("Option 'lora' must be a non-empty string naming one of the model's LoRA adapters.")
        if name not in self.spec.loras:
            known = ", ".join(sorted(self.spec.loras)) or "none"
            raise InvalidInput(f"Unknown LoRA '{name}' for model '{model}' (its LoRA adapters: {known}).")
        if not self.adapter.supports_lora:
            raise InvalidInput(f"Model '{model}' does not support LoRA adapters (LoRA '{name}').")
        entry = self.entries.get(name)
        if entry is None:
            entry = self.entries[name] = LoraEntry("loading")
            entry.task = asyncio.get_running_loop().create_task(self._load(name, entry), name=f"lora-{model}-{name}")
        if entry.state == "loading":
            if not wait:
                raise LoraLoading(f"LoRA '{name}' of model '{model}' is loading; retry shortly.")
            assert entry.task is not None
            try:
                await asyncio.wait_for(asyncio.shield(entry.task), WAIT_S)
            except TimeoutError:
                raise LoraLoading(f"LoRA '{name}' of model '{model}' is still loading; retry shortly.") from None
        if entry.state == "failed":
            assert entry.error is not None
            raise entry.error
        entry.last_used = self.clock()
        return LANE_PREFIX + name

    async def _load(self, name: str, entry: LoraEntry) -> None:
        model = self.spec.name
        try:
            folder = await asyncio.to_thread(lora_folder, self.spec, self.spec.loras[name])
            await asyncio.to_thread(self.adapter.load_lora, name, folder)
        except (LoraDoesNotFit, FileNotFoundError) as exc:
            entry.state, entry.error = "failed", InvalidInput(f"LoRA '{name}' does not fit model '{model}': {exc}")
            log.error("LoRA %s of %s does not fit: %s", name, model, exc)
            return
        except Exception as exc:
            entry.state = "failed"
            entry.error = InferenceError(
                f"LoRA '{name}' of model '{model}' failed to load: {type(exc).__name__}: {exc}"
            )
            log.error("loading LoRA %s of %s failed: %s", name, model, exc)
            return
        entry.state, entry.last_used = "loaded", self.clock()
        log.info("LoRA %s of %s loaded", name, model)
        await self._make_room(keep=name)

    async def _make_room(self, *, keep: str) -> None:
        loaded = [n for n, e in self.entries.items() if e.state == "loaded"]
        while len(loaded) > self.spec.max_loaded_loras:
            victim = min((n for n in loaded if n != keep), key=lambda n: self.entries[n].last_used)
            await asyncio.to_thread(self.adapter.unload_lora, victim)
            del self.entries[victim]  # the next request loads it again
            loaded.remove(victim)
            log.info("unloaded LoRA %s of %s (least recently used)", victim, self.spec.name)
