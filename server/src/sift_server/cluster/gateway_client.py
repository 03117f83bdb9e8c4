"""The gateway's NATS side: publish a request to its model's work queue, await
the reply a worker publishes on this gateway's inbox, and know which models
have a live worker (cluster.liveness).

A request for a catalog model is published whether or not a worker serves the
model now: it waits in the stream (the gateway holds it up to
``request_timeout_s``) while a worker starts, and the model's consumer, which the
gateway creates at start for every catalog model, shows the backlog an
autoscaler wakes a pool on (cluster.backlog). Only unknown models are refused
(by the caller, before anything is published).

Exactly one answer per request: replies are matched by request id and later
ones are dropped. The stream's publish ack is not awaited before the reply: it
arrives on this gateway's ack subject while the worker runs the request, and
only a refusal (the stream is full), a missing stream or no ack within
``publish_timeout_s`` fails the request (503 QUEUE_FULL), unless its reply came
first.

A streamed answer (cluster.streams) resolves the request with its head as a
``ReplyStream``, whose chunks are relayed as they come, in order: a missing
piece, another run of the request (its message was redelivered: the queue took
its worker for dead), a silent worker, a break in the connection or the
gateway's drain ends it with the answer's error event, never a silent cut; a
client that goes away, or a stream nobody waits for, is cancelled on its worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from prometheus_client import Counter

from sift_server.cluster.backlog import BACKLOG_POLL_S, BacklogWatch
from sift_server.cluster.codec import WorkReply, WorkRequest, pack_request, unpack_reply
from sift_server.cluster.hops import PUBLISHED_HEADER, stamp
from sift_server.cluster.jetstream import ensure_consumers_exist, ensure_stream, heartbeat_bucket
from sift_server.cluster.liveness import Heartbeats, consumer_has_worker
from sift_server.cluster.resume import Resume, after_reconnect, republished_id
from sift_server.cluster.streams import (
    CANCEL_HEADER,
    END_HEADER,
    RUN_HEADER,
    SEQ_HEADER,
    TICK_S,
    StreamOrder,
    Verdict,
)
from sift_server.cluster.subjects import (
    ACK_PREFIX,
    DEADLINE_HEADER,
    MSG_ID_HEADER,
    RECONNECT_WAIT_S,
    REPLY_HEADER,
    REPLY_PREFIX,
    STREAM,
    StreamLimits,
    ack_subject,
    durable_name,
    model_token,
    reply_subject,
    work_subject,
)
from sift_server.core.serve import new_request_id
from sift_server.core.state import ServerState
from sift_server.errors import BodyTooLarge, InferenceError, QueueFull, QueueTimeout, ShuttingDown, SiftError
from sift_server.generation import answers

log = logging.getLogger(__name__)

# At a drain, the requests still waiting are answered this long before the grace period ends.
DRAIN_ANSWER_S = 0.1
# After a reconnect, how long a reply already under way is given before its request is published again.
REPLY_SETTLE_S = 0.1


# Retry-After of a request that waited its whole timeout: soon when a worker serves the
# model (the queue moves, only slower than this request needed), later when none does
# (a pool waking from zero: a worker's start and load take seconds).
RETRY_BUSY_S, RETRY_WAKING_S = 1, 5


def held_too_long(model: str, timeout_s: float, worker_live: bool) -> QueueTimeout:
    """The 503 for a request no worker answered within its timeout."""
    if worker_live:
        error = QueueTimeout(f"Model '{model}': no worker answered within {timeout_s:g} s; retry shortly.")
        error.retry_after = RETRY_BUSY_S
    else:
        error = QueueTimeout(
            f"Model '{model}': no worker served it within {timeout_s:g} s (none is running; "
            "the request waited in the queue for one to start); retry later."
        )
        error.retry_after = RETRY_WAKING_S
    return error


@dataclass(slots=True)
class GatewayOptions:
    nats_url: str = "nats://127.0.0.1:4222"
    limits: StreamLimits = field(default_factory=StreamLimits)
    # The longest a request waits for its reply (also its deadline on the worker).
    request_timeout_s: float = 60.0
    publish_timeout_s: float = 5.0
    heartbeat_ttl_s: float = 6.0
    # How long a model's consumer state is reused before it is asked again.
    liveness_poll_s: float = 0.5
    # Add the hop's timestamps to each reply (X-Sift-Stamps; the hop_stamps setting).
    hop_stamps: bool = False
    # How often each catalog model's backlog is read for /metrics.
    backlog_poll_s: float = BACKLOG_POLL_S


@dataclass(slots=True)
class Waiting:
    """A request waiting for its reply; ``stamps``: its hop stamps (the hop_stamps setting)."""

    future: asyncio.Future[WorkReply | ReplyStream]
    model: str
    # How to publish it again after a break in the connection (cluster.resume).
    subject: str
    payload: bytes
    headers: dict[str, str]
    # The connection it was published on (Gateway.connection counts the breaks).
    connection: int
    stamps: list[tuple[str, float]] | None = None
    acked: bool = False  # the stream answered its publish
    seq: int | None = None  # where the stream stored it (from the stream's ack)
    republished: int = 0
    # Fails the request if the stream has not answered its publish in time.
    ack_timer: asyncio.TimerHandle | None = None


def stored_seq(msg: Msg) -> int | None:
    """The stream sequence of a stored publish, from the stream's ack (None: none)."""
    try:
        seq = json.loads(msg.data).get("seq")
    except (ValueError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


def ack_error(model: str, msg: Msg) -> SiftError | None:
    """What the stream's answer to a publish means for its request: None when it
    stored the message (or had it already: a duplicate id), else the 503 to answer."""
    status = msg.headers.get("Status") if msg.headers else None
    if status is not None and not msg.data:
        # 503: nothing listens on the subject (no stream); like nats-py's NoRespondersError.
        return QueueFull(f"The work queue is unavailable (status {status}); retry shortly.")
    if b'"error"' not in msg.data:
        return None  # {"stream": ..., "seq": ...}: stored
    try:
        described = json.loads(msg.data)["error"].get("description", "refused")
    except (ValueError, KeyError, AttributeError):
        described = "refused"
    return QueueFull(f"Model '{model}': the work queue is full ({described}); retry shortly.")


@dataclass(slots=True)
class Ended:
    """The end of a stream: complete, or broken off with ``error``."""

    error: SiftError | None = None


class ReplyStream:
    """A streamed answer's head and, as they come, its chunks (``body``)."""

    def __init__(self, gateway: Gateway, request_id: str, reply: WorkReply, run: str, cancel: str | None) -> None:
        self.gateway = gateway
        self.request_id = request_id
        self.status = reply.status
        self.headers = reply.headers
        self.media_type = next((v for k, v in reply.headers if k.lower() == "content-type"), "")
        self.answer_id = next((v for k, v in reply.headers if k.lower() == "x-request-id"), request_id)
        self.order = StreamOrder(run, time.monotonic())
        self.cancel_subject = cancel
        self.pieces: asyncio.Queue[bytes | Ended] = asyncio.Queue()
        self.ended = False

    def end(self, error: SiftError | None) -> None:
        """No more pieces: the stream is complete, or ``error`` ends it."""
        if not self.ended:
            self.ended = True
            self.pieces.put_nowait(Ended(error))

    def error_event(self, error: SiftError) -> bytes:
        """The answer's own error event: a generation's terminal error chunk and [DONE]."""
        return answers.sse(answers.error_chunk(error, self.answer_id)) + answers.DONE

    async def body(self, disconnected: Callable[[], Awaitable[Any]] | None) -> AsyncIterator[bytes]:
        """The chunks as they come, until the end; a client that goes away cancels the run."""
        gone = asyncio.ensure_future(disconnected()) if disconnected is not None else None
        complete = False
        try:
            while True:
                if gone is not None and gone.done():
                    return  # the client went away: cancelled below
                if self.pieces.empty():
                    following = asyncio.ensure_future(self.pieces.get())
                    waiting = {following} if gone is None else {following, gone}
                    await asyncio.wait(waiting, timeout=TICK_S, return_when=asyncio.FIRST_COMPLETED)
                    if not following.done():
                        following.cancel()
                        if self.order.silent(time.monotonic()):
                            self.gateway.end_stream(self.request_id, InferenceError(WORKER_SILENT))
                        continue
                    piece = following.result()
                else:
                    piece = self.pieces.get_nowait()  # already here: no task, no wait
                if isinstance(piece, Ended):
                    complete = piece.error is None
                    if piece.error is not None:
                        yield self.error_event(piece.error)
                    return
                yield piece
        finally:
            if gone is not None:
                gone.cancel()
            self.gateway.forget_stream(self.request_id, cancel=not complete)


WORKER_SILENT = "The worker generating this answer stopped answering; the answer is incomplete. Retry."
WORKER_REPLACED = "The worker generating this answer was taken for dead; the answer is incomplete. Retry."
PIECE_LOST = "Part of this answer was lost on its way from the worker; the answer is incomplete. Retry."
LINK_BROKEN = "The gateway's link to the queue broke during this answer; the answer is incomplete. Retry."
WORKER_FAILED = "The worker generating this answer failed; the answer is incomplete. Retry."


class Gateway:
    """The NATS side of the gateway: publish, await the reply, know live models."""

    def __init__(self, options: GatewayOptions, state: ServerState) -> None:
        self.options = options
        self.state = state
        self.gateway_id = uuid.uuid4().hex[:16]
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None
        self.kv: KeyValue | None = None
        self.pending: dict[str, Waiting] = {}
        # Streamed answers being relayed, by request id.
        self.streams: dict[str, ReplyStream] = {}
        self._cancelling: set[asyncio.Task[None]] = set()
        self.stamps = options.hop_stamps
        self.heartbeats = Heartbeats(options.heartbeat_ttl_s)
        # Per model: when its consumer was last asked, and whether it showed a worker.
        self._consumers: dict[str, tuple[float, bool]] = {}
        self._watcher: asyncio.Task[None] | None = None
        self.backlog = BacklogWatch(state.metrics.registry, options.backlog_poll_s)
        self._backlog_task: asyncio.Task[None] | None = None
        self.duplicates = Counter(
            "sift_gateway_duplicate_replies",
            "Replies dropped: their request was answered already",
            registry=state.metrics.registry,
        )
        self.refused = Counter(
            "sift_gateway_publish_refused",
            "Publishes refused by the work stream (full)",
            registry=state.metrics.registry,
        )
        self.republished = Counter(
            "sift_gateway_republished",
            "Requests published again after a break in the NATS connection (their reply may have been lost)",
            registry=state.metrics.registry,
        )
        # Counts the connection's breaks: a request remembers the one it was published on.
        self.connection = 0
        self._resuming: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.nc = await nats.connect(
            self.options.nats_url.split(","),
            name=f"sift-gateway-{self.gateway_id}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=RECONNECT_WAIT_S,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
            error_cb=self._on_error,
        )
        self.js = self.nc.jetstream()
        await ensure_stream(self.js, self.options.limits)
        models = self.state.registry.catalog.names()
        await ensure_consumers_exist(self.js, models)
        await self.backlog.refresh(self.js, models)
        self._backlog_task = asyncio.ensure_future(self.backlog.run(self.js, models))
        self.kv = await heartbeat_bucket(self.js, self.options.heartbeat_ttl_s)
        await self.nc.subscribe(f"{REPLY_PREFIX}.{self.gateway_id}.*", cb=self._on_reply)
        await self.nc.subscribe(f"{ACK_PREFIX}.{self.gateway_id}.*", cb=self._on_ack)
        synced = asyncio.Event()
        self._watcher = asyncio.ensure_future(self._watch_heartbeats(synced))
        with contextlib.suppress(TimeoutError):
            # The heartbeats already in the bucket, before the first request is judged.
            async with asyncio.timeout(self.options.publish_timeout_s):
                await synced.wait()

    async def _on_error(self, exc: Exception) -> None:
        # Each failed attempt to reconnect reports here: the break itself is logged once.
        reconnecting = self.nc is not None and self.nc.is_reconnecting
        log.log(logging.DEBUG if reconnecting else logging.WARNING, "NATS: %r", exc)

    async def _on_disconnected(self) -> None:
        self.connection += 1
        if self.nc is not None and (self.nc.is_closed or self.nc.is_draining):
            return  # our own stop
        log.warning("NATS connection lost; reconnecting (requests are held meanwhile)")

    async def _on_reconnected(self) -> None:
        log.warning("NATS connection back")
        # What the workers published to us meanwhile went to nobody: no stream can be whole.
        for request_id in list(self.streams):
            self.end_stream(request_id, InferenceError(LINK_BROKEN))
        if self._resuming is not None:
            self._resuming.cancel()  # a break during the last resume: this one looks at everything again
        self._resuming = asyncio.ensure_future(self._resume())

    async def _resume(self) -> None:
        """After a break: the stream and consumers are there again (a server that lost
        its store starts empty), the heartbeat watch restarts, the publishes waiting
        for their ack get a fresh ack timer, and each request published before the
        break whose message the stream no longer holds is published again
        (cluster.resume)."""
        assert self.js is not None
        connection = self.connection
        try:
            await ensure_stream(self.js, self.options.limits)
            await ensure_consumers_exist(self.js, self.state.registry.catalog.names())
            self.kv = await heartbeat_bucket(self.js, self.options.heartbeat_ttl_s)
        except Exception as exc:
            log.warning("could not check the stream after the reconnect: %r", exc)
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = asyncio.ensure_future(self._watch_heartbeats(asyncio.Event()))
        loop = asyncio.get_running_loop()
        again: list[tuple[str, Waiting]] = []
        for request_id, waiting in list(self.pending.items()):
            if waiting.future.done():
                continue
            if not waiting.acked:
                if waiting.ack_timer is not None:
                    waiting.ack_timer.cancel()
                waiting.ack_timer = loop.call_later(self.options.publish_timeout_s, self._ack_overdue, request_id)
            if waiting.connection >= connection:
                continue  # published since: its ack and reply come on this connection
            stored = await self._still_stored(request_id, waiting)
            if after_reconnect(stored, waiting.republished) is Resume.REPUBLISH:
                again.append((request_id, waiting))
        if again:
            # A reply already on its way (its worker acked just now) lands first.
            await asyncio.sleep(REPLY_SETTLE_S)
        for request_id, waiting in again:
            if not waiting.future.done():
                await self._republish(request_id, waiting)

    async def _still_stored(self, request_id: str, waiting: Waiting) -> bool | None:
        """Whether the stream holds the request's message (None: it cannot be asked now)."""
        if waiting.seq is None:
            return False  # no ack seen: stored or not, it is published again
        assert self.js is not None
        try:
            held = await self.js.get_msg(STREAM, waiting.seq)
        except NotFoundError:
            return False
        except Exception:
            return None
        # A stream recreated empty numbers its messages from 1 again: check it is ours.
        return str((held.headers or {}).get(MSG_ID_HEADER, "")).startswith(request_id)

    async def _republish(self, request_id: str, waiting: Waiting) -> None:
        assert self.nc is not None
        waiting.republished += 1
        waiting.acked, waiting.seq = False, None
        waiting.connection = self.connection
        headers = {**waiting.headers, MSG_ID_HEADER: republished_id(request_id, waiting.republished)}
        try:
            await self.nc.publish(
                waiting.subject, waiting.payload, reply=ack_subject(self.gateway_id, request_id), headers=headers
            )
        except nats.errors.Error as exc:
            log.warning("could not publish request %s again: %r", request_id, exc)
            return
        self.republished.inc()

    async def stop(self) -> None:
        for task in (self._watcher, self._backlog_task, self._resuming):
            if task is not None:
                task.cancel()
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                await self.nc.drain()

    async def drain(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` (less a moment to write the answers) for the replies
        of the requests in flight, then answer the rest 503 SHUTTING_DOWN: their
        clients get a retryable answer rather than a closed connection. Their
        messages stay queued; a worker may still run them (nobody reads that reply)."""
        ends = time.monotonic() + max(0.0, grace_s - DRAIN_ANSWER_S)
        while (self.pending or self.streams) and time.monotonic() < ends:
            await asyncio.sleep(0.02)
        for waiting in list(self.pending.values()):
            if not waiting.future.done():
                waiting.future.set_exception(ShuttingDown("The gateway is shutting down; retry shortly."))
        for request_id in list(self.streams):
            self.end_stream(request_id, ShuttingDown("The gateway is shutting down; the answer is incomplete."))
        if self.streams:
            await asyncio.sleep(DRAIN_ANSWER_S / 2)  # the streams' error events go out

    async def _on_reply(self, msg: Msg) -> None:
        request_id = msg.subject.rsplit(".", 1)[1]
        if msg.headers and RUN_HEADER in msg.headers:
            await self._on_stream_message(request_id, msg, msg.headers)
            return
        waiting = self.pending.get(request_id)
        if waiting is None or waiting.future.done():
            # A redelivered request answered twice (or after we gave up): drop it.
            self.duplicates.inc()
            return
        if waiting.stamps is not None:
            waiting.stamps.append(("g_reply", time.perf_counter()))
        waiting.future.set_result(unpack_reply(msg.data))

    async def _on_stream_message(self, request_id: str, msg: Msg, headers: dict[str, str]) -> None:
        """A piece of a streamed answer (cluster.streams)."""
        run = headers[RUN_HEADER]
        seq_text = headers.get(SEQ_HEADER)
        seq = int(seq_text) if seq_text is not None else None
        cancel = headers.get(CANCEL_HEADER)
        stream = self.streams.get(request_id)
        if seq == 0:
            waiting = self.pending.get(request_id)
            if stream is None and waiting is not None and not waiting.future.done():
                stream = ReplyStream(self, request_id, unpack_reply(msg.data), run, cancel)
                self.streams[request_id] = stream
                if waiting.stamps is not None:
                    waiting.stamps.append(("g_reply", time.perf_counter()))
                waiting.future.set_result(stream)
                return
            # Nobody waits for this run (answered, given up, or another run is relayed).
            self.duplicates.inc()
            if stream is not None and stream.order.run != run:
                self.end_stream(request_id, InferenceError(WORKER_REPLACED))
            await self._cancel(cancel)
            return
        if stream is None:
            waiting = self.pending.get(request_id)
            if seq is None and (waiting is None or waiting.future.done()):
                await self._cancel(cancel)  # a tick of a run nobody reads (not one ahead of its head): stop it
            return
        verdict = stream.order.judge(run, seq, headers.get(END_HEADER), time.monotonic())
        if verdict is Verdict.CHUNK:
            stream.pieces.put_nowait(msg.data)
        elif verdict is Verdict.DONE:
            stream.end(None)
        elif verdict is Verdict.FAILED:
            stream.end(InferenceError(WORKER_FAILED))
        elif verdict is Verdict.GAP:
            self.end_stream(request_id, InferenceError(PIECE_LOST))
        elif verdict is Verdict.OTHER_RUN:
            self.end_stream(request_id, InferenceError(WORKER_REPLACED))
            await self._cancel(cancel)

    def end_stream(self, request_id: str, error: SiftError) -> None:
        """End a stream with ``error`` (its error event is the client's last) and stop its run."""
        stream = self.streams.get(request_id)
        if stream is not None and not stream.ended:
            stream.end(error)
            self._cancel_soon(stream.cancel_subject)

    def forget_stream(self, request_id: str, cancel: bool) -> None:
        """The stream's relay is over; ``cancel``: its run may still be going."""
        stream = self.streams.pop(request_id, None)
        if stream is not None and cancel:
            self._cancel_soon(stream.cancel_subject)

    def _cancel_soon(self, subject: str | None) -> None:
        if subject is not None:
            task = asyncio.ensure_future(self._cancel(subject))
            self._cancelling.add(task)
            task.add_done_callback(self._cancelling.discard)

    async def _cancel(self, subject: str | None) -> None:
        if subject is None or self.nc is None or self.nc.is_closed:
            return
        with contextlib.suppress(Exception):
            await self.nc.publish(subject, b"")

    async def _on_ack(self, msg: Msg) -> None:
        waiting = self.pending.get(msg.subject.rsplit(".", 1)[1])
        if waiting is None:
            return  # answered (or given up) already
        waiting.acked = True
        waiting.seq = stored_seq(msg)
        if waiting.ack_timer is not None:
            waiting.ack_timer.cancel()
            waiting.ack_timer = None
        if waiting.stamps is not None:
            waiting.stamps.append(("g_acked", time.perf_counter()))
        error = ack_error(waiting.model, msg)
        if error is not None:
            if msg.data:
                self.refused.inc()
            if not waiting.future.done():
                waiting.future.set_exception(error)

    def _ack_overdue(self, request_id: str) -> None:
        waiting = self.pending.get(request_id)
        if self.nc is not None and self.nc.is_reconnecting:
            return  # the publish waits in the client's buffer; the reconnect arms a fresh timer
        if waiting is not None and not waiting.acked and not waiting.future.done():
            waiting.future.set_exception(QueueFull("The work queue is unavailable (no ack in time); retry shortly."))

    async def _watch_heartbeats(self, synced: asyncio.Event) -> None:
        """Follow the heartbeat bucket: every put and delete is pushed to us (no
        re-reading of the bucket, whose keys() can miss entries: nats-io/nats.py#842)."""
        while True:
            try:
                assert self.kv is not None
                watcher = await self.kv.watchall()
                async for entry in watcher:
                    if entry is None:  # the bucket's current entries are all in
                        synced.set()
                        continue
                    if entry.operation in (KV_DEL, KV_PURGE):
                        self.heartbeats.remove(entry.key)
                        continue
                    # Heard when it was put (an entry read at the watch's start may be old).
                    age = time.time() - entry.created.timestamp() if entry.created is not None else 0.0
                    self.heartbeats.put(entry.key, entry.value or b"", time.monotonic() - max(0.0, age))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("heartbeat watch failed, restarting it: %r", exc)
                await asyncio.sleep(self.options.liveness_poll_s)

    async def has_worker(self, model: str) -> bool:
        """A live heartbeat for the model, else its consumer showing a worker (cluster.liveness)."""
        token = model_token(model)
        now = time.monotonic()
        if self.heartbeats.serves(token, now):
            return True
        checked = self._consumers.get(token)
        if checked is not None and now - checked[0] < self.options.liveness_poll_s:
            return checked[1]
        found = await self._consumer_shows_worker(model)
        self._consumers[token] = (time.monotonic(), found)
        return found

    async def _consumer_shows_worker(self, model: str) -> bool:
        if self.js is None:
            return False
        try:
            info = await self.js.consumer_info(STREAM, durable_name(model))
        except Exception:
            return False  # no consumer: no worker ever served the model
        acked = info.ack_floor.last_active if info.ack_floor is not None else None
        age = time.time() - acked.timestamp() if acked is not None else None
        return consumer_has_worker(info.num_waiting or 0, info.num_ack_pending or 0, age, self.options.heartbeat_ttl_s)

    async def worker_view(self, model: str) -> dict[str, Any] | None:
        """What a live worker's heartbeat says of the loaded model (None: no live worker)."""
        for key in self.heartbeats.live_keys(model_token(model), time.monotonic()):
            value = self.heartbeats.value(key)
            if value:
                view = json.loads(value).get("model")
                if isinstance(view, dict):
                    return view
        return None

    async def call(
        self, model: str, work: WorkRequest, stamps: list[tuple[str, float]] | None = None
    ) -> WorkReply | ReplyStream:
        """Publish one request and wait for its reply, or a streamed reply's head
        (raises SiftError). ``stamps``
        (the hop_stamps setting): the hop's gateway-side stamps are appended to it."""
        assert self.nc is not None
        # Unique across gateways (a random per-process prefix): the stream deduplicates by it.
        request_id = new_request_id()
        timeout = self.options.request_timeout_s
        loop = asyncio.get_running_loop()
        now = time.time()
        headers = {
            MSG_ID_HEADER: request_id,
            REPLY_HEADER: reply_subject(self.gateway_id, request_id),
            DEADLINE_HEADER: stamp(now + timeout),
            PUBLISHED_HEADER: stamp(now),
        }
        payload = pack_request(work)
        if len(payload) > self.nc.max_payload:
            # The request travels whole in one NATS message: past the server's max_payload no worker can
            # ever get it, which is the client's 413, not a queue to retry.
            raise BodyTooLarge(
                f"The request is {len(payload)} bytes; the work queue carries at most {self.nc.max_payload} bytes "
                "per request (NATS max_payload)."
            )
        subject = work_subject(model)
        waiting = Waiting(loop.create_future(), model, subject, payload, headers, self.connection, stamps)
        self.pending[request_id] = waiting
        if stamps is not None:
            stamps.append(("g_publish", time.perf_counter()))
        try:
            try:
                # The stream answers on our ack subject (_on_ack) while the request runs.
                await self.nc.publish(subject, payload, reply=ack_subject(self.gateway_id, request_id), headers=headers)
            except nats.errors.Error as exc:
                raise QueueFull(f"The work queue is unavailable ({type(exc).__name__}); retry shortly.") from None
            if stamps is not None:
                stamps.append(("g_published", time.perf_counter()))
            if not waiting.acked and not waiting.future.done():
                waiting.ack_timer = loop.call_later(self.options.publish_timeout_s, self._ack_overdue, request_id)
            try:
                # asyncio.timeout, not wait_for: the reply wakes this task in one turn of the loop, not two.
                async with asyncio.timeout(timeout):
                    reply = await waiting.future
            except TimeoutError:
                raise held_too_long(model, timeout, await self.has_worker(model)) from None
            if stamps is not None:
                stamps.append(("g_resume", time.perf_counter()))
            return reply
        finally:
            self.pending.pop(request_id, None)
            if waiting.ack_timer is not None:
                waiting.ack_timer.cancel()
            if request_id in self.streams and sys.exc_info()[0] is not None:
                self.forget_stream(request_id, cancel=True)  # its head came as we gave up
