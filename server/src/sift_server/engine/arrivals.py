"""Arrival statistics of one model: what recent traffic predicts about the next burst.

Pure code over timestamps the shell passes in (request headers received).

Clusters. A cluster is a run of arrivals each within ``link_gap`` of the
previous one; a new cluster always starts when an arrival finds the model with
nothing in flight (sequential traffic: the previous request already finished,
so it is nobody's companion). A cluster is *isolated* when it began after at
least ``quiet_gap`` of silence, as bursts after idle time do.

Bursts versus chance. Random (Poisson-like) traffic also forms clusters of 2,
3, even 20 arrivals, and an isolated one is common: at 330 req/s a 5 ms
silence precedes one arrival in five. Learning "expect 3" from such a
coincidence makes the next isolated head wait for followers that never come
(on a forward whose cost grows with the batch, fusing two chance arrivals does
not even pay). So a cluster counts as a *burst* only when that many arrivals in
so short a span would be a rare coincidence for Poisson traffic at the model's
background rate: ``P[N >= size - 1] <= burst_alpha`` with ``N ~ Poisson(rate *
span)``, the rate measured over the ``rate_memory`` arrivals before the cluster
began. A burst of 8 within 3 ms passes by orders of magnitude; random traffic
practically never does (docs/batching.md has the simulated check). Traffic
that came one request at a time (no remembered arrival found
another in flight: a sequential client, however fast) cannot make a chance
cluster, so it counts as a single arrival over its span; otherwise a fast
sequential phase would hide the first burst after it. With no history at all
(a model's first arrivals) any cluster of two or more is taken for a burst.

What is learned. A closed isolated cluster teaches the expected size of the
next isolated one: its size if it was a burst, else 1 (lone traffic). Only an
isolated cluster after learned bursts expects unseen followers; one that
reaches or outgrows the learned size expects one more until it goes quiet, so a
first burst of 32 after bursts of 8 is not cut at 8 while its later requests
are still being read (the 24 cut off would wait a whole forward; the wait
costs ``follow_gap``, a millisecond or two). The shape of the last ``gap_memory`` bursts sets
``follow_gap``, how long after the latest arrival a burst may still grow:
twice their widest gap, and while only a few bursts are remembered at least a
shrinking multiple of their mean gap (one burst's widest gap underestimates
the next one's: with random jitter, a gap several times the mean is common).

A burst is followed by silence: its clients wait for their answers. A dense
cluster that the next arrival follows within ``quiet_gap``, or within
``silence_factor`` times its own mean gap, is the onset of sustained traffic
(independent users starting after a pause look dense against the quiet rate
before them: in the simulator, 99 Poisson arrivals over 252 ms after a closed
loop and a pause), so it teaches lone traffic, not its size.

A prediction is evidence only while the traffic keeps its pace. The learned
bursts say how fast one arrives (``pace``: the slowest learned seconds per
follower), so the latest cluster's ``k``-th follower is due by ``follower_due``:
``link_gap`` plus ``outlive_factor`` times ``k`` paces after its head. A
cluster that misses that (independent users after a closed loop or after
bursts, arriving at a fraction of a burst's rate) is not the predicted burst:
from then on it predicts no followers (``behind_pace``), unless it is dense
enough to be a burst by itself. So no request waits for a prediction longer
than ``outlive_factor`` times the slowest learned burst's span (plus
``link_gap``) while fewer arrivals than learned come.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


def poisson_tail(k: int, mu: float) -> float:
    """``P[N >= k]`` for ``N ~ Poisson(mu)``, summed outward from ``k`` so a
    long cluster costs about ``sqrt(mu)`` terms, not ``k``."""
    if k <= 0:
        return 1.0
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    log_mu = math.log(mu)
    if k > mu:
        # Upper tail: terms fall from P[N = k] by mu / i < 1.
        i = k
        term = math.exp(-mu + i * log_mu - math.lgamma(i + 1))
        upper = 0.0
        while term > upper * 1e-15:
            upper += term
            i += 1
            term *= mu / i
        return min(1.0, upper)
    # Lower tail: terms fall from P[N = k - 1] by i / mu <= 1 going down.
    i = k - 1
    term = math.exp(-mu + i * log_mu - math.lgamma(i + 1))
    lower = 0.0
    while i >= 0 and term > lower * 1e-15:
        lower += term
        term *= i / mu
        i -= 1
    return max(0.0, 1.0 - lower)


@dataclass(frozen=True, slots=True)
class BurstShape:
    """What one learned burst says about stragglers."""

    size: int
    span: float
    widest_gap: float


@dataclass(frozen=True, slots=True)
class ArrivalView:
    """What a policy reads of the arrival model at one instant (a snapshot:
    the policy cannot change, or see later changes to, the model)."""

    last_arrival: float = float("-inf")
    # Arrivals still predicted for the latest cluster (``ArrivalModel.unseen_followers``).
    unseen_followers: int = 0
    expects_burst: bool = False
    follow_gap: float = 0.0
    # The latest cluster reached the learned burst size (``ArrivalModel.at_learned_size``).
    at_learned_size: bool = False
    # When the next predicted follower is due (``ArrivalModel.follower_due``); infinite where the
    # prediction does not rest on history alone (a cluster dense enough to be a burst by itself).
    follower_due: float = math.inf


@dataclass(slots=True)
class ArrivalModel:
    link_gap: float = 0.002
    # 0: plain link-gap clusters; the server sets 50 ms (EngineConfig).
    busy_link_gap: float = 0.0
    quiet_gap: float = 0.005
    min_follow_gap: float = 0.0002
    # A cluster is a burst when chance would produce it with at most this probability.
    burst_alpha: float = 1e-5
    # Arrivals before a cluster that set the background rate it is judged against.
    rate_memory: int = 64
    # How many recent bursts set the straggler allowance.
    gap_memory: int = 8
    # Straggler allowance: this many times the widest gap of recent bursts, or,
    # while few are remembered, ``mean_gap_factor / bursts`` times their mean gap.
    widest_gap_factor: float = 2.0
    mean_gap_factor: float = 8.0
    # A burst ends in silence: a gap of at least ``quiet_gap`` and this many times its mean gap
    # (a gap of 8 means comes by chance once in 3,000 at a steady rate).
    silence_factor: float = 8.0
    # Before any history, assume lone traffic: the first request of a server's life is not delayed.
    expected_size: int = 1
    # A cluster whose followers come slower than this many times the slowest learned burst's
    # pace (``follower_due``), and is not dense enough to be a burst by itself, is not the burst
    # its history predicts.
    outlive_factor: float = 4.0
    cluster_start: float = float("-inf")
    cluster_size: int = 0
    cluster_max_gap: float = 0.0
    cluster_isolated: bool = True
    # A follower of the latest cluster came after it was due (``follower_due``).
    cluster_behind: bool = False
    # Background requests/s before the latest cluster began (0: no history).
    cluster_prior_rate: float = 0.0
    last_arrival: float = float("-inf")
    bursts_seen: int = 0
    recent_bursts: deque[BurstShape] = field(default_factory=deque)
    # Remembered arrivals (time, whether it found earlier work in flight) and
    # how many of them did.
    history: deque[tuple[float, bool]] = field(default_factory=deque)
    history_overlapping: int = 0

    def observe(self, now: float, *, in_flight: bool = True, returning: bool = False) -> None:
        """Record one arrival (request headers received). ``in_flight`` says
        whether any earlier request of this model was still queued, in ingress
        or in a forward at that moment; ``returning``, whether a forward of
        several requests ended just before and not all its clients are back
        (engine.returns): such a cluster is that wave coming back, never an
        isolated burst, whatever the silence before it."""
        gap = now - self.last_arrival
        # While earlier work is still in flight, a running forward can slow the
        # reading of a burst's later requests far past ``link_gap`` (one shared
        # core): they still belong to the cluster, up to ``busy_link_gap``.
        limit = self.busy_link_gap if in_flight else 0.0
        if gap > max(self.link_gap if in_flight else 0.0, limit) or not in_flight:
            self._close_cluster(followed_by_silence=gap >= max(self.quiet_gap, self.silence_factor * self._mean_gap))
            self.cluster_isolated = gap >= self.quiet_gap and not returning
            self.cluster_prior_rate = self._rate_before(now)
            self.cluster_start = now
            self.cluster_size = 1
            self.cluster_max_gap = 0.0
            self.cluster_behind = False
        else:
            # Checked before this arrival counts: it is the follower that was due.
            self.cluster_behind = self.cluster_behind or now > self.follower_due
            self.cluster_size += 1
            self.cluster_max_gap = max(self.cluster_max_gap, gap)
        self.last_arrival = now
        self.history.append((now, in_flight))
        self.history_overlapping += in_flight
        if len(self.history) > self.rate_memory:
            _, overlapped = self.history.popleft()
            self.history_overlapping -= overlapped

    @property
    def _mean_gap(self) -> float:
        """Mean gap between the latest cluster's arrivals (0 for a single one)."""
        if self.cluster_size < 2:
            return 0.0
        return (self.last_arrival - self.cluster_start) / (self.cluster_size - 1)

    def _rate_before(self, now: float) -> float:
        """Background arrivals per second before ``now``, over the remembered
        arrivals; traffic that came one request at a time counts as a single
        arrival over that span (it cannot make a chance cluster)."""
        if not self.history:
            return 0.0
        span = now - self.history[0][0]
        if span <= 0:
            return math.inf
        return (len(self.history) if self.history_overlapping else 1) / span

    def _close_cluster(self, *, followed_by_silence: bool = True) -> None:
        if self.cluster_size == 0:
            return
        if not self.cluster_isolated:
            return
        if not self.cluster_is_burst or not followed_by_silence:
            # Not a burst, or traffic that went on without a pause: its size predicts nothing.
            self.expected_size = 1
            return
        self.expected_size = self.cluster_size
        self.bursts_seen += 1
        span = self.last_arrival - self.cluster_start
        self.recent_bursts.append(BurstShape(self.cluster_size, span, self.cluster_max_gap))
        if len(self.recent_bursts) > self.gap_memory:
            self.recent_bursts.popleft()

    @property
    def cluster_is_burst(self) -> bool:
        """The latest cluster's arrivals so far are too dense to be a chance
        coincidence at the background rate before it."""
        if self.cluster_size < 2:
            return False
        span = self.last_arrival - self.cluster_start
        mu = self.cluster_prior_rate * span if span > 0 else 0.0
        return poisson_tail(self.cluster_size - 1, mu) <= self.burst_alpha

    @property
    def expects_burst(self) -> bool:
        """The latest cluster is, or is predicted to become, a burst: it is
        isolated and recent isolated clusters were bursts, or its arrivals are
        already too dense for chance. (Requests still in ingress are the
        latest arrivals, so they belong to it even once it has gone quiet.)"""
        if self.cluster_size == 0:
            return False
        # The cheap tests first: the chance test sums a Poisson tail.
        if self.cluster_isolated and self.expected_size > 1 and not self.cluster_behind:
            return True
        return self.cluster_is_burst

    @property
    def unseen_followers(self) -> int:
        """Arrivals still predicted for the latest cluster beyond those seen.

        Only an isolated cluster after learned bursts predicts any. Once it
        reached the learned size, its size is unknown (the next burst may be
        larger): one more is expected until it goes quiet. The caller decides how long to wait for them
        (``follow_gap`` after the latest arrival)."""
        if self.cluster_size == 0 or not self.cluster_isolated or self.expected_size < 2:
            return 0
        if self.cluster_behind and not self.cluster_is_burst:
            return 0
        if self.cluster_size < self.expected_size:
            return self.expected_size - self.cluster_size
        return 1

    @property
    def pace(self) -> float:
        """Seconds per follower of the slowest learned burst (0 while none is learned)."""
        return max((b.span / (b.size - 1) for b in self.recent_bursts), default=0.0)

    @property
    def follower_due(self) -> float:
        """When the latest cluster's next follower is due if it is the burst its history
        predicts: ``link_gap`` plus ``outlive_factor`` times as many of the slowest
        learned burst's paces as followers it would then have, after its head (infinite
        while no burst is learned). Past it, the prediction is dropped (``behind_pace``):
        arrivals at a fraction of a burst's rate are users on their own, and holding
        them for the rest of a burst that is not coming costs each of them the hold."""
        if not self.recent_bursts or self.cluster_size == 0:
            return math.inf
        return self.cluster_start + self.link_gap + self.outlive_factor * self.pace * self.cluster_size

    def behind_pace(self, now: float) -> bool:
        """At ``now`` the latest cluster is no longer the burst its history predicts: a
        follower came late, or the next one is overdue."""
        return self.cluster_behind or now > self.follower_due

    @property
    def at_learned_size(self) -> bool:
        """The latest cluster is isolated and has as many arrivals as the learned
        burst (or more): once it goes quiet, it is that burst, complete."""
        return self.cluster_isolated and self.expected_size >= 2 and self.cluster_size >= self.expected_size

    @property
    def follow_gap(self) -> float:
        """How long after the latest arrival a burst may still grow:
        ``widest_gap_factor`` times the widest gap of recent bursts, and while
        few are remembered at least ``mean_gap_factor / bursts`` times their
        mean gap, within ``[min_follow_gap, max(link_gap, busy_link_gap)]``."""
        bursts = len(self.recent_bursts)
        if not bursts:
            return min(self.link_gap, max(self.min_follow_gap, self.link_gap / 2))
        widest = max(b.widest_gap for b in self.recent_bursts)
        mean = sum(b.span for b in self.recent_bursts) / sum(b.size - 1 for b in self.recent_bursts)
        allowance = max(self.widest_gap_factor * widest, self.mean_gap_factor / bursts * mean)
        return min(max(self.link_gap, self.busy_link_gap), max(self.min_follow_gap, allowance))

    def view(self) -> ArrivalView:
        return ArrivalView(
            self.last_arrival,
            self.unseen_followers,
            self.expects_burst,
            self.follow_gap,
            self.at_learned_size,
            self.follower_due if self.unseen_followers and not self.cluster_is_burst else math.inf,
        )
