"""``sift worker``: load models as ``sift serve`` does and serve their work
queues. Each message runs through the serving core's one entry
(``core.serve.handle``: decoding, validation, services, error envelopes) and
the same batching engine as an HTTP request; its typed errors decide whether a
message is answered, handed back (nak) or dropped (terminate).

Arrival signals come from the stream: a message opens its model's ingress
ticket the moment it is delivered, before it is decoded, and admission ends
it, so a lone message dispatches at once and a burst delivered together is
admitted together and fuses. The worker keeps one single-message pull request
standing per free slot, so the server pushes each message as soon as it is
published (no polling, no waiting for a full batch) to a worker with room.

Reply first, then acknowledge. A message not acknowledged (the worker died)
is redelivered after the consumer's ack wait (3 s by default); while a message
is held (queued or running), the worker tells the server every second that it
is still in progress, from a thread of its own (cluster.keepalive) that also
puts the heartbeats. A message whose deadline passed is not run.

A streamed answer (a generation with ``stream: true``) is published on the
reply subject piece by piece as it is made (cluster.streams): its head, each
chunk with its sequence number, its end; the keepalive thread ticks it, and a
cancel message from the gateway (its client went away) stops the run as a
disconnecting client stops it on ``sift serve``. The message is acknowledged
once the end is published.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import signal
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from sift_server.api.models import model_info
from sift_server.cluster.codec import WorkReply, pack_reply, unpack_request
from sift_server.cluster.heartbeat import worker_view
from sift_server.cluster.hops import PUBLISHED_HEADER, STAMPS, format_stamps, worker_headers
from sift_server.cluster.jetstream import ensure_consumer, ensure_stream, heartbeat_bucket
from sift_server.cluster.keepalive import Keepalive
from sift_server.cluster.streams import (
    CANCEL_HEADER,
    CANCEL_PREFIX,
    END_HEADER,
    ENDED_DONE,
    ENDED_FAILED,
    RUN_HEADER,
    SEQ_HEADER,
    TICK_HEADER,
    cancel_subject,
)
from sift_server.cluster.subjects import (
    DEADLINE_HEADER,
    RECONNECT_WAIT_S,
    REPLY_HEADER,
    WORKER_HEADER,
    heartbeat_key,
    pull_request,
)
from sift_server.composition import build_state
from sift_server.core.endpoints import route
from sift_server.core.serve import Call, Reply, error_reply, handle
from sift_server.core.state import ServerState
from sift_server.engine.ingress import IngressTicket
from sift_server.engine.model_engine import ModelEngine
from sift_server.errors import RequestCancelled, RouteNotFound, ShuttingDown, SiftError
from sift_server.server import arm_exit_watchdog, hard_exit
from sift_server.telemetry import propagation
from sift_server.wire.split import Buffer

log = logging.getLogger(__name__)

_NO_MESSAGES = {"404", "408", "409"}
# Messages one model may hold at most by default (delivered, not yet acknowledged).
DEFAULT_MAX_INFLIGHT = 64


def holding_limit(explicit: int | None, batch_requests: int | None) -> int:
    """Messages a worker takes for one model at once: the operator's limit, else two
    forwards' worth (the one running and the next), at most DEFAULT_MAX_INFLIGHT.
    More would take messages off the stream that another worker with room could run
    now, and scale-out suffers (docs/benchmarks/scaleout.md has the runs)."""
    if explicit is not None:
        return explicit
    if batch_requests is None:
        return DEFAULT_MAX_INFLIGHT
    return max(1, min(DEFAULT_MAX_INFLIGHT, 2 * batch_requests))


@dataclass(slots=True)
class WorkerOptions:
    nats_url: str = "nats://127.0.0.1:4222"
    # Messages one model may hold at once (None: ``holding_limit``'s default).
    max_inflight: int | None = None
    ack_wait_s: float = 3.0
    # Tell the server a held message is still in progress this often (0: never).
    progress_interval_s: float = 1.0
    heartbeat_s: float = 2.0
    heartbeat_ttl_s: float = 6.0
    # A standing pull request expires after this and is renewed.
    pull_expires_s: float = 5.0
    worker_id: str = ""
    # Add the hop's timestamps to each reply (X-Sift-Stamps; the hop_stamps setting).
    hop_stamps: bool = False


class Hangup:
    """When nobody waits for a request's answer any more: a whole answer, once its
    deadline passed; a streamed one (which runs as long as it is read), once the
    gateway cancels it (its client went away, cluster.streams)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.streaming = False
        self.cancelled = asyncio.Event()

    async def wait(self) -> None:
        if self.streaming:
            await self.cancelled.wait()
        else:
            await asyncio.sleep(max(0.0, self.deadline - time.time()))


