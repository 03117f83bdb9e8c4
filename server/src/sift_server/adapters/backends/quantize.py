"""ONNX Runtime dynamic int8 quantisation of an exported fp32 graph (opt-in only)."""

from __future__ import annotations

from pathlib import Path


def quantize_int8(source: Path, dest: Path) -> None:
    """Write ``dest/model.onnx``, ``source/model.onnx`` with int8 weights."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The exporter's intermediate shape annotations can disagree with the quantizer's own
    # shape inference (a cross-encoder's head): drop them and let it infer afresh.
    model = onnx.load(str(source / "model.onnx"))
    del model.graph.value_info[:]
    plain = dest / "plain.onnx.tmp"
    onnx.save(model, str(plain))
    try:
        quantize_dynamic(str(plain), str(dest / "model.onnx"), weight_type=QuantType.QInt8)
    finally:
        plain.unlink(missing_ok=True)
