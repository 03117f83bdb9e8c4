"""Faults of the queue itself (issue 35, item 4), against a local cluster under load:
nats-server restarted, and a worker killed by the kernel's OOM killer mid-forward.

A local cluster (nats-server with JetStream in a temporary folder, a gateway, two
workers) serves the test sleeper model (tests/cluster/sleeper.py: ``--forward-ms``
forwards that use no CPU, so the figures are those of the queue path).
``--clients`` closed-loop clients (tests/cluster/faults.py) send one-item encodes
through the gateway, honouring Retry-After, for the whole run. Then:

- ``restart``: ``--restarts`` times, nats-server is stopped (alternately SIGTERM and
  SIGKILL), left down ``--outage-s`` and started again on the same port with the same
  JetStream store; then once more with an empty store (a server that lost its disk);
  ``--between-s`` of load between faults.
- ``oom``: a third worker, serving the same model from an entry whose forward takes
  4 GiB, is put in a memory cgroup limited to 512 MiB: the kernel's OOM killer ends it
  (SIGKILL) in its first forward (needs root and a memory cgroup; else it says so and
  fails).

Prints requests sent, answered, lost, 503s (with Retry-After, in the contract's
envelope), other failures, answers carrying another request's id, replies dropped
as duplicates (a request run twice), requests published again after a break, and
the maximum latency. Passes when nothing is lost, nothing else fails and no answer
is another request's.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from sift_server.cluster.local import LocalCluster, start_local_cluster
from sift_server.processes import spawn, start_nats
from tests.cluster.conftest import metric
from tests.cluster.faults import ClosedLoop, MemoryCgroup
from tests.cluster.sleeper import write_sleeper_entry

MODEL = "test/faults"
LAUNCHER = [sys.executable, "-m", "tests.cluster.launch"]


def restart_nats(cluster: LocalCluster, sig: signal.Signals, store: Path, outage_s: float) -> None:
    port = int(cluster.nats_url.rsplit(":", 1)[1])
    cluster.nats.stop(sig)
    time.sleep(outage_s)
    cluster.nats, _ = start_nats(store, port)


def oom_kill(cluster: LocalCluster, root: Path, forward_ms: float) -> tuple[str, float]:
    """(what happened, when the worker died)."""
    cage = MemoryCgroup.create(f"sift-probe-oom-{os.getpid()}", 512 << 20)
    if cage is None:
        return "no memory cgroup could be created (needs root and the memory controller)", time.monotonic()
    hungry = root / "hungry-catalog"
    write_sleeper_entry(hungry, MODEL, forward_ms, alloc_mb=4096)
    serving = ["--catalog", str(hungry), "--model", MODEL, "--no-calibrate"]
    victim = spawn(
        "oom-victim",
        [*LAUNCHER, "worker", "--nats-url", cluster.nats_url, "--worker-id", "oom-victim", *serving],
        cluster.folder / "oom-victim.log",
    )
    cage.add(victim.process.pid)
    try:
        victim.process.wait(120)
        died = time.monotonic()
    finally:
        kills = cage.oom_kills()
        if victim.alive():
            victim.stop(signal.SIGKILL)
        cage.remove()
    return f"worker exit {victim.process.returncode}, kernel OOM kills in its cgroup {kills}", died


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fault", choices=["restart", "oom"])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--forward-ms", type=float, default=50.0)
    parser.add_argument("--restarts", type=int, default=4)
    parser.add_argument("--outage-s", type=float, default=2.0)
    parser.add_argument("--between-s", type=float, default=5.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sift-queue-faults-"))
    write_sleeper_entry(root / "catalog", MODEL, args.forward_ms)
    # The repository (tests.*) ahead of the caller's path, which may name another checkout's sources.
    path = [str(Path(__file__).parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ.update({"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(path)})
    flags = ["--catalog", str(root / "catalog"), "--model", MODEL]
    cluster = start_local_cluster(2, [*flags, "--no-calibrate"], flags, folder=root / "cluster", launcher=LAUNCHER)
    load = ClosedLoop(cluster.url, MODEL, args.clients)
    notes: list[str] = []
    faults: list[float] = []  # when each fault began
    try:
        load.start()
        time.sleep(args.between_s)
        if args.fault == "restart":
            for n in range(args.restarts):
                sig = signal.SIGTERM if n % 2 == 0 else signal.SIGKILL
                faults.append(time.monotonic())
                restart_nats(cluster, sig, cluster.folder, args.outage_s)
                notes.append(f"{sig.name} + same store")
                time.sleep(args.between_s)
            faults.append(time.monotonic())
            restart_nats(cluster, signal.SIGTERM, cluster.folder / "empty-store", args.outage_s)
            notes.append("SIGTERM + empty store")
        else:
            note, died = oom_kill(cluster, root, args.forward_ms)
            notes.append(note)
            faults.append(died)
        time.sleep(args.between_s)
        figures = load.stop()
        duplicates = metric(cluster.url, "sift_gateway_duplicate_replies_total")
        republished = metric(cluster.url, "sift_gateway_republished_total")
    finally:
        load.stop()
        cluster.stop()
    print(f"{args.fault}: {'; '.join(notes)}")
    for note, began in zip(notes, faults, strict=True):
        around = [
            a.answered - a.sent for a in load.attempts if a.sent <= began + args.between_s and a.answered >= began
        ]
        print(
            f"  {note}: {len(around)} requests in flight or sent in the {args.between_s:g} s from it, max latency "
            f"{max(around, default=0.0):.2f} s"
        )
    print(figures.line())
    print(f"replies dropped as duplicates (a request run twice) {duplicates:.0f}, published again {republished:.0f}")
    for attempt in figures.bad[:5]:
        print("  failure:", attempt)
    ok = figures.lost == 0 and not figures.bad and figures.wrong_answers == 0
    if args.fault == "oom":
        ok = ok and "exit -9" in notes[0] and not notes[0].endswith(" 0")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
