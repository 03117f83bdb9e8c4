"""The msgspec error texts Sift reads (wire/msgspec_text.py), against the installed
msgspec: an upgrade that changes them fails here, not quietly in a 400's param or
in the sliced decode's step over a value."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from sift_server.wire.msgspec_text import top_field, trailing_offset, truncated


def _decode_error(data: bytes, kind: type = msgspec.Raw) -> msgspec.DecodeError:
    with pytest.raises(msgspec.DecodeError) as caught:
        msgspec.json.decode(data, type=kind)
    return caught.value


def test_the_end_of_a_value_followed_by_more_bytes() -> None:
    assert trailing_offset(_decode_error(b'{"a": [1, 2]} , "next"')) == 14
    assert trailing_offset(_decode_error(b'"x",')) == 3
    assert trailing_offset(_decode_error(b"[1, 2")) is None and truncated(_decode_error(b"[1, 2"))
    assert trailing_offset(_decode_error(b"[1 2]")) is None and not truncated(_decode_error(b"[1 2]"))


class _Body(msgspec.Struct):
    model: str
    dimensions: int | None = None
    input: list[Annotated[str, msgspec.Meta(max_length=3)]] = []


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b'{"dimensions": 1}', "model"),
        (b'{"model": "m", "dimensions": "a"}', "dimensions"),
        (b'{"model": "m", "input": ["abcd"]}', "input"),
        (b"[]", None),
    ],
)
def test_the_top_level_field_of_a_validation_error(data: bytes, field: str | None) -> None:
    assert top_field(str(_decode_error(data, _Body))) == field
