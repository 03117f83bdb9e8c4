"""Black-box compatibility: the released MCP server, sie-mcp 0.10.1, started locally (its
``sie-mcp serve``, streamable HTTP, a connector secret) and pointed at ``sift serve``
(tests/compat/conftest.py) with ``SIE_BASE_URL`` and ``SIE_API_KEY``; an MCP client (the
``mcp`` package's, tests/compat/mcp_driver.py) calls its tools that need no generation
model: ``docs_to_markdown`` (Sift's ``docling`` entry: documents the test makes, no weights
needed), ``extract_entities`` and ``redact_pii`` (the tiny GLiNER). Every answer is checked
against Sift's own, asked directly. ``describe_image`` (Florence-2) is not served yet."""

from __future__ import annotations

import base64
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
from tests.compat.conftest import COMPAT_VENV, KEY, NER
from tests.compat.test_integrations import assert_same_entities
from tests.fixtures import documents
from tests.fixtures.server_process import ServerProcess

DRIVER = Path(__file__).with_name("mcp_driver.py")
SECRET = "connector-secret"
HEADERS = {"Authorization": f"Bearer {KEY}", "Accept": "application/json"}
TEXT = "Contact John Smith at john@example.com or 555-0100; he lives at 1 Main Street, Paris."
LABELS = ["person", "location"]
PII_LABELS = ["person", "email", "phone number", "address"]
# sie-mcp sends this threshold with redact_pii (offload.MIN_PII_SCORE).
PII_THRESHOLD = 0.3


def _sift(url: str, model: str, items: list[dict[str, Any]], **params: Any) -> list[dict[str, Any]]:
    response = httpx.post(
        f"{url}/v1/extract/{model}", json={"items": items, "params": params}, headers=HEADERS, timeout=600
    )
    assert response.status_code == 200, response.text
    answer: list[dict[str, Any]] = response.json()["items"]
    return answer


def _document(data: bytes) -> dict[str, Any]:
    return {"document": {"data": base64.b64encode(data).decode()}}


@pytest.fixture(scope="module")
def docling(direct: ServerProcess) -> None:
    """Sift loads ``docling`` on its first request (503 until then): wait for it."""
    deadline = time.monotonic() + 600
    while True:
        response = httpx.post(
            f"{direct.url}/v1/extract/docling",
            json={"items": [_document(documents.MARKDOWN)]},
            headers=HEADERS,
            timeout=600,
        )
        if response.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def mcp_url(direct: ServerProcess, docling: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": "",
        "SIE_BASE_URL": direct.url,
        "SIE_API_KEY": KEY,
        "SIE_MCP_CONNECTOR_SECRETS": SECRET,
        # Its GLiNER tools default to hub models: name the tiny one Sift serves.
        "SIE_MCP_EXTRACT_MODEL": NER,
        "SIE_MCP_PII_MODEL": NER,
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
    "docx": ("docs_to_markdown", {"document_base64": documents.docx_report, "filename": "report.docx"}),
    "html": ("docs_to_markdown", {"document_base64": lambda: documents.HTML_PAGE, "filename": "page.html"}),
    "scan": (
        "docs_to_markdown",
        {"document_base64": documents.pdf_image_only, "filename": "scan.pdf", "engine": "docling"},
    ),
    "entities": ("extract_entities", {"labels": LABELS, "content": TEXT}),
    "entities-of-docx": (
        "extract_entities",
        {"labels": LABELS, "document_base64": documents.docx_report, "filename": "report.docx"},
    ),
    "redact": ("redact_pii", {"content": TEXT, "labels": PII_LABELS}),
}


@pytest.fixture(scope="module")
def answers(mcp_url: str) -> dict[str, dict[str, Any]]:
    def argument(value: Any) -> Any:
        return base64.b64encode(value()).decode() if callable(value) else value

    calls = [
        {"tool": tool, "arguments": {key: argument(value) for key, value in arguments.items()}}
        for tool, arguments in CALLS.values()
    ]
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


def ok(answers: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    assert "ok" in answers[name], answers[name].get("error")
    result: dict[str, Any] = answers[name]["ok"]
    return result


@pytest.mark.parametrize(
    ("name", "data"), [("docx", documents.docx_report), ("html", lambda: documents.HTML_PAGE)], ids=["docx", "html"]
)
def test_docs_to_markdown_gives_sifts_markdown(
    answers: dict[str, dict[str, Any]], direct: ServerProcess, name: str, data: Any
) -> None:
    got = ok(answers, name)
    (want,) = _sift(direct.url, "docling", [_document(data())])
    assert want["data"]["markdown"].startswith(("## Quarterly report", "# Opening hours"))
    assert got["markdown"] == want["data"]["markdown"]
    assert got["metadata"]["source_bytes"] == len(data())


def test_a_document_sift_cannot_convert_comes_back_as_the_tools_error(answers: dict[str, dict[str, Any]]) -> None:
    error = answers["scan"].get("error", "")
    assert "items[0].document: a PDF document needs docling's weights" in error


def test_extract_entities_finds_what_sift_finds(answers: dict[str, dict[str, Any]], direct: ServerProcess) -> None:
    got = ok(answers, "entities")
    (want,) = _sift(direct.url, NER, [{"text": TEXT}], labels=LABELS)
    assert_same_entities(got["entities"], want["entities"])
    assert got["metadata"]["entity_count"] == len(want["entities"])
    assert got["metadata"]["input_type"] == "content"


def test_extract_entities_reads_a_document_through_sift(
    answers: dict[str, dict[str, Any]], direct: ServerProcess
) -> None:
    got = ok(answers, "entities-of-docx")
    (converted,) = _sift(direct.url, "docling", [_document(documents.docx_report())])
    (want,) = _sift(direct.url, NER, [{"text": converted["data"]["markdown"]}], labels=LABELS)
    assert_same_entities(got["entities"], want["entities"])
    assert got["metadata"]["input_type"] == "document_base64"


def test_redact_pii_replaces_only_spans_sift_found(answers: dict[str, dict[str, Any]], direct: ServerProcess) -> None:
    got = ok(answers, "redact")
    (want,) = _sift(direct.url, NER, [{"text": TEXT}], labels=PII_LABELS, options={"threshold": PII_THRESHOLD})
    spans = {TEXT[e["start"] : e["end"]] for e in want["entities"]}
    assert spans, "the tiny GLiNER finds nothing: nothing to redact"
    # Each placeholder stands for one span Sift found; everything between them is the original text.
    redacted: str = got["redacted_text"]
    parts = re.split(r"\[[A-Z0-9_]+_\d+\]", redacted)
    any_span = "(?:" + "|".join(re.escape(span) for span in sorted(spans, key=len, reverse=True)) + ")"
    assert re.fullmatch(any_span.join(re.escape(part) for part in parts), TEXT, flags=re.DOTALL), redacted
    assert got["metadata"]["span_count"] == len(parts) - 1 >= 1
    assert got["metadata"]["pii_map_returned"] is False
    # The best-scored span is always redacted, under its own label.
    best = max(want["entities"], key=lambda e: e["score"])
    label = re.sub(r"[^A-Z0-9]+", "_", best["label"].upper())
    assert re.search(rf"\[{label}_\d+\]", redacted)
