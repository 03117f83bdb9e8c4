"""The OpenVINO IR conversion's LSTM rewrite: a bidirectional ONNX LSTM over padded
rows gives ONNX Runtime's outputs at every real step once converted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sift_server.adapters.backends import openvino_ir
from sift_server.adapters.backends.runtimes import openvino_config, openvino_module

pytest.importorskip("openvino")
ort = pytest.importorskip("onnxruntime")

HIDDEN, INPUTS, STEPS = 4, 3, 6
LENGTHS = np.array([6, 4, 2], dtype=np.int32)  # one full row, two padded


def write_lstm(folder: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {
        "W": rng.normal(size=(2, 4 * HIDDEN, INPUTS)),
        "R": rng.normal(size=(2, 4 * HIDDEN, HIDDEN)),
        "B": rng.normal(size=(2, 8 * HIDDEN)),
    }
    node = helper.make_node(
        "LSTM", ["X", "W", "R", "B", "lengths"], ["Y"], direction="bidirectional", hidden_size=HIDDEN
    )
    graph = helper.make_graph(
        [node],
        "lstm",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["steps", "batch", INPUTS]),
            helper.make_tensor_value_info("lengths", TensorProto.INT32, ["batch"]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(folder / "model.onnx"))


def test_a_converted_bidirectional_lstm_honours_each_rows_length(tmp_path: Path) -> None:
    write_lstm(tmp_path)
    openvino_ir.convert_openvino(tmp_path, tmp_path)
    model = openvino_module().Core().read_model(str(tmp_path / "model.xml"))
    kinds = [op.get_attributes()["direction"] for op in model.get_ops() if op.get_type_name() == "LSTMSequence"]
    assert kinds == ["forward", "forward"]

    x = np.random.default_rng(1).normal(size=(STEPS, len(LENGTHS), INPUTS)).astype(np.float32)
    feed = {"X": x, "lengths": LENGTHS}
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(None, feed)[0]  # [steps, directions, batch, hidden]
    compiled = openvino_module().Core().compile_model(model, "CPU", openvino_config(1, "fp32"))
    got = np.asarray(compiled(feed)[compiled.outputs[0]])
    assert got.shape == expected.shape
    for row, length in enumerate(LENGTHS):
        # Both directions, every real step; beyond a row's length the runtimes may differ.
        np.testing.assert_allclose(got[:length, :, row], expected[:length, :, row], atol=1e-5)


def test_a_forward_lstm_is_left_alone(tmp_path: Path) -> None:
    model = openvino_module().Core().read_model(str(_converted_plain(tmp_path)))
    assert openvino_ir.split_reverse_lstms(model) == 1  # the bidirectional one
    assert openvino_ir.split_reverse_lstms(model) == 0  # nothing left to rewrite


def _converted_plain(folder: Path) -> Path:
    """The IR as OpenVINO converts it, without the rewrite."""
    write_lstm(folder)
    ov = openvino_module()
    ov.save_model(ov.convert_model(str(folder / "model.onnx")), str(folder / "plain.xml"))
    return folder / "plain.xml"
