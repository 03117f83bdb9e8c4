import math

import pytest

from sift_server.simulator.metrics import percentile


def test_nearest_rank_reference_values() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert percentile(values, 5) == 15.0
    assert percentile(values, 30) == 20.0
    assert percentile(values, 40) == 20.0
    assert percentile(values, 50) == 35.0
    assert percentile(values, 100) == 50.0


def test_nearest_rank_returns_an_observed_value_and_ignores_order() -> None:
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 95) == 95.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 99.5) == 100.0
    assert percentile([3.0], 50) == 3.0


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 0)
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    assert not math.isnan(percentile([1.0, 2.0], 1e-9))
