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
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgpack

from sift_bench.server_proc import ServerProcess, ServerSpec, default_cpus
from sift_bench.stats import median
from sift_bench.workload import make_texts

LABELS = ["person", "location", "organization", "date"]


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


def _request(task: str, query: str, texts: list[str]) -> tuple[str, bytes]:
    if task == "score":
        body = {"query": {"text": query}, "items": [{"text": t} for t in texts]}
    else:
        body = {"items": [{"text": t} for t in texts], "params": {"labels": LABELS}}
    return task, msgpack.packb(body)


def measure_model(name: str, catalogs: Sequence[Path], requests: int, server_cpus: set[int] | None) -> dict[str, Any]:
    from sift_server.registry.catalog import Catalog, resolve_local_path

    spec = Catalog.from_dirs(catalogs).get(name)
    task = "score" if "score" in spec.tasks else "extract"
    texts = make_texts(32, seed=1)
    query = "who founded the company and where is it based?"
    route, body = _request(task, query, texts)
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    with tempfile.TemporaryDirectory() as tmp:
        server_spec = ServerSpec(
            model=name,
            policy="adaptive",
            log_path=Path(tmp) / "log",
            trace_path=Path(tmp) / "trace.jsonl",
            catalogs=catalogs,
            cpus=server_cpus,
        )
        with ServerProcess(server_spec) as server, httpx.Client(base_url=server.url, timeout=120) as client:
            for _ in range(3):
                client.post(f"/v1/{route}/{name}", content=body, headers=headers).raise_for_status()
            times = []
            for _ in range(requests):
                start = time.perf_counter()
                client.post(f"/v1/{route}/{name}", content=body, headers=headers).raise_for_status()
                times.append(time.perf_counter() - start)
    folder = resolve_local_path(spec)
    assert folder is not None, "measure local models (a path or package source)"
    call = _library_call(spec.adapter, folder, query, texts)
    for _ in range(3):
        call()
    library = []
    for _ in range(requests):
        start = time.perf_counter()
        call()
        library.append(time.perf_counter() - start)
    server_rate, library_rate = 32 / median(times), 32 / median(library)
    return {
        "model": name,
        "task": task,
        "items_per_request": 32,
        "server_items_per_s": server_rate,
        "library_items_per_s": library_rate,
        "ratio": server_rate / library_rate,
    }


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("primitives", help="Measure score/extract items/s against the in-process library call.")
    p.add_argument("--model", action="append", required=True, help="Catalog model (repeatable).")
    p.add_argument("--catalog", action="append", type=Path, default=[])
    p.add_argument("--requests", type=int, default=30)
    p.add_argument("--server-cpus", help="taskset CPU list of the server (default: the first available CPU)")
    p.add_argument("--client-cpus", help="CPU list of this client (default: the second available CPU)")
    p.add_argument("--json", type=Path, help="Also write the figures to this file.")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import torch

    server_cpus, client_cpus = default_cpus(args.server_cpus, args.client_cpus)
    torch.set_num_threads(1)
    rows = []
    for name in args.model:
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        row = measure_model(name, args.catalog, args.requests, server_cpus)
        rows.append(row)
    print(f"{'model':<28} {'task':<8} {'server items/s':>15} {'library items/s':>16} {'ratio':>6}")
    for row in rows:
        print(
            f"{row['model']:<28} {row['task']:<8} {row['server_items_per_s']:>15.1f} "
            f"{row['library_items_per_s']:>16.1f} {row['ratio']:>6.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0
