"""Where a request body accumulates while it is read.

Small bodies are a list of chunks joined at the end, as before. A body that
passes ``SPILL_BYTES`` moves into an anonymous memory map as large as the
declared Content-Length (or the body limit when chunked): the kernel hands out
zeroed pages only when they are first written, so each chunk costs a copy of
its own size, and there is no final ``b"".join`` of tens of megabytes (a copy
and page faults over the whole body, in one step of the event loop). The map is
unmapped when the last view of it goes, so its pages go back to the system.
"""

from __future__ import annotations

import mmap

from sift_server.wire.split import Buffer

SPILL_BYTES = 1 << 20


class BodyBuffer:
    def __init__(self, limit: int, declared: int | None) -> None:
        self._limit = limit
        self._declared = declared
        self._chunks: list[bytes] = []
        self._map: mmap.mmap | None = None
        self.size = 0

    def add(self, chunk: bytes) -> None:
        """Append a chunk; the caller has checked the limit."""
        needed = self.size + len(chunk)
        if self._map is None and needed <= SPILL_BYTES:
            self._chunks.append(chunk)
        else:
            if self._map is None or needed > len(self._map):
                self._spill(needed)
            assert self._map is not None
            self._map[self.size : needed] = chunk
        self.size = needed

    def _spill(self, needed: int) -> None:
        """A map that holds ``needed`` bytes: the declared length when the body keeps
        to it, else the limit (or ``needed``, should a caller pass the limit)."""
        capacity = self._limit
        if self._declared is not None and needed <= self._declared <= self._limit:
            capacity = self._declared
        grown = mmap.mmap(-1, max(capacity, needed))
        if self._map is not None:
            grown[: self.size] = self._map[: self.size]
        else:
            offset = 0
            for chunk in self._chunks:
                grown[offset : offset + len(chunk)] = chunk
                offset += len(chunk)
            self._chunks = []
        self._map = grown

    def view(self) -> Buffer:
        """The body: bytes when small, else a view of the map (read-only use)."""
        if self._map is None:
            return b"".join(self._chunks)
        return memoryview(self._map)[: self.size]
