"""GLiNER on PyTorch, ONNX Runtime or OpenVINO, through the gliner library's own
runtime path.

gliner exports its span models itself (``export_to_onnx``: the encoder and span
scorer in one graph, plus ``gliner_config.json`` and the tokenizer beside it) and
loads such a folder with ``GLiNER.from_pretrained(folder, runtime=...)``;
``GLiNER.inference`` then keeps its Python word splitting, collation and span
decoding and hands only the graph to the runtime. So the adapter's code is the
same whatever runs, and this module only decides which model object it holds:

- :class:`GlinerGraph` is the model as ``backends`` sees it: its torch module is
  the whole GLiNER, and its export hooks call the library's exporter, so exports
  land in Sift's artifact cache keyed like every other adapter's (content hash,
  backend, precision, library versions, plus gliner's version).
- :func:`open_gliner` opens a choice as a :class:`GlinerBackend`, with the thread
  count every Sift backend gets.
- :meth:`GlinerBackend.inference` is the served call: on a runtime the texts run
  in groups of similar length (``buckets.plan``), one library call per group,
  because the collator pads tokens, words and every word's spans to the longest
  text of a call; PyTorch keeps the library's one padded call.
- :func:`span_agreement` is ``auto``'s test: identical (start, end, label) spans on
  the probe set and scores within a tolerance; a candidate that moves one span fails.

The runtime path still imports PyTorch: gliner's collator builds torch tensors and
converts them to numpy for the runtime.
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sift_server.adapters._torch_runtime import module_bytes, release_module
from sift_server.adapters.backends import buckets
from sift_server.adapters.backends.request import REFERENCE, BackendRequest, Choice
from sift_server.adapters.backends.runtimes import (
    onnx_session_options,
    openvino_config,
    openvino_module,
    openvino_precision,
)
from sift_server.adapters.backends.seam import Backend, Graph
from sift_server.adapters.backends.select import Agreement
from sift_server.adapters.backends.store import Artifacts

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

KIND = "gliner"
# Part of the decision key: changing the probe texts, labels or rule decides again
# (2: OpenVINO's IR got its LSTM rewrite, so decisions made on the old IR are redone;
# 3: the exported markerV0 span layer is word-factored, ``gliner/export``).
PROBE_VERSION = "3"
# Scores are probabilities (0..1): the largest score difference a candidate may show
# on a span both found. Float32 runtimes differ from PyTorch by ~1e-6 here.
DEFAULT_SCORE_TOLERANCE = 1e-3
# What GLiNER runs: PyTorch at fp32 only (the library's collator and decoder work in
# fp32), the exported graph at fp32 on either runtime, OpenVINO's bf16 hint, and
# ONNX Runtime dynamic int8 when an operator names it.
SUPPORTED = frozenset(
    {
        REFERENCE,
        Choice("onnx", "fp32"),
        Choice("onnx", "int8"),
        Choice("openvino", "fp32"),
        Choice("openvino", "bf16"),
    }
)
# One more library call costs about as much as this many padded tokens of a row:
# the call's own Python (collator, data loader, decoder setup) plus the runtime's
# dispatch (MiniLM-sized GLiNER, one thread: docs/benchmarks/backends.md).
CALL_COST_TOKENS = 48
# Files of an exported folder that are the graph itself; everything else (config,
# tokenizer) is copied into the artifacts derived from it.
_GRAPH_FILES = frozenset({"model.onnx", "model.xml", "model.bin", "manifest.json"})

# One probe text's entities: (start, end, label, score), as ``GLiNER.inference`` found them.
Span = tuple[int, int, str, float]
Spans = list[list[Span]]


def gliner_version() -> str:
    try:
        return importlib.metadata.version("gliner")
    except importlib.metadata.PackageNotFoundError:
        return "absent"


class GlinerGraph(Graph):
    """A GLiNER folder; ``module()`` is the PyTorch GLiNER (the reference)."""

    kind = KIND
    # The exported graph's inputs depend on the architecture and are the library's
    # business; its version is in ``key_parts``.
    inputs: tuple[str, ...] = ()
    output = "logits"

    def __init__(self, folder: Path, device: str = "cpu") -> None:
        super().__init__(folder)
        self.device = device

    def build_module(self) -> torch.nn.Module:
        from gliner import GLiNER

        model: torch.nn.Module = GLiNER.from_pretrained(
            str(self.folder), local_files_only=True, map_location=self.device
        )
        return model

    def export_onnx(self, dest: Path) -> None:
        from sift_server.adapters.gliner.export import factored_span_layer

        model: Any = self.module()
        # The TorchScript exporter warns about every data-dependent branch it traces;
        # the export is checked by the parity probe, not by reading those.
        with warnings.catch_warnings(), factored_span_layer(model):
            warnings.simplefilter("ignore")
            model.export_to_onnx(str(dest), onnx_filename="model.onnx", quantize=False)

    def companions(self, exported: Path, dest: Path) -> None:
        for path in exported.iterdir():
            if path.is_file() and path.name not in _GRAPH_FILES:
                shutil.copy2(path, dest / path.name)

    def key_parts(self) -> dict[str, Any]:
        from sift_server.adapters.gliner.export import VERSION as span_layer

        return {"gliner": gliner_version(), "span_layer": span_layer}


class GlinerBackend(Backend):
    """A loaded GLiNER (``model``), PyTorch- or runtime-backed, as ``auto`` sees it."""

    def __init__(
        self,
        model: Any,
        choice: Choice,
        effective_precision: str,
        graph_files: Sequence[Path] = (),
        threads: dict[str, int] | None = None,
    ) -> None:
        self.model = model
        self.choice = choice
        self.effective_precision = effective_precision
        self._graph_files = tuple(graph_files)
        self._threads = threads or {}

    def memory_bytes(self) -> int:
        if self.choice.backend == "torch":
            return module_bytes(self.model)
        # The runtime holds about the graph's weights; the GLiNER shell holds no tensors.
        return sum(path.stat().st_size for path in self._graph_files if path.is_file())

    def close(self) -> None:
        if self.choice.backend == "torch":
            release_module(self.model, self.model.device)
        else:
            # Drop the session / compiled model now rather than when the adapter goes.
            self.model.model = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self._threads}

    def inference(
        self,
        texts: Sequence[str],
        lengths: Sequence[int],
        labels: Sequence[str],
        *,
        flat_ner: bool,
        threshold: float,
        multi_label: bool,
    ) -> list[list[dict[str, Any]]]:
        """``GLiNER.inference``'s entities for ``texts`` (``lengths``: each text's
        tokens with the label prompt, as ``prepare`` counted them), in order.

        A text's entities depend only on that text (padding is masked), so the
        groups' answers, put back in place, are the padded call's."""
        if self.choice.backend == "torch":
            groups = [list(range(len(texts)))]
        else:
            groups = buckets.plan(lengths, CALL_COST_TOKENS)
        found: list[list[dict[str, Any]]] = [[] for _ in texts]
        for group in groups:
            answers = self.model.inference(
                [texts[i] for i in group],
                list(labels),
                flat_ner=flat_ner,
                threshold=threshold,
                multi_label=multi_label,
                batch_size=len(group),  # the whole group in one encoder forward
            )
            for i, entities in zip(group, answers, strict=True):
                found[i] = entities
        return found


def open_gliner(graph: Graph, choice: Choice, request: BackendRequest, store: Artifacts | None) -> GlinerBackend:
    """Open ``choice`` for ``graph`` (exporting into ``store`` when its artifact is missing)."""
    assert isinstance(graph, GlinerGraph)
    if choice.backend == "torch":
        return GlinerBackend(graph.module(), choice, choice.precision)
    assert store is not None
    from gliner import GLiNER

    if choice.backend == "onnx":
        folder = store.onnx(choice.precision)
        model = GLiNER.from_pretrained(
            str(folder),
            local_files_only=True,
            runtime="onnxruntime",
            runtime_model_file="model.onnx",
            session_options=onnx_session_options(request.threads),
        )
        threads = {"intra_op_threads": request.threads, "inter_op_threads": 1}
        return GlinerBackend(model, choice, choice.precision, [folder / "model.onnx"], threads)
    if choice.backend == "openvino":
        folder = store.openvino()
        core = openvino_module().Core()
        model = GLiNER.from_pretrained(
            str(folder),
            local_files_only=True,
            runtime="openvino",
            runtime_model_file="model.xml",
            runtime_options={"core": core, "config": openvino_config(request.threads, choice.precision)},
        )
        effective = openvino_precision(model.model.compiled_model)
        files = [folder / "model.xml", folder / "model.bin"]
        return GlinerBackend(model, choice, effective, files, {"inference_num_threads": request.threads})
    raise ValueError(f"unknown backend {choice.backend!r}")


def span_agreement(tolerance: float) -> Callable[[Spans, Spans], tuple[bool, float]]:
    """Probe outputs agree when every text has the same (start, end, label) spans
    and every score is within ``tolerance`` of the reference's. The figure is the
    largest score difference, or 1.0 (the largest a probability can move) when a
    span appeared, vanished or changed label."""

    def agree(got: Spans, expected: Spans) -> tuple[bool, float]:
        if len(got) != len(expected):
            return False, 1.0
        worst = 0.0
        for found, reference in zip(got, expected, strict=True):
            a, b = sorted(found), sorted(reference)
            if [s[:3] for s in a] != [s[:3] for s in b]:
                return False, 1.0
            for x, y in zip(a, b, strict=True):
                worst = max(worst, abs(x[3] - y[3]))
        return worst <= tolerance, worst

    return agree


# auto's rule for GLiNER: the reference's spans, and scores within 1e-3 unless the entry says.
SPANS: Agreement[Spans] = Agreement(DEFAULT_SCORE_TOLERANCE, span_agreement)


def spans(predictions: Sequence[Sequence[dict[str, Any]]]) -> Spans:
    """``GLiNER.inference``'s entities as comparable (start, end, label, score) tuples."""
    return [
        [(int(e["start"]), int(e["end"]), str(e["label"]), float(e["score"])) for e in entities]
        for entities in predictions
    ]
