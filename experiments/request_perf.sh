#!/bin/bash
# Where a request's CPU goes by library (issue 20): `perf record` samples a running server (pinned
# to CPU 0, tiny 2-layer BERT embedder, hidden 64) for 8 s of closed-loop JSON load from
# experiments/request_cost.py (CPU 1), then reports the shares per shared object (the Python
# interpreter, ONNX Runtime, the tokenizers library, libc, the kernel, ...). Unlike py-spy it counts
# native code that runs without the GIL (the forward, the tokenizer) at its real CPU.
# Usage: flock -s /tmp/sift-cpu.lock experiments/request_perf.sh TREE IN_FLIGHT OUT.perf
#        perf report -i OUT.perf --sort dso --stdio
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD TREE=$1 N=$2 OUT=$3
WORK=${TMPDIR:-/tmp}/request_cost
PORT=18774
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
. experiments/_serve_tiny.sh
serve_tiny perf
sleep "${SETTLE_S:-15}"  # auto's background backend decision
.venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder json "$N" 2 > /dev/null
taskset -c 1 perf record -F 499 -o "$OUT" -p $SPID -- sleep 8 > /dev/null 2>&1 &
PP=$!
.venv/bin/python experiments/request_cost.py http://127.0.0.1:$PORT tiny/embedder json "$N" 8 $SPID
wait $PP
kill -TERM $SPID; wait $SPID
