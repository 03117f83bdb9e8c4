"""The released sie-sdk 0.10.1's ``generate``, ``stream_generate``, ``chat_completions``,
``stream_chat_completions`` and ``responses`` through ``sift gateway`` (a worker
behind NATS JetStream serving the tiny generator), unchanged: each returns
transformers' own greedy answer, as against ``sift serve``
(tests/generation/test_sie_sdk_generation.py; the same driver, run by the
compatibility venv's Python 3.12)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sift_server.cluster.local import LocalCluster
from tests.cluster.generation_cluster import generation_cluster, generator_catalog
from tests.compat.conftest import COMPAT_PYTHON, require_venv
from tests.fixtures.tiny_generator import TINY_GENERATOR

pytest.importorskip("openvino_genai")

from tests.generation.conftest import Reference

DRIVER = Path(__file__).parents[1] / "generation" / "sie_generation_driver.py"
PROMPT = "The quick brown fox"
MESSAGES = [{"role": "user", "content": "Say yes or no."}]
N = 20


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    require_venv()
    root = tmp_path_factory.mktemp("sdk-gen-gateway")
    catalog, hf = generator_catalog(root)
    return root, catalog, hf


@pytest.fixture(scope="module")
def cluster(built: tuple[Path, Path, Path]) -> Iterator[LocalCluster]:
    root, catalog, _ = built
    with generation_cluster(root, catalog) as running:
        yield running


@pytest.fixture(scope="module")
def reference(built: tuple[Path, Path, Path]) -> Reference:
    return Reference(built[2])


@pytest.fixture(scope="module")
def answers(cluster: LocalCluster) -> dict[str, Any]:
    spec = {"model": TINY_GENERATOR, "prompt": PROMPT, "messages": MESSAGES, "max_new_tokens": N}
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), cluster.url, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def ok(answers: dict[str, Any], name: str) -> Any:
    assert "ok" in answers[name], answers[name].get("trace", answers[name])
    return answers[name]["ok"]


def test_generate_and_stream_generate_through_the_gateway(answers: dict[str, Any], reference: Reference) -> None:
    expected, ids = reference.greedy(reference.ids_of(PROMPT), N)
    result = ok(answers, "generate")
    assert result["text"] == expected and result["model"] == TINY_GENERATOR
    assert result["usage"]["completion_tokens"] == len(ids)
    chunks = ok(answers, "stream_generate")
    assert len(chunks) > 1
    assert "".join(c.get("text_delta", "") for c in chunks) == expected
    assert chunks[-1]["done"] is True and chunks[-1]["usage"] == result["usage"]


def test_chat_completions_and_responses_through_the_gateway(answers: dict[str, Any], reference: Reference) -> None:
    expected, ids = reference.greedy(reference.chat_ids(MESSAGES), N)
    chat = ok(answers, "chat_completions")
    assert chat["choices"][0]["message"]["content"] == expected
    chunks = ok(answers, "stream_chat_completions")
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == expected
    assert chunks[-1]["usage"]["completion_tokens"] == len(ids)
    response = ok(answers, "responses")
    assert response["output"][0]["content"][0]["text"] == expected
