"""The ceiling: items/s of the model itself, in-process, at given batch sizes.

Run as a child process (``python -m sift_bench.run.ceiling``) pinned to the
server's CPUs with the server's torch threads, so that it measures what the
server's forward could do on the same core. Tokenization is done beforehand;
only the forward is timed, on whole passes over the texts the benchmark sends
(so the mix of lengths is the workload's), run as the server runs them: cut into sub-forwards of similar length
(``engine.padding``) with the fixed cost measured here first, as the server
learns it. On mixed lengths one padded forward of a whole batch would be a
straw man (a 16-text batch with one long passage runs several times slower)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sift_bench.arms.server import child_env, pin_prefix, run_json_child
from sift_bench.report.stats import median
from sift_bench.workload.request import ENCODE_DENSE, RequestSpec
from sift_bench.workload.texts import WORKLOADS, Workload, texts_for
from sift_server.config import DEFAULT_MODEL

GRID: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64)


def batches_covering(texts: Sequence[str], size: int) -> list[list[str]]:
    """Batches of ``size`` that together hold every text once (the last one filled
    from the start): a pass over them has the workload's mix of lengths. A sample of
    a few batches does not, and the ceiling then moves with the sample (docs/bench.md,
    "Ceiling")."""
    count = len(texts)
    return [[texts[(b * size + k) % count] for k in range(size)] for b in range(-(-count // size))]


def preparer(adapter: Any, request: RequestSpec = ENCODE_DENSE) -> Callable[[list[str]], Any]:
    """``adapter.prepare`` of one request of these texts, as the bench sends them
    (the request spec's primitive, query and labels)."""
    from sift_server.adapters.base import EncodeTask, ExtractTask, ScoreTask, TaskInput

    def prepare(texts: list[str]) -> Any:
        task: TaskInput
        if request.primitive == "score":
            task = ScoreTask(request.query, texts)
        elif request.primitive == "extract":
            task = ExtractTask(texts, list(request.labels))
        else:
            task = EncodeTask(texts, output_types=request.output_types)
        return adapter.prepare(task)

    return prepare


def measure(
    adapter: Any,
    texts: Sequence[str],
    sizes: Sequence[int],
    *,
    min_time_s: float = 0.5,
    min_passes: int = 2,
    max_passes: int = 50,
    progress: Callable[[int], None] = lambda size: None,
    request: RequestSpec = ENCODE_DENSE,
) -> dict[str, Any]:
    """Per batch size: items/s over whole passes of the texts (the median pass), and
    the median time of one forward, for the request spec's primitive."""
    from sift_server.adapters.base import Part
    from sift_server.engine import padding

    prepare = preparer(adapter, request)
    fixed_tokens = fixed_tokens_of(adapter, prepare, texts)
    out: dict[str, Any] = {}
    for size in sorted(set(sizes)):
        forwards = []
        for batch in batches_covering(texts, size):
            prepared = prepare(batch)
            groups = padding.plan(prepared.item_costs, fixed_tokens)
            forwards.append([[Part(prepared, i, i + 1) for i in group] for group in groups])

        def run(chunks: list[list[Any]]) -> None:
            for chunk in chunks:
                adapter.forward(chunk)

        run(forwards[0])  # not timed: first call at this shape
        times: list[float] = []
        rates: list[float] = []
        until = time.perf_counter() + min_time_s
        while len(rates) < max_passes and (len(rates) < min_passes or time.perf_counter() < until):
            pass_start = len(times)
            for chunks in forwards:
                t0 = time.perf_counter()
                run(chunks)
                times.append(time.perf_counter() - t0)
            rates.append(size * len(forwards) / sum(times[pass_start:]))
        out[str(size)] = {"median_s": median(times), "items_per_s": median(rates), "times_s": times}
        progress(size)
    return out


def fixed_tokens_of(adapter: Any, prepare: Callable[[list[str]], Any], texts: Sequence[str]) -> float | None:
    """The forward's fixed cost in tokens, from uniform batches of the shortest text
    (fastest of three per size), as the server's forward-cost line would learn it."""
    from sift_server.adapters.base import Part
    from sift_server.engine.forward_cost import ForwardCost

    probe = min(texts, key=len)
    cost = ForwardCost()
    for size in (1, 4, 16):
        prepared = prepare([probe] * size)
        parts = [Part(prepared, 0, size)]
        adapter.forward(parts)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            adapter.forward(parts)
            best = min(best, time.perf_counter() - t0)
        cost.observe(sum(prepared.item_costs), best)
    return cost.fixed_tokens


def load_model(model: str = DEFAULT_MODEL, catalogs: Sequence[Path] = (), torch_threads: int = 1) -> Any:
    """A catalog model's adapter, loaded in this process as ``sift serve`` loads it
    (its catalog backend, ``auto`` for the default model, unless ``SIFT_BACKEND`` names one)."""
    from sift_server.config.settings import Settings
    from sift_server.registry.catalog import Catalog
    from sift_server.registry.loader import load_adapter

    # The backend and cache settings as `sift serve` reads them: a bench child (replay,
    # ceiling) gets its arm's backend through SIFT_BACKEND.
    settings = Settings()
    return load_adapter(
        Catalog.from_dirs(list(catalogs)).get(model),
        torch_threads=torch_threads,
        backend_override=settings.backend,
        rechoose_backend=settings.rechoose_backend,
        cache_dir=settings.cache_dir,
    )


def runtime_of(adapter: Any) -> str:
    """What runs the adapter's forward, e.g. ``openvino bf16``."""
    runtime = adapter.info.runtime
    return f"{runtime.get('backend')} {runtime.get('precision')}"


def summarize(sizes: dict[str, Any]) -> dict[str, Any]:
    best_size = max(sizes, key=lambda s: sizes[s]["items_per_s"])
    return {"size": int(best_size), "items_per_s": sizes[best_size]["items_per_s"]}


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="In-process forward throughput of a catalog model (JSON on stdout).")
    parser.add_argument("--model", required=True)
    parser.add_argument("--catalog", action="append", type=Path, default=[])
    parser.add_argument("--sizes", required=True, help="comma-separated batch sizes")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--min-passes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload", choices=WORKLOADS, default="short")
    parser.add_argument("--request", default="{}", help="the bench's request spec as JSON (primitive, labels, query)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    adapter = load_model(args.model, args.catalog, args.torch_threads)
    load_s = time.perf_counter() - started
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    def note(size: int) -> None:
        print(f"ceiling: batch {size} done", file=sys.stderr, flush=True)

    texts = texts_for(args.workload, seed=args.seed)
    measured = measure(
        adapter, texts, sizes, min_time_s=args.min_time, min_passes=args.min_passes, progress=note,
        request=RequestSpec.from_fields(json.loads(args.request)),
    )  # fmt: skip
    result = {
        "model": args.model,
        "torch_threads": args.torch_threads,
        "load_s": load_s,
        "sizes": measured,
        "best": summarize(measured),
    }
    print(json.dumps(result), flush=True)
    return 0


def run_ceiling(
    model: str,
    catalogs: Sequence[Path],
    sizes: Sequence[int],
    *,
    cpus: set[int] | None,
    torch_threads: int,
    min_time_s: float,
    seed: int,
    log_path: Path,
    timeout_s: float = 1800.0,
    workload: Workload = "short",
    request: RequestSpec = ENCODE_DENSE,
) -> dict[str, Any]:
    """Measure in a pinned child process; raises ``RuntimeError`` on failure."""
    command = [
        *pin_prefix(cpus),
        sys.executable, "-m", "sift_bench.run.ceiling",
        "--model", model,
        "--sizes", ",".join(str(s) for s in sorted(set(sizes))),
        "--torch-threads", str(torch_threads),
        "--min-time", str(min_time_s),
        "--seed", str(seed),
        "--workload", workload,
        "--request", json.dumps(dataclasses.asdict(request)),
        *[arg for folder in catalogs for arg in ("--catalog", str(folder))],
    ]  # fmt: skip
    result = run_json_child(command, child_env(), log_path, timeout_s, "ceiling measurement")
    result["cpus"] = sorted(cpus) if cpus else None
    result["command"] = command
    return result


if __name__ == "__main__":
    raise SystemExit(_main())
