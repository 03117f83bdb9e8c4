"""The seam between an adapter and where its forward runs.

An adapter describes its network as a :class:`Graph` (int64 inputs in a fixed
order, batch first, one float output) and gets back a :class:`Runner`: a
callable from numpy inputs to a numpy output. A :class:`Backend` is what
``auto`` opens, checks, times and keeps; a Runner is one, and so is an
adapter's own wrapper where a library runs the backend itself (GLiNER).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters.backends.request import Choice

if TYPE_CHECKING:
    import torch


class Graph(abc.ABC):
    """An adapter's network: ``module()`` is a torch module taking the int64
    ``inputs`` positionally and returning the float ``output`` tensor. Inputs
    are ``(batch, seq)`` unless ``dynamic_axes`` names their axes otherwise."""

    kind: str
    inputs: tuple[str, ...]
    output: str

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._module: torch.nn.Module | None = None

    @abc.abstractmethod
    def build_module(self) -> torch.nn.Module: ...

    def module(self) -> torch.nn.Module:
        """The fp32 CPU module, built once (export and the reference share it)."""
        if self._module is None:
            self._module = self.build_module().eval()
        return self._module

    def release(self) -> None:
        """Forget the torch module (after a non-torch backend won)."""
        self._module = None

    # Export hooks: the defaults export ``module()`` with torch.onnx; a graph whose
    # library exports itself (GLiNER) overrides them.

    def export_onnx(self, dest: Path) -> None:
        """Write ``dest/model.onnx`` and whatever else loading it needs."""
        from sift_server.adapters.backends.export import export_onnx

        export_onnx(self.module(), self.inputs, self.output, self.dynamic_axes(), dest)

    def dynamic_axes(self) -> tuple[tuple[str, ...], ...]:
        """Per input, the names of its axes (all dynamic) and so the example
        shape the export traces with; inputs sharing a name share the size."""
        return tuple(("batch", "seq") for _ in self.inputs)

    def companions(self, exported: Path, dest: Path) -> None:  # noqa: B027 - optional
        """Copy into a derived artifact (int8 graph, OpenVINO IR) what loading it
        needs besides the graph, from the fp32 ONNX folder ``exported``."""

    def key_parts(self) -> dict[str, Any]:
        """What an export depends on besides the weights, the inputs and ``LIBRARIES``."""
        return {}


class Backend(abc.ABC):
    """What ``auto`` opens, checks, times and keeps: a :class:`Runner` for the
    adapters whose network is a :class:`Graph`, or an adapter's own wrapper where
    a library runs the backend itself (GLiNER's runtime models)."""

    choice: Choice
    # What actually runs (OpenVINO may ignore a bf16 hint on a CPU without bf16).
    effective_precision: str

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:  # noqa: B027 - optional
        pass

    def describe(self) -> dict[str, Any]:
        return {"backend": self.choice.backend, "precision": self.effective_precision}


class Runner(Backend):
    @abc.abstractmethod
    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray: ...


class PrepareOnly(Runner):
    """No network at all: the runner of an adapter loaded to prepare requests only
    (``LoadContext.prepare_only``, a front-end of ``sift serve --frontends``)."""

    choice = Choice("none", "none")
    effective_precision = "none"

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        raise RuntimeError("this adapter was loaded to prepare requests only; the engine process runs forwards")

    def describe(self) -> dict[str, Any]:
        return {"backend": "none", "precision": None, "prepare_only": True}
