"""The HTTP protocol ``sift serve`` runs under uvicorn: uvicorn's httptools
protocol, with two cuts of per-request work.

One socket write per reply. uvicorn writes the status line and headers when the app sends
``http.response.start`` and the body on ``http.response.body``: two ``send``
system calls and, with ``TCP_NODELAY``, two segments per reply. On loopback the
sending core also runs the receiving side of TCP, so each write costs the
server's core a few microseconds, a visible share of a one-text request
(docs/benchmarks/request-cost.md). The transport handed to the protocol holds a
head back and sends it with the next write; a head that nothing follows (a
``100 Continue``, a reply without body) goes out at the end of the current
loop iteration, and closing the transport sends it first.

The body's arrival in the scope. When a request's last body byte came in the
same read as its headers (a small request: nearly always), the protocol marks
the scope (``BODY_COMPLETE``) before the app runs, so the body read needs no
timer for its timeout: the whole body is already buffered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Scope key set once the whole request body is buffered in the protocol.
BODY_COMPLETE = "sift.body_complete"
_HEAD_START = b"HTTP/1.1 "
_HEAD_END = b"\r\n\r\n"


class OneWriteTransport:
    """A transport whose response heads wait for the next write (or the end of
    the loop iteration); everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + bytes(data))
        elif data[: len(_HEAD_START)] == _HEAD_START and data[-len(_HEAD_END) :] == _HEAD_END:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Send a held head now (nothing when none is held or the socket is gone)."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class SiftHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a :class:`OneWriteTransport`, marking
    the scope when a request's body is complete."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        wrapped = OneWriteTransport(transport, self.loop)
        super().connection_made(wrapped)  # type: ignore[arg-type]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        cycle = self.cycle
        if cycle is not None and not cycle.more_body:
            cycle.scope[BODY_COMPLETE] = True  # type: ignore[literal-required]
