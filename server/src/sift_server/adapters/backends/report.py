"""What a decision reads like in the log, and the machine it holds for: a
recorded decision is keyed by the CPU's model and flags."""

from __future__ import annotations

import functools
import platform
from collections.abc import Mapping
from typing import Any

from sift_server.adapters.backends import artifacts
from sift_server.adapters.backends.request import Choice
from sift_server.adapters.backends.timing import NEAR_MARGIN


def summary(kind: str, choice: Choice, measured: Mapping[str, Any], timing: Mapping[str, Any]) -> str:
    """One log line: what runs and the figures it was chosen by. Tolerates any
    shape of ``measured`` (a recorded decision file is read back, not trusted)."""
    entries = {name: entry for name, entry in measured.items() if isinstance(entry, Mapping)}
    timed = sorted(
        ((name, float(entry["seconds"])) for name, entry in entries.items() if isinstance(entry.get("seconds"), float)),
        key=lambda item: item[1],
    )
    missed = [
        f"{name} {entry['agreement']:.6f}"
        if isinstance(entry.get("agreement"), float)
        else f"{name} ({entry.get('note') or 'could not be opened'})"
        for name, entry in entries.items()
        if not entry.get("passed")
    ]
    if timed:
        figures = ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in timed)
        text = f"{kind}: backend {choice} (median of {timing.get('rounds', '?')} interleaved rounds: {figures})"
    else:
        text = f"{kind}: backend {choice} (the only candidate within tolerance: not timed)"
    fastest = timing.get("fastest")
    if fastest and fastest != str(choice):
        text += f"; preferred to {fastest}, within {float(timing.get('margin', NEAR_MARGIN)):.0%} of it"
    if missed:
        text += f"; not within tolerance {timing.get('tolerance', '?')}: {', '.join(missed)}"
    return text


@functools.cache
def cpu_signature() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(("model name", "flags")):
                    flags += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return f"{platform.machine()}:{platform.processor()}:{artifacts.artifact_key({'cpu': flags})}"