async def run_core(
    state: ServerState,
    path: str,
    headers: list[tuple[str, str]],
    body: Buffer,
    *,
    ingress: IngressTicket | None,
    hangup: Hangup,
) -> Reply:
    """One queued request through the serving core (``core.serve.handle``), the
    same entry ``sift serve``'s routes call; its answer whole or streamed.
    Domain errors stay raised (the caller decides ack, nak or terminate)."""
    target = route(path)
    if target is None:
        return error_reply(state, None, RouteNotFound(f"No route {path} on a worker."))
    endpoint, model = target
    lowered = {k.lower(): v for k, v in headers}
    call = Call(endpoint, model, lowered, body, ingress=ingress, disconnected=hangup.wait)
    with propagation.message_span(f"POST {path}", lowered, **{"sift.model": model}):
        try:
            return await handle(state, call)
        except (RequestCancelled, ShuttingDown):
            raise
        except SiftError as error:
            return error_reply(state, endpoint, error)


async def call_core(
    state: ServerState,
    path: str,
    headers: list[tuple[str, str]],
    body: Buffer,
    *,
    ingress: IngressTicket | None,
    deadline: float,
) -> WorkReply:
    """``run_core`` with its answer whole (a streamed one joined); nobody waits past its deadline."""
    return await _work_reply(await run_core(state, path, headers, body, ingress=ingress, hangup=Hangup(deadline)))


def _reply_headers(reply: Reply) -> list[tuple[str, str]]:
    headers = [(name.lower(), value) for name, value in reply.headers.items()]
    headers.append(("content-type", reply.media_type))
    return headers


async def _work_reply(reply: Reply) -> WorkReply:
    """The reply as an HTTP answer's header list, names in lower case; a streamed
    body is joined (the reply is one message)."""
    body = reply.body if isinstance(reply.body, bytes) else b"".join([chunk async for chunk in reply.body])
    return WorkReply(reply.status, _reply_headers(reply), body)


