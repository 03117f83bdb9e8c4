#!/bin/bash
# Sequential lone requests with a lean raw HTTP client against in-process one-item forwards of the same texts.
# Usage: flock /tmp/sift-bench.lock experiments/lone_raw.sh   (server on CPU 0, client on CPU 1, then the in-process arm on CPU 0)
set -u
cd "$(dirname "$0")/.."
HF_HUB_OFFLINE=1 taskset -c 0 .venv/bin/sift serve --port 18555 --torch-threads 1 --log-level warning > "${TMPDIR:-/tmp}/lone_raw-server.log" 2>&1 &
SPID=$!
for i in $(seq 1 200); do curl -sf localhost:18555/readyz >/dev/null && break; sleep 0.1; done
.venv/bin/python experiments/raw_closed_loop.py http://127.0.0.1:18555 sentence-transformers/all-MiniLM-L6-v2 1 3 > /dev/null
for r in 1 2 3; do .venv/bin/python experiments/raw_closed_loop.py http://127.0.0.1:18555 sentence-transformers/all-MiniLM-L6-v2 1 8; done
kill $SPID; wait $SPID 2>/dev/null
taskset -c 0 .venv/bin/python - <<'PY' 2>&1 | grep -v -i "warn\|rename"
import time, statistics
from sift_bench.ceiling import load_model, runtime_of
from sift_server.adapters.base import EncodeTask, Part
a = load_model(); print("in-process", runtime_of(a))
texts = [f"The quick brown fox jumps over the lazy dog number {i}." for i in range(64)]
prep = [a.prepare(EncodeTask([t])) for t in texts]
for r in range(3):
    ts = []
    for p in prep * 4:
        t0 = time.perf_counter(); a.forward([Part(p, 0, 1)]); ts.append(time.perf_counter() - t0)
    print(f"round {r+1}: one-item forward back to back p50 {statistics.median(ts)*1000:.2f} ms")
PY
