from __future__ import annotations

from collections import Counter

import pytest

from sift_bench.run.ordering import balanced_orders, trial_orders, williams_design


def test_three_arms_follow_the_published_order() -> None:
    orders = ["".join(o) for o in trial_orders(["A", "B", "C"], 6)]
    assert orders == ["ABC", "CBA", "BCA", "ACB", "CAB", "BAC"]


def test_orders_cycle_past_the_design() -> None:
    orders = ["".join(o) for o in trial_orders(["A", "B", "C"], 8)]
    assert orders[6:] == ["ABC", "CBA"]


def test_two_and_one_arms() -> None:
    assert trial_orders(["A", "B"], 3) == [["A", "B"], ["B", "A"], ["A", "B"]]
    assert trial_orders(["A"], 2) == [["A"], ["A"]]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_small_designs_are_all_permutations(n: int) -> None:
    orders = balanced_orders(n)
    assert len(orders) == len(set(orders))
    assert all(sorted(o) == list(range(n)) for o in orders)
    assert len(orders) == [1, 1, 2, 6][n]


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
def test_williams_design_is_balanced(n: int) -> None:
    rows = williams_design(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    # Every arm in every position equally often.
    for position in range(n):
        counts = Counter(row[position] for row in rows)
        assert set(counts) == set(range(n))
        assert len(set(counts.values())) == 1
    # Every ordered pair of different arms adjacent equally often (carry-over balance).
    pairs = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    assert len(pairs) == n * (n - 1)
    assert len(set(pairs.values())) == 1


def test_more_than_three_arms_use_williams() -> None:
    assert balanced_orders(4) == williams_design(4)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        trial_orders(["A"], 0)
    with pytest.raises(ValueError):
        balanced_orders(0)
