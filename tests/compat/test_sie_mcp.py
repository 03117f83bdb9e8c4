"""Black-box compatibility: the released MCP server, sie-mcp 0.10.1, started locally (its
``sie-mcp serve``, streamable HTTP, a connector secret) and pointed at ``sift serve``
(tests/compat/conftest.py) with ``SIE_BASE_URL`` and ``SIE_API_KEY``; an MCP client (the
``mcp`` package's, tests/compat/mcp_driver.py) calls its tools that need no generation
model: ``docs_to_markdown`` (Sift's ``docling`` entry: documents the test makes, no weights
needed), ``extract_entities`` and ``redact_pii`` (the tiny GLiNER). Every answer is checked
against Sift's own, asked directly; ``describe_image`` captions with the tiny Florence-2
(``<CAPTION>`` and ``<DETAILED_CAPTION>``) and tags with the tiny CLIP."""

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
from tests.adapters import test_florence2
from tests.compat.conftest import COMPAT_VENV, KEY, NER
from tests.compat.test_integrations import assert_same_entities
from tests.fixtures import documents
from tests.fixtures.server_process import ServerProcess
from tests.fixtures.tiny_detection import detection_images
from tests.fixtures.tiny_florence2 import TINY_FLORENCE2
from tests.fixtures.tiny_images import TINY_CLIP

DRIVER = Path(__file__).with_name("mcp_driver.py")
SECRET = "connector-secret"
HEADERS = {"Authorization": f"Bearer {KEY}", "Accept": "application/json"}
TEXT = "Contact John Smith at john@example.com or 555-0100; he lives at 1 Main Street, Paris."
LABELS = ["person", "location"]
PII_LABELS = ["person", "email", "phone number", "address"]
IMAGE = "square_jpeg"
TAGS = ["cat", "dog", "a red car"]
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
        # describe_image: the tiny Florence-2 captions, the tiny CLIP tags.
        "SIE_MCP_CAPTION_MODEL": TINY_FLORENCE2,
        "SIE_MCP_EMBED_MODEL": TINY_CLIP,
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
    "describe": (
        "describe_image",
        {"image_base64": lambda: detection_images()[IMAGE][0], "labels": TAGS, "top_k": 2},
    ),
    "describe-detailed": (
        "describe_image",
        {"image_base64": lambda: detection_images()[IMAGE][0], "labels": [], "detailed": True},
    ),
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


def _caption(case: str) -> str:
    index = test_florence2.florence2_cases()[0]["images"].index(IMAGE)
    text: str = test_florence2.recorded()[case][index]["entities"][0]["text"]
    return text


def test_describe_image_captions_with_sifts_florence2_and_tags_with_its_clip(
    answers: dict[str, dict[str, Any]], direct: ServerProcess
) -> None:
    got = ok(answers, "describe")
    assert _caption("caption"), "the tiny Florence-2's recorded caption is empty: nothing to compare"
    assert got["caption"] == _caption("caption")
    # The tags: the labels ranked by the cosine of Sift's own CLIP embeddings.
    image = base64.b64encode(detection_images()[IMAGE][0]).decode()
    items = [{"text": label} for label in TAGS] + [{"images": [{"data": image, "format": "jpeg"}]}]
    response = httpx.post(f"{direct.url}/v1/encode/{TINY_CLIP}", json={"items": items}, headers=HEADERS, timeout=600)
    assert response.status_code == 200, response.text
    vectors = [item["dense"]["values"] for item in response.json()["items"]]

    def cosine(a: list[float], b: list[float]) -> float:
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)

    want = sorted(
        ((label, cosine(vectors[-1], v)) for label, v in zip(TAGS, vectors, strict=False)), key=lambda t: -t[1]
    )
    assert [tag["label"] for tag in got["tags"]] == [label for label, _ in want[:2]]
    for tag, (_, score) in zip(got["tags"], want, strict=False):
        assert tag["score"] == pytest.approx(score, abs=1e-5)


def test_describe_image_detailed_asks_for_the_detailed_caption(answers: dict[str, dict[str, Any]]) -> None:
    got = ok(answers, "describe-detailed")
    assert got == {"caption": _caption("detailed-caption"), "tags": []}
