"""The human side of the results: a Markdown report and the console summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sift_bench.report import replay_section
from sift_bench.report.tables import md_table, text_table


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(stats: Mapping[str, Any] | None, key: str, digits: int = 2) -> str:
    if not stats or key not in stats:
        return "-"
    return f"{stats[key]:.{digits}f}"


def _ratio_text(r: Mapping[str, Any] | None) -> str:
    if r is None or r.get("ratio") is None:
        return "-"
    text = f"{r['ratio']:.3f}"
    if r.get("low") is not None:
        text += f" [{r['low']:.3f}, {r['high']:.3f}]"
    return text


# ---- the summary table ----------------------------------------------------


def summary_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    phases: list[str] = results["config"]["phases"]
    summary = results["analysis"]["summary"]
    ceiling = results.get("ceiling")
    best = ceiling["best"]["items_per_s"] if ceiling else None
    targets = results.get("targets", {})
    replayed = results["analysis"].get("replay") or {}
    headers = ["arm", "valid"]
    if "sequential" in phases:
        headers += ["seq queue p95 ms", "seq latency p50 ms"]
    bursts = [p for p in phases if p.startswith("burst")]
    closed = [p for p in phases if p.startswith("closed")]
    headers += [f"b{p.removeprefix('burst')} one fwd" for p in bursts]
    for p in closed:
        c = p.removeprefix("closed")
        headers += [f"c{c} items/s", f"c{c} cores"] + ([f"c{c} /ceiling"] if best else [])
        headers += ([f"c{c} /replay"] if replayed else []) + [f"c{c} p99/p50"]
    headers += ["joined", "targets met"]
    rows = []
    for arm, s in summary.items():
        row = [arm, f"{s['valid_trials']}/{s['runs']}"]
        if "sequential" in phases:
            seq = s.get("sequential")
            row += [_pct(seq and seq["queue_ms"], "p95", 3), _pct(seq and seq["latency_ms"], "p50")]
        for p in bursts:
            d = s.get(p)
            # An arm without a joined trace (the reference server) has no forwards to count.
            row.append(f"{d['one_forward']}/{d['bursts']}" if d and d["joined"] else "-")
        for p in closed:
            d = s.get(p)
            geo = d["throughput"]["geomean"] if d else None
            row.append(_f(geo, 1))
            # Cores the server used (CPU time / wall time), worst trial: more than pinned means a stray pool.
            cores = [r["server_cores"] for r in d["per_trial"] if r.get("server_cores") is not None] if d else []
            row.append(_f(max(cores), 2) if cores else "-")
            if best:
                row.append(_f(geo / best if geo else None, 3))
            if replayed:
                row.append(_ratio_text(replayed.get(arm, {}).get(p, {}).get("ratio")))
            tails = [r["tail_ratio"] for r in d["per_trial"] if r.get("tail_ratio")] if d else []
            row.append(_f(max(tails), 2) if tails else "-")
        joined = sum(s[p]["joined"] for p in phases if p in s)
        total = sum(s[p]["requests"] for p in phases if p in s)
        row.append(f"{joined}/{total}")
        arm_targets = targets.get(arm, [])
        met = sum(t["status"] == "met" for t in arm_targets)
        judged = sum(t["status"] != "n/a" for t in arm_targets)
        row.append(f"{met}/{judged}")
        rows.append(row)
    return headers, rows


def ratio_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["phase", "ratio", "geomean [95% CI]", "trials"]
    rows = [
        [r["phase"], f"{r['numerator']} / {r['denominator']}", _ratio_text(r), str(r["n"])]
        for r in results["analysis"]["ratios"]
    ]
    return headers, rows


def _check_text(check: Mapping[str, Any]) -> str:
    mark = "ok" if check["passed"] else "**no**"
    return f"{mark} ×{_ratio_text(check)}"


def dominance_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per (arm, reference, phase): X / reference per figure and the verdict."""
    config = results["config"]
    request = config.get("request") or {}
    what = request.get("primitive", "encode")
    headers = ["workload", "primitive", "client", "phase", "arm / reference", "trials",
               "p50", "p90", "p99", "max", "items/s", "verdict"]  # fmt: skip
    rows = []
    for v in results.get("dominance", []):
        checks = {c["stat"]: c for c in v["checks"]}
        cells = [_check_text(checks[s]) if s in checks else "-" for s in ("p50", "p90", "p99", "max", "throughput")]
        if not checks:
            word = "no paired trials"
        else:
            word = "dominates" if v["dominates"] else "does not dominate (" + ", ".join(v["failed"]) + ")"
        rows.append([config.get("workload", "?"), what, config["client"], v["phase"],
                     f"{v['arm']} / {v['reference']}", str(len(v["trials"])), *cells, word])  # fmt: skip
    return headers, rows


