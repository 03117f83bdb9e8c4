"""A reply's head and body leave in one socket write (``sift_server.http_protocol``),
and a head that nothing follows still leaves."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from sift_server.api.body import read_asgi_body
from sift_server.errors import BodyTimeout
from sift_server.http_protocol import BODY_COMPLETE, OneWriteTransport, SiftHttpToolsProtocol

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
    ours = await serve_one(SiftHttpToolsProtocol, request_bytes)
    # Stock uvicorn writes the head and the body apart (an empty body too).
    assert len(stock) == 2
    assert ours == [b"".join(stock)]
    assert ours[0].startswith(b"HTTP/1.1 20") and ours[0].endswith(b"\r\n\r\n" + body)


async def serve_recording_scope(chunks: list[bytes]) -> list[object]:
    seen: list[object] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope.get(BODY_COMPLETE))
        await echo(scope, receive, send)

    config = uvicorn.Config(app, http=SiftHttpToolsProtocol, lifespan="off", log_level="warning")
    config.load()
    protocol = SiftHttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    protocol.connection_made(FakeTransport())  # type: ignore[arg-type]
    for chunk in chunks:
        protocol.data_received(chunk)
        for _ in range(5):
            await asyncio.sleep(0)
    return seen


async def test_the_scope_says_when_the_body_came_with_the_headers() -> None:
    whole = b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\nhi"
    assert await serve_recording_scope([whole]) == [True]
    # The body arrives after the app started: no mark, the read keeps its timeout.
    assert await serve_recording_scope([whole[:-2], whole[-2:]]) == [None]


async def slow_receive() -> dict[str, Any]:
    await asyncio.sleep(0.05)
    return {"type": "http.request", "body": b"hi", "more_body": False}


async def test_a_complete_body_is_read_without_the_timeout() -> None:
    body = await read_asgi_body(slow_receive, 100, 2, 0.001, "POST", "/x", complete=True)
    assert bytes(body) == b"hi"
    with pytest.raises(BodyTimeout):
        await read_asgi_body(slow_receive, 100, 2, 0.001, "POST", "/x")
