"""``sift serve --frontends N`` against ``sift serve`` on the same tiny models: the same
answers bit for bit, the same error envelopes, readiness and MODEL_LOADING, and no
process left behind however it ends (a signal, a front-end or the supervisor killed)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np
import pytest

from tests.e2e.tiny_tasks import catalog_entry
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder
from tests.fixtures.tiny_models import build_tiny_cross_encoder, build_tiny_gliclass

RERANK, CLASSIFY, COLD = "tiny/reranker", "tiny/gliclass", "tiny/cold-embedder"
# Torch fp32 everywhere: nothing to export, the same forward in both servers.
COMMON = [
    "--backend",
    "torch:fp32",
    "--no-calibrate",
    "--preload",
    RERANK,
    "--preload",
    CLASSIFY,
    "--shutdown-grace-s",
    "5",
]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("frontends")
    embedder = build_tiny_embedder(root / "embedder")
    folder = root / "catalog"
    folder.mkdir()
    entries = {
        "embedder": catalog_entry(TINY_EMBEDDER, "sentence-embedder", embedder, "encode"),
        "cold": catalog_entry(COLD, "sentence-embedder", embedder, "encode"),
        "reranker": catalog_entry(RERANK, "cross-encoder", build_tiny_cross_encoder(root / "reranker"), "score"),
        "gliclass": catalog_entry(
            CLASSIFY, "gliclass", build_tiny_gliclass(root / "gliclass"), "extract", {"multi_label": False}
        ),
    }
    for name, text in entries.items():
        (folder / f"{name}.yaml").write_text(text)
    return folder


def _start(catalog: Path, log: Path, *extra: str) -> ServerProcess:
    return start_server(["--catalog", str(catalog), "--model", TINY_EMBEDDER, *COMMON, *extra], log)


@pytest.fixture(scope="module")
def servers(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    root = tmp_path_factory.mktemp("frontends-servers")
    single = _start(catalog, root / "single.log")
    try:
        split = _start(catalog, root / "split.log", "--frontends", "2")
    except BaseException:
        single.stop()
        raise
    yield single, split
    split.stop()
    single.stop()


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(name))
    return found


def _role(pid: int) -> str:
    """``engine`` or ``frontend``: the child's role, from its command line."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return args[args.index(b"sift_server.frontend.child") + 1].decode()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _without_timing(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: _without_timing(v) for k, v in body.items() if k != "timing"}
    if isinstance(body, list):
        return [_without_timing(v) for v in body]
    return body


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (f"/v1/encode/{TINY_EMBEDDER}", {"items": [{"text": "hello world"}, {"text": "a longer text about search"}]}),
    (
        f"/v1/encode/{TINY_EMBEDDER}",
        {"items": [{"id": "q", "text": "what is it?"}], "params": {"options": {"is_query": True}}},
    ),
    (f"/v1/encode/{TINY_EMBEDDER}", {"items": [{"text": "bits"}], "params": {"output_dtype": "int8"}}),
    (
        f"/v1/score/{RERANK}",
        {"query": {"text": "capital of France"}, "items": [{"text": "Paris"}, {"text": "Berlin is big"}]},
    ),
    (
        f"/v1/extract/{CLASSIFY}",
        {"items": [{"text": "The match ended two to one."}], "params": {"labels": ["sport", "politics"]}},
    ),
]


@pytest.mark.parametrize("accept", ["application/json", "application/msgpack"])
def test_the_same_answers_bit_for_bit(servers: tuple[ServerProcess, ServerProcess], accept: str) -> None:
    single, split = servers
    headers = {"accept": accept}
    for path, body in REQUESTS:
        answers = []
        for server in (single, split):
            response = httpx.post(server.url + path, json=body, headers=headers, timeout=60)
            assert response.status_code == 200, response.text
            decoded = response.json() if accept == "application/json" else msgspec.msgpack.decode(response.content)
            answers.append(_without_timing(decoded))
        assert answers[0] == answers[1], path


def test_many_concurrent_requests_get_their_own_answers(servers: tuple[ServerProcess, ServerProcess]) -> None:
    single, split = servers
    texts = [f"text number {i} " + "word " * (i % 9) for i in range(48)]
    path = f"/v1/encode/{TINY_EMBEDDER}"

    def ask(url: str) -> list[Any]:
        results: list[Any] = [None] * len(texts)

        def one(i: int) -> None:
            body = {"items": [{"text": texts[i]}]}
            response = httpx.post(url + path, json=body, headers={"accept": "application/json"}, timeout=60)
            if response.status_code == 200:
                results[i] = response.json()["items"]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert None not in results
        return results

    # Batches form differently from run to run, and a row's padding changes its last bits
    # (tests/test_repeatable_answers.py): each answer is its own text's, to rounding.
    for got, expected in zip(ask(split.url), ask(single.url), strict=True):
        a, b = np.array(got[0]["dense"]["values"]), np.array(expected[0]["dense"]["values"])
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-5)


def test_errors_come_in_the_contracts_envelope(servers: tuple[ServerProcess, ServerProcess]) -> None:
    single, split = servers
    cases = [
        (f"/v1/encode/{TINY_EMBEDDER}x", {"items": [{"text": "a"}]}),  # not found, with a hint
        (f"/v1/encode/{TINY_EMBEDDER}", {"items": []}),  # invalid input
        (f"/v1/score/{TINY_EMBEDDER}", {"query": {"text": "q"}, "items": [{"text": "a"}]}),  # task not supported
        (
            f"/v1/encode/{TINY_EMBEDDER}",
            {"items": [{"text": "a " * 500}], "params": {"options": {"overflow_policy": "error"}}},
        ),
    ]
    for path, body in cases:
        got = [httpx.post(server.url + path, json=body, timeout=60) for server in (single, split)]
        assert got[0].status_code == got[1].status_code >= 400, got[1].text
        assert got[0].json() == got[1].json()


