#!/bin/bash
# Where a request's CPU goes (issue 20): py-spy samples a running server (pinned to CPU 0, tiny
# 2-layer BERT embedder, hidden 64) for 10 s of closed-loop load from experiments/request_cost.py
# (CPU 1); experiments/profile_stages.py then sums the samples per request stage.
# Usage: flock -s /tmp/sift-cpu.lock experiments/request_profile.sh TREE ROUTE IN_FLIGHT OUT.txt
#        (PYSPY_ARGS=--gil: only the thread holding the GIL, i.e. Python CPU, no waits)
#        .venv/bin/python experiments/profile_stages.py OUT.txt
# TREE: a Sift checkout whose server/src is served (this checkout's venv and py-spy are used).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD TREE=$1 ROUTE=$2 N=$3 OUT=$4
WORK=${TMPDIR:-/tmp}/request_cost
PORT=18779
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
. experiments/_serve_tiny.sh
serve_tiny profile
.venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder "$ROUTE" "$N" 2 > /dev/null
taskset -c 1 .venv/bin/py-spy record -r 200 ${PYSPY_ARGS:-} -f raw -o "$OUT" -p $SPID -d 10 > /dev/null 2>&1 &
YPID=$!
.venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder "$ROUTE" "$N" 10
wait $YPID
kill -TERM $SPID; wait $SPID
