"""The hand-off's encoding brings back what was sent, types included."""

from __future__ import annotations

import numpy as np

from sift_server.errors import QueueFull
from sift_server.frontend.protocol import (
    Answer,
    Begin,
    Failure,
    Pickled,
    Submit,
    decode_frame,
    encode_frame,
    pack_compat,
    pack_outputs,
    pack_payload,
)


def _round_trip(messages: list[object]) -> list[object]:
    frame = encode_frame(messages)
    return decode_frame(frame[4:])


def test_a_frame_carries_several_messages_in_order() -> None:
    ids = [[101, 7592, 102], [101, 102]]
    sent = [
        Begin(3, "tiny/embedder", 12.5),
        Submit(1, "tiny/embedder", "r1", [3, 2], pack_compat(None), pack_payload(ids), 5, None, 3),
    ]
    got = _round_trip(sent)
    assert got == sent
    submit = got[1]
    assert isinstance(submit, Submit) and submit.payload == ids and type(submit.payload[0]) is list


def test_arrays_come_back_bit_for_bit_with_their_dtype_and_shape() -> None:
    rng = np.random.default_rng(0)
    outputs = [rng.standard_normal(7).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float16)]
    (answer,) = _round_trip([Answer(9, pack_outputs(outputs), 0.25, 0.5)])
    assert isinstance(answer, Answer)
    for sent, got in zip(outputs, answer.outputs, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and got.tobytes() == sent.tobytes()
        got[0] = 0  # writable, as the forward's own array
    assert (answer.queue_s, answer.inference_s) == (0.25, 0.5)


def test_what_msgpack_would_change_travels_pickled() -> None:
    payload = {"rows": ((1, 2), (3,)), "scale": np.float32(0.5)}
    compat = ("pair", 64)
    outputs = [np.float32(0.25), {"label": "a", "score": 0.9}]
    sent = Submit(2, "m", "r", [1], pack_compat(compat), pack_payload(payload), 1, "lora:x", -1)
    (submit,) = _round_trip([sent])
    assert isinstance(submit, Submit)
    assert submit.compat == compat and type(submit.compat) is tuple
    assert submit.payload == payload and type(submit.payload["rows"]) is tuple
    assert type(submit.payload["scale"]) is np.float32
    (answer,) = _round_trip([Answer(2, pack_outputs(outputs), 0.0, 0.0)])
    assert isinstance(answer, Answer) and answer.outputs == outputs and type(answer.outputs[0]) is np.float32


def test_errors_keep_their_class_message_and_retry_after() -> None:
    error = QueueFull("Model 'm': the queue is full.")
    (failure,) = _round_trip([Failure(4, Pickled(error))])
    assert isinstance(failure, Failure)
    got = failure.error
    assert type(got) is QueueFull and got.message == error.message and got.retry_after == 1 and got.status == 503
