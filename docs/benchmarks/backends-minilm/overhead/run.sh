#!/bin/bash
# usage: run.sh TAG [pyspy]   (env: BACKEND, MODEL, CATALOG, WT)
# The experiments/ scripts it runs (raw_closed_loop.py, thread_cpu.py) are kept at commit 462a0e4:
# set WT to a checkout of that commit (`git worktree add DIR 462a0e4`), the tree they were written for.
WT=${WT:-/work/wt/backends-b}
MODEL=${MODEL:-tiny/embedder}
CATALOG=${CATALOG:-/tmp/bkb/tiny/catalog}
BACKEND=${BACKEND:-torch:fp32}
PORT=${PORT:-18431}
cd $WT; rm -f /tmp/bkb/trace-$1.jsonl
SIFT_CACHE_DIR=${SIFT_CACHE_DIR:-/tmp/bkproto/cache} HF_HUB_OFFLINE=1 taskset -c 0 .venv/bin/sift serve --port $PORT ${CATALOG:+--catalog $CATALOG} --model $MODEL --backend $BACKEND --torch-threads 1 --log-level warning --trace-file /tmp/bkb/trace-$1.jsonl > /tmp/bkb/server-$1.log 2>&1 &
SPID=$!
for i in $(seq 1 120); do curl -sf localhost:$PORT/readyz >/dev/null && break; sleep 0.5; done
.venv/bin/python experiments/raw_closed_loop.py http://127.0.0.1:$PORT $MODEL 8 3 >/dev/null  # warm
for n in 8 32; do
  t0=$(awk '{print $14+$15}' /proc/$SPID/stat); w0=$(date +%s.%N); python3 docs/benchmarks/backends-minilm/overhead/thread_cpu.py $SPID > /tmp/bkb/thr0.json
  if [ "$2" = pyspy ]; then
    .venv/bin/py-spy record -p $SPID -d 12 -r 200 -f raw -t -o /tmp/bkb/prof-$1-$n.txt >/dev/null 2>&1 &
    PP=$!
  fi
  .venv/bin/python experiments/raw_closed_loop.py http://127.0.0.1:$PORT $MODEL $n 10
  t1=$(awk '{print $14+$15}' /proc/$SPID/stat); w1=$(date +%s.%N); python3 docs/benchmarks/backends-minilm/overhead/thread_cpu.py $SPID > /tmp/bkb/thr1.json
  python3 -c "
import json; a=json.load(open('/tmp/bkb/thr0.json')); b=json.load(open('/tmp/bkb/thr1.json'))
print('  thread cpu s:', {k: (b[k]-a.get(k,0))/100 for k in b if b[k]-a.get(k,0) > 0})" 
  echo "server cores: $(echo "($t1-$t0)/100/($w1-$w0)" | bc -l | cut -c1-5)"
  [ "$2" = pyspy ] && wait $PP
done
kill $SPID; wait $SPID 2>/dev/null
