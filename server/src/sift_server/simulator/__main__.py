"""``python -m sift_server.simulator``."""

from sift_server.simulator.cli import main

raise SystemExit(main())
