"""LoRA adapters of one loaded model, through ``peft``.

Every LoRA is loaded once into the same ``PeftModel`` (peft injects its layers
into the base model in place), so switching between forwards is
``set_adapter`` plus enabling or disabling the adapter layers: no reload, no
copy of the base weights. A forward of the base lane runs with the adapter
layers disabled, which is exactly the base model.

Thread safety: loading and unloading change modules, so they take the same
lock as the forward that activates a LoRA and runs; the engine runs one
forward at a time per model, so the lock only orders loads against forwards.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_server.adapters.base import Part

if TYPE_CHECKING:
    import torch

    from sift_server.adapters.backends.seam import Runner

LANE_PREFIX = "lora:"


class LoraDoesNotFit(ValueError):
    """The LoRA's shapes or target modules do not match the base model."""


def lora_of(parts: Sequence[Part]) -> str | None:
    """The LoRA a forward's parts ask for (the engine never mixes lanes in a forward)."""
    lane = parts[0].prepared.lane
    if lane is None or not lane.startswith(LANE_PREFIX):
        return None
    return lane[len(LANE_PREFIX) :]


class LoraSlots:
    """The LoRAs loaded into one model and the one that is active."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.base = model
        self.peft: Any = None
        self.paths: dict[str, Path] = {}  # loaded now
        self.sources: dict[str, Path] = {}  # ever loaded: where to reload one from
        self.loads = 0  # how many times a LoRA was read and injected (tests check switches cost none)
        self._lock = threading.Lock()

    def loaded(self) -> list[str]:
        return list(self.paths)

    def load(self, name: str, path: Path) -> None:
        """Read the LoRA at ``path`` and add it as ``name``; raise ``LoraDoesNotFit``
        when it cannot apply to this model."""
        with self._lock:
            self._load_locked(name, path)

    def unload(self, name: str) -> None:
        with self._lock:
            if name in self.paths and self.peft is not None:
                self.peft.delete_adapter(name)
                del self.paths[name]

    @contextmanager
    def active(self, name: str | None) -> Iterator[None]:
        """Run the body with LoRA ``name`` active (None: the base model). A LoRA that
        was unloaded meanwhile (least recently used) while a request for it still
        waited is loaded again from where it came from."""
        with self._lock:
            if name is None:
                if self.peft is not None:
                    self.peft.base_model.disable_adapter_layers()
            else:
                if name not in self.paths:
                    self._load_locked(name, self.sources[name])
                self.peft.base_model.enable_adapter_layers()
                self.peft.base_model.set_adapter(name)
            yield

    def _load_locked(self, name: str, path: Path) -> None:
        from peft import PeftModel

        try:
            if self.peft is None:
                self.peft = PeftModel.from_pretrained(self.base, str(path), adapter_name=name, is_trainable=False)
            else:
                self.peft.load_adapter(str(path), adapter_name=name, is_trainable=False)
        except (ValueError, RuntimeError, KeyError) as exc:
            text = str(exc)
            if "size mismatch" in text or "not found in the base model" in text or "Target modules" in text:
                raise LoraDoesNotFit(text) from exc
            raise
        self.base.eval()
        self.paths[name] = self.sources[name] = path
        self.loads += 1


class LoraHost:
    """What a torch adapter that serves LoRAs shares: ``loras`` is its slots on
    the torch backend (None on another backend, which says no), and ``forward``
    runs the adapter's own ``_forward`` with the batch's LoRA active."""

    loras: LoraSlots | None
    runner: Runner
    # The class serves LoRAs on the torch backend; an instance on another backend says no.
    supports_lora = True

    def load_lora(self, name: str, path: Path) -> None:
        if self.loras is None:
            raise NotImplementedError(f"LoRA needs the torch backend; this model runs {self.runner.choice}")
        self.loras.load(name, path)

    def unload_lora(self, name: str) -> None:
        if self.loras is not None:
            self.loras.unload(name)

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        if self.loras is None:
            return self._forward(parts)
        with self.loras.active(lora_of(parts)):
            return self._forward(parts)

    def _forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        raise NotImplementedError
