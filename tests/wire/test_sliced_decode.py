"""Large bodies are decoded in slices (wire/split.py, wire/sliced.py): the result
and the error status are those of decoding the body whole, the event loop gets a
turn between slices, and bodies the split does not understand fall back to the
whole decode."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest

from sift_server.api.body_buffer import BodyBuffer
from sift_server.core.embeddings import EmbeddingsBody
from sift_server.errors import InvalidInput
from sift_server.wire import sliced
from sift_server.wire.codec import decode_body
from sift_server.wire.negotiation import Format
from sift_server.wire.schemas import EncodeBody, ExtractBody, Item, ScoreBody
from sift_server.wire.split import Split, json_value_end, split_body


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every body in these tests takes the sliced path, a few elements per slice.
    monkeypatch.setattr(sliced, "SLICED_DECODE_BYTES", 0)
    monkeypatch.setattr(sliced, "SLICE_BYTES", 64)


def encoded(body: Any, fmt: Format) -> bytes:
    return msgspec.msgpack.encode(body) if fmt == "msgpack" else json.dumps(body).encode()


BODIES: list[tuple[type[Any], dict[str, Any]]] = [
    (EncodeBody, {"items": [{"text": f"item {i} é"} for i in range(40)], "params": {"instruction": "q: "}}),
    (EncodeBody, {"params": {"output_types": ["dense"]}, "items": [{"id": "a", "text": "x", "metadata": {"k": [1]}}]}),
    (EncodeBody, {"items": []}),
    (EncodeBody, {"items": None, "unknown": {"deep": [1, 2, {"x": "y"}]}}),
    (EncodeBody, {}),
    (ScoreBody, {"query": {"text": "q"}, "items": [{"text": "a"}, {"text": "b"}], "options": {"k": 1}}),
    (ExtractBody, {"items": [{"text": "Ada lived in London"}], "params": {"labels": ["person", "city"]}}),
]


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize(("schema", "body"), BODIES)
async def test_sliced_decode_equals_the_whole_decode(fmt: Format, schema: type[Any], body: dict[str, Any]) -> None:
    data = encoded(body, fmt)
    assert await sliced.decode_sliced(data, fmt, schema, "items", Item) == decode_body(data, fmt, schema)


async def test_json_with_odd_whitespace_and_escapes_decodes_the_same() -> None:
    data = b' \n{ "params" : {"instruction":"a\\"b]}"} ,\t"it\\u0065ms" :\r[ {"text":"x,]"} , {"text":"\\\\"} ] } \n'
    assert await sliced.decode_sliced(data, "json", EncodeBody, "items", Item) == decode_body(data, "json", EncodeBody)


async def test_openai_input_list_is_decoded_in_slices() -> None:
    data = json.dumps({"model": "m", "input": ["a", "b", 3], "dimensions": 4}).encode()
    body = await sliced.decode_sliced(data, "json", EmbeddingsBody, "input", Any)
    assert body.input == ["a", "b", 3] and body.dimensions == 4


async def test_an_item_error_names_its_place_in_the_whole_body() -> None:
    data = json.dumps({"items": [{"text": "a"}, {"text": 5}, 7]}).encode()
    with pytest.raises(InvalidInput) as sliced_error:
        await sliced.decode_sliced(data, "json", EncodeBody, "items", Item)
    with pytest.raises(InvalidInput) as whole_error:
        decode_body(data, "json", EncodeBody)
    assert sliced_error.value.message == whole_error.value.message
    assert "`$.items[1].text`" in sliced_error.value.message


def test_element_error_paths() -> None:
    assert sliced.element_error("Expected `object`, got `int`", "items", 2) == (
        "Expected `object`, got `int` - at `$.items[2]`"
    )
    assert sliced.element_error("Expected `str`, got `int` - at `$.text`", "input", 0) == (
        "Expected `str`, got `int` - at `$.input[0].text`"
    )


@pytest.mark.parametrize(
    "data",
    [
        b'{"items": [{"text": "a"}',  # truncated
        b'{"items": [{"text": "a"}]} x',  # trailing bytes
        b'{"items": [{"text": "a"}], "items": [{"text": "b"}]}',  # the field twice
        b'{"items": [{"text": "a\xff"}]}',  # invalid UTF-8 inside an element
        b'{"items": [{"metadata": ' + b"[" * 5000 + b"]" * 5000 + b"}]}",  # nested too deeply
        b"[1, 2]",  # not an object
    ],
)
async def test_bodies_the_split_does_not_understand_get_the_whole_decodes_answer(data: bytes) -> None:
    try:
        expected: Any = decode_body(data, "json", EncodeBody)
    except InvalidInput as exc:
        with pytest.raises(InvalidInput) as got:
            await sliced.decode_sliced(data, "json", EncodeBody, "items", Item)
        assert got.value.message == exc.message
    else:
        assert await sliced.decode_sliced(data, "json", EncodeBody, "items", Item) == expected


def walk(data: bytes, window: int = 1 << 20) -> tuple[list[int], Split | None]:
    steps = split_body(data, "json", "items", window)
    spans: list[int] = []
    while True:
        try:
            spans.append(next(steps))
        except StopIteration as done:
            return spans, done.value


def test_the_split_steps_over_one_value_at_a_time() -> None:
    spans, split = walk(b'{"params": {"a": 1}, "items": [{"text": "aa"}, {"text": "b"}]}')
    assert spans == [8, 14, 13]
    assert split is not None and split.envelope == b'{"params":{"a": 1}}'
    assert [bytes(element) for element in split.elements or []] == [b'{"text": "aa"}', b'{"text": "b"}']


def test_a_value_longer_than_the_window_is_not_split() -> None:
    assert walk(b'{"items": [{"text": "' + b"a" * 100 + b'"}]}', window=50)[1] is None


def test_json_value_end() -> None:
    view = memoryview(b'["a]", {"b": [1]}] , 2')
    assert json_value_end(view, 0, 1 << 10) == 19  # the comma, after the value's whitespace
    assert json_value_end(view, 21, 1 << 10) is None  # runs to the end: no closing bracket follows


async def test_the_loop_gets_turns_while_a_large_body_is_decoded() -> None:
    data = json.dumps({"items": [{"text": "word " * 40} for _ in range(50)]}).encode()
    turns = 0
    done = False

    async def count_turns() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)
    body = await sliced.decode_sliced(data, "json", EncodeBody, "items", Item)
    done = True
    await counter
    assert body.items is not None and len(body.items) == 50
    assert turns > 50  # a turn after each slice of 64 bytes, in the walk and in the decode


def test_body_buffer_spills_large_bodies_into_a_map(monkeypatch: pytest.MonkeyPatch) -> None:
    from sift_server.api import body_buffer

    monkeypatch.setattr(body_buffer, "SPILL_BYTES", 10)
    for declared in (None, 24, 12):  # chunked, declared, declared too short
        buffer = BodyBuffer(limit=100, declared=declared)
        for chunk in (b"abcdef", b"ghijkl", b"mnopqr", b"stuvwx"):
            buffer.add(chunk)
        view = buffer.view()
        assert isinstance(view, memoryview) and bytes(view) == b"abcdefghijklmnopqrstuvwx"
    small = BodyBuffer(limit=100, declared=None)
    small.add(b"abc")
    small.add(b"de")
    assert small.view() == b"abcde"


async def test_item_checks_give_the_loop_turns_and_answer_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    from sift_server.service import common

    monkeypatch.setattr(common, "CHECK_SLICE_BYTES", 10)
    limits = common.Limits(max_item_bytes=100, max_items=10)
    items = [Item(text="wörd " * 4) for _ in range(6)]
    turns = 0

    async def count() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count())
    await asyncio.sleep(0)
    texts = await common.item_texts_sliced(items, limits, shared_bytes=5)
    counter.cancel()
    assert texts == common.item_texts(items, limits, shared_bytes=5)
    assert turns >= 6
    with pytest.raises(InvalidInput, match=r"items\[1\]"):
        await common.item_texts_sliced([Item(text="a"), Item(text="x" * 200)], limits)
    with pytest.raises(InvalidInput, match="must not be empty"):
        await common.item_texts_sliced([], limits)


@pytest.mark.parametrize("escaped", [False, True], ids=["plain", "escaped"])
async def test_an_oversized_model_name_is_refused_before_the_envelope_is_decoded(
    monkeypatch: pytest.MonkeyPatch, escaped: bool
) -> None:
    # 8 MB of model name: neither copied into the envelope nor decoded (issue 10).
    decoded: list[int] = []
    whole = sliced.decode_body

    def spy(data: Any, fmt: Format, schema: type[Any]) -> Any:
        decoded.append(len(data))
        return whole(data, fmt, schema)

    monkeypatch.setattr(sliced, "decode_body", spy)
    name = b"\\u006d" * 1_000_000 if escaped else b"m" * 8_000_000
    data = b'{"model": "' + name + b'", "input": ["a"]}'
    with pytest.raises(InvalidInput) as error:
        await sliced.decode_sliced(data, "json", EmbeddingsBody, "input", Any)
    assert error.value.message == "Invalid request body: Expected `str` of length <= 256 - at `$.model`"
    assert decoded == []


async def test_a_model_name_at_the_limit_still_decodes() -> None:
    name = "\U0001f600" * 256  # 12 bytes each when escaped
    data = json.dumps({"model": name, "input": ["a"]}).encode()
    body = await sliced.decode_sliced(data, "json", EmbeddingsBody, "input", Any)
    assert body.model == name and body.input == ["a"]


async def test_a_long_model_value_that_is_not_a_string_gets_the_whole_decode_message() -> None:
    data = json.dumps({"model": list(range(2000)), "input": ["a"]}).encode()
    with pytest.raises(InvalidInput) as error:
        await sliced.decode_sliced(data, "json", EmbeddingsBody, "input", Any)
    assert error.value.message == "Invalid request body: Expected `str`, got `array` - at `$.model`"


def test_msgpack_string_limits_are_checked_on_the_encoded_length() -> None:
    from sift_server.wire.split import StringTooLong

    ok = msgspec.msgpack.encode({"model": "é" * 256, "items": []})
    walk = split_body(ok, "msgpack", "items", 1 << 20, {"model": 256})
    with pytest.raises(StopIteration):
        while True:
            next(walk)
    long_name = msgspec.msgpack.encode({"model": "m" * 2000, "items": []})
    walk = split_body(long_name, "msgpack", "items", 1 << 20, {"model": 256})
    with pytest.raises(StringTooLong):
        next(walk)


# ---- answers: a long items list is encoded in slices too ---------------------------


async def test_a_long_json_answer_is_encoded_in_slices_equal_to_the_whole() -> None:
    import numpy as np

    from sift_server.wire.codec import encode_body

    payload = {
        "model": "m",
        "items": [{"id": str(i), "dense": np.full(8, i / 3, dtype=np.float32)} for i in range(300)],
        "usage": {"input_tokens": 3},
    }
    coro = sliced.encode_sliced(payload, "json")
    turns = 0
    while True:
        try:
            coro.send(None)
            turns += 1
        except StopIteration as done:
            encoded_body = done.value
            break
    assert encoded_body == encode_body(payload, "json")
    assert turns >= 300 // sliced.ENCODE_SLICE_ITEMS - 1


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
async def test_short_answers_and_msgpack_are_encoded_whole(fmt: Format) -> None:
    from sift_server.wire.codec import encode_body

    payload = {"items": [{"id": "a"}] * (3 if fmt == "json" else 300)}
    assert await sliced.encode_sliced(payload, fmt) == encode_body(payload, fmt)
