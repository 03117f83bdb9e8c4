"""``python -m sift_bench.simulate``."""

from sift_bench.simulate.cli import main

raise SystemExit(main())
