"""sie-mcp 0.10.1's four generation tools end to end against ``sift serve``: the released
MCP server (``sie-mcp serve``) pointed at a Sift serving the tiny generator (a 2,048-token
context, so the tools' own prompts fit), the tiny embedder and the tiny reranker, and an MCP
client (tests/compat/mcp_driver.py) calling ``summarize_document``, ``extract_structured``,
``generate_structured`` and ``answer_questions``.

The tools' answers are checked against Sift's own, asked directly with the tools' own
prompts, read from the released package in the compatibility venv (not copied here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sift_server.processes import free_port
from tests.compat.conftest import COMPAT_VENV, KEY, require_venv
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry
from tests.fixtures.tiny_generator import TINY_GENERATOR, build_tiny_generator, catalog_entry, export_openvino
from tests.fixtures.tiny_models import build_tiny_cross_encoder

pytest.importorskip("openvino_genai")

DRIVER = Path(__file__).with_name("mcp_driver.py")
SECRET = "connector-secret"
RERANK = "tiny/reranker"
HEADERS = {"Authorization": f"Bearer {KEY}"}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
REGEX = "(yes|no)[0-9]{3}"
DOCUMENT = "The meeting is on Tuesday. Alice brings the report; Bob books the room for ten people."
TOKENS = 48


@pytest.fixture(scope="module")
def sift(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    require_venv()
    root = tmp_path_factory.mktemp("mcp-generation")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "embedder"))
    reranker = build_tiny_cross_encoder(root / "reranker")
    (catalog / "reranker.yaml").write_text(
        f"name: {RERANK}\nadapter: cross-encoder\nsource:\n  path: {reranker}\ntasks: [score]\n"
    )
    generator = export_openvino(build_tiny_generator(root / "hf", context=2048), root / "ov")
    (catalog / "generator.yaml").write_text(catalog_entry(TINY_GENERATOR, generator))
    args = ["--catalog", str(catalog), "--model", TINY_EMBEDDER, "--preload", RERANK, "--preload", TINY_GENERATOR]
    proc = start_server([*args, "--api-key", KEY], root / "serve.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def mcp_url(sift: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": "",
        "SIE_BASE_URL": sift.url,
        "SIE_API_KEY": KEY,
        "SIE_MCP_CONNECTOR_SECRETS": SECRET,
        "SIE_MCP_GENERATE_MODEL": TINY_GENERATOR,
        "SIE_MCP_ENCODE_MODEL": TINY_EMBEDDER,
        "SIE_MCP_RERANK_MODEL": RERANK,
        "SIE_MCP_QA_MAX_TOKENS": str(TOKENS),
        "SIE_MCP_QA_TOP_K": "2",
        "SIE_MCP_QA_CHUNK_CHARS": "60",
        "SIE_MCP_QA_CHUNK_OVERLAP_CHARS": "10",
    }
    log = (tmp_path_factory.mktemp("sie-mcp") / "sie-mcp.log").open("wb")
    command = [str(COMPAT_VENV / "bin" / "sie-mcp"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"sie-mcp exited with {process.returncode}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "sie-mcp did not start"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "summary": ("summarize_document", {"content": DOCUMENT, "max_output_tokens": TOKENS}),
    "extract": ("extract_structured", {"content": DOCUMENT, "output_schema": SCHEMA, "max_output_tokens": TOKENS}),
    "regex": (
        "generate_structured",
        {"prompt": "Say yes or no.", "response_format": {"type": "regex", "regex": REGEX}, "max_output_tokens": 16},
    ),
    "json": (
        "generate_structured",
        {
            "prompt": "How many people?",
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
            "max_output_tokens": TOKENS,
        },
    ),
    "questions": (
        "answer_questions",
        {"documents": [DOCUMENT, "Carol is away on Tuesday."], "questions": ["Who brings the report?"]},
    ),
}


@pytest.fixture(scope="module")
def answers(mcp_url: str) -> dict[str, dict[str, Any]]:
    calls = [{"tool": tool, "arguments": arguments} for tool, arguments in CALLS.values()]
    done = subprocess.run(
        [str(COMPAT_VENV / "bin" / "python"), str(DRIVER), mcp_url, SECRET, json.dumps(calls)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(zip(CALLS, json.loads(done.stdout.strip().splitlines()[-1]), strict=True))


def released(expression: str) -> Any:
    """A constant of the released sie-mcp, read in the compatibility venv."""
    done = subprocess.run(
        [
            str(COMPAT_VENV / "bin" / "python"),
            "-c",
            f"import json, sie_mcp.offload, sie_mcp.structured; print(json.dumps({expression}))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
        check=True,
    )
    return json.loads(done.stdout)


def ok(answers: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    assert "ok" in answers[name], answers[name].get("error")
    result: dict[str, Any] = answers[name]["ok"]
    return result


def chat(sift: ServerProcess, messages: list[dict[str, str]], **fields: Any) -> str:
    body = {"model": TINY_GENERATOR, "messages": messages, **fields}
    answer = httpx.post(f"{sift.url}/v1/chat/completions", json=body, headers=HEADERS, timeout=120)
    assert answer.status_code == 200, answer.text
    content: str = answer.json()["choices"][0]["message"]["content"]
    return content


def test_summarize_document_is_sifts_generate(answers: dict[str, dict[str, Any]], sift: ServerProcess) -> None:
    got = ok(answers, "summary")
    prompt = released("sie_mcp.offload._SINGLE_PROMPT").format(text=DOCUMENT)
    direct = httpx.post(
        f"{sift.url}/v1/generate/{TINY_GENERATOR.replace('/', '__')}",
        json={"prompt": prompt, "max_new_tokens": TOKENS},
        headers=HEADERS,
        timeout=120,
    )
    assert direct.status_code == 200, direct.text
    assert got["summary"] == direct.json()["text"].strip()
    assert got["metadata"]["chunks"] == 1


def test_extract_structured_is_sifts_constrained_chat(answers: dict[str, dict[str, Any]], sift: ServerProcess) -> None:
    got = ok(answers, "extract")
    system, instruction = released(
        "[sie_mcp.structured._EXTRACT_SYSTEM, sie_mcp.structured._DEFAULT_EXTRACT_INSTRUCTION]"
    )
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"{instruction}\n\n<document>\n{DOCUMENT}\n</document>"},
    ]
    response_format = {"type": "json_schema", "json_schema": {"name": "extraction", "schema": SCHEMA, "strict": True}}
    want = chat(sift, messages, response_format=response_format, temperature=0.0, max_completion_tokens=TOKENS)
    assert got["data"] == json.loads(want)
    assert isinstance(got["data"]["answer"], int)


def test_generate_structured_takes_a_regex_and_a_schema(
    answers: dict[str, dict[str, Any]], sift: ServerProcess
) -> None:
    regex = ok(answers, "regex")["content"]
    assert re.fullmatch(REGEX, regex)
    assert regex == chat(
        sift,
        [{"role": "user", "content": "Say yes or no."}],
        response_format={"type": "regex", "regex": REGEX},
        max_completion_tokens=16,
    )
    content = ok(answers, "json")["content"]
    assert isinstance(json.loads(content)["answer"], int)


def test_answer_questions_retrieves_reranks_and_answers_on_sift(answers: dict[str, dict[str, Any]]) -> None:
    (answer,) = ok(answers, "questions")["answers"]
    assert answer["question"] == "Who brings the report?"
    assert isinstance(answer["answer"], str)
    assert 1 <= len(answer["passages"]) <= 2
