"""Which models have a live worker, as the gateway sees it (pure: the times are
passed in).

The gateway queues a request for a catalog model whether or not a worker is
live (it waits in the stream for one: scale from zero); liveness says what
``/v1/models`` describes and which Retry-After a request that waited its whole
timeout gets. Two signals, either one enough:

* Heartbeats, pushed to the gateway by a watch on the heartbeat bucket. A key
  counts while its last put is younger than the bucket's TTL (the gateway's own
  clock: an expiry by age sends no message) and until its worker deletes it.
* The model's consumer on the work stream: a standing pull request (an idle
  worker asks for work every few seconds) or, while messages are held, a recent
  acknowledgement (a busy one acks as it answers). This covers a live worker whose heartbeat is late
  and the moments a watch needs to catch up, so a live worker is never taken
  for gone; a dead worker's pull requests expire, and it acks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sift_server.cluster.subjects import model_of_heartbeat_key


@dataclass(slots=True)
class Heartbeats:
    """The heartbeat keys heard and when, with their latest values."""

    ttl_s: float
    _heard: dict[str, tuple[float, bytes]] = field(default_factory=dict)

    def put(self, key: str, value: bytes, now: float) -> None:
        self._heard[key] = (now, value)

    def remove(self, key: str) -> None:
        self._heard.pop(key, None)

    def live_keys(self, token: str, now: float) -> list[str]:
        """The keys of a model token heard within the TTL (older ones are forgotten)."""
        stale = [k for k, (at, _) in self._heard.items() if now - at > self.ttl_s]
        for key in stale:
            del self._heard[key]
        return [k for k in self._heard if model_of_heartbeat_key(k) == token]

    def serves(self, token: str, now: float) -> bool:
        return bool(self.live_keys(token, now))

    def value(self, key: str) -> bytes | None:
        heard = self._heard.get(key)
        return heard[1] if heard is not None else None


def consumer_has_worker(num_waiting: int, num_held: int, last_ack_age_s: float | None, window_s: float) -> bool:
    """Whether a model's consumer shows a live worker: one asking for work now, or
    one holding messages that acknowledged one within ``window_s`` (None: never
    acked). A worker that drained and left holds nothing: it does not count."""
    if num_waiting > 0:
        return True
    return num_held > 0 and last_ack_age_s is not None and last_ack_age_s <= window_s
