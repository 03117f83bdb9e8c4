"""Small, dependency-free statistics: nearest-rank percentiles, geometric means
and geometric ratios with a 95 % t-interval over trials (on log ratios)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)

# Two-sided 95 % Student t quantiles (t_{0.975, df}) for df = 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959963984540054


def percentile(values: Iterable[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``p`` % of the
    values at or below it (``p`` = 0 gives the minimum, 100 the maximum)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def percentiles(values: Sequence[float], ps: Sequence[float] = PERCENTILES) -> dict[str, float]:
    """``{"n", "p50", ..., "max"}``; only ``n`` (0) when there are no values."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    out: dict[str, float] = {"n": len(ordered)}
    for p in ps:
        out[f"p{p:g}"] = percentile(ordered, p)
    out["max"] = ordered[-1]
    return out


def median(values: Sequence[float]) -> float:
    """The usual median (mean of the two middle values for an even count)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of an empty sequence")
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of an empty sequence")
    return math.fsum(values) / len(values)


def geometric_mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("geometric mean of an empty sequence")
    if any(v <= 0 for v in values):
        raise ValueError("geometric mean needs positive values")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: a table up to 30, a Cornish-Fisher expansion beyond."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """Geometric mean of per-trial ratios ``a_i / b_i`` with a 95 % interval
    (``low``/``high`` are None with fewer than two trials)."""

    ratio: float
    low: float | None
    high: float | None
    n: int
    per_trial: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "n": self.n, "per_trial": list(self.per_trial)}


def geometric_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> RatioInterval:
    """Paired geometric ratio: trial i compares ``numerators[i]`` with
    ``denominators[i]``. The interval is the t-interval of the mean log ratio,
    exponentiated, so it is symmetric in log space and ``ratio(b, a) = 1 / ratio(a, b)``."""
    if len(numerators) != len(denominators):
        raise ValueError("ratios need paired samples of equal length")
    if not numerators:
        raise ValueError("ratios need at least one pair")
    if any(v <= 0 for v in (*numerators, *denominators)):
        raise ValueError("ratios need positive values")
    logs = [math.log(a) - math.log(b) for a, b in zip(numerators, denominators, strict=True)]
    n = len(logs)
    centre = math.fsum(logs) / n
    per_trial = tuple(math.exp(x) for x in logs)
    if n < 2:
        return RatioInterval(math.exp(centre), None, None, n, per_trial)
    var = math.fsum((x - centre) ** 2 for x in logs) / (n - 1)
    half = t_quantile_975(n - 1) * math.sqrt(var / n)
    return RatioInterval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n, per_trial)
