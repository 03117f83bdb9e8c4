"""The gateway's view of live workers, against a fake key-value bucket.

nats-py's ``KeyValue.keys()`` can raise ``NoKeysError`` for a bucket that holds
keys (its watcher may signal "no more entries" before it has processed an entry
already on its way: nats-io/nats.py#842). One such read must not make the
gateway answer 503 NO_WORKER for a model whose worker is alive."""

from __future__ import annotations

import asyncio

from nats.js.errors import NoKeysError

from sift_server.cluster.gateway import Gateway
from sift_server.cluster.subjects import heartbeat_key
from tests.cluster.fakes import bare_gateway

MODEL = "org/model"


class FlakyKeys:
    """A bucket holding one worker's heartbeat whose first ``spurious`` reads come back empty."""

    def __init__(self, keys: list[str], spurious: int) -> None:
        self.keys_held = keys
        self.spurious = spurious
        self.reads = 0

    async def keys(self) -> list[str]:
        self.reads += 1
        if self.reads <= self.spurious or not self.keys_held:
            raise NoKeysError
        return list(self.keys_held)


def _gateway(kv: FlakyKeys) -> Gateway:
    gateway = bare_gateway()
    gateway.kv = kv  # type: ignore[assignment]
    return gateway


def test_one_spurious_empty_read_keeps_a_live_worker_live() -> None:
    kv = FlakyKeys([heartbeat_key(MODEL, "w1")], spurious=1)
    gateway = _gateway(kv)
    assert asyncio.run(gateway.has_worker(MODEL))


def test_a_bucket_that_stays_empty_means_no_worker() -> None:
    kv = FlakyKeys([], spurious=0)
    gateway = _gateway(kv)
    assert not asyncio.run(gateway.has_worker(MODEL))
    assert kv.reads >= 2  # an empty answer is read twice before it is believed


def test_a_worker_that_left_is_gone_at_once() -> None:
    kv = FlakyKeys([heartbeat_key("org/other", "w2")], spurious=0)
    gateway = _gateway(kv)
    assert not asyncio.run(gateway.has_worker(MODEL))
    assert kv.reads == 1  # a non-empty answer is authoritative
