"""Arrival statistics of one model: what recent traffic predicts about the next burst.

Pure code over timestamps the shell passes in. Arrivals closer together than
``link_gap`` belong to one cluster. A closed cluster teaches the expected size
of the next one and how tightly its members follow each other. Sequential
traffic produces clusters of one and so predicts no followers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ArrivalModel:
    link_gap: float = 0.002
    min_follow_gap: float = 0.0002
    # Before any history, assume lone traffic: the first request of a server's life is not delayed.
    expected_size: int = 1
    follow_gap: float = 0.0005
    cluster_start: float = float("-inf")
    cluster_size: int = 0
    cluster_max_gap: float = 0.0
    last_arrival: float = float("-inf")
    clusters_seen: int = 0

    def observe(self, now: float) -> None:
        """Record one arrival (request headers received)."""
        gap = now - self.last_arrival
        if gap > self.link_gap:
            self._close_cluster()
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
        self.expected_size = self.cluster_size
        if self.cluster_size > 1:
            # Twice the widest gap seen inside the last burst, within sane bounds.
            self.follow_gap = min(self.link_gap, max(self.min_follow_gap, 2.0 * self.cluster_max_gap))

    def current_cluster_size(self, now: float) -> int:
        """Arrivals of the cluster still open at ``now`` (0 if it has gone quiet)."""
        if now - self.last_arrival > self.link_gap:
            return 0
        return self.cluster_size

    def predicted_size(self, now: float) -> int:
        """Expected size of the cluster in progress, never less than what already arrived.

        While the current cluster is younger than the previous one it is
        compared with the previous one's size; once it has grown past it, the
        previous prediction is stale and the open cluster is its own best guess.
        """
        return max(self.expected_size, self.current_cluster_size(now))
