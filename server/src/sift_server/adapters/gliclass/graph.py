"""GLiClass on PyTorch, ONNX Runtime or OpenVINO.

The graph boundary is the model's forward: encoder, class-token pooling, text
pooling and scorer, from token ids to one logit per label slot. Rendering the
labels into the text, tokenizing and turning logits into scores stay in the
``gliclass`` pipeline, in Python, whatever runs; for a runtime the adapter hands
the pipeline a :class:`RunnerModel` in place of the PyTorch model.

The number of label slots is an input of its own (``class_slots``, only its
shape is read): the library sizes the class axis by the labels of the batch,
and an export with that axis fixed would score different slots than PyTorch.

Only the uni-encoder without segment embeddings is exported (the segment ids
come from a Python loop over the batch); other architectures run on PyTorch.
``auto`` keeps a runtime only when, on the probe texts, every label's rank is
PyTorch fp32's and every score is within the tolerance of it.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from sift_server.adapters.backends.buckets import run_grouped
from sift_server.adapters.backends.request import REFERENCE, Choice
from sift_server.adapters.backends.seam import Graph, Runner
from sift_server.adapters.backends.select import Agreement

if TYPE_CHECKING:
    import torch

KIND = "gliclass"
# Part of the decision key: changing the probe texts, labels or rule decides again.
PROBE_VERSION = "1"
# Scores are probabilities (0..1): the largest difference a candidate may show.
DEFAULT_SCORE_TOLERANCE = 1e-3
SLOTS = "class_slots"
# The token input whose row sums are the rows' real lengths.
MASK = "attention_mask"
SUPPORTED = frozenset(
    {
        REFERENCE,
        Choice("onnx", "fp32"),
        Choice("onnx", "int8"),
        Choice("openvino", "fp32"),
        Choice("openvino", "bf16"),
    }
)

# Per probe text, every label's score in the order of the labels asked for.
Scores = np.ndarray


def gliclass_version() -> str:
    try:
        return importlib.metadata.version("gliclass")
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def exportable(config: Any) -> bool:
    """Whether this GLiClass's forward exports (see the module docstring)."""
    return config.architecture_type == "uni-encoder" and not getattr(config, "use_segment_embeddings", False)


def _forward_module(model: Any, token_inputs: Sequence[str]) -> torch.nn.Module:
    import torch

    class Forward(torch.nn.Module):
        """``model``'s logits from the token inputs and ``class_slots``, positionally."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            named = dict(zip(token_inputs, tensors[:-1], strict=True))
            output = self.model(**named, max_num_classes=tensors[-1].shape[1], return_dict=True)
            logits: torch.Tensor = output.logits
            return logits

    return Forward()


class GliClassGraph(Graph):
    """A GLiClass folder; ``module()`` wraps the PyTorch GLiClassModel (the reference)."""

    kind = KIND
    output = "logits"

    def __init__(self, folder: Path, token_inputs: Sequence[str], prune_last_layer: bool = False) -> None:
        super().__init__(folder)
        self.token_inputs = tuple(token_inputs)
        self.inputs = (*self.token_inputs, SLOTS)
        # Export the forward that runs the last encoder layer at the read positions
        # only (``gliclass/export``); ``module()``, the reference, stays the library's.
        self.prune_last_layer = prune_last_layer

    def build_module(self) -> torch.nn.Module:
        from gliclass import GLiClassModel

        model = GLiClassModel.from_pretrained(str(self.folder), local_files_only=True)
        return _forward_module(model.eval(), self.token_inputs)

    def classifier(self) -> Any:
        """The GLiClassModel inside ``module()``."""
        return self.module().model

    def dynamic_axes(self) -> tuple[tuple[str, ...], ...]:
        return (*(("batch", "seq") for _ in self.token_inputs), ("batch", "classes"))

    def export_onnx(self, dest: Path) -> None:
        """The TorchScript exporter over eager attention: ONNX Runtime and OpenVINO
        fuse its plain MatMul/Softmax attention and LayerNorms, where the dynamo
        exporter's SDPA graph (NaN guards, Einsum) leaves them unfused and runs
        slower (docs/benchmarks/backends.md)."""
        import torch

        module = self.module()
        if self.prune_last_layer:
            from sift_server.adapters.gliclass.export import PrunedForward

            module = PrunedForward(self.classifier(), self.token_inputs).eval()
        names = self.dynamic_axes()
        axes = {name: dict(enumerate(dims)) for name, dims in zip(self.inputs, names, strict=True)}
        example = tuple(torch.ones((2, 8 if dims[1] == "seq" else 3), dtype=torch.long) for dims in names)
        configs: list[Any] = [
            m.config for m in module.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")
        ]
        saved = [c._attn_implementation for c in configs]
        try:
            for config in configs:
                config._attn_implementation = "eager"
            with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
                # The tracer warns about every Python branch on a shape; the parity probe checks the graph.
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    module,
                    example,
                    str(dest / "model.onnx"),
                    input_names=list(self.inputs),
                    output_names=[self.output],
                    dynamic_axes=axes,
                    dynamo=False,
                    opset_version=17,
                )
        finally:
            for config, value in zip(configs, saved, strict=True):
                config._attn_implementation = value

    def key_parts(self) -> dict[str, Any]:
        from sift_server.adapters.gliclass.export import VERSION as pruned

        return {
            "gliclass": gliclass_version(),
            "forward": "logits-by-slots:1",
            "export": "torchscript-eager:1",
            "last_layer": pruned if self.prune_last_layer else "full",
        }


def feed(tokenized: Mapping[str, Any], token_inputs: Sequence[str], slots: int) -> dict[str, np.ndarray]:
    """A runner's inputs from the pipeline's tokenized batch (torch tensors) and the slot count."""
    inputs = {name: np.ascontiguousarray(tokenized[name].cpu().numpy(), dtype=np.int64) for name in token_inputs}
    rows = next(iter(inputs.values())).shape[0]
    inputs[SLOTS] = np.zeros((rows, slots), dtype=np.int64)
    return inputs


def served_logits(runner: Runner, inputs: Mapping[str, np.ndarray], token_inputs: Sequence[str]) -> np.ndarray:
    """``runner``'s logits as served: on a runtime, rows grouped by length and each
    group cut to its own longest row (``buckets``: the exported graph takes any
    length per call); PyTorch, the reference, runs the library's padded batch."""
    if runner.choice.backend == "torch" or MASK not in token_inputs:
        return runner(inputs)
    return run_grouped(runner, inputs, MASK, token_inputs)


