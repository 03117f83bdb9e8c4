"""Split a request body into its envelope and the elements of one large array field
(``items``, or OpenAI's ``input``), without one long call over the whole body.

Pure functions. A generator walks the body and yields, after each value it steps
over, how many bytes that value spanned, so the caller can give the event loop a
turn between values (wire/sliced.py). Its return value is a :class:`Split`, or
``None`` when the body is not the plain object this walk understands (malformed,
nested too deeply, the field twice, a value larger than the window): the caller
then decodes the body whole, which also produces the exact error message.

JSON has no length prefixes, so skipping a value means scanning it. Each value is
stepped over by msgspec (decoding it as ``msgspec.Raw``, which only scans) on a
window of the body; msgspec stops at the first byte after the value and names its
offset in a "trailing characters" error (wire/msgspec_text.py). MessagePack
values are length-prefixed: msgspec decodes the top-level map and the field as
``msgspec.Raw`` values, a walk over headers only.

Top-level string fields with a maximum length (``StrType.max_length`` in the
schema, as OpenAI's ``model``) are stepped over in a window no larger than the
longest encoding of a string that long: a value that does not end there raises
:class:`StringTooLong` at once, instead of scanning, copying and decoding
megabytes of a name no model has.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from sift_server.wire.msgspec_text import trailing_offset, truncated
from sift_server.wire.negotiation import Format

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Split:
    """``envelope``: the body without the field, in the body's format (the field
    stays in it when its value is not an array). ``elements``: the array's encoded
    elements in order, or ``None`` when the field was left in the envelope."""

    envelope: bytes
    elements: Sequence[Buffer | msgspec.Raw] | None


class StringTooLong(Exception):
    """The top-level field ``key`` holds a string longer than ``max_chars``."""

    def __init__(self, key: str, max_chars: int) -> None:
        super().__init__(key, max_chars)
        self.key = key
        self.max_chars = max_chars


# The most bytes one character takes: a JSON escaped surrogate pair
# (``\ud83d\ude00``), four in UTF-8 (MessagePack).
_JSON_BYTES_PER_CHAR = 12
_UTF8_BYTES_PER_CHAR = 4
_MSGPACK_STR_HEADS = frozenset([*range(0xA0, 0xC0), 0xD9, 0xDA, 0xDB])

# Yields the byte span of each value stepped over; returns the split or None.
Walk = Generator[int, None, Split | None]

_WS = re.compile(rb"[ \t\n\r]*")
_json_raw = msgspec.json.Decoder(msgspec.Raw)
_json_key = msgspec.json.Decoder(str)
_msgpack_top = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])
_msgpack_array = msgspec.msgpack.Decoder(list[msgspec.Raw])


def split_body(data: Buffer, fmt: Format, field: str, window: int, max_chars: Mapping[str, int] | None = None) -> Walk:
    """``max_chars``: top-level keys whose string value may be at most this many
    characters long (:class:`StringTooLong` when longer)."""
    if fmt == "msgpack":
        return _split_msgpack(data, field, max_chars or {})
    return _split_json(memoryview(data), field, window, max_chars or {})


def _skip_ws(view: memoryview, pos: int) -> int:
    match = _WS.match(view, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _after_value(view: memoryview, pos: int, close: int) -> tuple[int, bool] | None:
    """After a value inside an array or object: the start of the next value and
    False, or the position past ``close`` and True; None when neither follows."""
    pos = _skip_ws(view, pos)
    if pos >= len(view):
        return None
    if view[pos] == close:
        return pos + 1, True
    if view[pos] != ord(","):
        return None
    return _skip_ws(view, pos + 1), False


def json_value_end(view: memoryview, pos: int, window: int) -> int | None:
    """The offset of the first byte after the JSON value at ``pos`` and the
    whitespace that follows it (``pos`` must not point at whitespace), scanning at
    most ``window`` bytes; ``None`` when the value is
    malformed, nested too deeply, longer than the window or runs to the end of the
    body (then no closing bracket follows it)."""
    end, _ = _scan(view, pos, window)
    return end


def _scan(view: memoryview, pos: int, window: int) -> tuple[int | None, bool]:
    """:func:`json_value_end`, and whether the value was cut by the window (or
    the end of the body) before it ended."""
    end = min(len(view), pos + window)
    try:
        _json_raw.decode(view[pos:end])
    except msgspec.DecodeError as exc:
        # msgspec tells where the value ended only in this error (wire/msgspec_text.py).
        offset = trailing_offset(exc)
        if offset is None:
            return None, truncated(exc)
        return pos + offset, False
    except RecursionError:
        return None, False
    return None, False


def _short_string_end(view: memoryview, pos: int, key: str, max_chars: int) -> int | None:
    """The end of the string at ``pos``, found in a window that holds any string
    of ``max_chars`` characters and the byte after it; :class:`StringTooLong` when
    the string runs past that window. ``None``: not settled here (not a string,
    malformed, last in the body), step over it as any other value."""
    if view[pos] != ord('"'):
        return None
    end, truncated = _scan(view, pos, 2 + _JSON_BYTES_PER_CHAR * max_chars + 1)
    if truncated and pos + 2 + _JSON_BYTES_PER_CHAR * max_chars + 1 <= len(view):
        raise StringTooLong(key, max_chars)
    return end


def _split_json(view: memoryview, field: str, window: int, max_chars: Mapping[str, int]) -> Walk:
    parts: list[bytes] = []
    elements: list[memoryview] | None = None
    pos = _skip_ws(view, 0)
    if pos >= len(view) or view[pos] != ord("{"):
        return None
    pos = _skip_ws(view, pos + 1)
    if pos < len(view) and view[pos] == ord("}"):
        pos += 1
    else:
        while True:
            if pos >= len(view) or view[pos] != ord('"'):
                return None
            key_end = json_value_end(view, pos, window)
            if key_end is None:
                return None
            key_raw = bytes(view[pos:key_end])
            try:
                key = _json_key.decode(key_raw)
            except msgspec.DecodeError:
                return None
            pos = _skip_ws(view, key_end)
            if pos >= len(view) or view[pos] != ord(":"):
                return None
            pos = _skip_ws(view, pos + 1)
            if pos >= len(view):
                return None
            if key == field and elements is not None:
                return None  # the field twice: let the whole decode settle it
            if key == field and view[pos] == ord("["):
                elements = []
                pos = _skip_ws(view, pos + 1)
                if pos < len(view) and view[pos] == ord("]"):
                    pos += 1
                else:
                    while True:
                        end = json_value_end(view, pos, window)
                        if end is None:
                            return None
                        elements.append(view[pos:end])
                        yield end - pos
                        step = _after_value(view, end, ord("]"))
                        if step is None:
                            return None
                        pos, closed = step
                        if closed:
                            break
            else:
                end = None
                if key in max_chars:
                    end = _short_string_end(view, pos, key, max_chars[key])
                if end is None:
                    end = json_value_end(view, pos, window)
                if end is None:
                    return None
                parts.append(key_raw + b":" + bytes(view[pos:end]))
                yield end - pos
                pos = end
            step = _after_value(view, pos, ord("}"))
            if step is None:
                return None
            pos, closed = step
            if closed:
                break
    if _skip_ws(view, pos) != len(view):
        return None
    return Split(b"{" + b",".join(parts) + b"}", elements)


def _split_msgpack(data: Buffer, field: str, max_chars: Mapping[str, int]) -> Walk:
    try:
        top = _msgpack_top.decode(data)
        for key, limit in max_chars.items():
            raw = top.get(key)
            # A str header is at most 5 bytes; then at most 4 bytes a character.
            if raw is None or len(raw) <= 5 + _UTF8_BYTES_PER_CHAR * limit:
                continue
            if memoryview(raw)[0] in _MSGPACK_STR_HEADS:
                raise StringTooLong(key, limit)
        value = top.pop(field, None)
        elements: list[msgspec.Raw] | None = None
        if value is not None:
            try:
                elements = _msgpack_array.decode(value)
            except msgspec.ValidationError:
                top[field] = value  # not an array: the envelope's decode answers it
        envelope = msgspec.msgpack.encode(top)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    yield len(data)
    return Split(envelope, elements)
