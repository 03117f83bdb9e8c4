"""``python -m sift_bench.cluster.launch <sift args>``: the sift command with the
sleeping test model's adapter registered (cluster tests and measurements)."""

from __future__ import annotations

import sys

from sift_bench.cluster.sleeper import register

if __name__ == "__main__":
    register()
    from sift_server.cli import main

    raise SystemExit(main(sys.argv[1:]))
