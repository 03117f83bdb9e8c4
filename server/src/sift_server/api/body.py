"""Request body reading with the size limit, and the client-disconnect watch."""

from __future__ import annotations

from starlette.requests import Request

from sift_server.errors import BodyTooLarge


async def read_body(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"Request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def wait_for_disconnect(request: Request) -> None:
    """Returns when the client goes away (only meaningful after the body is read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
