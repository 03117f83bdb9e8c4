"""Balanced run orders of the arms across trials.

Each trial runs every arm once, in a different order, so that drift of a shared
machine (and whatever the previous arm leaves behind: warm caches, a hot CPU)
falls on every arm alike. With up to three arms the orders are all
permutations, cycled (for three: ABC, CBA, BCA, ACB, CAB, BAC, so any three
consecutive trials already put each arm once in each position). With more,
a Williams design: every arm appears in every position equally often and
follows every other arm equally often (over ``n`` trials for an even number of
arms, ``2n`` for an odd one).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

# The published order for three arms (A, B, C = 0, 1, 2).
_THREE: tuple[tuple[int, ...], ...] = ((0, 1, 2), (2, 1, 0), (1, 2, 0), (0, 2, 1), (2, 0, 1), (1, 0, 2))


def williams_design(n: int) -> list[tuple[int, ...]]:
    """Rows of a Williams (carry-over balanced Latin) square for ``n`` arms."""
    if n < 1:
        raise ValueError("need at least one arm")
    # First row 0, 1, n-1, 2, n-2, ...; the others shift it by one each.
    first = [0]
    low, high = 1, n - 1
    for k in range(1, n):
        if k % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    rows = [tuple((x + shift) % n for x in first) for shift in range(n)]
    if n % 2:
        rows += [tuple(reversed(row)) for row in rows]
    return rows


def balanced_orders(n: int) -> list[tuple[int, ...]]:
    """The cycle of arm orders (as indices) for ``n`` arms."""
    if n < 1:
        raise ValueError("need at least one arm")
    if n == 3:
        return list(_THREE)
    if n < 3:
        return list(itertools.permutations(range(n)))
    return williams_design(n)


def trial_orders(arms: Sequence[T], trials: int) -> list[list[T]]:
    """The order of ``arms`` in each of ``trials`` trials (the cycle repeats)."""
    if trials < 1:
        raise ValueError("need at least one trial")
    cycle = balanced_orders(len(arms))
    return [[arms[i] for i in cycle[t % len(cycle)]] for t in range(trials)]