class RunnerModel:
    """What the gliclass pipeline calls in place of the PyTorch model: the same
    call, answered by ``runner`` (set once the backend is chosen; until then the
    pipeline only renders and tokenizes, which reads ``config``)."""

    def __init__(self, config: Any, token_inputs: Sequence[str], runner: Runner | None = None) -> None:
        import torch

        self.runner = runner
        self.config = config
        self.token_inputs = tuple(token_inputs)
        self.device = torch.device("cpu")

    def __call__(self, max_num_classes: int | None = None, adapter_ids: Any = None, **tokenized: Any) -> Any:
        import torch

        if self.runner is None:
            raise RuntimeError("no backend chosen yet")
        if adapter_ids is not None:
            raise ValueError("LoRA adapters run on the torch backend only")
        slots = int(max_num_classes if max_num_classes is not None else self.config.max_num_classes)
        logits = served_logits(self.runner, feed(tokenized, self.token_inputs, slots), self.token_inputs)
        return SimpleNamespace(logits=torch.from_numpy(logits))

    def eval(self) -> RunnerModel:
        return self


def probabilities(logits: np.ndarray, labels: int, single_label: bool) -> Scores:
    """The pipeline's activation over the first ``labels`` slots, in float64."""
    values = logits[:, :labels].astype(np.float64)
    if single_label:
        shifted = np.exp(values - values.max(axis=1, keepdims=True))
        return np.asarray(shifted / shifted.sum(axis=1, keepdims=True))
    return np.asarray(1.0 / (1.0 + np.exp(-values)))


def rank_agreement(tolerance: float) -> Callable[[Scores, Scores], tuple[bool, float]]:
    """Probe scores agree when every text ranks the labels as the reference does
    and every score is within ``tolerance`` of the reference's. The figure is the
    largest score difference, or 1.0 when a ranking differs."""

    def agree(got: Scores, expected: Scores) -> tuple[bool, float]:
        if got.shape != expected.shape:
            return False, 1.0
        order = np.argsort(-got, axis=1, kind="stable")
        if not np.array_equal(order, np.argsort(-expected, axis=1, kind="stable")):
            return False, 1.0
        worst = float(np.abs(got - expected).max()) if got.size else 0.0
        return worst <= tolerance, worst

    return agree


# auto's rule for GLiClass: the reference's ranking, and scores within 1e-3 unless the entry says.
RANKS: Agreement[Scores] = Agreement(DEFAULT_SCORE_TOLERANCE, rank_agreement)
