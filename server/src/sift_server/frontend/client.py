"""The front-end's side of the hand-off: :class:`RemoteEngine` stands where a model's
``ModelEngine`` stands in ``sift serve`` (``service/run.run_task`` submits to it and awaits
the ticket's future), and its ingress board reports to the engine process's.

Every message of a loop turn leaves in one frame (``channel``); a request costs its
``Submit`` (which carries the end of its ingress) and its ``Answer``, plus a ``Begin``
when its headers arrive."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sift_server.engine.ingress import IngressBoard, IngressTicket
from sift_server.engine.model_engine import ModelEngine, RequestTiming, Ticket
from sift_server.engine.policy import Policy
from sift_server.errors import ShuttingDown, SiftError
from sift_server.forward_io import Part, Prepared
from sift_server.frontend.channel import Channel
from sift_server.frontend.protocol import (
    Answer,
    Ask,
    Begin,
    Cancel,
    End,
    Failure,
    Reply,
    Submit,
    pack_compat,
    pack_payload,
)

log = logging.getLogger(__name__)

# Request counts (metrics) reach the engine process with the next frame, or within this.
LAZY_S = 0.25


class EngineLink:
    """This front-end's connection to the engine process: requests in flight by key,
    questions awaiting their reply."""

    def __init__(self, on_lost: Callable[[], None] = lambda: None) -> None:
        self.channel: Channel | None = None
        self._keys = itertools.count()
        self._idents = itertools.count()
        self.pending: dict[int, tuple[asyncio.Future[list[Any]], RequestTiming, str]] = {}
        self._asks: dict[int, asyncio.Future[Any]] = {}
        self._on_lost = on_lost
        self.lost = False

    async def connect(self, sock: Any) -> None:
        self.channel = await Channel.over(sock, self.on_messages, self.on_lost)

    def send(self, message: Any) -> None:
        assert self.channel is not None
        self.channel.send(message)

    def send_later(self, message: Any) -> None:
        """``message`` with the next frame, or within ``LAZY_S`` (request counts)."""
        assert self.channel is not None
        self.channel.send_later(message, LAZY_S)

    def next_ident(self) -> int:
        return next(self._idents)

    def in_flight(self, model: str) -> int:
        return sum(1 for _, _, name in self.pending.values() if name == model)

    # ---- requests --------------------------------------------------------

    def submit(
        self, model: str, prepared: Prepared, request_id: str, lane: str | None, ingress: IngressTicket | None
    ) -> Ticket:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        future: asyncio.Future[list[Any]] = loop.create_future()
        ident = -1
        if isinstance(ingress, RemoteIngressTicket) and ingress.open:
            ingress.open = False  # the engine ends it when it admits the request
            ident = ingress.ident
        elif ingress is not None:
            ingress.end()
        if self.lost:
            future.set_exception(ShuttingDown("The server is shutting down and admits no new work."))
            return Ticket(request_id, prepared, future, now, now)
        key = next(self._keys)
        timing = RequestTiming()
        self.pending[key] = (future, timing, model)
        self.send(
            Submit(
                key,
                model,
                request_id,
                prepared.item_costs,
                pack_compat(prepared.compat_key),
                pack_payload(prepared.payload),
                prepared.input_tokens,
                lane,
                ident,
            )
        )
        future.add_done_callback(lambda done: self._settled(key, done))
        return Ticket(request_id, prepared, future, now, now, timing=timing)

    def _settled(self, key: int, future: asyncio.Future[list[Any]]) -> None:
        if future.cancelled() and self.pending.pop(key, None) is not None and not self.lost:
            self.send(Cancel(key))  # the client disconnected: the engine drops it

    def send_want(self, model: str) -> None:
        """Ask the engine process to load ``model`` (its reply is not awaited)."""
        key = next(self._keys)
        self.send(Ask(key, "want", model))

    async def ask(self, what: str, model: str = "") -> Any:
        """The engine process's reply to ``what`` (``Ask``); a refusal is raised."""
        if self.lost:
            raise ShuttingDown("The server is shutting down.")
        key = next(self._keys)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._asks[key] = future
        self.send(Ask(key, what, model))
        value = await future
        if isinstance(value, SiftError):
            raise value
        return value

    # ---- from the engine process ----------------------------------------

    def on_messages(self, messages: list[Any]) -> None:
        for message in messages:
            kind = type(message)
            if kind is Answer:
                entry = self.pending.pop(message.key, None)
                if entry is not None and not entry[0].done():
                    entry[1].queue_s, entry[1].inference_s = message.queue_s, message.inference_s
                    entry[0].set_result(message.outputs)
            elif kind is Failure:
                entry = self.pending.pop(message.key, None)
                if entry is not None and not entry[0].done():
                    entry[0].set_exception(message.error)
            elif kind is Reply:
                asked = self._asks.pop(message.key, None)
                if asked is not None and not asked.done():
                    asked.set_result(message.value)

    def on_lost(self) -> None:
        """The engine process is gone: what waits on it fails; the front-end exits (``on_lost``)."""
        self.lost = True
        gone = ShuttingDown("The server's engine process stopped; the request was not answered.")
        for future, _, _ in self.pending.values():
            if not future.done():
                future.set_exception(gone)
        for asked in self._asks.values():
            if not asked.done():
                asked.set_exception(gone)
        self.pending.clear()
        self._asks.clear()
        log.error("the engine process's connection closed")
        self._on_lost()


