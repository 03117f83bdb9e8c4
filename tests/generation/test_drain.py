"""A real client dropping a stream mid-answer, and SIGTERM while streams run, against
``sift serve`` with the tiny generator (a 2,048-token context, so an answer can run for
seconds): the engine's sequence is cancelled (the metrics say why each generation ended
and how many tokens it made), and a drain lets running streams finish within the grace
period, or ends them with the SHUTTING_DOWN error event, and the process exits on time."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_generator import TINY_GENERATOR, build_tiny_generator, catalog_entry, export_openvino

pytest.importorskip("openvino_genai")

LONG = 1800


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("drain")
    folder = export_openvino(build_tiny_generator(root / "hf", context=2048), root / "ov")
    catalog = root / "catalog"
    catalog.mkdir()
    (catalog / "generator.yaml").write_text(
        catalog_entry(TINY_GENERATOR, folder, f"options:\n  max_new_tokens_cap: {LONG}\n")
    )
    return catalog


def serve(catalog: Path, log: Path, grace: float = 30) -> ServerProcess:
    args = ["--catalog", str(catalog), "--preload", TINY_GENERATOR, "--shutdown-grace-s", str(grace)]
    return start_server(args, log)


@pytest.fixture(scope="module")
def server(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = serve(catalog, tmp_path_factory.mktemp("drain-serve") / "server.log")
    yield proc
    proc.stop()


def metric(server: ServerProcess, name: str, **labels: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    wanted = {"model": TINY_GENERATOR, **labels}
    total = 0.0
    for found in re.finditer(rf"^{name}{{([^}}]*)}} ([0-9.e+]+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
        if all(have.get(k) == v for k, v in wanted.items()):
            total += float(found.group(2))
    return total


BODY = {"model": TINY_GENERATOR, "prompt": "hello world", "max_tokens": LONG, "stream": True}
# A random model soon says its end-of-text token; a grammar of 1,700 letters keeps it going.
GENERATE = f"/v1/generate/{TINY_GENERATOR.replace('/', '__')}"
LETTERS = {"regex": "[a-z]{1700}"}


def test_a_client_that_drops_the_stream_cancels_the_engines_sequence(server: ServerProcess) -> None:
    before = metric(server, "sift_generation_tokens_total", kind="completion")
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{server.url}/v1/completions", json=BODY) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
        assert metric(server, "sift_generation_active") == 1
    # The socket is closed: the server notices, closes the answer, the engine drops the sequence.
    deadline = time.monotonic() + 20
    while metric(server, "sift_generation_ended_total", reason="cancelled") < 1:
        assert time.monotonic() < deadline, "the generation was never counted as cancelled"
        time.sleep(0.05)
    assert metric(server, "sift_generation_active") == 0
    made = metric(server, "sift_generation_tokens_total", kind="completion") - before
    assert made < LONG, "the whole answer was made for nobody"
    # The engine is free: the next request is answered in full.
    whole = httpx.post(f"{server.url}/v1/completions", json={**BODY, "stream": False, "max_tokens": 8}, timeout=60)
    assert whole.status_code == 200 and whole.json()["usage"]["completion_tokens"] == 8


class Reader(threading.Thread):
    """One streamed answer read to its end in a thread: its events, once the first arrived."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.events: list[Any] = []
        self.first = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", f"{self.url}{GENERATE}", json=self.body, timeout=120) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        data = line[len("data: ") :]
                        self.events.append(data if data == "[DONE]" else json.loads(data))
                        self.first.set()
        except BaseException as exc:
            self.failure = exc
            self.first.set()


def start_streams(server: ServerProcess, n: int) -> list[Reader]:
    body = {"prompt": "hello world", "max_new_tokens": LONG, "grammar": LETTERS, "stream": True}
    readers = [Reader(server.url, body) for _ in range(n)]
    for reader in readers:
        reader.start()
    for reader in readers:
        assert reader.first.wait(60) and reader.failure is None, reader.failure
    return readers


def test_sigterm_lets_running_streams_finish_then_exits(catalog: Path, tmp_path: Path) -> None:
    server = serve(catalog, tmp_path / "server.log", grace=60)
    try:
        readers = start_streams(server, 2)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        refused = httpx.post(
            f"{server.url}/v1/completions", json={**BODY, "stream": False, "max_tokens": 4}, timeout=30
        )
        assert refused.status_code == 503
        assert refused.json()["error"]["code"].lower() == "shutting_down"
        code = server.process.wait(60)
        took = time.monotonic() - signalled
    finally:
        server.stop(signal.SIGKILL)
    assert code == 0
    for reader in readers:
        reader.join(10)
        assert reader.failure is None, reader.failure
        assert reader.events[-1] == "[DONE]"
        last = reader.events[-2]
        assert last["done"] is True and last["finish_reason"] in ("stop", "length"), last
        text = "".join(e["text_delta"] for e in reader.events[:-1])
        assert re.fullmatch("[a-z]{1700}", text), text[-40:]
    assert took < 60


def test_past_the_grace_period_streams_end_with_the_error_event_and_the_process_exits(
    catalog: Path, tmp_path: Path
) -> None:
    grace = 1.0
    server = serve(catalog, tmp_path / "server.log", grace=grace)
    try:
        readers = start_streams(server, 2)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(30)
        took = time.monotonic() - signalled
    finally:
        server.stop(signal.SIGKILL)
    assert code == 0
    assert took < grace + 2
    for reader in readers:
        reader.join(10)
        assert reader.events[-1] == "[DONE]", reader.events[-3:]
        last = reader.events[-2]
        assert last.get("error", {}).get("code") == "SHUTTING_DOWN", last
