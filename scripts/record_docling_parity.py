"""Record tests/documents/docling_reference.json once: the released sie-server 0.10.1's answers
through sie-sdk 0.10.1 to the document tests' own small documents (tests/fixtures/documents.py:
a DOCX with a heading, a paragraph and a table; an HTML page; a Markdown file; an image-only
PDF page), under the ``docling`` entry's default and ``ocr`` profiles.

    PYTHONPATH=server/src:sdk/src:bench/src:. HF_HUB_OFFLINE=1 \\
        .venv/bin/python scripts/record_docling_parity.py [--venv ~/.cache/sift/reference-venv]

The reference venv (``sift bench reference-setup``) leaves docling out; it needs the release the
reference pins (``docling>=2.99,<2.100``, from PyPI, with ``-c`` torch at the venv's own build):
``pip install -c constraints.txt docling==2.99.0``, then ``pip uninstall torchvision``
(PyPI's torchvision is a CUDA build the venv's CPU torch cannot load; without it transformers
falls back to its PIL image processors, as in Sift's own install). The reference's shipped entry names a Hub
repository (superlinked/docling-artifacts), which is not on this machine and is never
downloaded: the recorded entry is the shipped one (its adapter, limits and ``ocr`` profile) with
``package_backed: true`` in place of ``hf_id``, the reference's own spelling of "no artifact
folder" (its loader then hands the adapter none, docling finds no layout weights offline, and the
adapter's load-time PDF warm-up failure is logged, not fatal). Office, HTML and Markdown
documents convert without weights; the PDF shows the reference's answer without them.

The DoclingDocument JSON is kept whole: for these documents it is small, and deterministic
(the bytes are the same every run, so is its ``origin.binary_hash``).
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

from sift_bench.arms.reference.server import model_loaded, reference_launcher, reference_venv, serve_command
from sift_server.processes import free_port, spawn, wait_ready
from tests.fixtures.documents import DOCLING_PARITY_FIXTURE, docling_parity_documents

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "scripts" / "docling_parity_driver.py"
COMPAT_PYTHON = ROOT / ".venv" / "sie-compat" / "bin" / "python"
OUT = ROOT / "tests" / "documents" / DOCLING_PARITY_FIXTURE
ADAPTER = "sie_server.adapters.docling.adapter:DoclingAdapter"
MODEL = "docling"
PROFILES = (None, "ocr")


def _profile(runtime: dict[str, Any]) -> dict[str, Any]:
    loadtime = {"max_num_pages": 100, "max_file_size_bytes": 16777216, "document_timeout_s": 90}
    return {
        "max_batch_tokens": 1,
        "compute_precision": None,
        "adapter_path": ADAPTER,
        "adapter_options": {"loadtime": loadtime, "runtime": runtime},
    }


def _config() -> dict[str, Any]:
    return {
        "sie_id": MODEL,
        "package_backed": True,
        "inputs": {"text": False, "image": True, "audio": False, "video": False, "document": True},
        "tasks": {"encode": None, "score": None, "extract": {}},
        "profiles": {"default": _profile({}), "ocr": _profile({"ocr": True})},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=reference_venv())
    args = parser.parse_args()
    python = args.venv / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="docling-parity-") as tmp:
        root = Path(tmp)
        models = root / "models"
        models.mkdir()
        (models / f"{MODEL}.yaml").write_text(yaml.safe_dump(_config(), sort_keys=False))
        cases = []
        for name, (data, fmt) in docling_parity_documents().items():
            path = root / f"{name}.{fmt}"
            path.write_bytes(data)
            for profile in PROFILES:
                key = name if profile is None else f"{name}:{profile}"
                cases.append({"name": key, "path": str(path), "format": fmt, "profile": profile})
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        served = [MODEL, *(f"{MODEL}:{profile}" for profile in PROFILES if profile is not None)]
        command = serve_command(reference_launcher(args.venv), port, models, served, root / "cache")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        env.pop("PYTHONPATH", None)
        server = spawn("sie-server", command, root / "server.log", env=env, own_session=True)
        try:
            wait_ready(url, [server], 600.0, also=lambda: model_loaded(url, MODEL))
            out = subprocess.run(
                [str(COMPAT_PYTHON), str(DRIVER), url, json.dumps(cases)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=900,
            )
            if out.returncode != 0:
                sys.exit(f"the driver failed:\n{out.stderr}\n{(root / 'server.log').read_text()[-4000:]}")
            answers = json.loads(out.stdout)
        finally:
            server.stop()
        versions = subprocess.run(
            [str(python), "-c", "from importlib.metadata import version as v; print(v('docling'), v('docling-core'))"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    fixture = {
        "recorded_with": f"sie-server 0.10.1 ({ADAPTER}, docling {versions[0]}, docling-core {versions[1]}, "
        "CPU, no artifact folder) and sie-sdk 0.10.1 (scripts/record_docling_parity.py)",
        "answers": answers,
    }
    OUT.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