def target_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["arm", "target", "rule", "value", "status"]
    rows = [
        [arm, t["target"], t["rule"], t["value"], t["status"]]
        for arm, items in results.get("targets", {}).items()
        for t in items
    ]
    return headers, rows


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def open_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per (open-loop phase, arm): rates, the pooled latency distribution, and each
    percentile over the first arm's (the arms saw the same arrivals in each trial)."""
    summary = results["analysis"]["summary"]
    phases = [p for p in results["config"]["phases"] if p.startswith("open")]
    arms = list(summary)
    headers = ["phase", "arm", "offered req/s", "sent req/s", "achieved req/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
               "p99/p50", "client lag p99 ms", f"/ {arms[0]} (p50, p90, p99, max)" if arms else "-"]  # fmt: skip
    rows = []
    for phase in phases:
        base = summary[arms[0]].get(phase) if arms else None
        for arm in arms:
            d = summary[arm].get(phase)
            if not d:
                rows.append([phase, arm] + ["-"] * (len(headers) - 2))
                continue
            lat = d["latency_ms"]
            ratios = "-"
            if base and arm != arms[0] and base["latency_ms"].get("n"):
                ratios = ", ".join(
                    _f(lat[k] / base["latency_ms"][k], 2) if base["latency_ms"][k] else "-"
                    for k in ("p50", "p90", "p99", "max")
                )
            rows.append([
                phase, arm, _f(_mean(d["offered_rate"]), 1), _f(_mean(d.get("sent_rate") or []), 1),
                _f(_mean(d["achieved_rate"]), 1), _pct(lat, "p50", 1),
                _pct(lat, "p90", 1), _pct(lat, "p99", 1), _pct(lat, "max", 1),
                _f(lat["p99"] / lat["p50"], 2) if lat.get("p50") else "-", _pct(d.get("lag_ms"), "p99", 1), ratios,
            ])  # fmt: skip
    return headers, rows


def _open_capacity_text(results: Mapping[str, Any]) -> str:
    cap = results.get("open_capacity") or {}
    if not cap:
        return ""
    if cap.get("measured"):
        return (
            f"Loads are shares of {cap['requests_per_s']:.1f} requests/s, the closed loop of "
            f"{cap['concurrency']} in flight on a fresh `{cap['arm']}` server before the trials."
        )
    return f"Loads are shares of {cap['requests_per_s']:.1f} requests/s (given with --open-capacity)."


def console_summary(results: Mapping[str, Any]) -> str:
    meta, config = results["meta"], results["config"]
    out = [
        "",
        f"sift bench: {config['model']}, {config['trials']} trial(s), client {config['client']}, "
        f"server CPUs {config['server_cpus'] or 'any'}, client CPUs {config['client_cpus'] or 'any'}",
        "",
        text_table(*summary_rows(results)),
    ]
    ceiling = results.get("ceiling")
    if ceiling:
        best = ceiling["best"]
        out += ["", f"in-process ceiling: best {best['items_per_s']:.1f} items/s at batch {best['size']}"]
    headers, rows = ratio_rows(results)
    if rows:
        out += ["", "throughput ratios (geometric mean over paired trials):", text_table(headers, rows)]
    headers, rows = open_rows(results)
    if rows:
        out += ["", "open loops (latency pooled over trials): " + _open_capacity_text(results),
                text_table(headers, rows)]  # fmt: skip
    headers, rows = dominance_rows(results)
    if rows:
        out += ["", "against the reference (X / reference, geometric mean [95% CI] over paired trials):",
                text_table(headers, rows)]  # fmt: skip
    headers, rows = target_rows(results)
    if rows:
        out += ["", "targets (validity is separate: invalid runs are excluded):", text_table(headers, rows)]
    invalid = [r for r in results["runs"] if not r["valid"]]
    if invalid:
        out += ["", f"INVALID runs excluded ({len(invalid)}):"]
        out += [f"  trial {r['trial'] + 1} {r['arm']}: {'; '.join(r['problems'])}" for r in invalid]
    else:
        out += ["", f"all {len(results['runs'])} runs valid (every response checked)"]
    for warning in results.get("warnings", []):
        out.append(f"warning: {warning}")
    out.append(f"load average at start {meta.get('loadavg_start')}, at end {meta.get('loadavg_end')}")
    return "\n".join(out)


