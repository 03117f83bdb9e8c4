"""What msgspec says only in its error text, read in one place.

msgspec (0.23) has no API for two things Sift needs: where a value ended when
more bytes follow it (no ``raw_decode``: msgspec/msgspec#821 is open), which
wire/split.py uses to step over one JSON value, and which field a validation
error is about (no structured location: msgspec/msgspec#264 is open), which the
OpenAI envelope's ``param`` names. Both are read from the message here, and
tests/wire/test_msgspec_text.py pins the formats against the installed msgspec,
so an upgrade that changes them fails a test instead of degrading quietly.
"""

from __future__ import annotations

import re

_TRAILING = re.compile(r"JSON is malformed: trailing characters \(byte (\d+)\)")
_MISSING = re.compile(r"Object missing required field `([^`]*)`")
_AT = re.compile(r"at `\$\.([^`.\[]*)")

TRUNCATED = "Input data was truncated"


def trailing_offset(error: Exception) -> int | None:
    """The offset (from zero) of the first byte after a whole JSON value, when
    ``error`` is msgspec's "trailing characters" error; else None."""
    match = _TRAILING.fullmatch(str(error))
    # msgspec counts the trailing byte from one.
    return int(match.group(1)) - 1 if match else None


def truncated(error: Exception) -> bool:
    """The input ended inside a value."""
    return str(error) == TRUNCATED


def top_field(message: str) -> str | None:
    """The top-level field a msgspec validation message names (``... - at
    `$.dimensions``` or ``Object missing required field `model```), if any."""
    missing = _MISSING.search(message)
    if missing is not None:
        return missing.group(1) or None
    at = _AT.search(message)
    return at.group(1) or None if at is not None else None
