"""What one ``sift bench`` run is asked to do: its arms, trials, model, phases and
options. Apart from the runner so that the replay, which the runner calls, can read
it without importing the runner back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sift_bench.arms.arm import Arm
from sift_bench.client.answer import ClientKind
from sift_bench.run.ceiling import GRID
from sift_bench.run.phases import PhasePlan
from sift_bench.workload.request import RequestSpec
from sift_bench.workload.texts import Workload
from sift_server.config import DEFAULT_MODEL


@dataclass(slots=True)
class BenchConfig:
    arms: list[Arm]
    out_dir: Path
    trials: int = 3
    model: str = DEFAULT_MODEL
    catalogs: list[Path] = field(default_factory=list)
    plan: PhasePlan = field(default_factory=PhasePlan)
    client: ClientKind = "sdk"
    server_cpus: set[int] | None = None
    client_cpus: set[int] | None = None
    torch_threads: int = 1
    ceiling: bool = True
    ceiling_min_time_s: float = 0.5
    # The ceiling's batch sizes; every size the servers formed up to the largest is added.
    ceiling_grid: tuple[int, ...] = GRID
    # After each run, its closed-loop forwards replayed in-process (sift_bench.run.replay).
    replay: bool = True
    replay_cap_s: float = 3.0
    seed: int = 0
    ready_timeout_s: float = 300.0
    items_per_request: int = 1
    workload: Workload = "short"
    # What each request asks for (encode dense by default).
    request: RequestSpec = field(default_factory=RequestSpec)
    plots: bool = True
    progress: bool | None = None  # None: progress bars on a terminal only
    command_line: list[str] | None = None
    # Requests/s the open loops are shares of; None: measured before the trials (run.runner).
    open_capacity: float | None = None
    # Every Sift server start gets an empty artifact cache: each run is a first start after install.
    fresh_cache: bool = False
