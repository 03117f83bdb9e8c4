"""PNG figures (matplotlib, Agg): client latency CDF per arm and phase, forwards
per burst, closed-loop throughput per trial against the ceiling."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from sift_bench.report.analysis import run_phase_stats


def _valid_stats(results: Mapping[str, Any], arm: str, phase: str) -> list[dict[str, Any]]:
    items = int(results["config"].get("items_per_request", 1))
    return [
        run_phase_stats(run["phases"][phase], items)
        for run in results["runs"]
        if run["arm"] == arm and run["valid"] and phase in run["phases"]
    ]


def latency_cdf(results: Mapping[str, Any], path: Path) -> Path:
    phases: list[str] = results["config"]["phases"]
    arms = [a["name"] for a in results["arms"]]
    fig, axes = plt.subplots(1, len(phases), figsize=(4.2 * len(phases), 3.6), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        for arm in arms:
            values = sorted(v for s in _valid_stats(results, arm, phase) for v in s["latency_ms"])
            if not values:
                continue
            ys = [(i + 1) / len(values) for i in range(len(values))]
            ax.step(values, ys, where="post", label=arm)
        ax.set_xscale("log")
        ax.set_title(phase)
        ax.set_xlabel("client latency (ms)")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][0].legend(fontsize="small")
    fig.suptitle("Client latency CDF (valid trials pooled)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def forwards_per_burst(results: Mapping[str, Any], path: Path) -> Path:
    phases = [p for p in results["config"]["phases"] if p.startswith("burst")]
    arms = [a["name"] for a in results["arms"]]
    fig, axes = plt.subplots(1, max(1, len(phases)), figsize=(5.0 * max(1, len(phases)), 3.6), squeeze=False)
    width = 0.8 / max(1, len(arms))
    for ax, phase in zip(axes[0], phases, strict=False):
        counts_by_arm = {}
        for arm in arms:
            counts: dict[int, int] = {}
            for s in _valid_stats(results, arm, phase):
                for k in s["forwards_per_burst"]:
                    counts[k] = counts.get(k, 0) + 1
            counts_by_arm[arm] = counts
        ks = sorted({k for c in counts_by_arm.values() for k in c}) or [1]
        for j, arm in enumerate(arms):
            xs = [i + (j - (len(arms) - 1) / 2) * width for i in range(len(ks))]
            ax.bar(xs, [counts_by_arm[arm].get(k, 0) for k in ks], width=width, label=arm)
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_xlabel("forwards per burst")
        ax.set_ylabel("bursts")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"bursts of {phase.removeprefix('burst')}")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput(results: Mapping[str, Any], path: Path) -> Path:
    phases = [p for p in results["config"]["phases"] if p.startswith("closed")]
    arms = [a["name"] for a in results["arms"]]
    ceiling = results.get("ceiling")
    fig, axes = plt.subplots(1, max(1, len(phases)), figsize=(4.5 * max(1, len(phases)), 3.6), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=False):
        for j, arm in enumerate(arms):
            values = [s["throughput"] for s in _valid_stats(results, arm, phase)]
            ax.scatter([j] * len(values), values, label=arm)
        if ceiling:
            best = ceiling["best"]["items_per_s"]
            ax.axhline(best, color="grey", linestyle="--", label=f"ceiling {best:.0f}/s")
            ax.axhline(0.95 * best, color="grey", linestyle=":", label="0.95 x ceiling")
        ax.set_xticks(range(len(arms)), arms, rotation=20)
        ax.set_ylabel("items/s")
        ax.set_ylim(bottom=0)
        ax.set_title(f"closed loop, {phase.removeprefix('closed')} in flight")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(results: Mapping[str, Any], out_dir: Path) -> list[Path]:
    return [
        latency_cdf(results, out_dir / "latency_cdf.png"),
        forwards_per_burst(results, out_dir / "forwards_per_burst.png"),
        throughput(results, out_dir / "throughput.png"),
    ]
