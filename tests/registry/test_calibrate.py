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


class ScriptedAdapter:
    """An encoder whose forwards take scripted seconds on a fake clock: each
    batch size has a base time, and ``slow`` lists (size, call) pairs that take
    ten times longer (another process took the core)."""

    def __init__(self, per_item: dict[int, float], slow: set[tuple[int, int]]) -> None:
        from sift_server.adapters.base import AdapterInfo

        self.info = AdapterInfo(tasks=frozenset({"encode"}))
        self.per_item = per_item
        self.slow = slow
        self.now = 0.0
        self.calls: dict[int, int] = {}

    def prepare(self, task: object) -> object:
        from sift_server.forward_io import Prepared

        texts = task.texts  # type: ignore[attr-defined]
        return Prepared(item_costs=[16] * len(texts), compat_key="k", payload=None)

    def forward(self, parts: list[object]) -> list[list[object]]:
        size = parts[0].stop - parts[0].start  # type: ignore[attr-defined]
        call = self.calls.get(size, 0)
        self.calls[size] = call + 1
        seconds = size * self.per_item[size]
        self.now += seconds * (10 if (size, call) in self.slow else 1)
        return [[None] * size]

    def clock(self) -> float:
        return self.now


def test_one_slow_sample_after_the_best_size_does_not_cap_the_model() -> None:
    from sift_server.registry.calibrate import measure

    rising = {1: 1 / 300, 2: 1 / 500, 4: 1 / 650, 8: 1 / 850, 16: 1 / 1000, 32: 1 / 1250}
    # Calls 0 (untimed) and 1-3 (first pass) at 32 items all hit a busy core: the first pass sees a drop.
    adapter = ScriptedAdapter(rising, slow={(32, 0), (32, 1), (32, 2), (32, 3)})
    measured = measure(adapter, repeats=3, clock=adapter.clock)  # type: ignore[arg-type]
    assert measured is not None and measured.best_size == 32
    assert load_caps(measured, Caps()) is None


def test_a_drop_that_the_second_pass_confirms_still_caps() -> None:
    from sift_server.registry.calibrate import measure

    peaked = {1: 1 / 300, 2: 1 / 500, 4: 1 / 650, 8: 1 / 850, 16: 1 / 1000, 32: 1 / 700}
    adapter = ScriptedAdapter(peaked, slow=set())
    measured = measure(adapter, repeats=3, clock=adapter.clock)  # type: ignore[arg-type]
    assert measured is not None and measured.best_size == 16
    assert adapter.calls[32] == 1 + 3 + 3  # untimed, first pass, confirmation
    assert load_caps(measured, Caps()) == Caps(max_requests=64, max_cost=16 * 16)