@dataclass(slots=True)
class RemoteIngressTicket(IngressTicket):
    """A request of this front-end between its headers and its submit, counted in the engine."""

    ident: int = -1
    link: EngineLink | None = None

    def end(self) -> None:
        if self.open:
            self.open = False
            if self.link is not None and not self.link.lost:
                self.link.send(End(self.ident))


class RemoteIngressBoard(IngressBoard):
    """The model's ingress board in the engine process, reached over the link."""

    def __init__(self, link: EngineLink, model: str) -> None:
        super().__init__(_NoSink())
        self.link = link
        self.model = model

    def begin(self, now: float) -> IngressTicket:
        ident = self.link.next_ident()
        if not self.link.lost:
            self.link.send(Begin(ident, self.model, now))
        return RemoteIngressTicket(now, self, ident=ident, link=self.link)


class _NoSink:
    def header_arrived(self, now: float) -> None:
        pass

    def ingress_ended(self) -> None:
        pass


def _no_forward(parts: Any) -> list[list[Any]]:
    raise RuntimeError("a front-end runs no forward; the engine process does")


class RemoteEngine(ModelEngine):
    """A model's engine as a front-end sees it: ``submit`` hands the prepared request to
    the engine process; its ticket's future resolves with the outputs (or the error)
    the engine's own ticket got there."""

    def __init__(self, model: str, link: EngineLink, policy: Policy) -> None:
        super().__init__(model, _no_forward, policy)
        self.link = link
        self.ingress = RemoteIngressBoard(link, model)

    @property
    def has_work(self) -> bool:
        return self.link.in_flight(self.model) > 0

    def submit(
        self,
        prepared: Prepared,
        *,
        request_id: str,
        lane: str | None = None,
        ingress: IngressTicket | None = None,
    ) -> Ticket:
        return self.link.submit(self.model, prepared, request_id, lane, ingress)

    async def close(self, grace_s: float, error: SiftError | None = None) -> None:
        """Let this front-end's requests to the model finish (the engine process answers
        them) within ``grace_s``."""
        waiting = [future for future, _, name in list(self.link.pending.values()) if name == self.model]
        if waiting:
            await asyncio.wait(waiting, timeout=grace_s)

    async def forward_finished(self) -> None:
        return None


__all__ = ["EngineLink", "Part", "RemoteEngine", "RemoteIngressBoard", "RemoteIngressTicket"]
