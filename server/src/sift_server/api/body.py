"""Request body reading with the size limit and the body timeout, and the
client-disconnect watch: the one body path of ``sift serve`` and the gateway."""

from __future__ import annotations

import asyncio
import logging

from starlette.types import Receive

from sift_server.api.body_buffer import BodyBuffer
from sift_server.errors import BodyTimeout, BodyTooLarge, RequestCancelled
from sift_server.wire.split import Buffer

log = logging.getLogger(__name__)


def declared_length(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


async def read_asgi_body(
    receive: Receive, limit: int, declared: int | None, timeout_s: float | None, method: str, path: str
) -> Buffer:
    """The whole body, at most ``limit`` bytes (413), within ``timeout_s`` from
    the first read (408, the connection is then closed). A client that hangs up
    mid-body is a 499 with one log line. A large body comes back as a view of a
    memory map, never joined in one copy (api/body_buffer.py)."""
    buffer = BodyBuffer(limit, declared)
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    log.info("%s %s: client disconnected mid-body after %d bytes: 499", method, path, size)
                    raise RequestCancelled("The client disconnected before sending the whole body.")
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge(f"Request body exceeds the limit of {limit} bytes.")
                    buffer.add(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        log.info("%s %s: body not complete after %.1fs (%d bytes read): 408", method, path, timeout_s or 0.0, size)
        raise BodyTimeout(f"The request body was not received within {timeout_s:g} s.") from None
    return buffer.view()


async def wait_for_asgi_disconnect(receive: Receive) -> None:
    """Returns when the client goes away (only meaningful after the body is read)."""
    while (await receive())["type"] != "http.disconnect":
        pass
