"""A minimal HTTP/1.1 keep-alive connection for load generation (benchmarks only).

A general client library spends milliseconds of CPU per request at high
concurrency, so a closed loop can end up measuring the load generator rather
than the server. This writes the request and reads the status line, the
headers and a Content-Length body: enough for the answers of Sift and of the
reference server, at a small fraction of the CPU (figures in docs/bench.md)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(slots=True)
class RawResponse:
    status_code: int
    headers: dict[str, str]  # names in lower case
    content: bytes


class RawConnection:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # A server closes idle keep-alive connections: reopen one it has closed rather
        # than send into it (as client libraries do), or the request fails unsent.
        if self._reader is None or self._writer is None or self._writer.is_closing() or self._reader.at_eof():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self._reader, self._writer

    async def connect(self) -> None:
        """Open the connection now (else the first request opens it)."""
        await self._open()

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> RawResponse:
        reader, writer = await self._open()
        lines = [f"POST {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            await self.close()
            raise
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        out: dict[str, str] = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                out[name.strip().lower()] = value.strip()
        content = await reader.readexactly(int(out.get("content-length", "0")))
        if out.get("connection", "").lower() == "close":
            await self.close()
        return RawResponse(int(status_line.split(" ", 2)[1]), out, content)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._reader = None
