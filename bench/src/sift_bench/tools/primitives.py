"""``sift primitives``: score and extract through the server against the
reference library called in-process on the same inputs.

For each model: one query against 32 documents (score) or 32 texts (extract),
sent ``--requests`` times one after another through the HTTP API; then the
library's own batch call on the same 32 inputs, as often, in this process
pinned to the server's core with one torch thread. The ratio of items/s is the
server's efficiency on that primitive.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgpack

from sift_bench.arms.server import add_measurement_args, default_cpus, measured_server
from sift_bench.report.stats import median
from sift_bench.workload.texts import make_texts

LABELS = ["person", "location", "organization", "date"]
ITEMS = 32
QUERY = "who founded the company and where is it based?"


def _library_call(adapter_name: str, folder: Path, query: str, texts: list[str]) -> Callable[[], object]:
    """The reference library's own batch call on the same inputs."""
    if adapter_name == "cross-encoder":
        from sentence_transformers import CrossEncoder

        model = CrossEncoder(str(folder), device="cpu")
        pairs = [(query, text) for text in texts]
        return lambda: model.predict(pairs, batch_size=len(pairs))
    if adapter_name == "gliner":
        from gliner import GLiNER

        ner = GLiNER.from_pretrained(str(folder), local_files_only=True)
        return lambda: ner.inference(texts, LABELS, threshold=0.5, batch_size=len(texts))
    if adapter_name == "gliclass":
        from gliclass import GLiClassModel, ZeroShotClassificationPipeline
        from transformers import AutoTokenizer

        pipe = ZeroShotClassificationPipeline(
            GLiClassModel.from_pretrained(str(folder)), AutoTokenizer.from_pretrained(str(folder)), device="cpu"
        )
        return lambda: pipe(texts, LABELS, threshold=0.5, batch_size=len(texts))
    raise ValueError(f"no reference call for adapter {adapter_name!r}")


def _request(task: str, query: str, texts: list[str]) -> bytes:
    if task == "score":
        body = {"query": {"text": query}, "items": [{"text": t} for t in texts]}
    else:
        body = {"items": [{"text": t} for t in texts], "params": {"labels": LABELS}}
    return bytes(msgpack.packb(body))


def median_seconds(call: Callable[[], object], requests: int, warmup: int = 3) -> float:
    """The median seconds of ``call`` over ``requests`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        call()
    seconds = []
    for _ in range(requests):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return median(seconds)


def server_seconds(
    name: str, catalogs: Sequence[Path], server_cpus: set[int] | None, bodies: Mapping[str, bytes], requests: int
) -> dict[str, float]:
    """Per task (``encode``, ``score``, ``extract``): the median seconds of one
    MessagePack request with its body, sent one after another to a fresh server."""
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    with (
        measured_server(name, catalogs, server_cpus) as server,
        httpx.Client(base_url=server.url, timeout=300) as client,
    ):

        def post(task: str) -> None:
            client.post(f"/v1/{task}/{name}", content=bodies[task], headers=headers).raise_for_status()

        return {task: median_seconds(functools.partial(post, task), requests) for task in bodies}


def efficiency_row(model: str, task: str, server_s: float, library_s: float) -> dict[str, Any]:
    """Items/s of the server and of the library on the same ``ITEMS`` inputs, and their ratio."""
    server_rate, library_rate = ITEMS / server_s, ITEMS / library_s
    return {
        "model": model,
        "task": task,
        "items_per_request": ITEMS,
        "server_items_per_s": server_rate,
        "library_items_per_s": library_rate,
        "ratio": server_rate / library_rate,
    }


def print_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    print(f"{'model':<28} {'task':<8} {'server items/s':>15} {'library items/s':>16} {'ratio':>6}")
    for row in rows:
        print(
            f"{row['model']:<28} {row['task']:<8} {row['server_items_per_s']:>15.1f} "
            f"{row['library_items_per_s']:>16.1f} {row['ratio']:>6.2f}"
        )


def measure_model(name: str, catalogs: Sequence[Path], requests: int, server_cpus: set[int] | None) -> dict[str, Any]:
    from sift_server.registry.catalog import Catalog, resolve_local_path

    spec = Catalog.from_dirs(catalogs).get(name)
    task = "score" if "score" in spec.tasks else "extract"
    texts = make_texts(ITEMS, seed=1)
    served = server_seconds(name, catalogs, server_cpus, {task: _request(task, QUERY, texts)}, requests)
    folder = resolve_local_path(spec)
    assert folder is not None, "measure local models (a path or package source)"
    library = median_seconds(_library_call(spec.adapter, folder, QUERY, texts), requests)
    return efficiency_row(name, task, served[task], library)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("primitives", help="Measure score/extract items/s against the in-process library call.")
    p.add_argument("--model", action="append", required=True, help="Catalog model (repeatable).")
    add_measurement_args(p, requests=30)
    p.set_defaults(handler=_run)


def measure_models(
    args: argparse.Namespace, measure: Callable[[str, Sequence[Path], int, set[int] | None], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """``measure(model, catalogs, requests, server CPUs)``'s rows for each ``--model``,
    this process on the client CPUs with one torch thread (the library calls it
    times run here)."""
    import torch

    server_cpus, client_cpus = default_cpus(args.server_cpus, args.client_cpus)
    torch.set_num_threads(1)
    rows = []
    for name in args.model:
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        rows.extend(measure(name, args.catalog, args.requests, server_cpus))
    return rows


def _run(args: argparse.Namespace) -> int:
    rows = measure_models(args, lambda *how: [measure_model(*how)])
    print_rows(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0
