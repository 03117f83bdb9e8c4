"""How many cores a server process actually used: its CPU time (user + system,
all threads, from ``/proc/PID/stat``) over wall time, sampled in a thread of
the load generator every few tens of milliseconds and read per phase window.

A backend that ignores the CPU affinity (ONNX Runtime sizing its pool by the
machine) shows up here as more than one core on a server pinned to one."""

from __future__ import annotations

import bisect
import os
import threading
import time


def read_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the ")" of the command name: state is field 0, utime 11, stime 12.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.times: list[float] = []
        self.cpu: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-cpu", daemon=True)

    def start(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        self._sample()

    def _sample(self) -> None:
        value = read_cpu_seconds(self.pid)
        if value is not None:
            self.times.append(time.perf_counter())
            self.cpu.append(value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _at(self, t: float) -> float | None:
        i = bisect.bisect_left(self.times, t)
        if i == 0 or i >= len(self.times):
            return None
        t0, t1 = self.times[i - 1], self.times[i]
        c0, c1 = self.cpu[i - 1], self.cpu[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1

    def cores_used(self, start: float, end: float) -> float | None:
        """CPU seconds over wall seconds between two ``perf_counter`` times."""
        if end <= start:
            return None
        c0, c1 = self._at(start), self._at(end)
        if c0 is None or c1 is None:
            return None
        return round((c1 - c0) / (end - start), 3)
