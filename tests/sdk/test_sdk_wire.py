"""The msgpack / nd-map codec (API.md §1.3)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from sift_sdk._wire import WireFormatError, packb, unpackb

# The worked example of API.md §1.3, byte for byte.
WORKED_EXAMPLE = bytes.fromhex(
    "".join(
        [
            "83",
            "a4" + b"dims".hex() + "03",
            "a5" + b"dtype".hex() + "a7" + b"float32".hex(),
            "a6" + b"values".hex() + "85",
            "c402" + b"nd".hex() + "c3",
            "c404" + b"type".hex() + "a3" + b"<f4".hex(),
            "c404" + b"kind".hex() + "c400",
            "c405" + b"shape".hex() + "9103",
            "c404" + b"data".hex() + "c40c" + "0000803f" + "00000040" + "00004040",
        ]
    )
)


def test_worked_example_decodes_to_float32_array() -> None:
    decoded = unpackb(WORKED_EXAMPLE)
    assert decoded["dims"] == 3
    assert decoded["dtype"] == "float32"
    values = decoded["values"]
    assert isinstance(values, np.ndarray)
    assert values.dtype == np.float32
    assert values.shape == (3,)
    assert values.tolist() == [1.0, 2.0, 3.0]


def test_worked_example_is_exactly_what_packb_emits() -> None:
    body = {
        "dims": 3,
        "dtype": "float32",
        "values": np.array([1.0, 2.0, 3.0], dtype=np.float32),
    }
    assert packb(body) == WORKED_EXAMPLE


def test_plain_unpack_of_packed_array_has_bin_keys() -> None:
    raw = msgpack.unpackb(packb({"v": np.arange(4, dtype=np.int8)}), raw=False)
    nd_map = raw["v"]
    assert set(nd_map) == {b"nd", b"type", b"kind", b"shape", b"data"}
    assert nd_map[b"type"] == "|i1"
    assert nd_map[b"shape"] == [4]
    assert nd_map[b"data"] == bytes([0, 1, 2, 3])


@pytest.mark.parametrize(
    "type_str",
    [
        "<f4",
        ">f4",
        "<f2",
        ">f2",
        "<f8",
        "|i1",
        "|u1",
        "<i4",
        ">i4",
        "<i8",
        "<u2",
        "|b1",
    ],
)
def test_decodes_every_accepted_dtype_in_both_byte_orders(type_str: str) -> None:
    source = np.arange(6).reshape(2, 3).astype(np.dtype(type_str))
    nd_map = {
        b"nd": True,
        b"type": type_str,
        b"kind": b"",
        b"shape": [2, 3],
        b"data": source.tobytes(),
    }
    decoded = unpackb(msgpack.packb({"x": nd_map}, use_bin_type=True))["x"]
    assert isinstance(decoded, np.ndarray)
    assert decoded.shape == (2, 3)
    assert decoded.dtype.kind == source.dtype.kind
    assert decoded.dtype.itemsize == source.dtype.itemsize
    assert decoded.dtype.isnative
    assert decoded.flags.writeable
    np.testing.assert_array_equal(decoded, source)


def test_kind_may_be_missing_or_empty_str() -> None:
    for extra in ({}, {b"kind": ""}):
        nd_map = {
            b"nd": True,
            b"type": "<i4",
            b"shape": [2],
            b"data": b"\x01\0\0\0\x02\0\0\0",
            **extra,
        }
        decoded = unpackb(msgpack.packb(nd_map, use_bin_type=True))
        assert decoded.tolist() == [1, 2]


def test_numpy_scalar_form() -> None:
    nd_map = {b"nd": False, b"type": "<f8", b"data": np.float64(2.5).tobytes()}
    decoded = unpackb(msgpack.packb([nd_map], use_bin_type=True))[0]
    assert isinstance(decoded, np.float64)
    assert decoded == 2.5


def test_scalar_roundtrip_through_packb() -> None:
    decoded = unpackb(packb({"s": np.int32(-7)}))["s"]
    assert isinstance(decoded, np.int32)
    assert decoded == -7


def test_str_keyed_map_is_left_alone() -> None:
    lookalike = {
        "nd": True,
        "type": "<f4",
        "kind": "",
        "shape": [1],
        "data": b"\0\0\x80?",
    }
    decoded = unpackb(msgpack.packb(lookalike, use_bin_type=True))
    assert decoded == lookalike


def test_nested_arrays_in_lists_and_maps() -> None:
    body = {
        "items": [
            {"m": np.ones((2, 2), dtype=np.float16)},
            {"m": np.zeros((0, 4), np.float32)},
        ]
    }
    decoded = unpackb(packb(body))
    assert decoded["items"][0]["m"].dtype == np.float16
    assert decoded["items"][0]["m"].shape == (2, 2)
    assert decoded["items"][1]["m"].shape == (0, 4)


def test_big_endian_input_is_packed_little_endian() -> None:
    raw = msgpack.unpackb(packb(np.array([1.0], dtype=">f4")), raw=False)
    assert raw[b"type"] == "<f4"
    assert raw[b"data"] == b"\x00\x00\x80\x3f"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({b"data": b"\0\0\0"}, "bytes"),
        ({b"type": "<c8"}, "unsupported"),
        ({b"type": "|O"}, "unsupported"),
        ({b"type": "nonsense"}, "unknown"),
        ({b"kind": b"O"}, "kind"),
        ({b"shape": [-1]}, "shape"),
        ({b"shape": "3"}, "shape"),
        ({b"data": "not-bin"}, "bin"),
    ],
)
def test_malformed_nd_maps_are_rejected(patch: dict[bytes, object], message: str) -> None:
    nd_map = {
        b"nd": True,
        b"type": "<f4",
        b"kind": b"",
        b"shape": [1],
        b"data": b"\0\0\x80?",
        **patch,
    }
    with pytest.raises(WireFormatError, match=message):
        unpackb(msgpack.packb(nd_map, use_bin_type=True))


def test_garbage_bytes_raise_wire_format_error() -> None:
    with pytest.raises(WireFormatError):
        unpackb(b"\xc1")


def test_packb_uses_bin_for_bytes_and_str_for_text() -> None:
    packed = packb({"text": "hi", "data": b"\x01"})
    assert packed == b"\x82\xa4text\xa2hi\xa4data\xc4\x01\x01"
