"""The stream set-up against a real nats-server, in process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats

from sift_server.cluster.jetstream import ensure_consumer, ensure_stream
from sift_server.cluster.subjects import STREAM, StreamLimits, model_token, work_subject
from sift_server.processes import start_nats


def test_model_tokens_are_single_safe_subject_tokens() -> None:
    token = model_token("sentence-transformers/all-MiniLM-L6-v2")
    assert token == "sentence-transformers=2Fall-MiniLM-L6-v2"
    assert model_token("a.b c*>") == "a=2Eb=20c=2A=3E"
    assert work_subject("org/m.v1").count(".") == 2


def test_gateway_limits_apply_to_a_stream_a_worker_created_first(tmp_path: Path) -> None:
    proc, url = start_nats(tmp_path)

    async def run() -> tuple[int, int]:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await ensure_stream(js, None)  # a worker started first: defaults, file storage
            await ensure_stream(js, StreamLimits(max_msgs_per_model=7, storage="memory"))
            info = await js.stream_info(STREAM)
            assert info.config.max_msgs_per_subject is not None
            return info.config.max_msgs_per_subject, 0
        finally:
            await nc.close()

    try:
        per_model, _ = asyncio.run(run())
    finally:
        proc.stop()
    assert per_model == 7


def test_a_consumer_an_older_worker_created_takes_the_new_ack_wait(tmp_path: Path) -> None:
    # A stream kept on disk from a run with the old 30 s default must not keep
    # a dead worker's messages for 30 s.
    proc, url = start_nats(tmp_path)

    async def run() -> float:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await ensure_stream(js, None)
            await ensure_consumer(js, "org/m", ack_wait_s=30.0)
            durable = await ensure_consumer(js, "org/m", ack_wait_s=3.0)
            info = await js.consumer_info(STREAM, durable)
            assert info.config.ack_wait is not None
            return float(info.config.ack_wait)
        finally:
            await nc.close()

    try:
        ack_wait = asyncio.run(run())
    finally:
        proc.stop()
    assert ack_wait == 3.0
