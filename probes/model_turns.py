"""Two models that do not fit the memory budget together, wanted at once (issue 35):
8 clients alternate between them for --seconds, each request retried after the
Retry-After of its 503 until answered (as the SDK does) or --give-up-s passes.

Reports, per model, the time from its first request to its first answer against its
load time (from the server's log) + --slack-s; the share of requests answered over the
run; every 503 code seen with its Retry-After; the swaps (loads and evictions); and RSS
at the start of the run and after --idle-s of idleness at its end. Passes when both
models answer within load time + slack, at least --min-share of requests succeed, RSS
after idle is within --rss-ratio of its start, and every 503 is MODEL_LOADING or
RESOURCE_EXHAUSTED with a Retry-After.

    HF_HUB_OFFLINE=1 flock /tmp/sift-bench.lock .venv/bin/python -m probes.model_turns [--seconds 60]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from probes.common import rss_mb, second_catalog_entry, start_server

MODELS = ("probe/turns-a", "probe/turns-b")
CODES_ALLOWED = {"MODEL_LOADING", "RESOURCE_EXHAUSTED"}


@dataclass
class Tally:
    answered: int = 0
    gave_up: int = 0
    cut_off: int = 0
    first_request: dict[str, float] = field(default_factory=dict)
    first_answer: dict[str, float] = field(default_factory=dict)
    answers: collections.Counter[str] = field(default_factory=collections.Counter)
    refusals: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    wrong: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def client(base: str, index: int, start: float, end: float, give_up_s: float, tally: Tally) -> None:
    turn = index % 2  # half the clients start on each model: both are wanted at once
    with httpx.Client(base_url=base, timeout=60) as http:
        while time.perf_counter() < end:
            model = MODELS[turn]
            turn = 1 - turn
            began = time.perf_counter()
            with tally.lock:
                tally.first_request.setdefault(model, began - start)
            while True:
                now = time.perf_counter()
                if now >= end:
                    with tally.lock:
                        tally.cut_off += 1
                    return
                if now - began > give_up_s:
                    with tally.lock:
                        tally.gave_up += 1
                    break
                response = http.post(
                    f"/v1/encode/{model}",
                    json={"items": [{"text": f"client {index} asks {model}"}]},
                    headers={"Accept": "application/json"},
                )
                if response.status_code == 200:
                    with tally.lock:
                        tally.answered += 1
                        tally.answers[model] += 1
                        tally.first_answer.setdefault(model, time.perf_counter() - start)
                    break
                code = ""
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    code = response.json()["detail"]["code"]
                retry_after = response.headers.get("Retry-After")
                with tally.lock:
                    tally.refusals[(model, f"{response.status_code} {code} Retry-After {retry_after}")] += 1
                    if response.status_code != 503 or code not in CODES_ALLOWED or retry_after is None:
                        tally.wrong.append(f"{response.status_code} {response.text[:200]}")
                if response.status_code != 503 or retry_after is None:
                    break
                time.sleep(float(retry_after))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--give-up-s", type=float, default=30.0)
    parser.add_argument("--slack-s", type=float, default=5.0)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--min-share", type=float, default=0.8)
    parser.add_argument("--rss-ratio", type=float, default=1.25)
    parser.add_argument("--budget-mb", type=int, default=130)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sift-probe-turns-"))
    catalog = work / "catalog"
    for name in MODELS:
        second_catalog_entry(catalog, name)
    # MiniLM is about 87 MiB: the budget holds one copy. The default model (MiniLM,
    # preloaded, never asked for) gives way to the first of the two.
    os.environ.pop("SIFT_EVICT_IDLE_S", None)
    tally = Tally()
    with start_server("--memory-budget-mb", str(args.budget_mb), catalogs=[catalog], workdir=work) as server:
        assert server.process is not None
        pid = server.process.pid
        rss_start = rss_mb(pid)
        start = time.perf_counter()
        end = start + args.seconds
        threads = [
            threading.Thread(target=client, args=(server.url, i, start, end, args.give_up_s, tally))
            for i in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(args.idle_s)
        rss_idle = rss_mb(pid)
        log = server.log_tail(1_000_000)
    loads: dict[str, list[float]] = collections.defaultdict(list)
    for name, seconds in re.findall(r"model (\S+) loaded in ([0-9.]+)s", log):
        loads[name].append(float(seconds))
    evictions = collections.Counter(re.findall(r"evicted model (\S+)", log))
    total = tally.answered + tally.gave_up + tally.cut_off
    share = tally.answered / total if total else 0.0
    ok = True
    pair = " / ".join(MODELS)
    print(f"{args.clients} clients alternating {pair} for {args.seconds:.0f} s, budget {args.budget_mb} MiB")
    for name in MODELS:
        load = loads[name][0] if loads[name] else float("nan")
        first_req = tally.first_request.get(name, float("nan"))
        first_ans = tally.first_answer.get(name, float("nan"))
        waited = first_ans - first_req
        within = waited <= load + args.slack_s
        ok &= within
        print(
            f"  {name}: first request {first_req:.2f} s, first answer {first_ans:.2f} s -> {waited:.2f} s "
            f"(load {load:.2f} s + {args.slack_s:.0f} s = {load + args.slack_s:.2f} s: {'ok' if within else 'LATE'}); "
            f"{tally.answers[name]} answers; loads {len(loads[name])} (median "
            f"{sorted(loads[name])[len(loads[name]) // 2] if loads[name] else float('nan'):.2f} s), "
            f"evictions {evictions[name]}"
        )
    print(
        f"  requests: {total} ({tally.answered} answered, {tally.gave_up} gave up after {args.give_up_s:.0f} s, "
        f"{tally.cut_off} cut off by the end of the run): {share:.1%} answered"
    )
    ok &= share >= args.min_share
    print("  503s seen:")
    for (name, what), count in sorted(tally.refusals.items()):
        print(f"    {name}: {what} x {count}")
    ok &= not tally.wrong
    for wrong in tally.wrong[:5]:
        print(f"  UNEXPECTED: {wrong}")
    ratio = rss_idle / rss_start
    ok &= ratio <= args.rss_ratio
    print(f"  RSS at start {rss_start:.1f} MiB, after {args.idle_s:.0f} s idle {rss_idle:.1f} MiB ({ratio:.2f}x)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
