"""The small bench the end-to-end bench tests run: the tiny model, two bursts
of 8, a closed loop of 8 for half a second; the ceiling and the replay as small
as the tests that read them allow."""

from __future__ import annotations

from pathlib import Path

from sift_bench.arms.arm import Arm
from sift_bench.client.answer import ClientKind
from sift_bench.run.config import BenchConfig
from sift_bench.run.phases import PhasePlan
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry


def tiny_bench(
    folder: Path, arms: list[Arm], client: ClientKind, *, sequential: int, ceiling: bool = False
) -> BenchConfig:
    """A bench of ``arms`` with results in ``folder``/out, the model and catalog built in ``folder``."""
    catalog = folder / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(folder / "model"))
    plan = PhasePlan(
        sequential=sequential,
        bursts=2,
        burst_sizes=(8,),
        concurrencies=(8,),
        closed_seconds=0.5,
        burst_gap_s=0.1,
        settle_s=0.1,
        warmup_sequential=max(2, sequential // 3),
        warmup_closed_s=0.3,
    )
    return BenchConfig(
        arms=arms,
        out_dir=folder / "out",
        trials=1,
        model=TINY_EMBEDDER,
        catalogs=[catalog],
        plan=plan,
        client=client,
        ceiling=ceiling,
        ceiling_min_time_s=0.01,
        # No forward holds more than the 8 in flight: the ceiling then measures exactly the sizes seen.
        ceiling_grid=(8,),
        replay_cap_s=0.2,
        progress=False,
        ready_timeout_s=300.0,
    )
