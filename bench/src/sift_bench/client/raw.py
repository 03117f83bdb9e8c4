"""The lean client (``--client raw``): MessagePack over bare HTTP/1.1
keep-alive connections (``raw_http``), so that an answer leaves and returns
within a fraction of a millisecond of client time, as with a fast client
library. It checks every answer as the other clients do."""

from __future__ import annotations

import asyncio
import time

import msgpack

from sift_bench.client.answer import Outcome, check_status, decode_encode_response, validate_dense
from sift_bench.client.raw_http import RawConnection
from sift_bench.workload.request import ENCODE_DENSE, RequestSpec, check_answer

_HEADERS = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


class RawTransport:
    kind = "raw"

    def __init__(
        self,
        base_url: str,
        model: str,
        dims: int | None,
        *,
        max_connections: int,
        timeout: float,
        spec: RequestSpec = ENCODE_DENSE,
        echo_required: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.path = f"/v1/{spec.route}/{model}"
        self.dims = dims
        self.spec = spec
        self.timeout = timeout
        self.echo_required = echo_required
        self._idle: list[RawConnection] = []
        self._free = asyncio.Semaphore(max_connections)

    def _check_body(self, content: bytes, items: int) -> str | None:
        if self.spec.dense_only:
            return validate_dense(decode_encode_response(content, items), items, self.dims)
        return check_answer(self.spec, msgpack.unpackb(content, raw=False, strict_map_key=False), items)

    async def send(self, request_id: str, texts: list[str]) -> Outcome:
        body = msgpack.packb(self.spec.body(texts), use_bin_type=True)
        async with self._free:
            connection = self._idle.pop() if self._idle else RawConnection(self.base_url)
            issued = time.perf_counter()
            try:
                response = await asyncio.wait_for(
                    connection.post(self.path, body, {**_HEADERS, "X-Request-ID": request_id}), self.timeout
                )
            except Exception as exc:  # every failure is an invalid response, never a crash
                await connection.close()
                return Outcome(False, None, f"{type(exc).__name__}: {exc}", issued)
            self._idle.append(connection)
        echoed = response.headers.get("x-request-id") if self.echo_required else request_id
        error = check_status(response.status_code, echoed, request_id)
        if error is None:
            try:
                error = self._check_body(response.content, len(texts))
            except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
                error = f"malformed response: {type(exc).__name__}: {exc}"
        return Outcome(error is None, response.status_code, error, issued)

    async def aclose(self) -> None:
        for connection in self._idle:
            await connection.close()
        self._idle.clear()
