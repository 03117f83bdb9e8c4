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
# How far back a stream's dictionary is looked for (image and content dictionaries are
# a few hundred bytes; a longer one is read from its last 4 KiB).
_DICTIONARY_WINDOW = 4096
# Inflated in steps of this many bytes, so that a bomb is stopped after one step past the limit.
_STEP = 1 << 20
# A stream inflating past both this and the ratio limit is a bomb (as for ZIP members).
_FLOOR = 1 << 20


@dataclass(frozen=True, slots=True)
class PdfStreams:
    """The largest image an XObject declares (pixels, its object number), the stream that
    inflates most beyond the ratio limit (None if none does), and the bytes all Flate
    streams that are not images inflate to (up to the point the scan stopped)."""

    largest_image: tuple[int, int, int]  # (pixels, width, height)
    bomb: tuple[int, int] | None  # (inflated at least, compressed) of the first bomb found
    inflated: int


def _dictionary(data: bytes, end: int) -> bytes:
    window_start = max(0, end - _DICTIONARY_WINDOW)
    window = data[window_start:end]
    headers = list(_OBJECT.finditer(window))
    return window[headers[-1].end() :] if headers else window


def _number(data: bytes, match: re.Match[bytes] | None) -> int:
    """A direct integer, or an indirect one resolved in the file (0 when it cannot be)."""
    if match is None:
        return 0
    if match.group(2) is None:
        return int(match.group(1))
    target = re.search(rb"(?<!\d)%s\s+%s\s+obj\s*(\d+)\s*endobj" % (match.group(1), match.group(2)), data)
    return int(target.group(1)) if target else 0


def _inflated_size(data: bytes, start: int, max_ratio: int, budget: int) -> tuple[int, int, bool]:
    """(bytes out, bytes consumed, bomb?) of the zlib stream at ``start``, stopped once it
    passes ``max_ratio`` times its input (and the floor) or the remaining ``budget``."""
    inflater = zlib.decompressobj()
    position, out = start, 0
    pending = b""
    while True:
        if not pending:
            pending = data[position : position + _STEP]
            position += len(pending)
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


def scan_streams(data: bytes, max_ratio: int, max_inflated: int) -> PdfStreams:
    """The streams of the PDF in ``data`` (see the module's docstring)."""
    largest = (0, 0, 0)
    inflated = 0
    for match in _STREAM.finditer(data):
        dictionary = _dictionary(data, match.start() + 2)
        if _IMAGE.search(dictionary):
            width, height = _number(data, _WIDTH.search(dictionary)), _number(data, _HEIGHT.search(dictionary))
            largest = max(largest, (width * height, width, height))
            continue
        if not _FLATE.search(dictionary):
            continue
        out, consumed, bomb = _inflated_size(data, match.end(), max_ratio, max_inflated - inflated)
        inflated += out
        if bomb:
            return PdfStreams(largest, (out, consumed), inflated)
    return PdfStreams(largest, None, inflated)
