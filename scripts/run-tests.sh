#!/usr/bin/env bash
# Run the whole suite offline, on two pytest-xdist workers (SIFT_TEST_WORKERS=0 runs it in one
# process; tests/fixtures/parallel.py says how the work is split). pytest's exit code 5
# ("no tests collected") is a failure here.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The suite starts about a hundred interpreters that import torch and transformers. The bootstrap
# installs without compiling (most of it is never imported); if bytecode may not be written
# either, every one of them compiles those packages from source again, which doubles the suite's
# CPU time. So let the first import of each module leave its bytecode (in .venv, for packages).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m pytest -n "${SIFT_TEST_WORKERS:-2}" --dist loadscope "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "sift: pytest collected no tests; treating that as a failure" >&2
  exit 1
fi
exit "$status"