class ModelPuller:
    """One model's share of the work queue on this worker."""

    def __init__(self, owner: StreamWorker, model: str, durable: str) -> None:
        self.owner = owner
        self.model = model
        self.durable = durable
        self.inflight: dict[int, Msg] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._ids = 0
        # Issue times of this puller's pull requests still standing (one message each).
        self._outstanding: collections.deque[float] = collections.deque()
        self._wanted = asyncio.Event()
        self._inbox = ""
        self._loop_task: asyncio.Task[None] | None = None
        self.stopping = False

    @property
    def engine(self) -> ModelEngine | None:
        record = self.owner.state.registry.records.get(self.model)
        return record.engine if record is not None else None

    def holding_limit(self) -> int:
        engine = self.engine
        batch = engine.scheduler.config.caps.max_requests if engine is not None else None
        return holding_limit(self.owner.options.max_inflight, batch)

    async def start(self) -> None:
        nc = self.owner.nc
        assert nc is not None
        self._inbox = nc.new_inbox()
        await nc.subscribe(self._inbox, cb=self._on_message)
        self._loop_task = asyncio.ensure_future(self._pull_loop())

    async def _pull_loop(self) -> None:
        """Keep one single-message pull request standing per free slot. The
        server hands each message to a waiting request at once; a worker asks
        again as soon as a slot frees, so work goes to workers with room (one
        large request per worker was seen to starve behind others' requests)."""
        nc = self.owner.nc
        assert nc is not None
        options = self.owner.options
        subject, request = pull_request(self.durable, options.pull_expires_s)
        while not self.stopping:
            if not nc.is_connected:
                # A pull request sent now would be stale by the reconnect, which starts afresh.
                await asyncio.sleep(RECONNECT_WAIT_S)
                continue
            # Requests the server answered neither with a message nor a status are gone by now.
            horizon = time.monotonic() - options.pull_expires_s - 1.0
            while self._outstanding and self._outstanding[0] < horizon:
                self._outstanding.popleft()
            want = self.holding_limit() - len(self.inflight) - len(self._outstanding)
            if want <= 0:
                self._wanted.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wanted.wait(), options.pull_expires_s)
                continue
            try:
                for _ in range(want):
                    self._outstanding.append(time.monotonic())
                    await nc.publish(subject, request, reply=self._inbox)
            except Exception as exc:
                log.warning("pull request failed: %r", exc)
                await asyncio.sleep(0.5)

    def reconnected(self) -> None:
        """The connection came back: the server forgot the pull requests standing
        before the break (a restarted one), so they are all sent again now."""
        self._outstanding.clear()
        self._wanted.set()

    def _answered(self) -> None:
        """One pull request ended (a message, or expired / no messages)."""
        if self._outstanding:
            self._outstanding.popleft()

    async def _on_message(self, msg: Msg) -> None:
        status = msg.headers.get("Status") if msg.headers else None
        if status is not None and not msg.data:
            if status in _NO_MESSAGES:
                self._answered()
                self._wanted.set()
            return  # 100: idle heartbeat
        arrived = time.perf_counter()
        delivered = time.time()
        self._answered()
        if self.stopping:
            # Draining: hand it straight back to the other workers.
            await msg.nak()
            return
        engine = self.engine
        # Delivered, not decoded yet: this is the request's ingress.
        ticket = engine.ingress.begin(arrived) if engine is not None else None
        self._ids += 1
        key = self._ids
        self.inflight[key] = msg
        self.owner.keepalive_hold(msg.reply)
        task = asyncio.ensure_future(self._handle(key, msg, ticket, delivered, arrived))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _handle(self, key: int, msg: Msg, ticket: IngressTicket | None, delivered: float, arrived: float) -> None:
        try:
            headers = msg.headers or {}
            deadline = float(headers.get(DEADLINE_HEADER, "inf"))
            if time.time() >= deadline:
                # Nobody waits for this answer any more: do not run it.
                if ticket is not None:
                    ticket.end()
                await msg.term()
                return
            work = unpack_request(msg.data)
            app_start = time.perf_counter()
            hangup = Hangup(deadline)
            try:
                answer = await run_core(
                    self.owner.state, work.path, work.headers, work.body, ingress=ticket, hangup=hangup
                )
            except RequestCancelled:
                await msg.term()  # its deadline passed while queued
                return
            except ShuttingDown:
                await msg.nak()  # this worker is stopping: another one runs it now
                return
            finally:
                if ticket is not None:
                    ticket.end()  # refused before admission (bad input...): no longer incoming
            reply_to = headers.get(REPLY_HEADER)
            if not isinstance(answer.body, bytes):
                await self._stream(answer, reply_to, hangup, headers.get(PUBLISHED_HEADER), delivered)
                await msg.ack()
                return
            reply = await _work_reply(answer)
            app_end = time.perf_counter()
            reply.headers.append((WORKER_HEADER, self.owner.worker_id))
            reply.headers.extend(worker_headers(headers.get(PUBLISHED_HEADER), delivered, time.time()))
            if self.owner.stamps:
                stamps = [("w_receive", arrived), ("w_app", app_start), ("w_app_end", app_end)]
                reply.headers.append((STAMPS, format_stamps([*stamps, ("w_reply", time.perf_counter())])))
            if reply_to and self.owner.nc is not None:
                await self.owner.nc.publish(reply_to, pack_reply(reply))
            await msg.ack()
        except Exception:
            log.exception("message of model %s failed; left for redelivery", self.model)
            if ticket is not None:
                ticket.end()
        finally:
            self.inflight.pop(key, None)
            self.owner.keepalive_release(msg.reply)
            self._wanted.set()

    async def _stream(
        self, answer: Reply, reply_to: str | None, hangup: Hangup, published: str | None, delivered: float
    ) -> None:
        """A streamed answer on the reply subject: head, chunks, end (cluster.streams).
        A cancel message from the gateway, or nobody to send to, stops the run."""
        body = answer.body
        assert not isinstance(body, bytes)
        nc = self.owner.nc
        hangup.streaming = True
        if not reply_to or nc is None:
            hangup.cancelled.set()
        run = self.owner.new_run(hangup)
        marks = {RUN_HEADER: run}
        ended = ENDED_DONE
        try:
            if nc is None or not reply_to:
                return
            head = WorkReply(answer.status, _reply_headers(answer), b"")
            head.headers.append((WORKER_HEADER, self.owner.worker_id))
            head.headers.extend(worker_headers(published, delivered, time.time()))
            await nc.publish(
                reply_to, pack_reply(head), headers={**marks, SEQ_HEADER: "0", CANCEL_HEADER: cancel_subject(run)}
            )
            self.owner.keepalive_tick(reply_to, {**marks, TICK_HEADER: "1", CANCEL_HEADER: cancel_subject(run)})
            seq = 0
            try:
                async for chunk in body:
                    if chunk:
                        seq += 1
                        await nc.publish(reply_to, bytes(chunk), headers={**marks, SEQ_HEADER: str(seq)})
            except Exception:
                log.exception("stream of model %s broke off", self.model)
                ended = ENDED_FAILED
            await nc.publish(reply_to, b"", headers={**marks, SEQ_HEADER: str(seq + 1), END_HEADER: ended})
        finally:
            self.owner.end_run(run)
            if reply_to:
                self.owner.keepalive_untick(reply_to)
            with contextlib.suppress(Exception):
                await body.aclose()  # type: ignore[attr-defined]

    async def drain(self, grace_s: float) -> None:
        """Take no new messages; finish (reply, ack) those held, within the grace period."""
        self.stopping = True
        self._wanted.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=grace_s)


