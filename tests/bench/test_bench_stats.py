from __future__ import annotations

import math

import pytest

from sift_bench.report.stats import (
    geometric_mean,
    geometric_ratio,
    median,
    percentile,
    percentiles,
    t_quantile_975,
)


def test_nearest_rank_textbook_example() -> None:
    values = [15, 20, 35, 40, 50]
    assert percentile(values, 5) == 15
    assert percentile(values, 30) == 20
    assert percentile(values, 40) == 20
    assert percentile(values, 50) == 35
    assert percentile(values, 100) == 50


def test_nearest_rank_is_always_an_observed_value_and_ignores_order() -> None:
    values = [9.0, 1.0, 5.0, 3.0, 7.0, 2.0, 8.0]
    for p in (0, 1, 10, 33.3, 50, 90, 95, 99, 100):
        assert percentile(values, p) in values
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 5.0


def test_percentile_of_100_values() -> None:
    values = list(range(1, 101))
    assert percentile(values, 95) == 95
    assert percentile(values, 99) == 99
    assert percentile(values, 99.5) == 100


def test_percentile_errors() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_percentiles_dict() -> None:
    out = percentiles([4.0, 1.0, 3.0, 2.0])
    assert out == {"n": 4, "p50": 2.0, "p90": 4.0, "p95": 4.0, "p99": 4.0, "max": 4.0}
    assert percentiles([]) == {"n": 0}


def test_median_and_geometric_mean() -> None:
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert geometric_mean([1, 4, 16]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        geometric_mean([1.0, 0.0])


def test_t_quantiles() -> None:
    assert t_quantile_975(1) == 12.706
    assert t_quantile_975(5) == 2.571
    assert t_quantile_975(30) == 2.042
    assert 1.96 < t_quantile_975(31) < t_quantile_975(30)
    assert t_quantile_975(120) == pytest.approx(1.980, abs=0.002)
    assert t_quantile_975(10_000) == pytest.approx(1.96, abs=0.001)


def test_geometric_ratio_of_identical_arms_is_one_with_a_zero_width_interval() -> None:
    r = geometric_ratio([100.0, 120.0, 90.0], [100.0, 120.0, 90.0])
    assert r.ratio == pytest.approx(1.0)
    assert r.low == pytest.approx(1.0)
    assert r.high == pytest.approx(1.0)
    assert r.n == 3


def test_geometric_ratio_interval_by_hand() -> None:
    # Per-trial ratios 2 and 8: log mean ln 4, sd ln4/sqrt2, se ln2, half-width 12.706 ln 2.
    r = geometric_ratio([2.0, 80.0], [1.0, 10.0])
    assert r.ratio == pytest.approx(4.0)
    assert r.per_trial == pytest.approx((2.0, 8.0))
    assert r.low == pytest.approx(4.0 * 2.0**-12.706)
    assert r.high == pytest.approx(4.0 * 2.0**12.706)


def test_geometric_ratio_three_trials() -> None:
    a, b = [110.0, 105.0, 120.0], [100.0, 100.0, 100.0]
    r = geometric_ratio(a, b)
    logs = [math.log(x / y) for x, y in zip(a, b, strict=True)]
    centre = sum(logs) / 3
    sd = math.sqrt(sum((x - centre) ** 2 for x in logs) / 2)
    assert r.ratio == pytest.approx(math.exp(centre))
    assert r.low == pytest.approx(math.exp(centre - 4.303 * sd / math.sqrt(3)))
    assert r.high == pytest.approx(math.exp(centre + 4.303 * sd / math.sqrt(3)))
    assert r.low is not None and r.high is not None and r.low < r.ratio < r.high


def test_geometric_ratio_is_antisymmetric() -> None:
    a, b = [110.0, 95.0, 130.0, 101.0], [100.0, 100.0, 100.0, 97.0]
    ab, ba = geometric_ratio(a, b), geometric_ratio(b, a)
    assert ab.ratio * ba.ratio == pytest.approx(1.0)
    assert ab.low is not None and ba.high is not None
    assert ab.low * ba.high == pytest.approx(1.0)


def test_geometric_ratio_single_trial_has_no_interval() -> None:
    r = geometric_ratio([3.0], [2.0])
    assert r.ratio == pytest.approx(1.5)
    assert r.low is None and r.high is None


def test_geometric_ratio_errors() -> None:
    with pytest.raises(ValueError):
        geometric_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        geometric_ratio([], [])
    with pytest.raises(ValueError):
        geometric_ratio([0.0], [1.0])
