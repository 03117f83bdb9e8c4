"""Rows grouped by length for a runtime's forward (``backends.buckets``): the
plan is exact and deterministic, and running by groups answers what the padded
batch answers, in the rows' order."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np
import pytest

from sift_server.adapters.backends.buckets import plan, run_grouped


def cost(lengths: list[int], groups: list[list[int]], call_cost: int) -> int:
    return sum(call_cost + len(g) * max(lengths[i] for i in g) for g in groups)


def test_every_row_lands_in_one_group_sorted_by_length() -> None:
    lengths = [30, 12, 41, 12, 29, 40, 24]
    groups = plan(lengths, call_cost=8)
    flat = [i for g in groups for i in g]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths)


def test_equal_lengths_make_one_group() -> None:
    assert plan([20] * 8, call_cost=1) == [list(range(8))]


def test_a_large_call_cost_keeps_the_padded_batch() -> None:
    lengths = [10, 40, 12, 38]
    assert plan(lengths, call_cost=1000) == [[0, 2, 3, 1]]


def test_free_calls_split_every_distinct_length() -> None:
    assert plan([5, 9, 5, 9, 7], call_cost=0) == [[0, 2], [4], [1, 3]]


def test_two_length_clusters_split_where_padding_outweighs_a_call() -> None:
    # Two short and two long rows: one group pads 2 x 30 tokens, the split costs 16.
    assert plan([10, 40, 11, 40], call_cost=16) == [[0, 2], [1, 3]]


def test_the_plan_is_the_cheapest_partition_of_the_sorted_rows() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        lengths = [int(x) for x in rng.integers(5, 60, size=int(rng.integers(1, 9)))]
        call_cost = int(rng.integers(0, 40))
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        best = min(
            cost(lengths, [order[a:b] for a, b in itertools.pairwise((0, *cuts, len(order)))], call_cost)
            for k in range(len(order))
            for cuts in itertools.combinations(range(1, len(order)), k)
        )
        assert cost(lengths, plan(lengths, call_cost), call_cost) == best


def test_groups_hold_at_most_max_rows() -> None:
    groups = plan([16] * 10, call_cost=100, max_rows=4)
    # Equal lengths: the fewest groups the cap allows, none over it.
    assert len(groups) == 3 and max(len(g) for g in groups) == 4
    assert sorted(i for g in groups for i in g) == list(range(10))


def test_no_rows_no_groups() -> None:
    assert plan([]) == []


@pytest.mark.parametrize(("call_cost", "max_rows"), [(-1, 4), (0, 0)])
def test_bad_parameters_are_refused(call_cost: int, max_rows: int) -> None:
    with pytest.raises(ValueError, match="call_cost"):
        plan([3], call_cost=call_cost, max_rows=max_rows)


def padded_batch(lengths: list[int], width: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    mask = np.zeros((len(lengths), width), dtype=np.int64)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    ids = rng.integers(1, 100, size=mask.shape) * mask
    return {"input_ids": ids, "attention_mask": mask, "class_slots": np.zeros((len(lengths), 3), dtype=np.int64)}


def test_running_by_groups_answers_the_padded_batch_in_row_order() -> None:
    calls: list[tuple[int, int]] = []

    def runner(feed: Mapping[str, np.ndarray]) -> np.ndarray:
        ids, mask = feed["input_ids"], feed["attention_mask"]
        assert ids.shape == mask.shape and feed["class_slots"].shape == (ids.shape[0], 3)
        # No group carries a column of padding only: it was cut to its longest row.
        assert mask[:, -1].any()
        calls.append(ids.shape)
        # A per-row answer that depends on the real tokens only, as a masked encoder's does.
        return np.stack([(ids * mask).sum(axis=1), mask.sum(axis=1)], axis=1).astype(np.float32)

    lengths = [7, 30, 8, 29, 7, 31]
    feed = padded_batch(lengths, 31)
    expected = np.stack([feed["input_ids"].sum(axis=1), np.array(lengths)], axis=1).astype(np.float32)
    got = run_grouped(runner, feed, "attention_mask", ("input_ids", "attention_mask"), call_cost=4)
    np.testing.assert_array_equal(got, expected)
    assert calls == [(3, 8), (3, 31)]


def test_one_group_is_one_call_on_the_batch_as_given() -> None:
    feed = padded_batch([12, 12, 12], 12)
    seen: list[Mapping[str, np.ndarray]] = []

    def runner(f: Mapping[str, np.ndarray]) -> np.ndarray:
        seen.append(f)
        return np.ones((f["input_ids"].shape[0], 1), dtype=np.float32)

    run_grouped(runner, feed, "attention_mask", ("input_ids", "attention_mask"), call_cost=4)
    assert len(seen) == 1 and seen[0] is feed
