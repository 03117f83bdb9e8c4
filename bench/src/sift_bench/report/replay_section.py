"""The report's section on the per-trial in-process replay (``sift_bench.run.replay``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sift_bench.report.tables import md_table
from sift_bench.report.targets import reachable_ceiling


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "-"
    text = f"{r['ratio']:.3f}"
    if r.get("low") is not None:
        text += f" [{r['low']:.3f}, {r['high']:.3f}]"
    return text


def _curve(results: Mapping[str, Any], arm: str, phase: str) -> str:
    """The old figure: served items/s (geometric mean) over the curve's best and reachable sizes."""
    ceiling = results.get("ceiling")
    data = results["analysis"]["summary"].get(arm, {}).get(phase)
    geo = data["throughput"]["geomean"] if data else None
    if not ceiling or not geo:
        return "-"
    items = int(phase.removeprefix("closed")) * int(results["config"].get("items_per_request", 1))
    reachable = reachable_ceiling(ceiling, items)
    text = f"{geo / ceiling['best']['items_per_s']:.3f} of best"
    if reachable:
        text += f", {geo / reachable['items_per_s']:.3f} of reachable (batch {reachable['size']:.0f})"
    return text


def _cuts(row: Mapping[str, Any]) -> str:
    """Sub-forwards, server / replay, and the forwards recut to the server's count."""
    text = " / ".join(str(x) if x is not None else "-" for x in row["sub_forwards"])
    cuts = row.get("cuts") or {}
    notes = [f"{cuts[k]} {k}" for k in ("matched", "differs") if cuts.get(k)]
    return text + (f" ({', '.join(notes)})" if notes else "")


HEADERS = [
    "arm", "phase", "trial", "served items/s", "replay items/s", "served / replay", "mean fwd items",
    "server fwd ms/item", "replay ms/item", "server / replay fwd", "in forwards", "forwards replayed",
    "sub-forwards server / replay", "replay passes items/s", "runtime server / replay",
]  # fmt: skip


def replay_rows(results: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for arm, phases in (results["analysis"].get("replay") or {}).items():
        for phase, data in phases.items():
            for r in data["per_trial"]:
                busy = r.get("busy_fraction")
                rows.append([
                    arm, phase, str(r["trial"] + 1), _f(r["served_items_per_s"]), _f(r["replay_items_per_s"]),
                    _f(r["ratio"], 3), _f(r["mean_forward_items"]), _f(r["server_ms_per_item"], 2),
                    _f(r["replay_ms_per_item"], 2), _f(r["forward_slowdown"], 3),
                    "-" if busy is None else f"{busy * 100:.0f} %", f"{r['forwards']}/{r['total_forwards']}",
                    _cuts(r),
                    ", ".join(_f(x) for x in r["pass_items_per_s"]),
                    " / ".join(str(x or "?") for x in r.get("runtime", ())),
                ])  # fmt: skip
            old = f"old, curve: {_curve(results, arm, phase)}"
            rows.append([arm, phase, "**all**", "", "", f"**{_interval(data['ratio'])}**", "", "", "",
                         _interval(data["slowdown"]), "", "", "", old, ""])  # fmt: skip
    return rows


def failures(results: Mapping[str, Any]) -> list[str]:
    return [
        f"trial {r['trial'] + 1} {r['arm']}: {r['replay']['error'].splitlines()[0]}"
        for r in results["runs"]
        if "error" in (r.get("replay") or {})
    ]


def section(results: Mapping[str, Any]) -> list[str]:
    """Markdown lines of the replay section."""
    lines = ["## In-process replay of the server's batches", ""]
    rows = replay_rows(results)
    fails = failures(results)
    if not rows and not fails:
        return [*lines, "Not run (`--no-replay`, `--no-ceiling`, or no valid run with a trace).", ""]
    if not rows:
        return [*lines, "Failed:", "", *[f"- {text}" for text in fails], ""]
    lines += [
        "After each run, its server stopped, a child process on the same CPUs with the same threads, code and "
        "backend replays the forwards that server formed in each closed loop: the same texts in the same groups "
        "and order, tokenized beforehand, cut into as many sub-forwards as the server cut each (`padding.plan` with "
        "the fixed cost measured in the child; `matched`: forwards that cost would have cut otherwise, recut with "
        "the fixed cost nearest to it that gives the server's count; `differs`: none did), two timed passes after "
        "an untimed warm-up; the figure is the median pass (with two passes, their mean). Long phases are "
        "sampled: every k-th forward, within a few seconds of server forward time. `served / replay`: the "
        "phase's served items/s over the replay's, per trial; **all**: the geometric mean of the per-trial "
        "ratios with a 95 % t-interval. `server fwd ms/item`: the server's own forward time (trace start to end) "
        "over the items of the replayed forwards, beside the replay's; `server / replay fwd` above 1 means the "
        "forward itself ran slower in the server. `in forwards`: the share of the phase's window the server "
        "spent inside forwards. The last column of **all** rows is the old, curve-based figure (served items/s "
        "over the once-per-bench grid's best and reachable sizes), kept for comparison. The runtimes should "
        "match: a model on `auto` may serve on one backend while it chooses and the replay load the chosen one.",
        "",
        md_table(HEADERS, rows),
        "",
    ]
    lines += [f"> replay failed: {text}" for text in fails]
    return lines
