"""The keepalive thread against a real nats-server: it keeps held messages in
progress and the heartbeats current while the caller's event loop is blocked,
and a quiet keepalive deletes its heartbeats and beats no more."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
from nats.aio.msg import Msg

from sift_server.cluster.jetstream import heartbeat_bucket
from sift_server.cluster.keepalive import IN_PROGRESS, Keepalive
from sift_server.processes import start_nats

KEY = "org=2Fm.w1"


def test_progress_and_heartbeats_go_out_while_the_loop_is_blocked(tmp_path: Path) -> None:
    proc, url = start_nats(tmp_path)

    async def run() -> tuple[list[bytes], list[float], bool]:
        nc = await nats.connect(url)
        try:
            kv = await heartbeat_bucket(nc.jetstream(), ttl_s=6.0)
            progress: list[bytes] = []

            async def on_progress(msg: Msg) -> None:
                progress.append(msg.data)

            sub = await nc.subscribe("test.ack.held", cb=on_progress)
            keepalive = Keepalive(url, "test", {KEY: {"worker": "w1"}}, heartbeat_s=0.2, progress_s=0.2)
            await asyncio.to_thread(keepalive.start)
            keepalive.hold("test.ack.held")
            keepalive.hold("test.ack.released")
            keepalive.release("test.ack.released")
            time.sleep(1.5)  # this loop blocked: only the keepalive's own thread can send
            await asyncio.sleep(0.3)  # let this connection read what arrived meanwhile
            beats = [json.loads((await kv.get(KEY)).value or b"{}")["at"]]
            await asyncio.sleep(0.5)
            beats.append(json.loads((await kv.get(KEY)).value or b"{}")["at"])
            await asyncio.to_thread(keepalive.quiet)
            await asyncio.sleep(0.5)  # a beat would have come by now
            try:
                await kv.get(KEY)
                gone = False
            except nats.js.errors.KeyNotFoundError:
                gone = True
            await asyncio.to_thread(keepalive.stop)
            await sub.unsubscribe()
            return progress, beats, gone
        finally:
            await nc.close()

    try:
        progress, beats, gone = asyncio.run(run())
    finally:
        proc.stop()
    assert len(progress) >= 4 and set(progress) == {IN_PROGRESS}  # ~7 in 1.5 s at 0.2 s
    assert beats[1] > beats[0]  # still beating
    assert gone


def test_a_stream_is_ticked_while_the_loop_is_blocked_until_untick(tmp_path: Path) -> None:
    proc, url = start_nats(tmp_path)

    async def run() -> tuple[list[dict[str, str]], int]:
        nc = await nats.connect(url)
        try:
            await heartbeat_bucket(nc.jetstream(), ttl_s=6.0)
            ticks: list[dict[str, str]] = []

            async def on_tick(msg: Msg) -> None:
                ticks.append(dict(msg.headers or {}))

            sub = await nc.subscribe("test.reply.r1", cb=on_tick)
            keepalive = Keepalive(url, "test", {KEY: {"worker": "w1"}}, heartbeat_s=0.2, progress_s=0, tick_s=0.2)
            await asyncio.to_thread(keepalive.start)
            keepalive.tick("test.reply.r1", {"Sift-Run": "r1", "Sift-Tick": "1"})
            time.sleep(1.2)  # this loop blocked: only the keepalive's own thread can send
            await asyncio.sleep(0.3)
            keepalive.untick("test.reply.r1")
            await asyncio.sleep(0.3)  # a tick in flight lands
            after_untick = len(ticks)
            await asyncio.sleep(0.6)  # none comes any more
            extra = len(ticks) - after_untick
            await asyncio.to_thread(keepalive.stop)
            await sub.unsubscribe()
            return ticks, extra
        finally:
            await nc.close()

    try:
        ticks, extra = asyncio.run(run())
    finally:
        proc.stop()
    assert len(ticks) >= 4  # ~6 in 1.2 s at 0.2 s
    assert all(t.get("Sift-Run") == "r1" and t.get("Sift-Tick") == "1" for t in ticks)
    assert extra == 0
