"""Where an adapter's forward runs: PyTorch, ONNX Runtime or OpenVINO, and at
which precision; ``auto`` picks, on this machine, the fastest one whose outputs
on a fixed probe set match PyTorch fp32 within the entry's tolerance. Nothing
outside the adapters knows a backend exists.

One job per module:

- ``request``: the vocabulary (backends, precisions, :class:`Choice`) and what
  a catalog entry asks for (:class:`BackendRequest`, ``request_for``);
- ``seam``: :class:`Graph` (an adapter's network), :class:`Backend`, :class:`Runner`;
- ``runtimes``: ONNX Runtime and OpenVINO settings (threads, precision hints);
- ``runners``: the PyTorch, ONNX Runtime and OpenVINO runners;
- ``export``, ``quantize``, ``openvino_ir``: ONNX export, int8, OpenVINO IR;
- ``artifacts`` (the on-disk cache) and ``store`` (a graph's exports in it);
- ``timing``, ``agreement``, ``choice``, ``report``: how auto times, compares,
  chooses and logs its decision;
- ``buckets``: a runtime forward's rows grouped by length (GLiClass, GLiNER, the embedder);
- ``call_cost``: what one more runtime call costs a loaded runner, in tokens;
- ``gliner``, ``gliclass``: the extractors' graphs and backends.

This module re-exports what adapters use, so they import one name: ``backends``.
"""

from sift_server.adapters.backends.agreement import (
    DEFAULT_COSINE,
    DEFAULT_SCORE_RELATIVE,
    Agree,
    cosine_agreement,
    score_agreement,
)
from sift_server.adapters.backends.choice import PROBE_VERSION, Evaluate, choose, choose_backend
from sift_server.adapters.backends.report import summary
from sift_server.adapters.backends.request import (
    BACKENDS,
    PRECISIONS,
    REFERENCE,
    SUPPORTED,
    BackendName,
    BackendRequest,
    Choice,
    PrecisionName,
    available,
    candidates,
    is_explicit,
    request_for,
    torch_fp32_only,
)
from sift_server.adapters.backends.runners import OnnxRunner, OpenVinoRunner, TorchRunner
from sift_server.adapters.backends.runtimes import (
    OPENVINO_SHAPE_CACHE,
    onnx_session_options,
    openvino_config,
    openvino_module,
    openvino_precision,
)
from sift_server.adapters.backends.seam import Backend, Graph, Runner
from sift_server.adapters.backends.store import Artifacts, open_runner
from sift_server.adapters.backends.timing import (
    NEAR_MARGIN,
    TIMING_METHOD,
    TIMING_ROUNDS,
    Clock,
    Verdict,
    pick,
    time_rounds,
    timing_order,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_COSINE",
    "DEFAULT_SCORE_RELATIVE",
    "NEAR_MARGIN",
    "OPENVINO_SHAPE_CACHE",
    "PRECISIONS",
    "PROBE_VERSION",
    "REFERENCE",
    "SUPPORTED",
    "TIMING_METHOD",
    "TIMING_ROUNDS",
    "Agree",
    "Artifacts",
    "Backend",
    "BackendName",
    "BackendRequest",
    "Choice",
    "Clock",
    "Evaluate",
    "Graph",
    "OnnxRunner",
    "OpenVinoRunner",
    "PrecisionName",
    "Runner",
    "TorchRunner",
    "Verdict",
    "available",
    "candidates",
    "choose",
    "choose_backend",
    "cosine_agreement",
    "is_explicit",
    "onnx_session_options",
    "open_runner",
    "openvino_config",
    "openvino_module",
    "openvino_precision",
    "pick",
    "request_for",
    "score_agreement",
    "summary",
    "time_rounds",
    "timing_order",
    "torch_fp32_only",
]
