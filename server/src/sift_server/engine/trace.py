"""Per-forward trace records, so a benchmark can join every request to its forward.

Off by default. When on, each forward appends one JSON line to a file. Times
are ``time.perf_counter()`` seconds (CLOCK_MONOTONIC on Linux, so a client on
the same machine can compare them with its own ``perf_counter``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import msgspec


@dataclass(slots=True)
class ForwardRecord:
    model: str
    lane: str
    forward_id: int
    reason: str
    request_ids: list[str]
    # Per request, aligned with request_ids: headers received, admitted to the queue.
    arrivals: list[float]
    admitted: list[float]
    items: int
    cost: int
    decided: float
    # Sub-forwards of similar length the batch ran as (engine.padding).
    chunks: int = 1
    start: float = 0.0
    end: float = 0.0
    error: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


class TraceSink(Protocol):
    def write(self, record: ForwardRecord) -> None: ...

    def close(self) -> None: ...


class NullTrace:
    def write(self, record: ForwardRecord) -> None:
        return None

    def close(self) -> None:
        return None


_encoder = msgspec.json.Encoder()


class JsonlTrace:
    """Appends one JSON object per forward; safe to call from any thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def write(self, record: ForwardRecord) -> None:
        # msgspec encodes the dataclass directly: a fraction of asdict + json.dumps.
        line = _encoder.encode(record).decode()
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def parse_trace(lines: Iterable[str]) -> list[ForwardRecord]:
    """The records of a trace's lines (blank lines skipped), from any text source."""
    return [ForwardRecord(**json.loads(line)) for line in lines if line.strip()]


def read_trace(path: Path) -> list[ForwardRecord]:
    with path.open(encoding="utf-8") as handle:
        return parse_trace(handle)