# ---- the Markdown report --------------------------------------------------


def _phase_detail(results: Mapping[str, Any], phase: str) -> list[str]:
    summary = results["analysis"]["summary"]
    headers = ["arm", "n", "latency p50", "p90", "p99", "max", "queue p50", "queue p95", "queue p99",
               "ingress p50", "wait p95", "mean fwd size", "joined"]  # fmt: skip
    rows = []
    for arm, s in summary.items():
        d = s.get(phase)
        if not d:
            rows.append([arm] + ["-"] * (len(headers) - 1))
            continue
        lat, q, ing, wait = d["latency_ms"], d["queue_ms"], d["ingress_ms"], d["wait_ms"]
        rows.append([
            arm, str(lat.get("n", 0)), _pct(lat, "p50"), _pct(lat, "p90"), _pct(lat, "p99"), _pct(lat, "max"),
            _pct(q, "p50", 3), _pct(q, "p95", 3), _pct(q, "p99", 3), _pct(ing, "p50", 3), _pct(wait, "p95", 3),
            _f(d["mean_forward_requests"], 1), f"{d['joined']}/{d['requests']}",
        ])  # fmt: skip
    out = [f"### {phase}", "", "Times in ms.", "", md_table(headers, rows), ""]
    drow = []
    for arm, s in summary.items():
        d = s.get(phase)
        if d:
            keys = ("client_ms", "to_server_ms", "ingress_ms", "queue_ms", "forward_ms", "to_client_ms", "latency_ms")
            drow.append([arm] + [_pct(d.get(k), "p50", 3) for k in keys])
    out += [
        "Where the time goes (medians, ms; client and server share the monotonic clock):",
        "",
        md_table(
            [
                "arm",
                "client (call → issued)",
                "issued → headers in",
                "ingress",
                "queue",
                "forward",
                "forward end → client",
                "latency",
            ],
            drow,
        ),
        "",
    ]
    if phase.startswith("burst"):
        prow = []
        for arm, s in summary.items():
            d = s.get(phase)
            if not d:
                continue
            patterns = ", ".join(f"`{k}` x{v}" for k, v in d["patterns"].items())
            span = d["arrival_span_ms"]
            issue = d.get("issue_span_ms")
            prow.append(
                [arm, f"{d['one_forward']}/{d['bursts']}", patterns, _pct(issue, "p50", 2), _pct(span, "p50", 2),
                 _pct(span, "max", 2)]
            )  # fmt: skip
        out += [
            md_table(["arm", "one forward", "patterns (requests per forward, in forward order)",
                      "client issue span p50 ms", "server arrival span p50 ms", "max"], prow),
            "",
            "Issue span: first to last request of a burst handed to the client's HTTP stack; arrival span: first "
            "to last request's headers received by the server.",
            "",
        ]  # fmt: skip
    if phase.startswith("closed"):
        trow = []
        for arm, s in summary.items():
            d = s.get(phase)
            if not d:
                continue
            per = ", ".join(_f(v, 1) for v in d["throughput"]["per_trial"])
            tails = ", ".join(_f(r.get("tail_ratio"), 2) for r in d["per_trial"])
            maxima = ", ".join(_f(r.get("max_ratio"), 2) for r in d["per_trial"])
            cores = ", ".join(_f(r.get("server_cores"), 2) for r in d["per_trial"])
            client = ", ".join(_f(r.get("client_cores"), 2) for r in d["per_trial"])
            passed = d.get("passed_over") or {}
            trow.append([
                arm, _f(d["throughput"]["geomean"], 1), _f(d["throughput"]["median"], 1), per, cores, client, tails,
                maxima,
                _pct(passed, "p99", 0), _pct(passed, "max", 0),
            ])  # fmt: skip
        headers = ["arm", "items/s geomean", "median", "per trial", "server cores per trial",
                   "client cores per trial", "p99/p50 per trial",
                   "max/p50 per trial", "passed over p99", "passed over max"]  # fmt: skip
        out += [
            md_table(headers, trow),
            "",
            "Server cores: the server's CPU time over wall time in the phase; client cores: the load generator's. "
            "Passed over: forwards that started "
            "after a request was admitted and before its own (0 or 1 in a fair queue; starvation makes it grow).",
            "",
        ]
    return out


