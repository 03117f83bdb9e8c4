"""State and decisions shared by :class:`SiftClient` and :class:`AsyncSiftClient`.

The clients own only the IO (sending a request, sleeping). Everything else lives here: URLs,
headers, error mapping, retry bookkeeping and response parsing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import httpx

from ._calls import Call
from ._retry import RetryBudget, RetryPolicy
from ._version import __version__
from ._wire import WireFormatError, unpackb
from .errors import (
    MalformedResponseError,
    SiftConnectionError,
    SiftError,
    SiftTimeoutError,
    error_from_response,
)

__all__ = ["DEFAULT_BASE_URL", "ClientCore"]

T = TypeVar("T")

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
API_KEY_ENV = "SIFT_API_KEY"

_MIME = {"msgpack": "application/msgpack", "json": "application/json"}

#: Transport failures where the request never reached the server, so a retry is safe.
_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class ClientCore:
    """Configuration plus the non-IO steps of one call."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        timeout: float | None,
        retry_deadline_s: float,
        retry_policy: RetryPolicy | None,
        clock: Callable[[], float] | None,
    ) -> None:
        base_url = base_url.rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an absolute http(s) URL, got {base_url!r}")
        if retry_deadline_s < 0:
            raise ValueError("retry_deadline_s must be >= 0")
        self.base_url = base_url
        self.timeout = timeout
        self.retry_deadline_s = retry_deadline_s
        self.retry_policy = retry_policy or RetryPolicy()
        self._api_key = (api_key if api_key is not None else os.environ.get(API_KEY_ENV)) or None
        self._clock = clock or time.monotonic
        self._retry_count: ContextVar[int] = ContextVar(f"sift_retry_count_{id(self)}", default=0)

    @property
    def last_retry_count(self) -> int:
        """Retries made by the last call of this thread / asyncio task (0 = first try worked)."""
        return self._retry_count.get()

    def _new_budget(self) -> RetryBudget:
        self._retry_count.set(0)
        return RetryBudget(self.retry_policy, self.retry_deadline_s, self._clock)

    def _request_args(self, call: Call[Any]) -> dict[str, Any]:
        headers = {"Accept": _MIME[call.accept], "User-Agent": f"sift-sdk/{__version__}"}
        if call.body is not None:
            headers["Content-Type"] = _MIME["msgpack"]
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return {
            "method": call.method,
            "url": self.base_url + call.path,
            "content": call.body,
            "headers": headers,
        }

    def _delay_after_transport_error(self, budget: RetryBudget, exc: httpx.TransportError) -> float:
        """Seconds to wait before retrying a transport failure; raises when giving up."""
        delay = budget.after_transport_error() if isinstance(exc, _CONNECT_ERRORS) else None
        self._retry_count.set(budget.retries)
        if delay is None:
            timed_out = isinstance(exc, httpx.TimeoutException)
            cls = SiftTimeoutError if timed_out else SiftConnectionError
            raise cls(f"{type(exc).__name__}: {exc or 'transport error'}") from exc
        return delay

    def _delay_after_response(self, budget: RetryBudget, response: httpx.Response) -> float | None:
        """``None`` if the response succeeded, else seconds to wait; raises when giving up."""
        if response.is_success:
            return None
        error = error_from_response(response.status_code, response.headers, response.content)
        delay = budget.after_status(response.status_code, error.code, error.retry_after)
        self._retry_count.set(budget.retries)
        if delay is None:
            raise error
        return delay

    @staticmethod
    def _parse(call: Call[T], response: httpx.Response) -> T:
        """Decode a 2xx body (as the call's ``accept`` says) and run the call's parser."""
        try:
            decode: Callable[[bytes], Any] = unpackb if call.accept == "msgpack" else json.loads
            raw = decode(response.content)
        except (WireFormatError, ValueError) as exc:
            raise MalformedResponseError(
                f"Malformed {call.accept} response from {call.path}: {exc}",
                status_code=response.status_code,
            ) from exc
        try:
            return call.parse(raw)
        except SiftError as exc:
            exc.status_code = response.status_code
            raise
