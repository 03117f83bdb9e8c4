"""An exported ONNX graph to OpenVINO IR (``model.xml`` + ``model.bin``).

One rewrite on the way: OpenVINO's CPU LSTM does not honour per-row sequence
lengths in its reverse direction (on padded rows the reverse states at the real
steps differ from ONNX Runtime's and PyTorch's ``pack_padded_sequence`` by ~4e-2;
docs/models.md, GLiNER). Every reverse or bidirectional ``LSTMSequence`` becomes
forward-only ones, the reverse one run on each row's steps reversed by its own
length (``ReverseSequence``) and its outputs reversed back, which OpenVINO's
forward LSTM computes as the other runtimes do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sift_server.adapters.backends.runtimes import openvino_module

# Part of the IR artifact's key: changing the rewrites converts again.
IR_REWRITES = "lstm-reverse-by-length:1"


def convert_openvino(source: Path, dest: Path) -> None:
    """Write ``dest/model.xml`` from ``source/model.onnx``, weights kept at fp32
    (precision is a compile-time hint, so one IR serves every precision)."""
    ov = openvino_module()

    model = ov.convert_model(str(source / "model.onnx"))
    if split_reverse_lstms(model):
        model.validate_nodes_and_infer_types()
    ov.save_model(model, str(dest / "model.xml"), compress_to_fp16=False)


def split_reverse_lstms(model: Any) -> int:
    """Rewrite ``model``'s reverse and bidirectional LSTMSequences in place (see
    the module docstring); returns how many were rewritten."""
    from openvino import opset13 as ops

    def direction(value: Any, index: int, axis: int) -> Any:
        return ops.gather(value, ops.constant(np.array([index], np.int64)), ops.constant(np.array(axis, np.int64)))

    count = 0
    for op in model.get_ops():
        if op.get_type_name() != "LSTMSequence":
            continue
        attrs = op.get_attributes()
        if attrs["direction"] == "forward":
            continue
        x, h0, c0, lengths, w, r, b = (op.input_value(i) for i in range(7))
        parts = []
        for index in range(2 if attrs["direction"] == "bidirectional" else 1):
            reverse = attrs["direction"] == "reverse" or index == 1
            # X is [batch, seq, input]; Y is [batch, directions, seq, hidden].
            steps = ops.reverse_sequence(x, lengths, 0, 1).output(0) if reverse else x
            sequence = ops.lstm_sequence(
                steps,
                direction(h0, index, 1),
                direction(c0, index, 1),
                lengths,
                direction(w, index, 0),
                direction(r, index, 0),
                direction(b, index, 0),
                attrs["hidden_size"],
                "forward",
                attrs["activations"],
                attrs["activations_alpha"],
                attrs["activations_beta"],
                attrs["clip"],
            )
            y = sequence.output(0)
            parts.append((ops.reverse_sequence(y, lengths, 0, 2).output(0) if reverse else y, *sequence.outputs()[1:]))
        for i in range(3):
            new = parts[0][i] if len(parts) == 1 else ops.concat([parts[0][i], parts[1][i]], 1).output(0)
            for target in list(op.output(i).get_target_inputs()):
                target.replace_source_output(new)
        count += 1
    return count
