"""A graph's exports in the artifact cache (ONNX fp32, int8, OpenVINO IR), and
opening a choice as a :class:`Runner` from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sift_server.adapters.backends import artifacts
from sift_server.adapters.backends.openvino_ir import IR_REWRITES, convert_openvino
from sift_server.adapters.backends.quantize import quantize_int8
from sift_server.adapters.backends.request import BackendRequest, Choice
from sift_server.adapters.backends.runners import OnnxRunner, OpenVinoRunner, TorchRunner
from sift_server.adapters.backends.seam import Graph, Runner


@dataclass(slots=True)
class Artifacts:
    """Exports of one graph into one cache folder, keyed by content and versions."""

    graph: Graph
    cache: Path
    model_hash: str
    versions: Mapping[str, str] = field(default_factory=artifacts.library_versions)

    def _parts(self, backend: str, precision: str) -> dict[str, Any]:
        return {
            "model": self.model_hash,
            "graph": self.graph.kind,
            "inputs": list(self.graph.inputs),
            "backend": backend,
            "precision": precision,
            "versions": dict(self.versions),
            **self.graph.key_parts(),
        }

    def onnx(self, precision: str = "fp32") -> Path:
        what = f"{self.graph.kind} {self.graph.folder.name} onnx/{precision}"
        fp32 = artifacts.ensure_artifact(self.cache, "onnx", self._parts("onnx", "fp32"), self.graph.export_onnx, what)
        if precision == "fp32":
            return fp32

        def quantize(dest: Path) -> None:
            quantize_int8(fp32, dest)
            self.graph.companions(fp32, dest)

        return artifacts.ensure_artifact(self.cache, "onnx", self._parts("onnx", precision), quantize, what)

    def openvino(self) -> Path:
        # One fp32 IR serves every precision: OpenVINO's precision is a compile-time hint.
        # The ONNX graph it is converted from is only needed (and checked) when the IR is missing.
        what = f"{self.graph.kind} {self.graph.folder.name} openvino IR"
        return artifacts.ensure_artifact(
            self.cache,
            "openvino",
            {**self._parts("openvino", "fp32"), "rewrites": IR_REWRITES},
            self._convert_openvino,
            what,
        )

    def _convert_openvino(self, dest: Path) -> None:
        exported = self.onnx("fp32")
        convert_openvino(exported, dest)
        self.graph.companions(exported, dest)


def open_runner(graph: Graph, choice: Choice, request: BackendRequest, store: Artifacts | None) -> Runner:
    if choice.backend == "torch":
        return TorchRunner(graph, choice, request.device, request.threads)
    assert store is not None
    if choice.backend == "onnx":
        return OnnxRunner(store.onnx(choice.precision) / "model.onnx", choice, request.threads)
    if choice.backend == "openvino":
        return OpenVinoRunner(store.openvino() / "model.xml", choice, request.threads)
    raise ValueError(f"unknown backend {choice.backend!r}")
