"""Returning waves: what the end of a forward predicts about the next arrivals.

Pure code over timestamps the shell passes in.

Closed-loop clients (a search service with a fixed pool of workers, a batch
job with N concurrent calls) send their next request a few milliseconds after
the previous answer. So when a forward of N requests ends, about N arrivals
follow within a short, stable delay: a *returning wave*. Dispatching the first
of them at once splits the wave, and the two halves then alternate forever
(each half returns while the other runs). A wave that is known to be coming is
evidence of imminent arrivals, like headers in ingress.

The model learns two things from the waves it has seen, and nothing from
anything else:

* how reliably waves come back: the share of each forward's requests matched
  by arrivals within ``horizon`` after it ended (capped at its size), averaged
  over the last ``memory`` waves of at least ``min_size`` requests; below
  ``min_share`` (a client that went away) no return is expected at all. Random
  (open-loop) traffic also puts arrivals after a forward's end, so a wave
  counts only when its returns came too close together to be a coincidence
  at the background rate: ``P[N >= seen - 1] <= alpha`` for ``N`` Poisson
  over the span from its first to its last return (random traffic spreads
  ``k`` arrivals over about ``k / rate``; clients coming back from one
  forward arrive within their turnaround jitter); otherwise its share is 0;
* how long a wave takes to come back: the size and the delay of the last
  return of each of the last ``memory`` complete waves. A wave of ``n`` is
  allowed ``margin`` times the slowest of those at least as large, or, if all
  were smaller, the largest one's delay scaled up by ``n / size`` (on one
  shared core the server reads a wave's requests one after the other, so a
  wave of 32 takes about four times as long as one of 8: one delay for all
  sizes cut the first wave of 32 after waves of 8 short); never more than
  its horizon.

A wave nobody came back to (a burst whose clients went quiet, the end of a
closed loop) says nothing about how waves come back, so it counts neither
way; a few returns too spread to be a wave count as 0. It does say that the
loop has stopped for now: answers went out and no arrival followed them. Until
a wave comes back again (too close together for chance), no return is
expected (``stopped``; only ``restart_waves`` waves in a row that came back,
at least ``min_share`` of each, restart it, since a few independent arrivals
soon after a forward pass the chance test now and then): independent
users after a closed loop, whose forwards
of one or two requests are too small to be judged, were otherwise held after
every forward for the loop's clients (``expected``, ``missing``).

A wave's horizon is ``horizon``, or ``share`` of its forward's duration if
longer, counted from its latest return once one came: on one shared core the
loop reads a wave's requests one after the other (tens of milliseconds for 32
after a forward of several hundred), a slow client sends them one after the
other too, and a fixed horizon would never see such a wave complete.

A wave is open from the end of its forward until the next forward ends; the
policy decides whether holding for it pays (see ``engine.policy``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sift_server.engine.arrivals import poisson_tail


@dataclass(slots=True)
class Wave:
    start: float
    size: int
    horizon: float
    seen: int = 0
    first_delay: float = 0.0
    last_delay: float = 0.0


@dataclass(slots=True)
class ReturnModel:
    # Arrivals later than this after a forward ended are not its clients coming back.
    horizon: float = 0.010
    # A slower forward's wave may take this share of its duration to come back.
    share: float = 0.10
    memory: int = 16
    min_share: float = 0.75
    # Smaller waves say nothing either way (two arrivals soon after a forward are common).
    min_size: int = 3
    alpha: float = 1e-2
    margin: float = 1.5
    # Waves judged (at least ``min_size``, some arrival after them) before their
    # shares can say that arrivals do not follow answers (``independent``).
    min_judged: int = 4
    # Arrivals remembered for the background rate.
    rate_memory: int = 64
    # Waves still within ``horizon`` of their forward's end, oldest first: a
    # forward may end before the stragglers of the one before it are back.
    open: deque[Wave] = field(default_factory=deque)
    shares: deque[float] = field(default_factory=deque)
    # (size, delay of the last return) of recent complete waves.
    delays: deque[tuple[int, float]] = field(default_factory=deque)
    # Remembered arrival times, for the background rate.
    history: deque[float] = field(default_factory=deque)
    # When the latest return of a wave arrived.
    last_return: float = float("-inf")
    # Of the recent waves that came back (too close together for chance), whether all of each did.
    whole: deque[bool] = field(default_factory=deque)
    # The latest wave to close had no return at all, and no run of ``restart_waves`` waves came
    # back since (at least ``min_share`` of each): the loop stopped.
    stopped: bool = False
    restart_waves: int = 2
    # Waves of at least ``min_size`` in a row that came back, at least ``min_share`` of each.
    returned_run: int = 0

    def forward_ended(self, now: float, completed: int, seconds: float = 0.0) -> None:
        """A forward that ran ``seconds`` ended at ``now`` and answered ``completed`` requests."""
        self._expire(now)
        if completed > 0:
            self.open.append(Wave(now, completed, max(self.horizon, self.share * seconds)))

    def awaiting(self, now: float) -> bool:
        """A wave of at least ``min_size`` requests is open at ``now`` and not all back."""
        return any(w.size >= self.min_size and w.seen < w.size and now <= self._closes_at(w) for w in self.open)

    def observe(self, now: float) -> None:
        """One arrival (request headers received): the return of the oldest
        open wave that still misses some, if any."""
        self._expire(now)
        wave = next((w for w in self.open if w.seen < w.size), None)
        self.history.append(now)
        if len(self.history) > self.rate_memory:
            self.history.popleft()
        if wave is not None:
            wave.seen += 1
            if wave.seen == 1:
                wave.first_delay = now - wave.start
            wave.last_delay = now - wave.start
            self.last_return = now

    def _expire(self, now: float) -> None:
        while self.open and now > self._closes_at(self.open[0]):
            self._close(self.open.popleft())

    @staticmethod
    def _closes_at(wave: Wave) -> float:
        """A wave is open ``horizon`` after its forward ended, or after its
        latest return if one came: a slow client (one core handling the answers
        one by one) sends its first request tens of milliseconds after the
        forward, and the others one after the other."""
        return wave.start + wave.last_delay + wave.horizon

    def _close(self, wave: Wave) -> None:
        if wave.seen == 0:
            self.stopped = True
            self.returned_run = 0
            return
        if wave.size < self.min_size:
            return
        spread = wave.last_delay - wave.first_delay
        returned = wave.seen >= 2 and poisson_tail(wave.seen - 1, self._rate() * spread) <= self.alpha
        # Only ``restart_waves`` waves in a row that came back (at least ``min_share`` of each, a
        # straggler allowed) restart the loop: a few independent arrivals soon after a forward
        # pass the chance test now and then, even as a whole wave of five (in the simulator,
        # Poisson users after a closed loop); twice in a row hardly ever.
        self.returned_run = self.returned_run + 1 if returned and wave.seen >= self.min_share * wave.size else 0
        self.stopped = self.stopped and self.returned_run < self.restart_waves
        self._remember(self.shares, wave.seen / wave.size if returned else 0.0)
        if returned:
            self._remember(self.whole, wave.seen == wave.size)
        if returned and wave.seen == wave.size:
            self._remember(self.delays, (wave.size, wave.last_delay))

    def _rate(self) -> float:
        """Arrivals per second over the remembered ones."""
        if len(self.history) < 2:
            return 0.0
        span = self.history[-1] - self.history[0]
        return (len(self.history) - 1) / span if span > 0 else float("inf")

    def _remember(self, values: deque[Any], value: Any) -> None:
        values.append(value)
        if len(values) > self.memory:
            values.popleft()

    @property
    def reliable(self) -> bool:
        return bool(self.shares) and bool(self.delays) and sum(self.shares) / len(self.shares) >= self.min_share

    @property
    def returning(self) -> bool:
        """Waves come back reliably and the loop has not stopped (``stopped``)."""
        return self.reliable and not self.stopped

    @property
    def independent(self) -> bool:
        """Arrivals do not follow answers: enough waves were judged and they do
        not come back reliably (an open loop: users who do not wait for each
        other's answers, whose arrivals after a forward are no more than chance,
        or clusters of their own that happen to follow it)."""
        judged = len(self.shares)
        return judged >= self.min_judged and sum(self.shares) / judged < self.min_share

    @property
    def clearly_independent(self) -> bool:
        """``independent`` on twice as many judged waves, and either at most ``1 -
        min_share`` of the returns a closed loop would send came back, or fewer than
        ``min_share`` of the waves that did come back came back whole. A slow
        client's closed loop, before its waves are learned, has half of its waves
        judged spread out (its shares' mean fell to 0.31-0.5 in the simulator), but
        the others come back whole (at least 0.88 of them in every closed family);
        Poisson arrivals stay near a share of 0, and bursty users' clusters that
        follow a forward match its size only by chance."""
        judged = len(self.shares)
        if judged < 2 * self.min_judged or not self.independent:
            return False
        mean = sum(self.shares) / judged
        whole = sum(self.whole) / len(self.whole) if self.whole else 1.0
        return mean <= 1 - self.min_share or whole < self.min_share

    def allowance(self, wave: Wave) -> float:
        """How long after its forward ``wave`` may take to come back: ``margin``
        times the slowest recent complete wave at least as large (the next
        one's slowest return is often a little later), or the largest one's
        delay scaled to this wave's size; within its horizon."""
        return min(wave.last_delay + wave.horizon, self.margin * self.span(wave.size))

    def span(self, size: int) -> float:
        """How long after its forward a wave of ``size`` takes to come back in
        full, from the recent complete waves: the slowest one at least as
        large, or the largest one's delay scaled to ``size`` (0 while unknown)."""
        if not self.delays:
            return 0.0
        larger = [delay for known, delay in self.delays if known >= size]
        if larger:
            return max(larger)
        known, slowest = max(self.delays)
        return slowest * size / known

    def scaled_span(self, size: int) -> float:
        """The time a wave of ``size`` takes to come back, scaled from every
        recent complete wave by size (the slowest per request); unlike
        ``span``, a wave of 8 after waves of 32 is not taken to be as slow as
        they were (0 while unknown)."""
        return max((delay * size / known for known, delay in self.delays), default=0.0)

    def expected(self, now: float) -> int:
        """Returns still expected at ``now`` from open waves whose allowance
        has not passed (0 where waves do not come back reliably, or the loop stopped)."""
        if not self.returning:
            return 0
        return sum(w.size - w.seen for w in self.open if now < w.start + self.allowance(w))

    def missing(self, now: float) -> int:
        """Returns not back yet from open waves still within their horizon at
        ``now``, their allowance passed or not (0 where waves do not come back reliably, or the
        loop stopped)."""
        if not self.returning:
            return 0
        return sum(w.size - w.seen for w in self.open if now <= self._closes_at(w))

    def deadline(self, now: float) -> float:
        """When the open waves still missing returns at ``now`` should be back in full."""
        due = [w.start + self.allowance(w) for w in self.open if w.seen < w.size]
        pending = [t for t in due if now < t]
        return max(pending) if pending else float("-inf")

    def back(self, now: float) -> bool:
        """A reliable wave of several requests came back in full and nothing more is expected."""
        return self.returning and any(w.size > 1 and w.seen == w.size for w in self.open) and not self.expected(now)
