# Sourced by request_profile.sh and request_perf.sh: builds the tiny 2-layer BERT embedder's
# catalog once under $WORK, then serves TREE's server/src on CPU 0 (this checkout's venv) on
# $PORT, logging to $WORK/$1-server.log, and waits until it is ready. Sets SPID.
serve_tiny() {
  if [ ! -d "$WORK/catalog" ]; then
    PYTHONPATH=$ROOT .venv/bin/python -c "import sys; from pathlib import Path; \
from tests.fixtures.tiny_embedder import build_tiny_embedder, write_catalog_entry as w; \
r = Path(sys.argv[1]); w(r / 'catalog', build_tiny_embedder(r / 'model', hidden=64))" "$WORK"
  fi
  (cd "$TREE" && PYTHONPATH=$TREE/server/src exec taskset -c 0 "$ROOT/.venv/bin/python" -m sift_server serve \
    --catalog "$WORK/catalog" --model tiny/embedder --port $PORT --torch-threads 1 --log-level warning \
    > "$WORK/$1-server.log" 2>&1) &
  SPID=$!
  for i in $(seq 1 600); do curl -sf localhost:$PORT/readyz >/dev/null && break; sleep 0.1; done
}
