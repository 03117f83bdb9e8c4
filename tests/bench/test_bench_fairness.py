"""Fairness figures the bench derives from the joined trace: forwards that
passed a request over, the reachable ceiling, and the max/p50 target."""

from __future__ import annotations

from typing import Any

from sift_bench.report.analysis import passed_over
from sift_bench.report.targets import reachable_ceiling


def _phase(rows: list[tuple[float, float, int]]) -> dict[str, Any]:
    """rows: (admitted, own forward start, forward id) per request."""
    return {
        "admitted": [r[0] for r in rows],
        "start": [r[1] for r in rows],
        "forward_id": [r[2] for r in rows],
    }


def test_a_request_joining_the_next_forward_is_passed_over_by_none() -> None:
    # Forward 0 starts at 1.0; b and c are admitted while it runs and join forward 1 at 2.0.
    phase = _phase([(0.9, 1.0, 0), (1.2, 2.0, 1), (1.5, 2.0, 1)])
    assert passed_over(phase, [0, 1, 2]) == [0, 0, 0]


def test_a_request_left_behind_counts_every_forward_that_started_before_its_own() -> None:
    # The long request is admitted at 0.5 and runs only in forward 3: forwards 0, 1 and 2 passed it over.
    phase = _phase([(0.6, 1.0, 0), (1.1, 2.0, 1), (2.1, 3.0, 2), (0.5, 4.0, 3), (3.5, 4.0, 3)])
    assert passed_over(phase, [0, 1, 2, 3, 4]) == [0, 0, 0, 3, 0]


def test_reachable_ceiling_only_counts_batches_the_in_flight_items_can_form() -> None:
    ceiling = {"sizes": {"1": {"items_per_s": 100.0}, "8": {"items_per_s": 250.0}, "64": {"items_per_s": 400.0}}}
    assert reachable_ceiling(ceiling, 8) == {"size": 8.0, "items_per_s": 250.0}
    assert reachable_ceiling(ceiling, 64) == {"size": 64.0, "items_per_s": 400.0}
    assert reachable_ceiling({"sizes": {"16": {"items_per_s": 1.0}}}, 8) is None


def test_ceiling_batches_cover_every_text_of_the_workload() -> None:
    # The ceiling once timed eight batches per size: with one passage in twenty
    # texts, its figure moved with how many passages the sample happened to hold.
    from sift_bench.run.ceiling import batches_covering

    texts = [f"t{i}" for i in range(10)]
    batches = batches_covering(texts, 4)
    assert [len(b) for b in batches] == [4, 4, 4]
    assert {t for b in batches for t in b} == set(texts)
    assert batches[-1] == ["t8", "t9", "t0", "t1"]
    assert batches_covering(texts, 1) == [[t] for t in texts]
    assert batches_covering(texts, 64) == [[texts[k % 10] for k in range(64)]]
