"""How ``auto`` times the candidates that agree with the reference, and which
one the samples choose: a functional core (``timing_order`` and ``pick`` are
pure) around one loop that runs forwards and reads an injected clock."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sift_server.adapters.backends.request import Choice
from sift_server.adapters.backends.seam import Backend

# auto times the candidates that pass in rounds, each round running every one of
# them once on the probe set, and compares their medians (see ``pick``). Five
# rounds: the median then ignores up to two disturbed samples per candidate, for
# about two more probe-set forwards per candidate than the three sequential
# repeats this replaced.
TIMING_ROUNDS = 5
# Candidates whose medians are within this fraction of the fastest count as equally
# fast; the first of them in ``candidates()``' order wins (see ``pick``).
NEAR_MARGIN = 0.05
# Part of a decision's key: changing how auto measures or decides redoes recorded
# decisions once (those of the sequential single timing could be an unlucky draw).
TIMING_METHOD = f"interleaved-median:{TIMING_ROUNDS}:{NEAR_MARGIN}"
# Seconds from an arbitrary origin; injected so tests can script what timing sees.
Clock = Callable[[], float]
T = TypeVar("T")
B = TypeVar("B", bound=Backend)


def timing_order(items: Sequence[T], round_index: int) -> list[T]:
    """Round ``round_index``'s order: rotated by one each round, so no candidate
    always runs first (after the probe inputs were built) or always right after
    the same other runtime (whose caches it then finds cold)."""
    if not items:
        return []
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``pick`` chose from the samples, and why."""

    choice: Choice
    fastest: Choice  # the lowest median; ``choice`` differs only within the margin
    medians: Mapping[Choice, float]


def pick(samples: Mapping[Choice, Sequence[float]], preference: Sequence[Choice], margin: float) -> Verdict:
    """The candidate the timing samples choose: the first in ``preference``
    whose median is within ``margin`` (a fraction) of the lowest median.

    The median, not the minimum: interference on a shared machine only ever adds
    time, so the minimum would also ignore it, but it is one sample, and a runtime
    whose forwards vary (thread wake-ups, allocator) can post a lucky one that its
    served forwards will not match; the median is the forward time it typically
    gives and, over interleaved rounds, ignores the few samples a stall disturbs.
    The margin: candidates this close are equally fast as far as a few rounds on
    a noisy machine can tell, and always taking the preferred one keeps noise from
    flipping the recorded choice between them from one decision to the next."""
    if not samples:
        raise ValueError("nothing was timed")
    rank = {choice: index for index, choice in enumerate(preference)}
    medians = {choice: float(statistics.median(values)) for choice, values in samples.items()}
    fastest = min(medians, key=lambda c: (medians[c], rank[c]))
    bar = medians[fastest] * (1.0 + margin)
    choice = min((c for c in medians if medians[c] <= bar), key=lambda c: rank[c])
    return Verdict(choice=choice, fastest=fastest, medians=medians)


def time_rounds(
    runners: Sequence[B], evaluate: Callable[[B], object], rounds: int, clock: Clock
) -> dict[Choice, list[float]]:
    """Seconds of each runner's ``evaluate``, ``rounds`` samples each, interleaved:
    every round runs every runner once (in ``timing_order``), so a stretch when
    another process holds the core costs each candidate a sample or two rather
    than one candidate all of its samples."""
    samples: dict[Choice, list[float]] = {runner.choice: [] for runner in runners}
    for index in range(rounds):
        for runner in timing_order(runners, index):
            start = clock()
            evaluate(runner)
            samples[runner.choice].append(clock() - start)
    return samples
