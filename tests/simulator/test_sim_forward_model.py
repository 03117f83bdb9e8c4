import json
from pathlib import Path

import pytest

from sift_bench.simulate.forward_model import (
    CPU_LIKE,
    GPU_LIKE,
    LinearForward,
    fit_linear,
    load_fitted,
    load_points,
)


def test_linear_forward_time_and_capacity() -> None:
    model = LinearForward(a=0.008, b=0.00015)
    assert model(1) == pytest.approx(0.00815)
    assert model(64) == pytest.approx(0.0176)
    assert model.capacity(64) == pytest.approx(64 / 0.0176)
    with pytest.raises(ValueError):
        model(0)


def test_presets_have_the_intended_shape() -> None:
    assert GPU_LIKE.a > 10 * GPU_LIKE.b
    assert CPU_LIKE.b > CPU_LIKE.a
    # A GPU-like forward of 32 costs little more than one; a CPU-like one costs ~20x.
    assert GPU_LIKE(32) < 2 * GPU_LIKE(1)
    assert CPU_LIKE(32) > 15 * CPU_LIKE(1)


def test_invalid_models_are_rejected() -> None:
    with pytest.raises(ValueError):
        LinearForward(a=-0.001, b=0.001)
    with pytest.raises(ValueError):
        LinearForward(a=0.0, b=0.0)


def test_fit_recovers_exact_line() -> None:
    fitted = fit_linear({1: 0.0031, 8: 0.0031 + 7 * 0.0002, 32: 0.0031 + 31 * 0.0002})
    assert fitted.a == pytest.approx(0.0029)
    assert fitted.b == pytest.approx(0.0002)
    assert fitted.name == "fitted"


def test_fit_is_least_squares_on_noisy_points() -> None:
    # Points off the line y = 1 + n by +-0.5 symmetrically: the fit is the line itself.
    fitted = fit_linear({1: 2.5, 2: 2.5, 3: 4.5, 4: 4.5})
    assert fitted.b == pytest.approx(0.8)
    assert fitted.a == pytest.approx(1.5)
    residual = sum((fitted(n) - t) ** 2 for n, t in {1: 2.5, 2: 2.5, 3: 4.5, 4: 4.5}.items())
    for a, b in ((1.0, 1.0), (1.5, 0.8 + 0.01), (1.4, 0.8)):
        other = sum((a + b * n - t) ** 2 for n, t in {1: 2.5, 2: 2.5, 3: 4.5, 4: 4.5}.items())
        assert residual <= other


def test_fit_is_constrained_to_non_negative_coefficients() -> None:
    flat = fit_linear({1: 0.0102, 8: 0.0100, 32: 0.0099})
    assert flat.b == 0.0
    assert flat.a == pytest.approx((0.0102 + 0.0100 + 0.0099) / 3)
    through_origin = fit_linear({1: 0.0001, 10: 0.0020})
    assert through_origin.a == 0.0
    assert through_origin.b > 0


def test_fit_needs_two_sizes() -> None:
    with pytest.raises(ValueError):
        fit_linear({8: 0.01})
    with pytest.raises(ValueError):
        fit_linear({0: 0.01, 4: 0.02})


def test_points_load_from_json(tmp_path: Path) -> None:
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"batch_seconds": {"1": 0.003, "8": [0.005, 0.004, 0.009], "32": 0.010}}))
    assert load_points(path) == {1: 0.003, 8: 0.005, 32: 0.010}
    assert load_fitted(path).b > 0
    path.write_text(json.dumps({"seconds": {}}))
    with pytest.raises(ValueError):
        load_points(path)
