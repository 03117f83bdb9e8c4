"""``python -m tests.cluster.launch <sift args>``: the sift command with the
test-only sleeping adapter registered (for the cluster tests and benchmarks)."""

from __future__ import annotations

import sys

from tests.cluster.sleeper import register

if __name__ == "__main__":
    register()
    from sift_server.cli import main

    raise SystemExit(main(sys.argv[1:]))
