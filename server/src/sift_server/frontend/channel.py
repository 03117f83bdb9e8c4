"""A framed connection over a Unix socket: messages queued during a loop turn leave as
one frame at the next turn (one write and one wake-up of the other process for all of
them), and each frame received is handed over as its list of messages."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any, cast

from sift_server.frontend.protocol import HEADER, decode_frame, encode_frame

log = logging.getLogger(__name__)


class Channel(asyncio.Protocol):
    def __init__(self, on_messages: Callable[[list[Any]], None], on_lost: Callable[[], None]) -> None:
        self._on_messages = on_messages
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._outbox: list[Any] = []
        self._flush_pending = False
        self._lazy: asyncio.TimerHandle | None = None
        self._buffer = bytearray()
        self.closed = False

    @classmethod
    async def over(
        cls, sock: socket.socket, on_messages: Callable[[list[Any]], None], on_lost: Callable[[], None]
    ) -> Channel:
        """A channel on a connected socket (one end of a socketpair)."""
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        _, channel = await loop.connect_accepted_socket(lambda: cls(on_messages, on_lost), sock)
        return channel

    # ---- asyncio.Protocol ----------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer, start)
            end = start + HEADER.size + size
            if len(buffer) < end:
                break
            messages = decode_frame(buffer[start + HEADER.size : end])
            start = end
            self._on_messages(messages)
        del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self._on_lost()

    # ---- sending -------------------------------------------------------

    def send(self, message: Any) -> None:
        """Queue ``message``; this turn's messages leave together at the next one."""
        if self.closed:
            return
        self._outbox.append(message)
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def send_later(self, message: Any, within_s: float) -> None:
        """Queue ``message`` without a frame of its own: it leaves with the next one, or
        within ``within_s`` (what nobody waits for: it costs the other side no wake-up)."""
        if self.closed:
            return
        self._outbox.append(message)
        if not self._flush_pending and self._lazy is None:
            self._lazy = asyncio.get_running_loop().call_later(within_s, self._flush)

    def _flush(self) -> None:
        if self._lazy is not None:
            self._lazy.cancel()
            self._lazy = None
        self._flush_pending = False
        messages, self._outbox = self._outbox, []
        if messages and self._transport is not None and not self.closed:
            self._transport.write(encode_frame(messages))

    def close(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()
