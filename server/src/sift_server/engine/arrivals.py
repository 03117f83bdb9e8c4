"""Arrival statistics of one model: what recent traffic predicts about the next burst.

Pure code over timestamps the shell passes in. A cluster is a run of arrivals
each within ``link_gap`` of the previous one, and a new cluster always starts
when an arrival finds the model with nothing in flight (sequential traffic:
the previous request already finished, so it is nobody's companion). A closed
cluster teaches the expected size of the next one, but only an *isolated*
cluster (one that began after at least ``quiet_gap`` of silence, as bursts
after idle time do) teaches it, and only an isolated head expects unseen
followers: under steady random traffic, chance coincidences must not make
every request wait. The widest gaps inside recent bursts teach how long to
wait for a straggler.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class ArrivalModel:
    link_gap: float = 0.002
    quiet_gap: float = 0.005
    min_follow_gap: float = 0.0002
    # How many recent multi-request clusters set the straggler allowance.
    gap_memory: int = 8
    # Before any history, assume lone traffic: the first request of a server's life is not delayed.
    expected_size: int = 1
    cluster_start: float = float("-inf")
    cluster_size: int = 0
    cluster_max_gap: float = 0.0
    cluster_isolated: bool = True
    last_arrival: float = float("-inf")
    clusters_seen: int = 0
    recent_gaps: deque[float] = field(default_factory=deque)

    def observe(self, now: float, *, in_flight: bool = True) -> None:
        """Record one arrival (request headers received). ``in_flight`` says
        whether any earlier request of this model was still queued, in ingress
        or in a forward at that moment."""
        gap = now - self.last_arrival
        if gap > self.link_gap or not in_flight:
            self._close_cluster()
            self.cluster_isolated = gap >= self.quiet_gap
            self.cluster_start = now
            self.cluster_size = 1
            self.cluster_max_gap = 0.0
        else:
            self.cluster_size += 1
            self.cluster_max_gap = max(self.cluster_max_gap, gap)
        self.last_arrival = now

    def _close_cluster(self) -> None:
        if self.cluster_size == 0:
            return
        self.clusters_seen += 1
        if self.cluster_isolated:
            self.expected_size = self.cluster_size
        if self.cluster_size > 1:
            self.recent_gaps.append(self.cluster_max_gap)
            if len(self.recent_gaps) > self.gap_memory:
                self.recent_gaps.popleft()

    @property
    def follow_gap(self) -> float:
        """How long after the latest arrival a burst may still grow: twice the
        widest gap seen inside recent bursts, within sane bounds."""
        widest = max(self.recent_gaps, default=self.link_gap / 4)
        return min(self.link_gap, max(self.min_follow_gap, 2.0 * widest))

    def current_cluster_size(self, now: float) -> int:
        """Arrivals of the cluster still open at ``now`` (0 if it has gone quiet)."""
        if now - self.last_arrival > self.link_gap:
            return 0
        return self.cluster_size

    def predicted_size(self, now: float) -> int:
        """Expected size of the cluster in progress, never less than what already arrived."""
        current = self.current_cluster_size(now)
        if not self.cluster_isolated:
            return current
        return max(self.expected_size, current)
