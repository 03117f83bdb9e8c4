"""An exported ONNX graph to OpenVINO IR (``model.xml`` + ``model.bin``)."""

from __future__ import annotations

from pathlib import Path

from sift_server.adapters.backends.runtimes import openvino_module


def convert_openvino(source: Path, dest: Path) -> None:
    """Write ``dest/model.xml`` from ``source/model.onnx``, weights kept at fp32
    (precision is a compile-time hint, so one IR serves every precision)."""
    ov = openvino_module()

    ov.save_model(ov.convert_model(str(source / "model.onnx")), str(dest / "model.xml"), compress_to_fp16=False)
