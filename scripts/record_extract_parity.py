"""Re-record tests/adapters/parity/extract_reference.json: the released sie-server's
answers to the NLI, GLiNER2 and bi-encoder GLiNER parity cases on the tiny models, through sie-sdk.

    PYTHONPATH=server/src:sdk/src:bench/src:. HF_HUB_OFFLINE=1 \\
        .venv/bin/python scripts/record_extract_parity.py [--venv /tmp/refprobe/venv]

The reference venv needs sie-server and sie-sdk 0.10.1 with gliner2 1.3.2
(``sift bench reference-setup`` makes one; ``SIFT_BENCH_REFERENCE_VENV`` names it).
The models are built here with the tests' builders (fixed seeds), served by the
reference from a models folder naming their weights, on the CPU, offline.

gliner2 orders a structured schema's fields by string hash, so the reference is
started with a PYTHONHASHSEED under which that order is the schema's own (the
order Sift always uses); the fixture records the seed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from sift_bench.arms.reference.server import model_loaded, reference_launcher, serve_command
from sift_server.processes import free_port, spawn, wait_ready
from tests.adapters.parity.cases import CASES, FIXTURE, GLINER2_MODEL, GLINER_BI_MODEL, NLI_MODEL, SCHEMA
from tests.fixtures.tiny_models import build_tiny_gliner2, build_tiny_gliner_bi, build_tiny_nli

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "scripts" / "extract_parity_driver.py"
OUT = ROOT / "tests" / "adapters" / "parity" / FIXTURE


def _config(model: str, weights: Path, adapter: str, precision: str | None, runtime: dict[str, Any]) -> dict[str, Any]:
    return {
        "sie_id": model,
        "weights_path": str(weights),
        "inputs": {"text": True, "image": False, "audio": False, "video": False},
        "tasks": {"encode": None, "score": None, "extract": {}},
        "max_sequence_length": 512,
        "profiles": {
            "default": {
                "max_batch_tokens": 16384,
                "compute_precision": precision,
                "adapter_path": adapter,
                "adapter_options": {"loadtime": {}, "runtime": runtime},
            }
        },
    }


def hash_seed(python: Path, names: list[str]) -> int:
    """A PYTHONHASHSEED under which a set filled with ``names`` iterates in their order."""
    probe = "import sys; s = set(); s.update(sys.argv[1:]); print(','.join(s))"
    for seed in range(1000):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run([str(python), "-c", probe, *names], env=env, capture_output=True, text=True, check=True)
        if out.stdout.strip() == ",".join(names):
            return seed
    raise RuntimeError(f"no hash seed orders {names} as given")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--venv", type=Path, default=Path(os.environ.get("SIFT_BENCH_REFERENCE_VENV", "/tmp/refprobe/venv"))
    )
    args = parser.parse_args()
    python = args.venv / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="extract-parity-") as tmp:
        root = Path(tmp)
        models = root / "models"
        models.mkdir()
        configs = {
            NLI_MODEL: _config(
                NLI_MODEL,
                build_tiny_nli(root / "nli"),
                "sie_server.adapters.nli_classification_flash:NLIClassificationFlashAdapter",
                None,
                {"hypothesis_template": "This text is about {}.", "multi_label": False},
            ),
            GLINER2_MODEL: _config(
                GLINER2_MODEL,
                build_tiny_gliner2(root / "gliner2"),
                "sie_server.adapters.gliner2.adapter:GLiNER2Adapter",
                "float32",
                {},
            ),
            # As the reference's catalog serves bi-encoder GLiNER: label embeddings precomputed.
            GLINER_BI_MODEL: _config(
                GLINER_BI_MODEL,
                build_tiny_gliner_bi(root / "gliner-bi"),
                "sie_server.adapters.gliner_bi:GLiNERBiAdapter",
                "float32",
                {"threshold": 0.3, "precompute_labels": True},
            ),
        }
        for name, config in configs.items():
            (models / (name.replace("/", "__") + ".yaml")).write_text(yaml.safe_dump(config, sort_keys=False))
        seed = hash_seed(python, list(SCHEMA["properties"]))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = serve_command(reference_launcher(args.venv), port, models, list(configs), root / "cache")
        env = {
            **os.environ,
            "PYTHONHASHSEED": str(seed),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "SIE_LOG_LEVEL": "WARNING",
        }
        env.pop("PYTHONPATH", None)
        server = spawn("sie-server", command, root / "server.log", env=env, own_session=True)
        try:
            # Its /readyz answers before the preload has finished.
            wait_ready(url, [server], 300.0, also=lambda: all(model_loaded(url, name) for name in configs))
            spec = json.dumps({"cases": CASES})
            out = subprocess.run(
                [str(python), str(DRIVER), url, spec], env=env, capture_output=True, text=True, check=True, timeout=600
            )
            answers = json.loads(out.stdout)
        finally:
            server.stop()
        errors = [(case["name"], a["error"]) for case, a in zip(CASES, answers, strict=True) if "error" in a]
        if errors:
            sys.exit(f"the reference failed cases: {errors}\n{(root / 'server.log').read_text()[-4000:]}")
    fixture = {
        "recorded_with": "sie-server 0.10.1 and sie-sdk 0.10.1 (scripts/record_extract_parity.py)",
        "pythonhashseed": seed,
        "answers": {case["name"]: answer["items"] for case, answer in zip(CASES, answers, strict=True)},
    }
    OUT.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
