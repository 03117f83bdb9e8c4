"""A stand-in for the reference server's CLI (``sie-server serve ...``): it
records the arguments and the models folder it was given, then runs ``sift
serve`` on the model that folder names, with the catalog in
``$FAKE_REFERENCE_CATALOG``. The reference arm's wiring runs against it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve"])
    for flag in ("--host", "--port", "--device", "--models-dir", "--models", "--preload", "--local-cache"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--no-hf-fallback", action="store_true")
    args = parser.parse_args(argv)
    configs = {p.name: yaml.safe_load(p.read_text()) for p in Path(args.models_dir).glob("*.yaml")}
    record = {"argv": argv, "configs": configs, "omp_threads": os.environ.get("OMP_NUM_THREADS")}
    Path(os.environ["FAKE_REFERENCE_RECORD"]).write_text(json.dumps(record))
    command = [sys.executable, "-m", "sift_server", "serve", "--host", args.host, "--port", args.port,
               "--model", args.preload, "--catalog", os.environ["FAKE_REFERENCE_CATALOG"]]  # fmt: skip
    os.execv(sys.executable, command)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
