"""The three :class:`Runner` s: PyTorch (the reference, and its reduced
precisions), ONNX Runtime and OpenVINO, each from numpy inputs to a numpy output."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters.backends.request import Choice
from sift_server.adapters.backends.runtimes import (
    onnx_session_options,
    openvino_config,
    openvino_module,
    openvino_precision,
)
from sift_server.adapters.backends.seam import Graph, Runner

if TYPE_CHECKING:
    import torch


class TorchRunner(Runner):
    def __init__(self, graph: Graph, choice: Choice, device: str, threads: int) -> None:
        import torch

        from sift_server.adapters._torch_runtime import configure_threads, module_bytes

        configure_threads(threads)
        module = graph.module()
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[choice.precision]
        if dtype != torch.float32 or device != "cpu":
            import copy

            module = copy.deepcopy(module).to(device=device, dtype=dtype)
        self.module = module
        self.device = torch.device(device)
        self.choice = choice
        self.effective_precision = choice.precision
        self.inputs = graph.inputs
        self._bytes = module_bytes(module)

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        import torch

        args = [torch.from_numpy(np.ascontiguousarray(feed[name])).to(self.device) for name in self.inputs]
        with torch.inference_mode():
            out = self.module(*args)
        result: np.ndarray = out.float().cpu().numpy()
        return result

    def base_model(self) -> torch.nn.Module:
        """The Hugging Face model inside the graph's wrapper (where LoRA layers go)."""
        import torch

        inner = getattr(self.module, "model", self.module)
        assert isinstance(inner, torch.nn.Module)
        return inner

    def memory_bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        import torch

        self.module.to("meta")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


class OnnxRunner(Runner):
    def __init__(self, path: Path, choice: Choice, threads: int) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(
            str(path), onnx_session_options(threads), providers=["CPUExecutionProvider"]
        )
        self.names = [i.name for i in self.session.get_inputs()]
        self.choice = choice
        self.effective_precision = choice.precision
        self._bytes = path.stat().st_size
        self.threads = threads

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        result: np.ndarray = self.session.run(None, {name: feed[name] for name in self.names})[0]
        return result

    def memory_bytes(self) -> int:
        return self._bytes

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "intra_op_threads": self.threads, "inter_op_threads": 1}


class OpenVinoRunner(Runner):
    def __init__(self, xml: Path, choice: Choice, threads: int) -> None:
        ov = openvino_module()

        config = openvino_config(threads, choice.precision)
        self.config = config
        self.compiled = ov.Core().compile_model(str(xml), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.names = [port.get_any_name() for port in self.compiled.inputs]
        self.choice = choice
        self.effective_precision = openvino_precision(self.compiled)
        self.threads = threads
        self._bytes = sum(p.stat().st_size for p in xml.parent.glob("model.*"))

    def __call__(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        outputs = self.request.infer({name: feed[name] for name in self.names})
        # The request reuses its output buffer on the next call: copy.
        return np.array(outputs[0], dtype=np.float32, copy=True)

    def memory_bytes(self) -> int:
        return self._bytes

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "inference_num_threads": self.threads}
