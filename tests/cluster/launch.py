"""``python -m tests.cluster.launch <sift args>``: the sift command with the
test-only sleeping and slow generation adapters registered (for the cluster tests and benchmarks)."""

from __future__ import annotations

import sys

from tests.cluster import slow_generator
from tests.cluster.sleeper import register

if __name__ == "__main__":
    register()
    slow_generator.register()
    from sift_server.cli import main

    raise SystemExit(main(sys.argv[1:]))
