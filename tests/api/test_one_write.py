"""A reply's head and body leave in one socket write (``sift_server.one_write``),
and a head that nothing follows still leaves."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from sift_server.one_write import OneWriteHttpToolsProtocol, OneWriteTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_a_head_goes_out_with_the_body_in_one_write() -> None:
    fake = FakeTransport()
    transport = OneWriteTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    assert fake.writes == []
    transport.write(b"hi")
    assert fake.writes == [HEAD + b"hi"]
    await asyncio.sleep(0)
    assert fake.writes == [HEAD + b"hi"]


async def test_a_lone_head_leaves_at_the_end_of_the_loop_iteration() -> None:
    fake = FakeTransport()
    transport = OneWriteTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert fake.writes == []
    await asyncio.sleep(0)
    assert fake.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_closing_sends_a_held_head_first_and_a_lost_socket_drops_it() -> None:
    fake = FakeTransport()
    transport = OneWriteTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    transport.close()
    assert fake.writes == [HEAD]
    assert fake.closed

    gone = FakeTransport()
    transport = OneWriteTransport(gone, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    gone.closed = True
    await asyncio.sleep(0)
    assert gone.writes == []


async def test_other_writes_pass_straight_through() -> None:
    fake = FakeTransport()
    transport = OneWriteTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"5\r\nhello\r\n")
    transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 3\r\n\r\nbad")
    assert fake.writes == [b"5\r\nhello\r\n", b"HTTP/1.1 400 Bad Request\r\ncontent-length: 3\r\n\r\nbad"]
    assert transport.get_extra_info("peername", "none") == "none"


async def echo(scope: Any, receive: Any, send: Any) -> None:
    message = await receive()
    body = message.get("body", b"")
    status = 204 if not body else 200
    headers = [(b"content-length", str(len(body)).encode())] if body else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_one(protocol_class: type[HttpToolsProtocol], request: bytes) -> list[bytes]:
    config = uvicorn.Config(echo, http=protocol_class, lifespan="off", log_level="warning")
    config.load()
    fake = FakeTransport()
    protocol = protocol_class(config, ServerState(), {}, asyncio.get_running_loop())
    protocol.connection_made(fake)  # type: ignore[arg-type]
    protocol.data_received(request)
    for _ in range(20):
        await asyncio.sleep(0)
    return fake.writes


@pytest.mark.parametrize(
    ("request_bytes", "body"),
    [
        (b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\nhi", b"hi"),
        (b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: 0\r\n\r\n", b""),
    ],
)
async def test_uvicorn_replies_in_one_write_through_the_protocol(request_bytes: bytes, body: bytes) -> None:
    stock = await serve_one(HttpToolsProtocol, request_bytes)
    ours = await serve_one(OneWriteHttpToolsProtocol, request_bytes)
    # Stock uvicorn writes the head and the body apart (an empty body too).
    assert len(stock) == 2
    assert ours == [b"".join(stock)]
    assert ours[0].startswith(b"HTTP/1.1 20") and ours[0].endswith(b"\r\n\r\n" + body)
