"""CPU of each of a process's threads over an interval: where a server's cores
go (the main thread runs the event loop; the forward's executor thread and the
backend's own pool threads are the others, most of them named after the
process, so they are told apart by their CPU).

Usage: python experiments/thread_cpu.py PID SECONDS
Prints one line per thread that used CPU in the interval (cores: CPU seconds
over wall seconds), the main (event loop) thread marked, then the total.
"""

from __future__ import annotations

import os
import sys
import time


def threads(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (name, user + system CPU seconds) for every live thread of ``pid``."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii", errors="replace") as stat:
                text = stat.read()
        except OSError:
            continue  # the thread ended meanwhile
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rpartition(")")[2].split()
        found[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return found


def main() -> None:
    pid, seconds = int(sys.argv[1]), float(sys.argv[2])
    before = threads(pid)
    started = time.perf_counter()
    time.sleep(seconds)
    after = threads(pid)
    wall = time.perf_counter() - started
    used = {tid: (name, cpu - before.get(tid, (name, 0.0))[1]) for tid, (name, cpu) in after.items()}
    for tid, (name, cpu) in sorted(used.items(), key=lambda kv: -kv[1][1]):
        if cpu > 0:
            role = "main(loop)" if tid == pid else "other"
            print(f"tid={tid} name={name!r} role={role} cores={cpu / wall:.2f}")
    print(f"threads={len(used)} total_cores={sum(cpu for _, cpu in used.values()) / wall:.2f}")


if __name__ == "__main__":
    main()
