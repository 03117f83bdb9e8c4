"""The efficient batch a forward curve yields, and the caps it sets under load."""

from __future__ import annotations

from sift_server.engine.batch_queue import Caps
from sift_server.registry.calibrate import Curve, load_caps


def curve(rates: dict[int, float]) -> Curve:
    return Curve(seconds={n: n / rate for n, rate in rates.items()}, tokens_per_item=16)


def test_a_clear_optimum_caps_batches_under_load_in_tokens() -> None:
    peaked = curve({1: 43, 4: 87, 8: 108, 16: 126, 32: 100})
    assert peaked.best_size == 16
    assert load_caps(peaked, Caps()) == Caps(max_requests=64, max_cost=16 * 16)


def test_a_nearly_flat_curve_does_not_shrink_batches_to_its_noisy_maximum() -> None:
    # OpenVINO bf16 on this CPU: about as fast from batch 4 on; the maximum at 4 is noise.
    flat = curve({1: 150, 4: 240, 8: 235, 16: 236, 32: 232})
    assert flat.best_size == 32
    assert load_caps(flat, Caps()) is None
