"""PNG figures of simulated runs (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from sift_bench.simulate.metrics import Summary
from sift_bench.simulate.report import MAIN_FIGURE, MEAN_LATENCY, QUEUE_P95, Criterion, Verdict

UNIT_LABELS = {"ms": "ms", "share": "share", "rate": "req/s", "ratio": "x"}
COLORS = {"adaptive": "tab:green", "timed": "tab:blue", "immediate": "tab:orange", "adaptive-old": "tab:gray"}


def _ordered(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _grouped_bars(
    ax: Axes, summaries: Sequence[Summary], families: Sequence[str], policies: Sequence[str], value: Criterion
) -> None:
    width = 0.8 / max(len(policies), 1)
    index = {(s.family, s.policy): s for s in summaries}
    scale = 1e3 if value.unit == "ms" else 1.0
    for k, policy in enumerate(policies):
        xs, ys = [], []
        for i, family in enumerate(families):
            summary = index.get((family, policy))
            if summary is not None and not math.isnan(value.value(summary)):
                xs.append(i + (k - (len(policies) - 1) / 2) * width)
                ys.append(value.value(summary) * scale)
        ax.bar(xs, ys, width=width, label=policy, color=COLORS.get(policy))
    ax.set_xticks(range(len(families)), families, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel(f"{value.label} ({UNIT_LABELS[value.unit]})")


def plot_overview(summaries: Sequence[Summary], path: Path) -> None:
    """Queue-delay p95 per family (all kinds) and forwards per burst, one row per forward model."""
    forwards = _ordered([s.forward for s in summaries])
    policies = _ordered([s.policy for s in summaries])
    fig, axes = plt.subplots(len(forwards), 2, figsize=(16, 4.5 * len(forwards)), squeeze=False)
    per_burst = Criterion("forwards_per_burst", "forwards per burst", False, "share")
    for row, forward in enumerate(forwards):
        mine = [s for s in summaries if s.forward == forward]
        families = _ordered([s.family for s in mine])
        ax = axes[row][0]
        _grouped_bars(ax, mine, families, policies, QUEUE_P95)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_title(f"{forward}: queue delay p95")
        ax.legend(fontsize=8)
        burst_families = _ordered([s.family for s in mine if s.kind == "bursts"])
        ax = axes[row][1]
        _grouped_bars(ax, mine, burst_families, policies, per_burst)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_ylabel("forwards per burst (mean)")
        ax.set_title(f"{forward}: forwards per burst (1 = fused)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_main(summaries: Sequence[Summary], results: Sequence[Verdict], forward: str, path: Path) -> None:
    """Per family: its main figure on top, a second figure below (mean latency,
    or queue p95 where the main figure is mean latency), verdict in the title."""
    mine = [s for s in summaries if s.forward == forward]
    families = _ordered([s.family for s in mine])
    policies = _ordered([s.policy for s in mine])
    verdict = {v.family: v for v in results if v.forward == forward}
    ncols = min(7, len(families))
    nrows = 2 * math.ceil(len(families) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 3.0 * nrows), squeeze=False)
    for ax in axes.flat:
        ax.set_visible(False)
    for index, family in enumerate(families):
        row, col = 2 * (index // ncols), index % ncols
        rows = [s for s in mine if s.family == family]
        criteria = MAIN_FIGURE[rows[0].kind]
        top = criteria[0]
        bottom = criteria[1] if len(criteria) > 1 else (QUEUE_P95 if top is MEAN_LATENCY else MEAN_LATENCY)
        for ax, criterion in ((axes[row][col], top), (axes[row + 1][col], bottom)):
            ax.set_visible(True)
            by_policy = {s.policy: s for s in rows}
            present = [p for p in policies if p in by_policy]
            scale = 1e3 if criterion.unit == "ms" else 1.0
            ax.bar(
                range(len(present)),
                [criterion.value(by_policy[p]) * scale for p in present],
                color=[COLORS.get(p, "grey") for p in present],
            )
            ax.set_xticks(range(len(present)), present, rotation=45, fontsize=7)
            ax.set_ylabel(f"{criterion.label} ({UNIT_LABELS[criterion.unit]})", fontsize=7)
            ax.tick_params(axis="y", labelsize=7)
        v = verdict.get(family)
        mark = "" if v is None else (" ok" if v.ok else " LOSS")
        axes[row][col].set_title(f"{family}{mark}", fontsize=8, color="black" if v is None or v.ok else "red")
    fig.suptitle(f"{forward}: main figure per family (adaptive vs the better of timed and immediate)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
