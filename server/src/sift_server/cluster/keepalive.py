"""A worker's signs of life, sent from a thread of their own.

The worker's heartbeats and the progress acknowledgements of the messages it
holds go out on a second NATS connection driven by its own event loop in a
daemon thread. The worker's loop can be busy for seconds (decoding a burst,
writing replies, the collector) and its forwards hold the GIL in stretches;
a thread needs only a GIL switch (a few milliseconds) to beat on time, so a
short ack wait (a dead worker's messages come back within seconds) does not
take a busy live worker for dead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import nats
from nats.js.kv import KeyValue

from sift_server.cluster.streams import TICK_S
from sift_server.cluster.subjects import HEARTBEAT_BUCKET, RECONNECT_WAIT_S

log = logging.getLogger(__name__)

# The body of a JetStream "still working on it" acknowledgement (what Msg.in_progress sends).
IN_PROGRESS = b"+WPI"


async def _quiet_error(exc: Exception) -> None:
    """The worker's own connection logs a break; this one's attempts to reconnect need no traceback each."""
    log.debug("keepalive NATS: %r", exc)


class Keepalive:
    """Puts ``beats`` (heartbeat key -> value; ``at`` is added at each put) every
    ``heartbeat_s`` and marks every held message in progress every ``progress_s``
    (0: never), and ticks every stream being sent every ``tick_s``."""

    def __init__(
        self,
        nats_url: str,
        name: str,
        beats: Mapping[str, dict[str, Any]],
        heartbeat_s: float,
        progress_s: float,
        tick_s: float = TICK_S,
    ) -> None:
        self.nats_url = nats_url
        self.name = name
        self.beats = dict(beats)
        self.heartbeat_s = heartbeat_s
        self.progress_s = progress_s
        self.tick_s = tick_s
        self._held: set[str] = set()
        # Reply subject -> the tick's headers, per stream being sent.
        self._ticking: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._kv: KeyValue | None = None

    def hold(self, ack_subject: str) -> None:
        """A message was delivered to this worker: keep it in progress until released."""
        with self._lock:
            self._held.add(ack_subject)

    def release(self, ack_subject: str) -> None:
        with self._lock:
            self._held.discard(ack_subject)

    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def tick(self, reply_subject: str, headers: dict[str, str]) -> None:
        """A stream is being sent on ``reply_subject``: tick it until ``untick``."""
        with self._lock:
            self._ticking[reply_subject] = headers

    def untick(self, reply_subject: str) -> None:
        with self._lock:
            self._ticking.pop(reply_subject, None)

    def ticking(self) -> list[tuple[str, dict[str, str]]]:
        with self._lock:
            return list(self._ticking.items())

    def start(self, timeout_s: float = 30.0) -> None:
        """Connect and put the first heartbeats; return once they are in (raises if not)."""
        self._thread = threading.Thread(target=self._run, name="sift-keepalive", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError("keepalive: no connection to NATS")
        if self._error is not None:
            raise self._error

    def quiet(self, timeout_s: float = 1.0) -> None:
        """Stop beating and delete the heartbeats (a draining worker takes no new
        work); held messages are still kept in progress until they are released."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._quiet(), loop).result(timeout_s)
        except Exception as exc:
            log.warning("could not delete the heartbeats: %r", exc)

    async def _quiet(self) -> None:
        beats, self.beats = self.beats, {}
        if self._kv is not None:
            for key in beats:
                await self._kv.delete(key)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop beating (the caller deletes the heartbeats) and close the connection."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to start(); the worker then fails to start
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        nc = await nats.connect(
            self.nats_url.split(","),
            name=f"{self.name}-keepalive",
            max_reconnect_attempts=-1,
            reconnect_time_wait=RECONNECT_WAIT_S,
            error_cb=_quiet_error,
        )
        try:
            kv = self._kv = await nc.jetstream().key_value(HEARTBEAT_BUCKET)
            await self._beat(kv)
            self._ready.set()
            tasks = [asyncio.ensure_future(self._beating(kv)), asyncio.ensure_future(self._ticking_streams(nc))]
            if self.progress_s > 0:
                tasks.append(asyncio.ensure_future(self._progressing(nc)))
            await self._stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await nc.close()

    async def _beat(self, kv: KeyValue) -> None:
        for key, value in list(self.beats.items()):
            await kv.put(key, json.dumps({**value, "at": time.time()}).encode())

    async def _beating(self, kv: KeyValue) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self._beat(kv)
            except Exception as exc:
                log.warning("heartbeat failed: %r", exc)

    async def _progressing(self, nc: Any) -> None:
        while True:
            await asyncio.sleep(self.progress_s)
            try:
                for subject in self.held():
                    await nc.publish(subject, IN_PROGRESS)
            except Exception as exc:
                log.warning("progress acknowledgement failed: %r", exc)

    async def _ticking_streams(self, nc: Any) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                for subject, headers in self.ticking():
                    await nc.publish(subject, b"", headers=headers)
            except Exception as exc:
                log.warning("stream tick failed: %r", exc)
