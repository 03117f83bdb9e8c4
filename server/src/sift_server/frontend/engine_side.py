"""The engine process's side of the hand-off: the registry and every model's
``ModelEngine``, unchanged, fed by the front-ends' messages.

Per front-end a :class:`Session` keeps what that front-end holds open here (its requests'
tickets, the ingress of its requests still being read), so that a front-end that goes away
leaves nothing behind: its queued requests are cancelled and its ingress ended."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from prometheus_client import generate_latest

from sift_server.api.models import describe_local
from sift_server.core.state import ServerState
from sift_server.engine.ingress import IngressTicket
from sift_server.engine.model_engine import Ticket
from sift_server.errors import InferenceError, SiftError
from sift_server.forward_io import Prepared
from sift_server.frontend.channel import Channel
from sift_server.frontend.protocol import (
    Answer,
    Ask,
    Begin,
    Cancel,
    Count,
    End,
    Failure,
    Pickled,
    Reply,
    Submit,
    pack_outputs,
)

log = logging.getLogger(__name__)


def _sendable(error: BaseException) -> SiftError:
    """What a front-end is told: the domain error, or an internal one for anything else."""
    if isinstance(error, SiftError):
        return error
    log.error("front-end request failed in the engine process: %r", error)
    return InferenceError("Internal error in the engine process.")


class EngineServer:
    """Loads the default model and the preloads, then serves the front-ends' requests."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.ready = asyncio.Event()
        self.sessions: list[Session] = []

    async def load_models(self) -> None:
        settings = self.state.settings
        for name in dict.fromkeys([settings.default_model, *settings.preload]):
            await self.state.registry.load_now(name)
        self.state.ready = True
        self.ready.set()
        log.info("engine process ready: serving %s", settings.default_model)

    def metrics_text(self) -> bytes:
        """The Prometheus text of the server: the engines' and, counted here, every front-end's requests."""
        metrics = self.state.metrics
        for name, record in self.state.registry.records.items():
            if record.engine is not None:
                metrics.queue_depth.labels(name).set(record.engine.queued_items)
        return generate_latest(metrics.registry)

    async def attach(self, sock: socket.socket) -> Session:
        session = Session(self)
        session.channel = await Channel.over(sock, session.on_messages, session.on_lost)
        self.sessions.append(session)
        return session


class Session:
    """One front-end's connection."""

    def __init__(self, server: EngineServer) -> None:
        self.server = server
        self.registry = server.state.registry
        self.channel: Channel | None = None
        self.tickets: dict[int, Ticket] = {}
        self.ingress: dict[int, IngressTicket] = {}
        self.lost = False
        self.asking: set[asyncio.Future[None]] = set()

    def _send(self, message: Any) -> None:
        assert self.channel is not None
        self.channel.send(message)

    def on_messages(self, messages: list[Any]) -> None:
        for message in messages:
            kind = type(message)
            if kind is Submit:
                self._submit(message)
            elif kind is Begin:
                ticket = self.registry.begin_ingress(message.model, message.at)
                if ticket is not None:
                    self.ingress[message.ident] = ticket
            elif kind is End:
                ended = self.ingress.pop(message.ident, None)
                if ended is not None:
                    ended.end()
            elif kind is Cancel:
                cancelled = self.tickets.pop(message.key, None)
                if cancelled is not None:
                    cancelled.future.cancel()
            elif kind is Count:
                self.server.state.metrics.count(message.model, message.endpoint, message.status, message.seconds)
            elif kind is Ask:
                task = asyncio.ensure_future(self._answer(message))
                self.asking.add(task)
                task.add_done_callback(self.asking.discard)

    def _submit(self, message: Submit) -> None:
        ingress = self.ingress.pop(message.ingress, None) if message.ingress >= 0 else None
        try:
            _, engine = self.registry.ready_engine(message.model)
            prepared = Prepared(message.costs, message.compat, message.payload, message.tokens, message.lane)
            ticket = engine.submit(prepared, request_id=message.request_id, lane=message.lane, ingress=ingress)
        except Exception as error:  # refused at admission: the front-end's request fails with it
            if ingress is not None:
                ingress.end()
            self._send(Failure(message.key, Pickled(_sendable(error))))
            return
        key = message.key
        self.tickets[key] = ticket
        ticket.future.add_done_callback(lambda future: self._done(key, ticket, future))

    def _done(self, key: int, ticket: Ticket, future: asyncio.Future[list[Any]]) -> None:
        self.tickets.pop(key, None)
        if future.cancelled() or self.lost:
            return  # the front-end cancelled it, or is gone
        error = future.exception()
        if error is not None:
            self._send(Failure(key, Pickled(_sendable(error))))
            return
        timing = ticket.timing
        self._send(Answer(key, pack_outputs(future.result()), timing.queue_s, timing.inference_s))

    async def _answer(self, ask: Ask) -> None:
        value: Any = None
        try:
            if ask.what == "ready":
                await self.server.ready.wait()
            elif ask.what == "describe":
                value = Pickled(await describe_local(self.server.state, ask.model))
            elif ask.what == "want":
                self.registry.ready_engine(ask.model)
            elif ask.what == "metrics":
                value = self.server.metrics_text()
        except SiftError as error:
            value = Pickled(error)
        if not self.lost:
            self._send(Reply(ask.key, value))

    def on_lost(self) -> None:
        """The front-end is gone: cancel its requests, end its ingress."""
        self.lost = True
        for ticket in self.tickets.values():
            ticket.future.cancel()
        self.tickets.clear()
        for ingress in self.ingress.values():
            ingress.end()
        self.ingress.clear()
        if self in self.server.sessions:
            self.server.sessions.remove(self)
        log.warning("a front-end's connection to the engine process closed")
