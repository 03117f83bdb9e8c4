"""The efficient batch a forward curve yields, and the caps it sets under load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sift_server.engine.batch_queue import Caps
from sift_server.registry.calibrate import Curve, CurveRecords, load_caps
from sift_server.registry.catalog import ModelSpec, load_spec


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


def _spec(tmp_path: Path, backend: str = "auto") -> ModelSpec:
    path = tmp_path / "m.yaml"
    path.write_text(f"name: m\nadapter: sentence-embedder\nsource: {{path: m}}\ntasks: [encode]\nbackend: {backend}\n")
    return load_spec(path)


class _Recording:
    """``calibrate.measure`` replaced: counts its calls and answers a fixed curve."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, adapter: object) -> Curve:
        self.calls += 1
        return curve({1: 40.0 + self.calls, 8: 100.0, 32: 90.0})


def _encoder(runtime: dict[str, object]) -> Any:
    from sift_server.adapters.base import AdapterInfo

    class Encoder:
        info = AdapterInfo(tasks=frozenset({"encode"}), runtime=runtime)

    return Encoder()


def test_a_curve_is_measured_once_and_read_back_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sift_server.registry import calibrate

    measured = _Recording()
    monkeypatch.setattr(calibrate, "measure", measured)
    monkeypatch.setattr(calibrate, "agrees", lambda curve, adapter: True)
    spec, encoder = _spec(tmp_path), _encoder({"backend": "openvino", "precision": "bf16", "selected_by": "auto"})
    first = CurveRecords(tmp_path / "cache").curve(spec, encoder)
    # The next start: the same entry and runtime, chosen from the record this time.
    again = _encoder({"backend": "openvino", "precision": "bf16", "selected_by": "auto (recorded)"})
    second = CurveRecords(tmp_path / "cache").curve(spec, again)
    assert measured.calls == 1
    assert first == second


def test_another_runtime_or_entry_is_measured_anew_and_remeasure_replaces_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sift_server.registry import calibrate

    measured = _Recording()
    monkeypatch.setattr(calibrate, "measure", measured)
    monkeypatch.setattr(calibrate, "agrees", lambda curve, adapter: True)
    records = CurveRecords(tmp_path / "cache")
    records.curve(_spec(tmp_path), _encoder({"backend": "openvino", "precision": "bf16"}))
    records.curve(_spec(tmp_path), _encoder({"backend": "torch", "precision": "fp32"}))
    records.curve(_spec(tmp_path, "torch"), _encoder({"backend": "torch", "precision": "fp32"}))
    assert measured.calls == 3
    fresh = CurveRecords(tmp_path / "cache", remeasure=True).curve(
        _spec(tmp_path), _encoder({"backend": "openvino", "precision": "bf16"})
    )
    assert measured.calls == 4
    assert records.curve(_spec(tmp_path), _encoder({"backend": "openvino", "precision": "bf16"})) == fresh
    assert measured.calls == 4


def test_a_cache_that_cannot_be_written_still_gives_the_measured_curve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from sift_server.registry import calibrate

    monkeypatch.setattr(calibrate, "measure", _Recording())
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "curves").write_text("a file where the folder goes: every write fails, for root too")
    got = CurveRecords(cache).curve(_spec(tmp_path), _encoder({"backend": "torch"}))
    assert got is not None
    assert "could not record the forward curve" in caplog.text


def test_models_that_do_not_encode_have_no_curve(tmp_path: Path) -> None:
    from sift_server.adapters.base import AdapterInfo

    class Scorer:
        info = AdapterInfo(tasks=frozenset({"score"}))

    assert CurveRecords(tmp_path).curve(_spec(tmp_path), Scorer()) is None  # type: ignore[arg-type]


def test_preparing_a_model_records_its_curve_for_the_server(tmp_path: Path) -> None:
    """``sift models prepare`` and the deciding child: the next start reads the curve."""
    from sift_server.registry.deciding import prepare
    from sift_server.registry.loader import load_adapter
    from tests.fixtures.tiny_embedder import build_tiny_embedder

    folder = build_tiny_embedder(tmp_path / "model")
    path = tmp_path / "m.yaml"
    path.write_text(
        f"name: m\nadapter: sentence-embedder\nsource: {{path: {folder}}}\ntasks: [encode]\nbackend: torch\n"
    )
    spec = load_spec(path)
    prepare(spec, calibrate=True, torch_threads=1, cache_dir=tmp_path / "cache")
    adapter = load_adapter(spec, 1, cache_dir=tmp_path / "cache")
    try:
        recorded = CurveRecords(tmp_path / "cache").recorded(spec, adapter)
    finally:
        adapter.close()
    assert recorded is not None
    assert sorted(recorded.seconds) == [1, 2, 4, 8, 16, 32]


def test_a_recorded_curve_a_check_forward_disagrees_with_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen live: a curve recorded while the core was busy (3-4 times too slow) capped every
    # later start's batches at 4; one size timed again at load catches it.
    from sift_server.registry import calibrate

    measured = _Recording()
    monkeypatch.setattr(calibrate, "measure", measured)
    encoder = _encoder({"backend": "torch"})
    CurveRecords(tmp_path / "cache").curve(_spec(tmp_path), encoder)
    monkeypatch.setattr(calibrate, "agrees", lambda curve, adapter: False)
    CurveRecords(tmp_path / "cache").curve(_spec(tmp_path), encoder)
    assert measured.calls == 2


def test_the_check_compares_one_size_within_a_quarter_either_way() -> None:
    from sift_server.registry.calibrate import CHECK_SIZE, agrees

    adapter = ScriptedAdapter({CHECK_SIZE: 0.01}, slow=set())  # 80 ms for a forward of 8
    honest = Curve({CHECK_SIZE: 0.080}, 16)
    too_slow = Curve({CHECK_SIZE: 0.300}, 16)  # recorded on a busy core
    too_fast = Curve({CHECK_SIZE: 0.040}, 16)
    assert agrees(honest, adapter, adapter.clock)  # type: ignore[arg-type]
    assert not agrees(too_slow, adapter, adapter.clock)  # type: ignore[arg-type]
    assert not agrees(too_fast, adapter, adapter.clock)  # type: ignore[arg-type]
    assert not agrees(Curve({1: 0.01}, 16), adapter, adapter.clock)  # type: ignore[arg-type]
