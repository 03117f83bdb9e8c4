"""A generation model served by an operator's OpenAI-compatible upstream (adapter
``openai-remote``), as the reference's remote generation profiles are: Sift
validates, limits, meters and lists it like any model, and forwards the validated
request to the upstream's ``/completions`` or ``/chat/completions``, streaming.

Loading makes no call and holds no weights: it checks the entry and keeps an HTTP
client (httpx, already a dependency). The key is read from the environment variable
the entry names at each call (config/secrets.py) and sent only as the upstream's
``Authorization`` header; no message or log repeats it. Closing the answer early (a
client gone) closes the upstream connection, which cancels the upstream's work."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sift_server.adapters.base import Adapter, AdapterInfo, LoadContext, Part, Prepared, TaskInput
from sift_server.config.secrets import environment_secret
from sift_server.errors import InvalidInput, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from sift_server.generation.params import Limits
from sift_server.generation.upstream import (
    DONE,
    PATHS,
    SseEvents,
    UpstreamPiece,
    UpstreamRequest,
    read_event,
    status_error,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS_CAP = 4096
# No tokenizer here: the upstream checks its own context (a prompt over it is its 400).
UNKNOWN_CONTEXT = 2**31 - 1
# The most of an upstream's error body read (it is quoted briefly, never streamed on).
ERROR_BODY_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    base_url: str
    model: str
    api_key_env: str | None
    connect_timeout_s: float
    read_timeout_s: float

    @classmethod
    def of(cls, remote: Mapping[str, Any]) -> RemoteSettings:
        return cls(
            base_url=str(remote["base_url"]),
            model=str(remote["model"]),
            api_key_env=remote.get("api_key_env"),
            connect_timeout_s=float(remote["connect_timeout_s"]),
            read_timeout_s=float(remote["read_timeout_s"]),
        )


class RemoteGenerationAdapter(Adapter):
    transformers_models = False
    loads_runtime_without_torch = True

    def __init__(self, settings: RemoteSettings, limits: Limits) -> None:
        self.settings = settings
        self.limits = limits
        self.info = AdapterInfo(
            tasks=frozenset({"generate"}),
            outputs=("text",),
            max_sequence_length=0 if limits.context_tokens == UNKNOWN_CONTEXT else limits.context_tokens,
            runtime={"engine": "openai-remote", "upstream_model": settings.model},
        )
        # One client per event loop that used it (httpx's async client is bound to its loop).
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def load(cls, ctx: LoadContext) -> RemoteGenerationAdapter:
        if ctx.remote is None:
            raise ValueError("an openai-remote entry needs its 'remote' block")
        if importlib.util.find_spec("httpx") is None:
            raise ValueError("a remote model needs httpx: pip install 'sift-server[remote]'")
        settings = RemoteSettings.of(ctx.remote)
        if settings.api_key_env is not None and environment_secret(settings.api_key_env) is None:
            # Said at load (the name only), so the operator meets it at start, not at the first request.
            log.warning("remote model: environment variable %s (its upstream key) is not set", settings.api_key_env)
        cap = int(ctx.options.get("max_new_tokens_cap", DEFAULT_MAX_NEW_TOKENS_CAP))
        context = ctx.max_sequence_length or UNKNOWN_CONTEXT
        return cls(settings, Limits(context_tokens=context, max_new_tokens_cap=cap))

    # ---- the upstream call ------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        import httpx  # the extra 'remote'; imported by the first call, not by the server

        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(base_url=self.settings.base_url, trust_env=False)
            self._client_loop = loop
        return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
        variable = self.settings.api_key_env
        if variable is not None:
            key = environment_secret(variable)
            if key is None:
                raise UpstreamError(f"The upstream's key is missing: the operator must set {variable}.")
            if not key.isascii() or not key.isprintable():
                raise UpstreamError(f"The upstream's key in {variable} holds characters a key cannot contain.")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def stream(self, request: UpstreamRequest) -> AsyncIterator[UpstreamPiece]:
        """The upstream's answer, piece by piece, ending with ``DONE``; closing
        this closes the connection (the upstream then drops the request)."""
        import httpx

        settings = self.settings
        timeout = httpx.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s)
        headers = self._headers()
        try:
            async with self._http().stream(
                "POST", PATHS[request.endpoint], json=request.body(settings.model), headers=headers, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    raise status_error(response.status_code, await _bounded(response))
                events = SseEvents()
                async for line in response.aiter_lines():
                    data = events.feed(line)
                    if data is None:
                        continue
                    piece = read_event(data, request.endpoint)
                    yield piece
                    if piece is DONE:
                        return
                last = events.end()
                if last is not None and read_event(last, request.endpoint) is DONE:
                    yield DONE
                    return
                raise UpstreamError("The upstream's stream ended before [DONE].")
        except httpx.TimeoutException as exc:
            phase = "connect to" if isinstance(exc, httpx.ConnectTimeout) else "hear from"
            raise UpstreamTimeout(f"Could not {phase} the upstream within its timeout.") from None
        except httpx.ConnectError:
            raise UpstreamUnreachable("The upstream is unreachable (no connection).") from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"The upstream connection failed ({type(exc).__name__}).") from None

    # ---- the adapter contract ---------------------------------------------------

    def prepare(self, task: TaskInput) -> Prepared:
        raise InvalidInput("A generation model serves the generation routes only.")

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]:
        raise InvalidInput("A generation model serves the generation routes only.")

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        client, loop = self._client, self._client_loop
        self._client = self._client_loop = None
        if client is None or loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile: its sockets go with it
            loop.call_soon_threadsafe(lambda: loop.create_task(client.aclose()))


async def _bounded(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= ERROR_BODY_BYTES:
            break
    return bytes(body[:ERROR_BODY_BYTES])
