"""What a PDF's streams would cost, read from its raw bytes: no page is loaded.

Loading a page makes PDFium inflate and parse its content stream: a 130 KB PDF
whose one page draws millions of lines kept the server's prep thread busy for
40 s and grew it by 1.3 GB before this scan existed. So the checks read only
the file's bytes: every stream's dictionary (streams are never inside object
streams, so their dictionaries are plain text in the file), the width and height
an image XObject declares, and for a Flate stream that is not an image how far
it inflates, stopped as soon as it passes the limit (a PDF bomb), never held.

What this does not see: inline images inside content streams (their size is
bounded by the content stream that holds them), and filters other than Flate.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

# A stream's keyword after its dictionary, and the object header before it.
_STREAM = re.compile(rb">>\s*stream\r?\n")
_OBJECT = re.compile(rb"\d+\s+\d+\s+obj\b")
_IMAGE = re.compile(rb"/Subtype\s*/Image\b")
_WIDTH = re.compile(rb"/Width\s+(\d+)(?:\s+(\d+)\s+R)?")
_HEIGHT = re.compile(rb"/Height\s+(\d+)(?:\s+(\d+)\s+R)?")
_FLATE = re.compile(rb"/FlateDecode\b")
# An integer object's body, then its header read backwards from there: starting the pattern at
# the literal ``obj`` keeps the pass over the file in the regex engine's fast literal search.
_INTEGER_BODY = re.compile(rb"obj\s*(\d+)\s*endobj")
_HEADER_BEFORE = re.compile(rb"(?<!\d)(\d+)\s+(\d+)\s+$")
# How far back a stream's dictionary is looked for (image and content dictionaries are
# a few hundred bytes; a longer one is read from its last 4 KiB).
_DICTIONARY_WINDOW = 4096
# Inflated in steps of this many bytes out, so that a bomb is stopped one step past the limit;
# its input is read in steps from 4 KiB up to the same (zlib's cost grows with the input
# handed to it, even when the first bytes are not Flate at all).
_STEP = 1 << 20
_FIRST_STEP = 4096
# A stream inflating past both this and the ratio limit is a bomb (as for ZIP members).
_FLOOR = 1 << 20


@dataclass(frozen=True, slots=True)
class PdfStreams:
    """The largest image an XObject declares, the first stream that inflates beyond the
    ratio limit (None if none does), the bytes the Flate streams that are not images
    inflate to, and the streams seen (all counted up to where the scan stopped)."""

    largest_image: tuple[int, int, int]  # (pixels, width, height)
    bomb: tuple[int, int] | None  # (inflated at least, compressed) of the first bomb found
    inflated: int
    streams: int  # counted up to one past the limit, where the scan stops


def _dictionary(data: bytes, start: int, end: int) -> bytes:
    """The text of the stream dictionary ending at ``end``, looked for no earlier than
    ``start`` (the previous stream's start), so that the whole scan reads each byte once."""
    window = data[max(start, end - _DICTIONARY_WINDOW) : end]
    headers = list(_OBJECT.finditer(window))
    return window[headers[-1].end() :] if headers else window


class _Numbers:
    """Integer objects (``7 0 obj 6251 endobj``), indexed in one pass over the file the first
    time an image's width or height is a reference (the first ``max_objects`` of them: a
    file has about one per stream, its length)."""

    def __init__(self, data: bytes, max_objects: int) -> None:
        self._data = data
        self._max_objects = max_objects
        self._index: dict[tuple[bytes, bytes], int] | None = None

    def value(self, match: re.Match[bytes] | None) -> int:
        """A direct integer, or an indirect one resolved in the file (0 when it cannot be)."""
        if match is None:
            return 0
        if match.group(2) is None:
            return int(match.group(1))
        if self._index is None:
            self._index = {}
            for count, body in enumerate(_INTEGER_BODY.finditer(self._data)):
                if count >= self._max_objects:
                    break
                header = _HEADER_BEFORE.search(self._data, max(0, body.start() - 24), body.start())
                if header:
                    self._index[(header.group(1), header.group(2))] = int(body.group(1))
        return self._index.get((match.group(1), match.group(2)), 0)


def _inflated_size(view: memoryview, start: int, max_ratio: int, budget: int) -> tuple[int, int, bool]:
    """(bytes out, bytes consumed, bomb?) of the zlib stream at ``start``, stopped once it
    passes ``max_ratio`` times its input (and the floor) or the remaining ``budget``."""
    inflater = zlib.decompressobj()
    position, out, step = start, 0, _FIRST_STEP
    pending: bytes | memoryview = b""
    while True:
        if not pending:
            pending = view[position : position + step]  # a view: nothing is copied
            position += len(pending)
            step = min(2 * step, _STEP)
            if not pending:
                break
        try:
            out += len(inflater.decompress(pending, _STEP))
        except zlib.error:
            break  # not Flate after all, or corrupt: the converter will say
        pending = inflater.unconsumed_tail
        consumed = position - start - len(pending) - len(inflater.unused_data)
        if (out > _FLOOR and out > max_ratio * max(consumed, 1)) or out > budget:
            return out, consumed, True
        if inflater.eof:
            break
    return out, position - start - len(pending) - len(inflater.unused_data), False


def scan_streams(data: bytes, max_ratio: int, max_inflated: int, max_streams: int) -> PdfStreams:
    """The streams of the PDF in ``data`` (see the module's docstring); the scan stops at
    the first bomb or past ``max_streams`` streams (its cost is about linear in them)."""
    view, numbers = memoryview(data), _Numbers(data, 2 * max_streams)
    largest = (0, 0, 0)
    inflated = previous = streams = 0
    for match in _STREAM.finditer(data):
        streams += 1
        if streams > max_streams:
            break
        dictionary = _dictionary(data, previous, match.start() + 2)
        previous = match.end()
        if _IMAGE.search(dictionary):
            width = numbers.value(_WIDTH.search(dictionary))
            height = numbers.value(_HEIGHT.search(dictionary))
            largest = max(largest, (width * height, width, height))
            continue
        if not _FLATE.search(dictionary):
            continue
        out, consumed, bomb = _inflated_size(view, match.end(), max_ratio, max_inflated - inflated)
        inflated += out
        if bomb:
            return PdfStreams(largest, (out, consumed), inflated, streams)
    return PdfStreams(largest, None, inflated, streams)
