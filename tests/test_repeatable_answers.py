"""Repeatable answers (issue 23.3): the same request, sent again and again from
a fresh start, gets bit-identical values.

Where the variation came from: not the models. A forward over the same rows is
bit-identical every time, on the base lane, on a LoRA lane after any number of
switches, and from the first forward of a fresh SPLADE model (the adapter tests
below). It is the engine's cut of a batch into sub-forwards of similar length
(``engine.padding.plan``): the cut depends on the forward's fixed cost, which the
scheduler learns from measured (wall-clock) forward times, so the same four texts
ran as one forward, then as (3 + 1), then as (1) + (2) + (1) as the estimate moved,
and each cut pads the rows differently, which changes the arithmetic in the last
bits. The scheduler therefore cuts by a fixed cost frozen once known (the seeded
calibration curve, else the estimate after the first forwards), never by one that
follows timed forwards."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._lora import LANE_PREFIX
from sift_server.adapters.base import Adapter, EncodeTask, Part
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from sift_server.adapters.sparse_encoder import SparseEncoderAdapter
from sift_server.engine.policy import Dispatch, ImmediatePolicy
from sift_server.engine.scheduler import Scheduler
from tests.adapters.conftest import load_context
from tests.fixtures.tiny_embedder import build_tiny_embedder
from tests.fixtures.tiny_models import build_tiny_lora, build_tiny_sparse_encoder

TEXTS = [
    "What is the capital of France?",
    "Paris is the capital and largest city of France, on the Seine.",
    "x",
    "Sparse retrieval weights every vocabulary term of a passage.",
]
REPEATS = 30


def digest(adapter: Adapter, lora: str | None = None) -> str:
    """A hash of the exact bytes one forward of ``TEXTS`` answers."""
    prepared = adapter.prepare(EncodeTask(TEXTS))
    prepared.lane = LANE_PREFIX + lora if lora else None
    [items] = adapter.forward([Part(prepared, 0, len(prepared.item_costs))])
    hasher = hashlib.sha256()
    for item in items:
        vectors: Sequence[Any] = [item["sparse"].indices, item["sparse"].values] if isinstance(item, dict) else [item]
        for vector in vectors:
            hasher.update(np.ascontiguousarray(vector).tobytes())
    return hasher.hexdigest()


@pytest.fixture(scope="module")
def lora_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("repeatable-lora")
    base = build_tiny_embedder(root / "base")
    return {
        "base": base,
        "a": build_tiny_lora(base, root / "a", seed=1),
        "b": build_tiny_lora(base, root / "b", seed=2),
    }


@pytest.mark.parametrize("threads", [1, 2])
def test_lora_entry_repeats_exactly_on_every_lane(lora_models: dict[str, Path], threads: int) -> None:
    context = dataclasses.replace(load_context(lora_models["base"]), torch_threads=threads)
    adapter = SentenceEmbedderAdapter.load(context)
    first_base = digest(adapter)  # before any LoRA exists: plain model
    adapter.load_lora("a", lora_models["a"])
    adapter.load_lora("b", lora_models["b"])
    seen: dict[str | None, set[str]] = {None: {first_base}, "a": set(), "b": set()}
    lanes: list[str | None] = [None, "a", "b", "a", None, "b", None, None, "a"]
    for i in range(REPEATS):
        lane = lanes[i % len(lanes)]
        seen[lane].add(digest(adapter, lane))
    assert {lane: len(digests) for lane, digests in seen.items()} == {None: 1, "a": 1, "b": 1}
    assert len(set.union(*seen.values())) == 3  # the LoRAs really change the answers


def test_sparse_encoder_first_request_after_start_repeats_exactly(tmp_path: Path) -> None:
    folder = build_tiny_sparse_encoder(tmp_path / "sparse", prompts={"query": "query: ", "document": "passage: "})
    adapter = SparseEncoderAdapter.load(load_context(folder))
    digests = [digest(adapter) for _ in range(REPEATS)]
    assert digests == [digests[0]] * REPEATS


def cut_of(scheduler: Scheduler, costs: list[int], now: float) -> list[list[int]]:
    """The sub-forwards (as item costs) the scheduler runs one request of ``costs``
    in, when it is alone in the queue."""
    scheduler.admit(f"r{now}", costs, now)
    batch = scheduler.take(Dispatch("default", "full"), now)
    assert batch is not None
    return [[costs[i] for _, i in chunk] for chunk in batch.chunks] or [costs]


def test_the_same_request_is_cut_the_same_way_whatever_forwards_took() -> None:
    """Identical requests must run in identical sub-forwards, or their rows are padded
    differently and the answers differ in the last bits: forward times measured
    between them (noise on a shared core) must not change the cut."""
    scheduler = Scheduler(ImmediatePolicy())
    # A MiniLM-like forward curve (2 ms fixed, 50 us a token), as calibration after load seeds it.
    scheduler.seed_costs([(17, 0.00285), (68, 0.0054), (272, 0.0156), (544, 0.0292)])
    costs = [9, 17, 3, 14]
    cuts = []
    # The same forward timed on a shared core: a few milliseconds either way.
    for step, took in enumerate([0.0025, 0.0040, 0.0020, 0.0015, 0.0060, 0.0010]):
        now = float(step)
        cuts.append(cut_of(scheduler, costs, now))
        assert scheduler.running is not None
        scheduler.complete(scheduler.running, now, now + took)
    assert cuts == [cuts[0]] * len(cuts), cuts


def test_a_model_without_a_seeded_curve_cuts_once_its_cost_is_known_and_always_the_same_way() -> None:
    """Extractors have no calibration curve: their batches are not cut until the
    forward cost is learned over the first forwards, then cut by that estimate,
    frozen, so later noise in forward times never changes the cut."""
    from sift_server.engine.scheduler import CUT_WARMUP_FORWARDS

    scheduler = Scheduler(ImmediatePolicy())
    costs = [9, 17, 3, 14, 60, 5]
    warmup = [[4], [30, 8], [60, 60, 12], [5, 40], [120]]
    for step in range(CUT_WARMUP_FORWARDS):
        now = float(step)
        cut = cut_of(scheduler, warmup[step % len(warmup)], now)
        assert len(cut) == 1  # nothing known yet: one forward
        assert scheduler.running is not None
        # 2 ms fixed and 50 us a padded token.
        scheduler.complete(scheduler.running, now, now + 0.002 + 0.00005 * scheduler.running.padded_cost)
    cuts = []
    for step, took in enumerate([0.0025, 0.0040, 0.0020, 0.0015, 0.0060, 0.0010]):
        now = 100.0 + step
        cuts.append(cut_of(scheduler, costs, now))
        assert scheduler.running is not None
        scheduler.complete(scheduler.running, now, now + took)
    assert len(cuts[0]) > 1, cuts[0]
    assert cuts == [cuts[0]] * len(cuts), cuts
