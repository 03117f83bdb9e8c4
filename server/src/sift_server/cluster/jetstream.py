"""Creating (or checking) the work stream, the model consumers and the heartbeat bucket."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from sift_server.cluster.subjects import HEARTBEAT_BUCKET, STREAM, WORK_PREFIX, StreamLimits, durable_name, work_subject

log = logging.getLogger(__name__)


def stream_config(limits: StreamLimits) -> StreamConfig:
    return StreamConfig(
        name=STREAM,
        subjects=[f"{WORK_PREFIX}.*"],
        retention=RetentionPolicy.WORK_QUEUE,
        # Refuse new work at the limits: back-pressure reaches the gateway as a failed publish.
        discard=DiscardPolicy.NEW,
        max_msgs=limits.max_msgs,
        max_bytes=limits.max_bytes,
        max_msgs_per_subject=limits.max_msgs_per_model,
        discard_new_per_subject=True,
        storage=StorageType.MEMORY if limits.storage == "memory" else StorageType.FILE,
        duplicate_window=120.0,
    )


async def ensure_stream(js: JetStreamContext, limits: StreamLimits | None) -> None:
    """With limits (the gateway): create the stream or update it to them.
    Without (a worker): create it with defaults only when missing."""
    try:
        info = await js.stream_info(STREAM)
    except NotFoundError:
        await js.add_stream(stream_config(limits or StreamLimits()))
        return
    if limits is None:
        return
    config = stream_config(limits)
    if info.config.storage is not None and info.config.storage != config.storage:
        # The storage of a stream cannot change: keep it, apply the limits.
        log.warning("stream %s keeps its %s storage", STREAM, info.config.storage)
        config.storage = info.config.storage
    await js.update_stream(config)


async def ensure_consumer(js: JetStreamContext, model: str, ack_wait_s: float, max_ack_pending: int = 100_000) -> str:
    name = durable_name(model)
    config = ConsumerConfig(
        durable_name=name,
        filter_subject=work_subject(model),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
        max_waiting=512,
    )
    try:
        await js.add_consumer(STREAM, config)
    except Exception as exc:
        log.warning("consumer %s exists with another configuration (%s); using it", name, exc)
    return name


# A worker's --ack-wait-s default: the consumer a gateway creates before any worker started.
DEFAULT_ACK_WAIT_S = 3.0


async def ensure_consumers_exist(
    js: JetStreamContext, models: Iterable[str], ack_wait_s: float = DEFAULT_ACK_WAIT_S
) -> None:
    """The gateway's part: every catalog model has its durable consumer, so a request
    for a model no worker ever served waits in the stream (and an autoscaler sees it)
    instead of finding nothing to wait on. An existing consumer is left as it is: its
    workers chose its ack wait."""
    for model in models:
        try:
            await js.consumer_info(STREAM, durable_name(model))
        except NotFoundError:
            await ensure_consumer(js, model, ack_wait_s)


async def heartbeat_bucket(js: JetStreamContext, ttl_s: float) -> KeyValue:
    try:
        return await js.key_value(HEARTBEAT_BUCKET)
    except Exception:
        return await js.create_key_value(KeyValueConfig(bucket=HEARTBEAT_BUCKET, ttl=ttl_s, history=1))