class StreamWorker:
    def __init__(self, settings: Any, options: WorkerOptions, models: list[str]) -> None:
        self.settings = settings
        self.options = options
        self.models = models
        self.worker_id = options.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.state = build_state(settings)
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None
        self.kv: KeyValue | None = None
        self.pullers: list[ModelPuller] = []
        self.stamps = options.hop_stamps
        self.keepalive: Keepalive | None = None
        self._stop = asyncio.Event()
        self._rechecking: asyncio.Task[None] | None = None
        # Streams being sent, by run (cluster.streams): a cancel message sets the run's hangup.
        self._run_prefix = uuid.uuid4().hex
        self._runs = itertools.count(1)
        self.running: dict[str, Hangup] = {}

    async def run(self) -> None:
        for name in self.models:
            await self.state.registry.load_now(name)
        self.state.ready = True
        self.nc = await nats.connect(
            self.options.nats_url.split(","),
            name=f"sift-worker-{self.worker_id}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=RECONNECT_WAIT_S,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
            error_cb=self._on_error,
        )
        self.js = self.nc.jetstream()
        await ensure_stream(self.js, None)
        self.kv = await heartbeat_bucket(self.js, self.options.heartbeat_ttl_s)
        self.keepalive = Keepalive(
            self.options.nats_url,
            f"sift-worker-{self.worker_id}",
            self._beats(),
            self.options.heartbeat_s,
            self.options.progress_interval_s,
        )
        await asyncio.to_thread(self.keepalive.start)
        await self.nc.subscribe(f"{CANCEL_PREFIX}.{self._run_prefix}.*", cb=self._on_cancel)
        for name in self.models:
            durable = await ensure_consumer(self.js, name, self.options.ack_wait_s)
            puller = ModelPuller(self, name, durable)
            await puller.start()
            self.pullers.append(puller)
        log.info("worker %s ready: %s", self.worker_id, ", ".join(self.models))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal)
        await self._stop.wait()
        await self._drain(self.settings.shutdown_grace_s)

    async def _drain(self, grace: float) -> None:
        """Within ``grace`` in all: no new messages, finish (reply, ack) those held,
        close the models; what is unfinished then is redelivered to other workers."""
        ends = time.monotonic() + grace
        log.info("worker %s draining (grace %.1fs)", self.worker_id, grace)
        assert self.keepalive is not None
        await asyncio.to_thread(self.keepalive.quiet)
        await asyncio.gather(*(p.drain(max(0.0, ends - time.monotonic())) for p in self.pullers))
        self.state.draining = True
        await self.state.close(max(0.0, ends - time.monotonic()))
        await asyncio.to_thread(self.keepalive.stop)
        if self.nc is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(max(0.1, ends - time.monotonic())):
                    await self.nc.drain()
        log.info("worker %s stopped", self.worker_id)

    async def _on_error(self, exc: Exception) -> None:
        # Each failed attempt to reconnect reports here: the break itself is logged once.
        reconnecting = self.nc is not None and self.nc.is_reconnecting
        log.log(logging.DEBUG if reconnecting else logging.WARNING, "NATS: %r", exc)

    async def _on_disconnected(self) -> None:
        if self.nc is not None and (self.nc.is_closed or self.nc.is_draining):
            return  # our own drain
        log.warning("worker %s: NATS connection lost; reconnecting", self.worker_id)

    async def _on_reconnected(self) -> None:
        """Pull again at once, and make sure the stream, consumers and heartbeat bucket exist (a server
        that lost its store starts empty). Replies and acks sent during the break
        were buffered by the client and went out with the reconnect."""
        log.warning("worker %s: NATS connection back", self.worker_id)
        self._rechecking = asyncio.ensure_future(self._pull_again())

    async def _pull_again(self) -> None:
        """Once the consumers exist (a pull request to a missing one goes nowhere and
        would hold its slot until it expires), pull afresh."""
        await self._ensure_consumers()
        for puller in self.pullers:
            puller.reconnected()

    async def _ensure_consumers(self) -> None:
        if self.js is None:
            return
        try:
            await ensure_stream(self.js, None)
            await heartbeat_bucket(self.js, self.options.heartbeat_ttl_s)
            for puller in self.pullers:
                await ensure_consumer(self.js, puller.model, self.options.ack_wait_s)
        except Exception as exc:
            log.warning("could not check the consumers after the reconnect: %r", exc)

    def _on_signal(self) -> None:
        if self._stop.is_set():
            hard_exit("second signal")
        # Whatever still runs when the grace period is over, the process leaves.
        arm_exit_watchdog(self.settings.shutdown_grace_s)
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()

    def new_run(self, hangup: Hangup) -> str:
        """A name for one run of a streamed answer; its cancel message sets ``hangup``."""
        run = f"{self._run_prefix}.{next(self._runs)}"
        self.running[run] = hangup
        return run

    def end_run(self, run: str) -> None:
        self.running.pop(run, None)

    async def _on_cancel(self, msg: Msg) -> None:
        hangup = self.running.get(msg.subject[len(CANCEL_PREFIX) + 1 :])
        if hangup is not None:
            hangup.cancelled.set()

    def keepalive_tick(self, reply_subject: str, headers: dict[str, str]) -> None:
        if self.keepalive is not None:
            self.keepalive.tick(reply_subject, headers)

    def keepalive_untick(self, reply_subject: str) -> None:
        if self.keepalive is not None:
            self.keepalive.untick(reply_subject)

    def keepalive_hold(self, ack_subject: str | None) -> None:
        if ack_subject and self.keepalive is not None:
            self.keepalive.hold(ack_subject)

    def keepalive_release(self, ack_subject: str | None) -> None:
        if ack_subject and self.keepalive is not None:
            self.keepalive.release(ack_subject)

    def _beats(self) -> dict[str, dict[str, Any]]:
        """Each served model's heartbeat (its key and value, less the time of the put)."""
        beats: dict[str, dict[str, Any]] = {}
        for name in self.models:
            record = self.state.registry.records.get(name)
            described = model_info(record, self.state.runtime_instance) if record is not None else {}
            beats[heartbeat_key(name, self.worker_id)] = {
                "worker": self.worker_id,
                "pid": os.getpid(),
                "model": worker_view(described),
            }
        return beats


def served_models(settings: Any) -> list[str]:
    """The models a worker loads and pulls for: the default one, then the preloads."""
    return list(dict.fromkeys([settings.default_model, *settings.preload]))


def run_worker(settings: Any, options: WorkerOptions) -> None:
    from sift_server.server import configure_logging, exit_after_drain, run_event_loop, tune_collector

    configure_logging(settings)
    tune_collector()
    worker = StreamWorker(settings, options, served_models(settings))
    run_event_loop(worker.run())
    if worker.state.draining:
        exit_after_drain()