def markdown(results: Mapping[str, Any]) -> str:
    meta, config = results["meta"], results["config"]
    plan = config["plan"]
    lines = [
        "# sift bench report",
        "",
        f"- model: `{config['model']}`; client: `{config['client']}` on {config.get('event_loop', 'asyncio')}; "
        f"torch threads per server: {config['torch_threads']}",
        f"- CPUs: server {config['server_cpus'] or 'unpinned'}, load generator {config['client_cpus'] or 'unpinned'} "
        f"(available {meta.get('cpus_available')}); "
        f"load average {meta.get('loadavg_start')} → {meta.get('loadavg_end')}",
        f"- phases per run: warmup ({plan['warmup_sequential']} sequential, one burst of each size, "
        f"{plan['warmup_closed_s']} s closed loop; not counted), sequential {plan['sequential']}, "
        f"{plan['bursts']} bursts of each of {plan['burst_sizes']} after {plan['burst_gap_s'] * 1000:.0f} ms idle, "
        f"closed loop at {plan['concurrencies']} in flight for {plan['closed_seconds']} s each",
        *(
            ["- artifact cache: empty at every Sift server start (`--fresh-cache`): each run is a first start"]
            if config.get("fresh_cache")
            else []
        ),
        f"- command: `{' '.join(meta.get('command_line') or ['?'])}`",
        f"- started {meta['started']}, finished {meta.get('finished', '?')}, host `{meta['host']}`, "
        f"Python {meta['python']}, SDK {meta.get('sift_sdk')}",
        "",
        "## Arms",
        "",
    ]
    arow = []
    wt = meta.get("worktree", {})
    for arm in results["arms"]:
        if arm["kind"] == "reference":
            code = "the released SIE server (sie-server 0.10.1, its own environment, CPU, offline), its timed window"
        elif arm["kind"] == "rev":
            code = f"`{arm['ref']}` = {arm['commit'][:12]} (manifest {arm['manifest_digest'][:12]})"
        else:
            dirty = " + uncommitted changes" if wt.get("dirty") else ""
            code = f"current tree ({(wt.get('head') or '?')[:12]}{dirty}, files {wt.get('digest', '?')[:12]})"
            if arm["kind"] == "gateway":
                code += ", through nats-server + sift gateway + one sift worker"
        arow.append([arm["name"], arm["policy"], code])
    lines += [md_table(["arm", "policy", "code"], arow), ""]
    lines += ["Orders: " + "; ".join(f"trial {i + 1}: " + " → ".join(o) for i, o in enumerate(results["orders"])), ""]

    lines += ["## Validity", ""]
    vrows = []
    for r in results["runs"]:
        vrows.append([
            str(r["trial"] + 1), str(r["position"] + 1), r["arm"], "valid" if r["valid"] else "**invalid**",
            f"{r.get('joined', 0)}/{r.get('requests', 0)}", str(r.get("forwards", 0)),
            _f(r.get("server", {}).get("startup_s"), 1), "; ".join(r["problems"]) or "-",
        ])  # fmt: skip
    lines += [
        "Every response is checked (HTTP status, echoed request id, item count, vector shape, finite values). "
        "A run with any invalid response is excluded from every figure below; validity says nothing about targets.",
        "",
        md_table(["trial", "pos", "arm", "validity", "joined", "forwards", "startup s", "problems"], vrows),
        "",
    ]
    for warning in results.get("warnings", []):
        lines.append(f"> warning: {warning}")
    lines += ["", "## Summary", "", md_table(*summary_rows(results)), ""]
    lines += [
        "`seq queue p95`: server queue time (admission → forward start) of sequential requests. `one fwd`: bursts "
        "whose requests all ran in a single forward. `items/s`: geometric mean over valid trials. `/ceiling`: "
        "fraction of the best in-process items/s of the curve. `/replay`: served over the in-process replay of "
        "the same batches, geometric mean of per-trial ratios [95 % interval]. `p99/p50`: worst trial's client "
        "latency ratio.",
        "",
        "## Targets",
        "",
        md_table(*target_rows(results)),
        "",
        "## Against the reference",
        "",
        "Each figure is X / reference, the geometric mean of per-trial ratios (paired by trial) with a 95 % "
        "t-interval. A latency figure passes (`ok`) when the interval's low end is ≤ 1, throughput when its "
        "high end is ≥ 1 (with one trial, the ratio itself); X dominates when every figure passes.",
        "",
        md_table(*dominance_rows(results)) if results.get("dominance") else "No reference arm in this run.",
        "",
        "## Throughput ratios",
        "",
        "Paired by trial; geometric mean of per-trial ratios with a 95 % t-interval on the log ratios "
        "(no interval with one trial).",
        "",
        md_table(*ratio_rows(results)),
        "",
    ]
    headers, orows = open_rows(results)
    if orows:
        plan_open = ", ".join(f"{load:g}" for load in plan.get("open_loads", ()))
        lines += [
            "## Open loops",
            "",
            f"Independent users ({', '.join(plan.get('open_arrivals', ()))} arrivals, "
            f"`sift_bench.workload.arrivals`) at loads {plan_open} for {plan.get('open_seconds')} s each. "
            + _open_capacity_text(results)
            + " Every arm of a trial sees the same arrival times. Latency is pooled over the valid trials; "
            "`client lag`: how late the load generator sent a request after its scheduled time (its own "
            "queueing, not the server's); `sent`: the requests this draw of the schedule holds over its length; "
            "`achieved`: answers over the phase's window (first send to last answer); the last column is each "
            "percentile over the first arm's.",
            "",
            md_table(headers, orows),
            "",
        ]
    lines += ["## Phases", ""]
    for phase in config["phases"]:
        lines += _phase_detail(results, phase)
    lines += replay_section.section(results)
    ceiling = results.get("ceiling")
    lines += ["## In-process ceiling", ""]
    if ceiling:
        seen = set(results["analysis"].get("batch_sizes_seen", []))
        crow = [
            [size, _f(v["median_s"] * 1000, 2), _f(v["items_per_s"], 1), "yes" if int(size) in seen else ""]
            for size, v in sorted(ceiling["sizes"].items(), key=lambda kv: int(kv[0]))
        ]
        lines += [
            f"`adapter.forward` alone, pinned to CPUs {ceiling.get('cpus') or 'any'}, "
            f"{ceiling['torch_threads']} torch thread(s); best {ceiling['best']['items_per_s']:.1f} items/s "
            f"at batch {ceiling['best']['size']}.",
            "",
            md_table(["batch", "median forward ms", "items/s", "seen in runs"], crow),
            "",
        ]
    else:
        lines += ["Not measured.", ""]
    plotted = results.get("files", {}).get("plots")
    lines += ["## Plots", ""]
    lines += [f"![{name.removesuffix('.png').replace('_', ' ')}]({name})\n" for name in plotted] if plotted else [
        "Not drawn (`--no-plots`).", ""]  # fmt: skip
    lines += [
        "Raw per-request columns (client send/receive, server arrival/admission/decision/forward times, forward "
        "ids and sizes) are in `results.json`; server logs in `logs/`, traces in `traces/`."
        if not results.get("slim")
        else "Archived results (`results.json.gz`): per-request columns, logs and traces are not kept; the command "
        "line above regenerates them.",
        "",
    ]
    return "\n".join(lines)
