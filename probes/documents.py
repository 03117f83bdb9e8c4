"""Documents: conversion throughput per format, how long docling holds the GIL, and the
latency of encode requests while a long document converts.

    taskset -c 0 .venv/bin/python -m probes.documents throughput   # documents/s and pages/s, one core
    .venv/bin/python -m probes.documents gil                       # the loop's stalls, thread vs process
    .venv/bin/python -m probes.documents latency                   # encode latency during a conversion

``throughput`` converts through the same child process the server uses (it inherits the
affinity); pages are what the server counts (PDF pages, slides, sheets; an estimate by size
for DOCX, HTML, Markdown). ``gil`` converts a 10-page DOCX in a thread of this process, then
in the child (on CPU 0), while the main thread (on CPU 1) sleeps 1 ms at a time: its
lateness is how long the GIL was out of reach. ``latency`` starts ``sift serve`` on the first CPU (the probe on the
second), encodes one short text 40 times idle, then 40 times while the DOCX converts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

import httpx
import msgpack

from probes.common import MINILM, start_server
from sift_server.adapters.conversion_process import ConversionProcess
from sift_server.service.document_inspect import DocumentLimits, inspect_document
from tests.fixtures import documents

CHILD = "sift_server.adapters.docling_child"
# gil: the conversion (thread or child) on one CPU, the sleeping thread on another, so that a
# late wake-up is the GIL's doing, not the conversion's use of the same CPU.
WORK_CPU, WATCH_CPU = 0, 1


def _cases() -> dict[str, tuple[bytes, str]]:
    return {
        "docx (1 page)": (documents.docx_report(), "docx"),
        "docx (46 pages)": (documents.docx_pages(1500), "docx"),
        "pptx (20 slides)": (documents.pptx_slides(20), "pptx"),
        "xlsx (3 sheets × 200 rows)": (documents.xlsx_sheets(3, 200), "xlsx"),
        "html (1 page)": (documents.HTML_PAGE, "html"),
        "html (60 KB, 4 pages)": (documents.HTML_PAGE * 250, "html"),
        "md (60 KB, 4 pages)": (documents.MARKDOWN * 600, "md"),
    }


def _child(nice: int = 0) -> ConversionProcess:
    config = {"artifacts": None, "document_timeout_s": 600, "threads": 1, "nice": nice}
    process = ConversionProcess(CHILD, config, 900)
    started = time.perf_counter()
    process.start()
    print(f"conversion process ready in {time.perf_counter() - started:.1f} s")
    return process


def throughput(min_s: float) -> None:
    process = _child()
    print("| format | documents/s | pages/s | ms/document | bytes |\n|---|---|---|---|---|")
    for name, (data, fmt) in _cases().items():
        pages = inspect_document(data, fmt, name, DocumentLimits(max_pages=10_000)).pages
        process.call((data, fmt, False, 10_000, 1 << 30), 600)  # warm: first use of a reader
        count, started = 0, time.perf_counter()
        while count < 3 or (time.perf_counter() - started < min_s and count < 200):
            status, answer = process.call((data, fmt, False, 10_000, 1 << 30), 600)
            assert status == "ok" and "data" in answer, answer
            count += 1
        elapsed = time.perf_counter() - started
        print(
            f"| {name} | {count / elapsed:.2f} | {count * pages / elapsed:.1f} | {1000 * elapsed / count:.0f}"
            f" | {len(data)} |"
        )
    process.stop()


def _worst_oversleep(work: Callable[[], object]) -> tuple[float, str]:
    """(seconds the work took, the 1 ms sleeps' lateness: p50, p99, worst) with the work in a thread."""
    done = threading.Event()

    def run() -> None:
        os.sched_setaffinity(0, {WORK_CPU})  # this thread only
        work()
        done.set()

    worker = threading.Thread(target=run)
    os.sched_setaffinity(0, {WATCH_CPU})
    started = time.perf_counter()
    worker.start()
    late: list[float] = []
    while not done.is_set():
        before = time.perf_counter()
        time.sleep(0.001)
        late.append(1000 * (time.perf_counter() - before - 0.001))
    worker.join()
    late.sort()
    over = sum(1 for value in late if value > 5)
    summary = (
        f"1 ms sleeps late by p50 {late[len(late) // 2]:.2f} ms, p99 {late[int(0.99 * len(late))]:.1f} ms,"
        f" worst {late[-1]:.1f} ms; {over} of {len(late)} late by over 5 ms"
    )
    return time.perf_counter() - started, summary


def gil() -> None:
    os.sched_setaffinity(0, {WORK_CPU})  # the child, started from this thread, inherits it
    data = documents.docx_pages(300)
    import io

    from docling.datamodel.base_models import DocumentStream
    from docling.document_converter import DocumentConverter

    converter = DocumentConverter()

    def in_thread() -> object:
        stream = DocumentStream(name="document.docx", stream=io.BytesIO(data))
        return converter.convert(stream).document.export_to_markdown()

    in_thread()  # warm
    took, late = _worst_oversleep(in_thread)
    print(f"thread:  conversion {took:.2f} s; {late}")
    process = _child()
    took, late = _worst_oversleep(lambda: process.call((data, "docx", False, 10_000, 1 << 30), 600))
    print(f"process: conversion {took:.2f} s; {late}")
    process.stop()


def _encode_ms(client: httpx.Client, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        response = client.post(f"/v1/encode/{MINILM}", json={"items": [{"text": "is the server still here?"}]})
        response.raise_for_status()
        times.append(1000 * (time.perf_counter() - started))
    return times


def _summary(times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[int(0.9 * len(ordered)) - 1]
    return f"p50 {statistics.median(ordered):.1f} ms, p90 {p90:.1f} ms, max {ordered[-1]:.1f} ms"


def latency(count: int) -> None:
    body = msgpack.packb({"items": [{"document": {"data": documents.docx_pages(1500), "format": "docx"}}]})
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    with start_server() as server, httpx.Client(base_url=server.url, timeout=900) as client:
        while client.post("/v1/extract/docling", content=body, headers=headers).status_code == 503:
            time.sleep(1)  # the first request loads the model (the child imports docling)
        _encode_ms(client, 10)
        idle = _encode_ms(client, count)
        took: list[float] = []

        def convert() -> None:
            started = time.perf_counter()
            with httpx.Client(base_url=server.url, timeout=900) as own:
                own.post("/v1/extract/docling", content=body, headers=headers).raise_for_status()
            took.append(time.perf_counter() - started)

        worker = threading.Thread(target=convert)
        worker.start()
        time.sleep(0.3)
        during = _encode_ms(client, count)
        still_converting = worker.is_alive()
        worker.join()
    print(f"encode idle:              {_summary(idle)}")
    print(
        f"encode during conversion: {_summary(during)} (conversion {took[0]:.2f} s; "
        f"{'all' if still_converting else 'not all'} encodes inside it)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("what", choices=("throughput", "gil", "latency"))
    parser.add_argument("--min-s", type=float, default=5.0, help="throughput: seconds per format (at least 3 runs)")
    parser.add_argument("--count", type=int, default=40, help="latency: encodes per phase")
    args = parser.parse_args()
    if args.what == "throughput":
        throughput(args.min_s)
    elif args.what == "gil":
        gil()
    else:
        latency(args.count)


if __name__ == "__main__":
    main()
