"""Names on the NATS side: the stream, per-model subjects, consumers, replies,
the heartbeat bucket and the message headers."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from nats.js.api import DEFAULT_PREFIX

STREAM = "SIFT_WORK"
WORK_PREFIX = "sift.work"
REPLY_PREFIX = "_SIFT.reply"
ACK_PREFIX = "_SIFT.ack"  # the stream's publish acks, per gateway and request
HEARTBEAT_BUCKET = "sift_workers"

# Message headers set by the gateway.
REPLY_HEADER = "Sift-Reply"
DEADLINE_HEADER = "Sift-Deadline"  # wall-clock seconds since the epoch
MSG_ID_HEADER = "Nats-Msg-Id"  # JetStream deduplicates publishes by it
# How long a NATS client waits between attempts to reconnect (nats-py's default is 2 s;
# a restarted server is back within a second or two and every held request waits on it).
RECONNECT_WAIT_S = 0.25

# Response header naming the worker that answered (relayed to the client).
WORKER_HEADER = "X-Sift-Worker"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def model_token(name: str) -> str:
    """One subject token for a model name: letters, digits, '_' and '-' stay;
    anything else (``/``, ``.``, ...) becomes ``=XX`` (its UTF-8 bytes in hex)."""
    return _UNSAFE.sub(lambda m: "".join(f"={b:02X}" for b in m.group().encode()), name)


def work_subject(model: str) -> str:
    return f"{WORK_PREFIX}.{model_token(model)}"


def durable_name(model: str) -> str:
    """One durable pull consumer per model, shared by all its workers."""
    return "sift-" + model_token(model).replace("=", "_")


def pull_request(durable: str, expires_s: float) -> tuple[str, bytes]:
    """The subject and body of one single-message pull request on the durable
    consumer ``durable``, answered on the inbox it is published with.

    nats-py's pull API (``PullSubscription.fetch``) awaits each batch on its own
    subscription; the worker instead keeps one request standing per free slot,
    all answered on one inbox callback (cluster/worker.py), and nats-py names
    neither that subject nor that body publicly. They are JetStream's API
    (CONSUMER.MSG.NEXT under nats-py's own default prefix), built here only."""
    body = json.dumps({"batch": 1, "expires": int(expires_s * 1e9)}).encode()
    return f"{DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{STREAM}.{durable}", body


def reply_subject(gateway_id: str, request_id: str) -> str:
    return f"{REPLY_PREFIX}.{gateway_id}.{request_id}"


def ack_subject(gateway_id: str, request_id: str) -> str:
    """Where the stream acknowledges (or refuses) the publish of a request."""
    return f"{ACK_PREFIX}.{gateway_id}.{request_id}"


def heartbeat_key(model: str, worker_id: str) -> str:
    return f"{model_token(model)}.{worker_id}"


def model_of_heartbeat_key(key: str) -> str:
    """The model token of a heartbeat key."""
    return key.rsplit(".", 1)[0]


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """The work queue's limits: a publish beyond them is refused (503 QUEUE_FULL)."""

    max_msgs: int = 100_000
    max_bytes: int = 1 << 30
    max_msgs_per_model: int = 10_000
    storage: str = "file"  # or "memory"
