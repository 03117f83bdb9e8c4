"""The ``ctranslate2`` generation adapter (madlad400's engine) through the cluster: a
gateway and one worker behind NATS JetStream serving the tiny random T5
(tests/fixtures/tiny_translator.py). Greedy answers through the gateway equal
transformers' own greedy ``generate`` at fp32, whole and streamed token by token, on
``/v1/generate`` and ``/v1/completions``; what the engine cannot do and bad input are
the worker's 400 in the contract's envelope, relayed unchanged; the released sie-sdk
0.10.1's ``generate`` and ``stream_generate`` answer unchanged through the gateway."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sift_server.cluster.local import LocalCluster
from tests.cluster.conftest import add_worker, start_cluster, wait_for, wait_workers
from tests.fixtures.tiny_translator import TINY_TRANSLATOR, build_tiny_translator, catalog_entry
from tests.translation.test_madlad_routes import CAP, CONTEXT, PROMPTS, N, Reference

pytest.importorskip("ctranslate2")

PATH_ID = TINY_TRANSLATOR.replace("/", "__")
WORKER = "w-translate"
DRIVER = Path(__file__).parents[1] / "generation" / "sie_generation_driver.py"


class Built:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.hf = build_tiny_translator(root / "hf")
        self.catalog = root / "catalog"
        self.catalog.mkdir()
        options = f"max_sequence_length: {CONTEXT}\noptions:\n  max_new_tokens_cap: {CAP}\n"
        (self.catalog / "translator.yaml").write_text(catalog_entry(TINY_TRANSLATOR, self.hf, options))
        self.cache = root / "artifacts"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(tmp_path_factory.mktemp("translate-cluster"))


@pytest.fixture(scope="module")
def reference(built: Built) -> Reference:
    return Reference(built.hf)


@pytest.fixture(scope="module")
def cluster(built: Built) -> Iterator[LocalCluster]:
    running = start_cluster(built.root / "cluster", 0, [], ["--catalog", str(built.catalog)])
    try:
        args = ["--catalog", str(built.catalog), "--model", TINY_TRANSLATOR, "--preload", TINY_TRANSLATOR]
        add_worker(running, WORKER, [*args, "--torch-threads", "1", "--cache-dir", str(built.cache)])
        # Until its first start has converted the model (a child at nice 19: minutes on a busy machine),
        # watched on disk: polling the heartbeats that long runs out of NATS consumers.
        wait_for(lambda: any(built.cache.glob("ctranslate2/*/model.bin")), "the conversion", 900)
        wait_workers(running, TINY_TRANSLATOR, {WORKER})
        yield running
    finally:
        running.stop()


def sse_payloads(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines and lines[-1] == "[DONE]", lines[-3:]
    return [json.loads(line) for line in lines[:-1]]


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_generate_through_the_gateway_equals_transformers_greedy(
    cluster: LocalCluster, reference: Reference, prompt: str
) -> None:
    expected, ids, finish = reference.greedy(prompt, N)
    url = f"{cluster.url}/v1/generate/{PATH_ID}"
    answer = httpx.post(url, json={"prompt": prompt, "max_new_tokens": N}, timeout=120)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["text"] == expected and body["finish_reason"] == finish
    prompt_tokens = len(reference.ids_of(prompt))
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(ids),
        "total_tokens": prompt_tokens + len(ids),
    }
    request = {"prompt": prompt, "max_new_tokens": N, "stream": True}
    with httpx.stream("POST", url, json=request, timeout=120) as streamed:
        events = sse_payloads(streamed)
    assert "".join(e["text_delta"] for e in events) == expected
    assert events[-1]["done"] is True and events[-1]["usage"] == body["usage"]
    assert len(events) > 2  # chunk by chunk through the queue, not one piece at the end


def test_completions_through_the_gateway_whole_and_streamed(cluster: LocalCluster, reference: Reference) -> None:
    expected, ids, finish = reference.greedy(PROMPTS[1], 12)
    body = {"model": TINY_TRANSLATOR, "prompt": PROMPTS[1], "max_tokens": 12}
    answer = httpx.post(f"{cluster.url}/v1/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    assert choice["text"] == expected and choice["finish_reason"] == finish
    assert answer.json()["usage"]["completion_tokens"] == len(ids)
    streamed_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{cluster.url}/v1/completions", json=streamed_body, timeout=120) as streamed:
        events = sse_payloads(streamed)
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == expected
    assert events[-1]["usage"] == answer.json()["usage"]


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"prompt": "hello", "max_new_tokens": 4, "temperature": 0.7}, "INVALID_INPUT", "temperature"),
        ({"prompt": "hello", "max_new_tokens": 4, "grammar": {"regex": "[a-z]+"}}, "INVALID_INPUT", "grammar"),
        ({"prompt": "hello", "max_new_tokens": CAP + 1}, None, "max_new_tokens"),
        ({"prompt": "", "max_new_tokens": 4}, "INVALID_INPUT", "prompt"),
        ({"prompt": " ".join(["the small house"] * 20), "max_new_tokens": 4}, "INPUT_TOO_LONG", None),
    ],
)
def test_bad_input_through_the_gateway_is_the_workers_400(
    cluster: LocalCluster, body: dict[str, Any], code: str | None, param: str | None
) -> None:
    answer = httpx.post(f"{cluster.url}/v1/generate/{PATH_ID}", json=body, timeout=120)
    assert answer.status_code == 400, answer.text
    text = answer.text
    if code is not None:
        assert code in text
    if param is not None:
        assert param in text
    # Refused before any work: the worker still answers the next request at once.
    ok = httpx.post(f"{cluster.url}/v1/generate/{PATH_ID}", json={"prompt": "hello", "max_new_tokens": 2}, timeout=120)
    assert ok.status_code == 200, ok.text


def test_chat_without_a_template_through_the_gateway_is_a_400(cluster: LocalCluster) -> None:
    body = {"model": TINY_TRANSLATOR, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    answer = httpx.post(f"{cluster.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 400, answer.text
    assert "chat template" in answer.text


def test_the_released_sie_sdk_generates_through_the_gateway(cluster: LocalCluster, reference: Reference) -> None:
    from tests.compat.conftest import COMPAT_PYTHON, require_venv

    require_venv()
    spec = {"model": TINY_TRANSLATOR, "prompt": PROMPTS[0], "messages": [{"role": "user", "content": "hi"}]}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), cluster.url, json.dumps({**spec, "max_new_tokens": N})],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    expected, ids, _ = reference.greedy(PROMPTS[0], N)
    assert "ok" in answers["generate"], answers["generate"]
    assert answers["generate"]["ok"]["text"] == expected and answers["generate"]["ok"]["model"] == TINY_TRANSLATOR
    assert answers["generate"]["ok"]["usage"]["completion_tokens"] == len(ids)
    assert "ok" in answers["stream_generate"], answers["stream_generate"]
    chunks = answers["stream_generate"]["ok"]
    assert len(chunks) > 1
    assert "".join(c.get("text_delta", "") for c in chunks) == expected
    assert chunks[-1]["done"] is True and chunks[-1]["usage"] == answers["generate"]["ok"]["usage"]
    assert "error" in answers["chat_completions"] and "chat template" in answers["chat_completions"]["error"]
