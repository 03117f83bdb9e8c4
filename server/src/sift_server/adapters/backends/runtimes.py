"""The settings every Sift session of ONNX Runtime and OpenVINO gets: explicit
thread counts (the cores in the process's CPU affinity unless the server says
otherwise; ONNX Runtime would otherwise size its pool by the machine and ignore
``taskset``), sleeping idle threads, a bounded shape cache."""

from __future__ import annotations

from typing import Any

# OpenVINO's CPU plugin keeps compiled kernels per input shape in a cache of 5,000
# entries by default: served batches come in every (rows, length), so RSS grew with
# every new shape for hours. A small cache bounds it and costs nothing on repeated
# shapes (figures in docs/architecture.md, "Memory"; probes/soak.py measures it).
OPENVINO_SHAPE_CACHE = 128

# ONNX Runtime graph rewrites every Sift session leaves out (see onnx_session_options).
ONNX_DISABLED_FUSIONS = ("SkipLayerNormFusion",)


def onnx_session_options(threads: int) -> Any:
    """ONNX Runtime settings of every Sift session: ``threads`` intra-op threads, one inter-op."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    # Told explicitly: left alone, ONNX Runtime sizes its pool by the machine, not the affinity.
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # The event loop shares these cores: idle pool threads must sleep, not spin.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # The fused SkipLayerNormalization kernel normalizes each row with a scalar
    # running mean and variance (a division per element): on small hidden sizes it
    # was the forward's largest node, and the unfused Add + LayerNormalization give
    # the same outputs (to 1e-6) about a fifth faster on a hidden-64 BERT, a few per
    # cent on MiniLM (docs/benchmarks/request-cost.md, "The tiny forward's own cost").
    options.add_session_config_entry("optimization.disable_specified_optimizers", ",".join(ONNX_DISABLED_FUSIONS))
    options.log_severity_level = 3
    return options


def openvino_module() -> Any:
    """``import openvino``, then stop the thread pool its telemetry starts on import:
    a server sends nothing anywhere, and a lingering non-daemon thread would hold
    the process at exit."""
    import openvino as ov

    try:
        from openvino_telemetry.main import Telemetry
    except ImportError:
        return ov
    instance = getattr(Telemetry, "_SingletonMetaClass__single_instance", None)
    executor = getattr(getattr(instance, "sender", None), "executor", None)
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)
    return ov


def openvino_config(threads: int, precision: str) -> dict[str, Any]:
    """OpenVINO CPU compile settings of every Sift model: ``threads`` inference
    threads in one stream, the precision as a hint, a bounded shape cache."""
    return {
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16"}[precision],
        "CPU_RUNTIME_CACHE_CAPACITY": OPENVINO_SHAPE_CACHE,
    }


def openvino_precision(compiled: Any) -> str:
    """The precision a compiled model really runs at (the hint is only a request)."""
    hint_type = compiled.get_property("INFERENCE_PRECISION_HINT")
    actual = str(hint_type.get_type_name()) if hasattr(hint_type, "get_type_name") else str(hint_type)
    return {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}.get(actual, actual)
