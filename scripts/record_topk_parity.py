"""Record tests/adapters/parity/topk_reference.json once: the reference server's own
``topk_embed`` adapter (sie-server 0.10.1, on the CPU in float32, one row per input as it runs
off CUDA) answering the TopK-Embed parity cases (tests/adapters/parity/topk_cases.py) on the
tiny folder of tests/fixtures/tiny_topk.py (fixed seed, built here by Sift's environment,
nothing downloaded).

    PYTHONPATH=server/src:sdk/src:bench/src:. HF_HUB_OFFLINE=1 \\
        .venv/bin/python scripts/record_topk_parity.py [--venv ~/.cache/sift/reference-venv]

The reference environment is ``sift bench reference-setup``'s; scripts/topk_reference_driver.py
runs in it (its docstring says how the pages avoid torchvision).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path

from sift_bench.arms.reference.server import reference_venv
from tests.adapters.parity.topk_cases import EMBED_CASES, FIXTURE, MODEL, SCORE_CASES
from tests.fixtures.tiny_topk import build_tiny_topk, topk_images

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "scripts" / "topk_reference_driver.py"
OUT = ROOT / "tests" / "adapters" / "parity" / FIXTURE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=reference_venv())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="topk-parity-") as tmp:
        folder = build_tiny_topk(Path(tmp) / "topk")
        request = {
            "folder": str(folder),
            "images": [base64.b64encode(data).decode("ascii") for data in topk_images()],
            "embed_cases": EMBED_CASES,
            "score_cases": SCORE_CASES,
        }
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        env.pop("PYTHONPATH", None)
        result = subprocess.run(
            [str(args.venv / "bin" / "python"), str(DRIVER)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if result.returncode != 0:
            raise SystemExit(result.stderr[-4000:])
        answers = json.loads(result.stdout)
    version = subprocess.run(
        [str(args.venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('sie-server'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    record = {
        "recorded_with": f"sie-server {version}, adapter topk_embed, CPU float32 (scripts/record_topk_parity.py)",
        "model": MODEL,
        **answers,
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
