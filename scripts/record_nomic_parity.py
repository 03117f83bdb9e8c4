"""Record the reference answers for the tiny Nomic model (tests/fixtures/tiny_nomic.py), once.

The reference server serves nomic-embed-text-v1.5 only through its Rust ``candle`` profile
(not on PyPI) or its ``nomic_flash`` adapter (flash-attn, CUDA only), so the reference is the
library's own call: sentence-transformers with ``trust_remote_code`` over the publisher's code
(``configuration_hf_nomic_bert.py`` and ``modeling_hf_nomic_bert.py`` from nomic-ai/contrastors,
which the operator downloads and reads; they are never part of this repository). The tiny
folder is copied into a temporary folder with those two files, its ``auto_map`` pointed at
them there, and the reference venv (``sift bench reference-setup``) encodes the cases of
tests/adapters/parity/nomic_cases.py with the reference catalog's prefixes.

    .venv/bin/python scripts/record_nomic_parity.py --code /path/to/publisher-files \
        --python ~/.cache/sift/reference-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.adapters.parity.nomic_cases import CASES, FIXTURE, formatted  # noqa: E402
from tests.fixtures.tiny_nomic import build_tiny_nomic  # noqa: E402

CODE_FILES = ("configuration_hf_nomic_bert.py", "modeling_hf_nomic_bert.py")

CHILD = r"""
import base64, json, sys
import numpy as np
import torch
from sentence_transformers import SentenceTransformer

folder, cases = sys.argv[1], json.loads(sys.stdin.read())
torch.manual_seed(0)
model = SentenceTransformer(folder, device="cpu", trust_remote_code=True, local_files_only=True)
model.eval()
raw = SentenceTransformer(modules=[model[0], model[1]], device="cpu")
out = {}
for case in cases:
    encoder = model if case["normalize"] else raw
    vectors = encoder.encode(case["texts"], convert_to_numpy=True, batch_size=len(case["texts"]))
    out[case["name"]] = base64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").tobytes()).decode()
print(json.dumps({"vectors": out, "max_seq_length": model.max_seq_length,
                  "model_class": type(model[0].auto_model).__module__ + "." + type(model[0].auto_model).__name__}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", type=Path, required=True, help="folder holding the publisher's two files")
    parser.add_argument("--python", type=Path, required=True, help="the reference venv's python")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_nomic(Path(tmp) / "nomic")
        for name in CODE_FILES:
            shutil.copy2(args.code / name, folder / name)
        config = json.loads((folder / "config.json").read_text())
        # The published auto_map names the publisher's base repository; point it at the copied files.
        config["auto_map"] = {key: value.split("--", 1)[1] for key, value in config["auto_map"].items()}
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        cases = [{"name": case["name"], "texts": formatted(case), "normalize": case["normalize"]} for case in CASES]
        done = subprocess.run(
            [str(args.python), "-c", CHILD, str(folder)],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            check=False,
            env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        )
    if done.returncode:
        sys.exit(f"the reference failed:\n{done.stderr}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    versions = subprocess.run(
        [str(args.python), "-c", "import sentence_transformers, transformers, torch;"
         "print(sentence_transformers.__version__, transformers.__version__, torch.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    record = {
        "reference": {
            "call": "sentence_transformers.SentenceTransformer(folder, trust_remote_code=True).encode",
            "code": "nomic-ai/contrastors modeling_hf_nomic_bert.py, configuration_hf_nomic_bert.py",
            "sentence_transformers": versions[0],
            "transformers": versions[1],
            "torch": versions[2],
            "model_class": answer["model_class"],
            "max_seq_length": answer["max_seq_length"],
        },
        "vectors": {
            name: {"f32": packed, "rows": len(case["texts"])}
            for case in CASES
            for name, packed in answer["vectors"].items()
            if name == case["name"]
        },
    }
    out = ROOT / "tests" / "adapters" / "parity" / FIXTURE
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
