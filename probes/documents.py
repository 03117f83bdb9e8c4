"""Documents: conversion throughput per format, how long docling holds the GIL, and the
latency of encode requests while a long document converts.

    taskset -c 0 .venv/bin/python -m probes.documents throughput   # documents/s and pages/s, one core
    .venv/bin/python -m probes.documents gil                       # the loop's stalls, thread vs process
    .venv/bin/python -m probes.documents latency                   # encode latency during a conversion
    taskset -c 0 .venv/bin/python -m probes.documents checks       # the pre-parse checks on hostile documents

``throughput`` converts through the same child process the server uses (it inherits the
affinity); pages are what the server counts (PDF pages, slides, sheets; an estimate by size
for DOCX, HTML, Markdown). ``gil`` converts a 10-page DOCX in a thread of this process, then
in the child (on CPU 0), while the main thread (on CPU 1) sleeps 1 ms at a time: its
lateness is how long the GIL was out of reach. ``latency`` starts ``sift serve`` on the first
CPU (the probe on the second) with a docling entry per conversion nice (``--nices``, 10 and
19), and per entry encodes one short text one request after another: 200 times idle, as many
times as fit while a 50-page DOCX converts, 200 times idle again. ``throughput`` also reports
the child's CPU time per document, which waiting for a shared core does not inflate.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import msgpack

from probes.common import MINILM, start_server
from sift_server.adapters.conversion_process import ConversionProcess
from sift_server.errors import InvalidInput
from sift_server.service.document_inspect import DocumentLimits, inspect_document
from tests.fixtures import documents

CHILD = "sift_server.adapters.docling_child"
# gil: the conversion (thread or child) on one CPU, the sleeping thread on another, so that a
# late wake-up is the GIL's doing, not the conversion's use of the same CPU.
WORK_CPU, WATCH_CPU = 0, 1


def _memo_docx() -> bytes:
    """A two-page memo: a title, three sections of paragraphs, a bullet list and a table."""
    import io

    import docx

    document = docx.Document()
    document.add_heading("Supplier review, second quarter", 0)
    for section in ("Summary", "Findings", "Next steps"):
        document.add_heading(section, 1)
        for index in range(4):
            document.add_paragraph(f"{section} point {index + 1}: " + "deliveries were on time and within budget. " * 6)
    for item in ("renew the contract", "audit the invoices", "visit the plant"):
        document.add_paragraph(item, style="List Bullet")
    table = document.add_table(rows=6, cols=4)
    for row in range(6):
        for col in range(4):
            table.cell(row, col).text = ("supplier", "orders", "late", "score")[col] if row == 0 else f"{row * col}"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _article_html() -> bytes:
    """A 3 KB article page: a title, sections, paragraphs with links, a list and a table."""
    sections = []
    for index in range(6):
        paragraphs = "".join(
            f"<p>Paragraph {j} of section {index}: the <a href='/x'>committee</a> met on <b>Tuesday</b> "
            "and agreed on the budget for the coming year.</p>"
            for j in range(3)
        )
        sections.append(f"<h2>Section {index + 1}</h2>{paragraphs}")
    rows = "".join(f"<tr><td>item {i}</td><td>{i * 7}</td><td>{i * 1.5:.1f}</td></tr>" for i in range(10))
    body = "".join(sections) + "<ul><li>one</li><li>two</li><li>three</li></ul>"
    body += f"<table><tr><th>item</th><th>count</th><th>price</th></tr>{rows}</table>"
    head = "<!DOCTYPE html><html><head><title>News</title></head>"
    return f"{head}<body><h1>Annual meeting</h1>{body}</body></html>".encode()


def _readme_md() -> bytes:
    """A 4 KB README: headings, paragraphs, a list, a code block and a table."""
    parts = ["# Project\n\nA small library for reading sensor data.\n"]
    for index in range(8):
        parts.append(f"## Part {index + 1}\n\n" + "The reader parses *records* and **checks** them. " * 8 + "\n")
        parts.append("- first\n- second\n- third\n")
    parts.append("```python\nimport sensors\nprint(sensors.read())\n```\n")
    parts.append("| field | type |\n|---|---|\n" + "".join(f"| f{i} | int |\n" for i in range(10)))
    return "\n".join(parts).encode()


def _orders_csv() -> bytes:
    """200 orders of six columns (9 KB)."""
    lines = ["order,date,customer,region,units,amount"]
    lines += [
        f"{i},2026-{i % 12 + 1:02d}-{i % 28 + 1:02d},customer {i % 37},region {i % 5},{i % 9},{i * 3.25:.2f}"
        for i in range(200)
    ]
    return ("\n".join(lines) + "\n").encode()


def _cases() -> dict[str, tuple[bytes, str]]:
    """Realistic small documents of each weight-free format, made here (none are in git), and
    the long DOCX of the latency measurement."""
    return {
        "docx (memo: title, 3 sections, list, table)": (_memo_docx(), "docx"),
        "pptx (12 slides: title and bullets)": (documents.pptx_slides(12), "pptx"),
        "xlsx (1 sheet × 100 rows)": (documents.xlsx_sheets(1, 100), "xlsx"),
        "html (3 KB article: sections, links, list, table)": (_article_html(), "html"),
        "md (4 KB README: sections, lists, code, table)": (_readme_md(), "md"),
        "csv (200 rows × 6 columns)": (_orders_csv(), "csv"),
        f"docx ({LONG_PAGES} pages: {LONG_PARAGRAPHS} paragraphs, headings and tables)": (_long_docx(), "docx"),
    }


# The long document of the latency measurement: 50 pages as the server counts DOCX pages.
LONG_PARAGRAPHS = 1630
LONG_PAGES = 50


def _long_docx() -> bytes:
    return documents.docx_pages(LONG_PARAGRAPHS)


def _child(nice: int = 0) -> ConversionProcess:
    config = {"artifacts": None, "document_timeout_s": 600, "threads": 1, "nice": nice}
    process = ConversionProcess(CHILD, config, 900)
    started = time.perf_counter()
    process.start()
    print(f"conversion process ready in {time.perf_counter() - started:.1f} s")
    return process


def _cpu_s(process: ConversionProcess) -> float:
    """The child's CPU time so far (user and system), from /proc: on a shared core the wall
    time includes waiting for the core, the CPU time does not."""
    assert process.pid is not None
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(min_s: float) -> None:
    process = _child()
    print(
        "| format | pages | bytes | documents/s | pages/s | ms/document | CPU ms/document | documents/s per CPU-s |"
        "\n|---|---|---|---|---|---|---|---|"
    )
    for name, (data, fmt) in _cases().items():
        pages = inspect_document(data, fmt, name, DocumentLimits(max_pages=10_000)).pages
        process.call((data, fmt, False, 10_000, 1 << 30), 600)  # warm: first use of a reader
        count, started, cpu = 0, time.perf_counter(), _cpu_s(process)
        while count < 3 or (time.perf_counter() - started < min_s and count < 200):
            status, answer = process.call((data, fmt, False, 10_000, 1 << 30), 600)
            assert status == "ok" and "data" in answer, answer
            count += 1
        elapsed, cpu = time.perf_counter() - started, _cpu_s(process) - cpu
        print(
            f"| {name} | {pages} | {len(data)} | {count / elapsed:.2f} | {count * pages / elapsed:.1f}"
            f" | {1000 * elapsed / count:.0f} | {1000 * cpu / count:.0f} | {count / max(cpu, 1e-9):.2f} |"
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


def _encode(client: httpx.Client) -> tuple[float, float]:
    """One short text encoded: (round trip, the server's forward time), in ms."""
    started = time.perf_counter()
    response = client.post(f"/v1/encode/{MINILM}", json={"items": [{"text": "is the server still here?"}]})
    response.raise_for_status()
    return 1000 * (time.perf_counter() - started), float(response.headers["X-Inference-Time"])


def _quantiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": ordered[-1]}


def _nice_catalog(folder: Path, nices: Sequence[int]) -> Path:
    """docling entries at each conversion nice, with a deadline the long DOCX cannot reach."""
    catalog, empty = folder / "catalog", folder / "empty"
    catalog.mkdir(parents=True)
    empty.mkdir()
    for nice in nices:
        (catalog / f"docling-nice{nice}.yaml").write_text(
            f"name: probe/docling-nice{nice}\nadapter: docling\nsource:\n  path: {empty}\ntasks: [extract]\n"
            f"options:\n  conversion_nice: {nice}\n  document_timeout_s: 1800\nbatching:\n  max_batch_cost: 1\n"
        )
    return catalog


def _latency_arm(client: httpx.Client, url: str, model: str, count: int, body: bytes) -> list[str]:
    """Encodes one after another: ``count`` idle, as many as fit in the conversion of the long
    DOCX on ``model``, ``count`` idle again (the idle arm is both, so that drift shows)."""
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    small = msgpack.packb({"items": [{"document": {"data": documents.MARKDOWN, "format": "md"}}]})
    while client.post(f"/v1/extract/{model}", content=small, headers=headers).status_code == 503:
        time.sleep(1)  # the first request loads the model (the child imports docling)
    for _ in range(20):
        _encode(client)
    idle = [_encode(client) for _ in range(count)]
    took: list[float] = []

    def convert() -> None:
        started = time.perf_counter()
        with httpx.Client(base_url=url, timeout=1800) as own:
            response = own.post(f"/v1/extract/{model}", content=body, headers=headers)
        response.raise_for_status()
        (item,) = msgpack.unpackb(response.content)["items"]
        assert "error" not in item, item["error"]
        took.append(time.perf_counter() - started)

    worker = threading.Thread(target=convert)
    worker.start()
    time.sleep(0.5)  # the request is in, its document in the child
    during: list[tuple[float, float]] = []
    while worker.is_alive():
        during.append(_encode(client))
    worker.join()
    idle += [_encode(client) for _ in range(count)]
    quiet, busy = _quantiles([ms for ms, _ in idle]), _quantiles([ms for ms, _ in during])
    forward = statistics.median(fwd for _, fwd in idle)
    name = model.removeprefix("probe/")
    return [
        f"| {name}: idle ({len(idle)}) | " + " | ".join(f"{quiet[key]:.1f} ms" for key in quiet) + " | |",
        f"| {name}: during the conversion ({len(during)}; {took[0]:.1f} s) | "
        + " | ".join(f"{busy[key]:.1f} ms" for key in busy)
        + f" | {busy['p50'] - quiet['p50']:+.1f} ms (one forward: {forward:.1f} ms) |",
        f"| {name}: ratio | " + " | ".join(f"{busy[key] / quiet[key]:.2f}" for key in quiet) + " | |",
    ]


def latency(count: int, nices: Sequence[int]) -> None:
    """One server, one docling entry per conversion nice; each arm in turn (see _latency_arm)."""
    data = _long_docx()
    pages = inspect_document(data, "docx", "long", DocumentLimits()).pages
    body = msgpack.packb({"items": [{"document": {"data": data, "format": "docx"}}]})
    catalog = _nice_catalog(Path(tempfile.mkdtemp(prefix="sift-probe-documents-")), nices)
    rows = []
    with start_server(catalogs=[catalog]) as server, httpx.Client(base_url=server.url, timeout=1800) as client:
        for nice in nices:
            rows += _latency_arm(client, server.url, f"probe/docling-nice{nice}", count, body)
    print(f"encode of one short text beside a {pages}-page DOCX ({len(data)} bytes)")
    print("| arm | p50 | p90 | p99 | max | p50 grew by |\n|---|---|---|---|---|---|")
    print("\n".join(rows))


def _hostile() -> dict[str, tuple[bytes, str]]:
    """Documents made to cost the checks the most at the server's limits (16 MiB each)."""
    import io
    import zipfile
    import zlib

    head = documents.pdf_pages(1)
    budget = 15 * 1024 * 1024
    text = zlib.compress(b"BT /F1 12 Tf 72 712 Td (Hello world, this is text) Tj ET\n" * 2000)
    streams = b"<</Filter/FlateDecode>>stream\n" + text + b"\nendstream\n"
    archive = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(documents.docx_report())) as old, zipfile.ZipFile(archive, "w") as new:
        for info in old.infolist():
            new.writestr(info, old.read(info))
        for index in range(9_000):
            new.writestr(f"word/media/image{index}.png", documents.png_header(10, 10))
    return {
        "PDF: one page drawing 8 MiB of lines (a PDF bomb)": (documents.pdf_stream_bomb(8), "pdf"),
        "PDF: 16 MiB of empty Flate stream dictionaries": (
            head + b"<</Filter/FlateDecode>>stream\n" * (budget // 30),
            "pdf",
        ),
        "PDF: 16 MiB of image dictionaries, sizes by reference": (
            head + b"<</Subtype/Image/Width 9 0 R/Height 9 0 R>>stream\n" * (budget // 52),
            "pdf",
        ),
        "PDF: 16 MiB of text streams compressed 275-fold": (head + streams * (budget // len(streams)), "pdf"),
        "PDF: 10,000 blank pages": (documents.pdf_pages(10_000), "pdf"),
        "DOCX: 9,000 embedded images": (archive.getvalue(), "docx"),
        "DOCX: a 64 MiB member (a ZIP bomb)": (documents.docx_bomb(), "docx"),
    }


def checks() -> None:
    """How long the pre-parse checks take (in the server's prep thread) on hostile documents."""
    print("| document | bytes | checks | answer |\n|---|---|---|---|")
    for name, (data, fmt) in _hostile().items():
        started = time.perf_counter()
        try:
            answer = f"accepted, {inspect_document(data, fmt, 'items[0].document', DocumentLimits()).pages} pages"
        except InvalidInput as exc:
            answer = "400: " + str(exc).removeprefix("items[0].document: ")[:80]
        print(f"| {name} | {len(data)} | {1000 * (time.perf_counter() - started):.0f} ms | {answer} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("what", choices=("throughput", "gil", "latency", "checks"))
    parser.add_argument("--min-s", type=float, default=5.0, help="throughput: seconds per format (at least 3 runs)")
    parser.add_argument("--count", type=int, default=200, help="latency: idle encodes before and after")
    parser.add_argument("--nices", type=int, nargs="+", default=[10, 19], help="latency: conversion nice per arm")
    args = parser.parse_args()
    if args.what == "throughput":
        throughput(args.min_s)
    elif args.what == "gil":
        gil()
    elif args.what == "checks":
        checks()
    else:
        latency(args.count, args.nices)


if __name__ == "__main__":
    main()
