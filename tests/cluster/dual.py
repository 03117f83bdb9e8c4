"""``python -m tests.cluster.dual``: the benchmark's worker that is also a sift serve
(sift_bench.cluster.dual), under the name the cluster tests start it by."""

import sys

from sift_bench.cluster.dual import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
