"""The lean client's connection: a keep-alive connection the server closed while
idle is reopened, not written into (the request would fail unsent)."""

from __future__ import annotations

import asyncio

from sift_bench.client.raw_http import RawConnection

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def test_a_connection_the_server_closed_while_idle_is_reopened() -> None:
    connections = 0

    async def serve_one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(ANSWER)
        await writer.drain()
        writer.close()  # as a server's keep-alive timeout does, without "Connection: close"

    server = await asyncio.start_server(serve_one_then_close, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = RawConnection(f"http://127.0.0.1:{port}")
    try:
        first = await connection.post("/", b"{}", {})
        await asyncio.sleep(0.1)  # the close reaches the client while the connection is idle
        second = await connection.post("/", b"{}", {})
    finally:
        await connection.close()
        server.close()
        await server.wait_closed()
    assert (first.status_code, first.content) == (200, b"ok")
    assert (second.status_code, second.content) == (200, b"ok")
    assert connections == 2
