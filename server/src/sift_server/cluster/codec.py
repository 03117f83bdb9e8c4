"""The two message bodies: a request (path, the headers the serving core reads, the
body) and a reply (status, headers, body). msgpack, a few bytes of framing."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from sift_server.wire.split import Buffer

# Request headers carried to the worker (the serving core reads only these).
FORWARDED_HEADERS = frozenset({"content-type", "accept", "x-request-id", "user-agent"})


@dataclass(frozen=True, slots=True)
class WorkRequest:
    path: str
    headers: list[tuple[str, str]]
    body: Buffer  # as the gateway read it (a view of a memory map past 1 MiB); bytes once unpacked


@dataclass(frozen=True, slots=True)
class WorkReply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def pack_request(request: WorkRequest) -> bytes:
    data: bytes = msgpack.packb([request.path, [list(h) for h in request.headers], request.body])
    return data


def unpack_request(data: bytes) -> WorkRequest:
    path, headers, body = msgpack.unpackb(data)
    return WorkRequest(str(path), [(str(k), str(v)) for k, v in headers], bytes(body))


def pack_reply(reply: WorkReply) -> bytes:
    data: bytes = msgpack.packb([reply.status, [list(h) for h in reply.headers], reply.body])
    return data


def unpack_reply(data: bytes) -> WorkReply:
    status, headers, body = msgpack.unpackb(data)
    return WorkReply(int(status), [(str(k), str(v)) for k, v in headers], bytes(body))
