"""Request body reading with the size limit and the body timeout, and the
client-disconnect watch."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import ClientDisconnect, Request

from sift_server.api.body_buffer import BodyBuffer
from sift_server.errors import BodyTimeout, BodyTooLarge, RequestCancelled
from sift_server.wire.split import Buffer

log = logging.getLogger(__name__)


async def read_body(request: Request, limit: int, timeout_s: float | None = None) -> bytes:
    """The whole body as bytes (see :func:`read_body_buffer`)."""
    return bytes(await read_body_buffer(request, limit, timeout_s))


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


async def read_body_buffer(request: Request, limit: int, timeout_s: float | None = None) -> Buffer:
    """The whole body, at most ``limit`` bytes (413), within ``timeout_s`` from
    the first read (408, the connection is then closed). A client that hangs up
    mid-body is a 499 with one log line. A large body comes back as a view of a
    memory map, never joined in one copy (api/body_buffer.py)."""
    buffer = BodyBuffer(limit, _declared_length(request))
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"Request body exceeds the limit of {limit} bytes.")
                buffer.add(chunk)
    except TimeoutError:
        log.info(
            "%s %s: body not complete after %.1fs (%d bytes read): 408",
            request.method,
            request.url.path,
            timeout_s or 0.0,
            size,
        )
        raise BodyTimeout(f"The request body was not received within {timeout_s:g} s.") from None
    except ClientDisconnect:
        log.info("%s %s: client disconnected mid-body after %d bytes: 499", request.method, request.url.path, size)
        raise RequestCancelled("The client disconnected before sending the whole body.") from None
    return buffer.view()


async def wait_for_disconnect(request: Request) -> None:
    """Returns when the client goes away (only meaningful after the body is read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