def test_models_and_readiness(servers: tuple[ServerProcess, ServerProcess]) -> None:
    single, split = servers
    assert httpx.get(split.url + "/readyz").text == "ok"
    described = [httpx.get(f"{s.url}/v1/models/{TINY_EMBEDDER}").json() for s in (single, split)]
    for entry in described:
        entry["profiles"]["default"].pop("runtime_instance_id")
        entry["runtime"].pop("call_cost_tokens", None)
    assert described[0] == described[1] and described[1]["runtime"]["backend"] == "torch"
    names = [m["name"] for m in httpx.get(split.url + "/v1/models").json()["models"]]
    assert {TINY_EMBEDDER, RERANK, CLASSIFY, COLD} <= set(names)
    # The same list as sift serve's, profile entries ({name}:{profile}) included.
    assert names == [m["name"] for m in httpx.get(single.url + "/v1/models").json()["models"]]
    assert httpx.get(split.url + "/v1/models/docling:ocr").json()["name"] == "docling:ocr"
    # Every front-end tells the same runtime instance.
    instances = {
        httpx.post(split.url + f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "x"}]}).headers[
            "x-sie-runtime-instance"
        ]
        for _ in range(8)
    }
    assert len(instances) == 1


def _requests_total(text: str, model: str) -> float:
    prefix = f'sie_requests_total{{endpoint="encode",model="{model}",status="200"}} '
    return sum(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


def test_metrics_count_every_front_ends_requests(servers: tuple[ServerProcess, ServerProcess]) -> None:
    _, split = servers
    time.sleep(0.5)  # the earlier tests' counts arrive first (with a frame, or within 0.25 s)
    before = _requests_total(httpx.get(split.url + "/metrics").text, TINY_EMBEDDER)
    for _ in range(12):  # new connections: the kernel spreads them over both front-ends
        response = httpx.post(split.url + f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "counted"}]})
        assert response.status_code == 200
    time.sleep(0.5)  # the counts travel with the front-ends' next frame, or within 0.25 s
    for _ in range(4):  # whichever front-end answers, the whole server's figures
        text = httpx.get(split.url + "/metrics").text
        assert _requests_total(text, TINY_EMBEDDER) == before + 12
        assert f'sift_forward_seconds_count{{model="{TINY_EMBEDDER}"}}' in text
        assert f'sift_model_loaded{{model="{TINY_EMBEDDER}"}} 1.0' in text


def test_a_cold_model_answers_model_loading_then_serves(servers: tuple[ServerProcess, ServerProcess]) -> None:
    _, split = servers
    path = f"{split.url}/v1/encode/{COLD}"
    first = httpx.post(path, json={"items": [{"text": "cold"}]}, timeout=60)
    assert first.status_code == 503 and first.json()["detail"]["code"] == "MODEL_LOADING"
    assert int(first.headers["retry-after"]) >= 1
    deadline = time.monotonic() + 120
    while True:
        response = httpx.post(path, json={"items": [{"text": "cold"}]}, timeout=60)
        if response.status_code == 200 or time.monotonic() > deadline:
            break
        assert response.json()["detail"]["code"] == "MODEL_LOADING"
        time.sleep(0.5)
    assert response.status_code == 200, response.text


def _split_server(catalog: Path, log: Path) -> tuple[ServerProcess, list[int]]:
    """One front-end (the fewest processes to start); its children, the engine first."""
    args = ["--catalog", str(catalog), "--model", TINY_EMBEDDER, "--backend", "torch:fp32", "--no-calibrate"]
    server = start_server([*args, "--frontends", "1", "--shutdown-grace-s", "3"], log)
    children = sorted(_children(server.process.pid), key=lambda pid: _role(pid) != "engine")
    assert [_role(pid) for pid in children] == ["engine", "frontend"]
    return server, children


def _load(url: str, stop: threading.Event, statuses: list[int]) -> None:
    while not stop.is_set():
        try:
            response = httpx.post(
                url + f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "busy " * 20}]}, timeout=10
            )
            statuses.append(response.status_code)
        except httpx.HTTPError:
            statuses.append(0)


def test_a_front_end_killed_mid_request_ends_the_server(catalog: Path, tmp_path: Path) -> None:
    server, children = _split_server(catalog, tmp_path / "server.log")
    stop, statuses = threading.Event(), []
    clients = [threading.Thread(target=_load, args=(server.url, stop, statuses)) for _ in range(4)]
    for client in clients:
        client.start()
    time.sleep(1.0)
    assert 200 in statuses
    _, front_end = children
    os.kill(front_end, signal.SIGKILL)
    try:
        assert server.process.wait(30) == 1  # the supervisor saw it and ended the rest
        assert _wait_gone(children, 10) == []
        assert "stopping the others" in server.log()
    finally:
        stop.set()
        for client in clients:
            client.join()
        server.stop(signal.SIGKILL)


def test_the_children_end_with_a_killed_supervisor(catalog: Path, tmp_path: Path) -> None:
    server, children = _split_server(catalog, tmp_path / "server.log")
    server.process.kill()
    server.process.wait()
    assert _wait_gone(children, 20) == []
    server.stop()


# Last in the module: it ends the shared split server.
def test_sigterm_drains_and_leaves_no_process(servers: tuple[ServerProcess, ServerProcess]) -> None:
    _, split = servers
    children = _children(split.process.pid)
    assert len(children) == 3  # the engine and two front-ends
    assert split.stop(signal.SIGTERM, timeout=30) == 0
    assert _wait_gone(children, 10) == []
