"""Document items through HTTP and the released sie-sdk, against a ``sift serve`` with the
shipped catalog: the docling model (its weights not on this machine: office, HTML and Markdown
convert, PDFs are refused naming what is missing) and the default embedder."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from tests.compat.conftest import COMPAT_PYTHON, require_venv
from tests.fixtures import documents
from tests.fixtures.server_process import ServerProcess, start_server

EXTRACT = "/v1/extract/docling"
ROOT = Path(__file__).resolve().parents[2]
PARITY_DRIVER = ROOT / "scripts" / "docling_parity_driver.py"
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
REPORT_MARKDOWN = (
    "## Quarterly report\n\nRevenue grew by 12 percent in the northern region.\n\n"
    "| region   |   sales |\n|----------|---------|\n| north    |      42 |"
)

# docling's own rendering (a space before the full stop after bold text is docling's).
HTML_MARKDOWN = (
    "# Opening hours\n\nWe open at **nine** .\n\n| day    | hours   |\n|--------|---------|\n| Monday | 9-17    |"
)


# A second docling entry with a short per-document deadline (its own conversion process).
DEADLINE_MODEL = "tiny/docling-deadline"
DEADLINE_S = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # The shipped catalog's entry: its weights (a hub repository) are not in the test machine's cache.
    root = tmp_path_factory.mktemp("documents")
    (root / "catalog").mkdir()
    (root / "empty").mkdir()
    (root / "catalog" / "deadline.yaml").write_text(
        f"name: {DEADLINE_MODEL}\nadapter: docling\nsource:\n  path: {root / 'empty'}\ntasks: [extract]\n"
        f"options:\n  document_timeout_s: {DEADLINE_S}\nbatching:\n  max_batch_cost: 1\n"
    )
    proc = start_server(["--queue-timeout-s", "600", "--catalog", str(root / "catalog")], root / "server.log")
    _wait_loaded(proc, "docling")
    yield proc
    proc.stop()


def _wait_loaded(server: ServerProcess, model: str) -> None:
    """The first request starts the load (the conversion process imports docling): wait for it."""
    deadline = time.monotonic() + 600
    while True:
        response = _post(server, [{"document": {"data": documents.MARKDOWN, "format": "md"}}], model=model)
        if response.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert response.status_code == 200, response.text


def _post(server: ServerProcess, items: list[dict[str, Any]], model: str = "docling", **params: Any) -> httpx.Response:
    body: dict[str, Any] = {"items": items}
    if params:
        body["params"] = params
    path = f"/v1/extract/{model}"
    return httpx.post(server.url + path, content=msgpack.packb(body), headers=MSGPACK, timeout=300)


def _items(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = msgpack.unpackb(response.content)["items"]
    return items


def _refusal(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT"
    assert response.headers["X-SIE-Error-Code"] == "INVALID_INPUT"
    message: str = detail["message"]
    return message


def test_weight_free_formats_convert(server: ServerProcess) -> None:
    items = _items(
        _post(
            server,
            [
                {"id": "report", "document": {"data": documents.docx_report(), "format": "docx"}},
                {"document": {"data": documents.HTML_PAGE, "format": "htm"}},
                {"document": {"data": documents.MARKDOWN, "format": None}},
            ],
        )
    )
    assert [item["id"] for item in items] == ["report", "item-1", "item-2"]
    report, page, notes = (item["data"] for item in items)
    assert report["markdown"] == REPORT_MARKDOWN
    assert report["document"]["schema_name"] == "DoclingDocument"
    assert [table["data"]["num_rows"] for table in report["document"]["tables"]] == [2]
    assert "Revenue grew by 12 percent" in report["text"]
    assert page["markdown"] == HTML_MARKDOWN
    assert notes["markdown"].startswith("# Release notes\n\nThe server now reads *documents*")
    assert "| docx     | none      |" in notes["markdown"]
    for item in items:
        assert "error" not in item
        assert (item["entities"], item["objects"]) == ([], [])


def test_json_carries_the_bytes_as_base64(server: ServerProcess) -> None:
    import base64

    data = base64.b64encode(documents.docx_report()).decode()
    body = {"items": [{"document": {"data": data}}]}
    response = httpx.post(server.url + EXTRACT, json=body, headers={"Accept": "application/json"}, timeout=300)
    assert response.status_code == 200, response.text
    assert response.json()["items"][0]["data"]["markdown"] == REPORT_MARKDOWN


def test_a_pdf_without_weights_names_what_is_missing(server: ServerProcess) -> None:
    items = [
        {"document": {"data": documents.MARKDOWN, "format": "md"}},
        {"document": {"data": documents.pdf_image_only(), "format": "pdf"}},
    ]
    message = _refusal(_post(server, items))
    assert message.startswith("items[1].document: a PDF document needs docling's weights")
    assert "docling-project--docling-layout-heron, docling-project--docling-models not found in" in message
    pdf = {"document": {"data": documents.pdf_image_only(), "format": "pdf"}}
    ocr = _refusal(_post(server, [pdf], options={"ocr": True}))
    assert ocr.startswith("items[0].document: a PDF document with OCR needs docling's weights")
    assert "docling-project--docling-models, RapidOcr not found" in ocr


BAD_DOCUMENTS: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "truncated": (lambda: {"data": documents.docx_report()[:3000], "format": "docx"}, "truncated or corrupt ZIP"),
    "truncated-pdf": (lambda: {"data": documents.pdf_pages(3)[:200], "format": "pdf"}, "PDF is truncated or corrupt"),
    "encrypted-pdf": (lambda: {"data": documents.pdf_encrypted(), "format": "pdf"}, "the PDF is encrypted"),
    "encrypted-office": (lambda: {"data": documents.OLE_DOCUMENT, "format": "docx"}, "encrypted Office file"),
    "zip-bomb": (lambda: {"data": documents.docx_bomb(), "format": "docx"}, "ZIP bomb"),
    "pdf-bomb": (lambda: {"data": documents.pdf_stream_bomb(8), "format": "pdf"}, "(a PDF bomb?)"),
    "contradiction": (
        lambda: {"data": documents.docx_report(), "format": "pdf"},
        "declared 'pdf' but its data is a DOCX document",
    ),
    "pages": (lambda: {"data": documents.pdf_pages(10_000), "format": "pdf"}, "the PDF has 10000 pages"),
    "pixels": (lambda: {"data": documents.png_header(8000, 6251), "format": "png"}, "50008000 pixels; the limit"),
    "pdf-pixels": (lambda: {"data": documents.pdf_with_image(8000, 6251)}, "50008000 pixels; the limit"),
    "docx-pixels": (lambda: {"data": documents.docx_with_image(8000, 6251)}, "50008000 pixels; the limit"),
    "rtf": (lambda: {"data": documents.MARKDOWN, "format": "rtf"}, "documents of format 'rtf' are not converted"),
}


@pytest.mark.parametrize("case", list(BAD_DOCUMENTS))
def test_bad_documents_are_400_naming_the_item(server: ServerProcess, case: str) -> None:
    make, expected = BAD_DOCUMENTS[case]
    good = {"text": "unused", "document": {"data": documents.MARKDOWN}}
    message = _refusal(_post(server, [good, {"document": make()}]))
    assert message.startswith("items[1]") and expected in message


ENCODE = "/v1/encode/sentence-transformers/all-MiniLM-L6-v2"


async def test_bad_documents_disturb_nothing_in_flight(server: ServerProcess) -> None:
    """Every bad document at once, beside a good conversion, an encode and /healthz: each bad
    one is its own 400, the good answers are what they are alone, the server stays up."""
    encode_body = {"items": [{"text": "still here"}]}
    as_json = {"Accept": "application/json"}
    bad = [msgpack.packb({"items": [{"document": make()}]}) for make, _ in BAD_DOCUMENTS.values()]
    good = msgpack.packb({"items": [{"document": {"data": documents.docx_report(), "format": "docx"}}]})
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        alone = (await client.post(ENCODE, json=encode_body, headers=as_json)).json()["items"][0]
        answers = await asyncio.gather(
            *(client.post(EXTRACT, content=body, headers=MSGPACK) for body in bad),
            client.post(EXTRACT, content=good, headers=MSGPACK),
            client.post(ENCODE, json=encode_body, headers=as_json),
            client.get("/healthz"),
        )
        after = await client.post(ENCODE, json=encode_body)
    *refused, converted, encoded, health = answers
    for response, (_, expected) in zip(refused, BAD_DOCUMENTS.values(), strict=True):
        assert expected in _refusal(response)
    assert _items(converted)[0]["data"]["markdown"] == REPORT_MARKDOWN
    assert encoded.status_code == 200 and health.status_code == 200 and after.status_code == 200
    assert encoded.json()["items"][0]["dense"]["values"] == pytest.approx(alone["dense"]["values"], abs=1e-6)
    assert server.process.poll() is None


def test_an_image_item_is_an_image_document(server: ServerProcess) -> None:
    image = {"images": [{"data": documents.png_header(40, 30), "format": "png"}]}
    message = _refusal(_post(server, [image]))
    assert message.startswith("items[0].document: a IMAGE document needs docling's weights")
    assert "RapidOcr not found" in message


def test_models_lists_what_docling_reads(server: ServerProcess) -> None:
    models = {model["name"]: model for model in httpx.get(server.url + "/v1/models").json()["models"]}
    assert models["docling"]["inputs"] == ["document", "image"]
    assert models["docling"]["outputs"] == ["json"]


def test_an_item_without_a_document_is_400(server: ServerProcess) -> None:
    assert "items[0]: this model reads documents" in _refusal(_post(server, [{"text": "hello"}]))


async def test_an_encode_request_is_answered_while_a_document_converts(server: ServerProcess) -> None:
    long_docx = documents.docx_pages(1500)
    body = msgpack.packb({"items": [{"document": {"data": long_docx, "format": "docx"}}]})
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        conversion = asyncio.create_task(client.post(EXTRACT, content=body, headers=MSGPACK))
        await asyncio.sleep(0.5)
        encoded = await client.post(ENCODE, json={"items": [{"text": "still here"}]})
        health = await client.get("/healthz")
        converted = await conversion
    assert encoded.status_code == 200 and health.status_code == 200
    markdown = _items(converted)[0]["data"]["markdown"]
    assert markdown.count("## Section") == 75 and "Paragraph 1499:" in markdown


async def test_a_document_past_its_deadline_is_its_items_error_and_stalls_nothing(server: ServerProcess) -> None:
    """A 46-page DOCX (seconds to convert) on a model whose deadline is 3 s: its child is killed,
    its item answers the error, the next document of the request converts in a fresh child, and
    an encode and /healthz are answered meanwhile."""
    _wait_loaded(server, DEADLINE_MODEL)
    items = [{"document": {"data": documents.docx_pages(1500)}}, {"document": {"data": documents.docx_report()}}]
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        conversion = asyncio.create_task(
            client.post(f"/v1/extract/{DEADLINE_MODEL}", content=msgpack.packb({"items": items}), headers=MSGPACK)
        )
        await asyncio.sleep(0.5)
        encoded = await client.post(ENCODE, json={"items": [{"text": "still here"}]})
        health = await client.get("/healthz")
        # Not a timing: the conversion cannot end before its 3 s deadline and a fresh child's start.
        assert not conversion.done()
        slow, small = _items(await conversion)
    assert encoded.status_code == 200 and health.status_code == 200
    assert slow["error"] == {
        "code": "INFERENCE_ERROR",
        "message": f"Document conversion failed: the conversion took longer than {DEADLINE_S} s.",
    }
    assert small["data"]["markdown"] == REPORT_MARKDOWN and "error" not in small


def test_the_released_sdk_sends_documents(server: ServerProcess, tmp_path: Path) -> None:
    require_venv()
    files = {
        "report.docx": documents.docx_report(),
        "page.htm": documents.HTML_PAGE,
        "notes.markdown": documents.MARKDOWN,
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    driver = Path(__file__).with_name("sdk_driver.py")
    command = [str(COMPAT_PYTHON), str(driver), server.url, *(str(tmp_path / name) for name in files)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    by_path = out["by_path"]
    assert [item["id"] for item in by_path] == list(files)
    assert by_path[0]["data"]["markdown"] == REPORT_MARKDOWN
    assert by_path[1]["data"]["markdown"] == HTML_MARKDOWN
    assert by_path[2]["data"]["markdown"].startswith("# Release notes")
    assert all(item["error"] is None for item in by_path)
    assert out["by_bytes"]["data"]["markdown"] == REPORT_MARKDOWN
    assert out["contradiction"]["type"] == "RequestError"
    assert "declared 'pdf' but its data is a DOCX document" in out["contradiction"]["message"]


def _sdk_answers(server: ServerProcess, tmp_path: Path, profiles: tuple[str | None, ...]) -> dict[str, Any]:
    """The released sie-sdk's answers from this server to the parity documents, as the recorder asks."""
    cases = []
    for name, (data, fmt) in documents.docling_parity_documents().items():
        path = tmp_path / f"{name}.{fmt}"
        path.write_bytes(data)
        for profile in profiles:
            key = name if profile is None else f"{name}:{profile}"
            cases.append({"name": key, "path": str(path), "format": fmt, "profile": profile})
    command = [str(COMPAT_PYTHON), str(PARITY_DRIVER), server.url, json.dumps(cases)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    answers: dict[str, Any] = json.loads(done.stdout)
    return answers


def test_answers_equal_the_reference_servers(server: ServerProcess, tmp_path: Path) -> None:
    """sie-server 0.10.1's answers (scripts/record_docling_parity.py) to the same documents, default
    and ``ocr`` profiles: text, Markdown and the DoclingDocument identical. The image-only PDF is the
    one departure (docs/models.md, "Documents"): the reference, with no artifact folder, answers the
    item with a bare conversion failure; Sift refuses the request naming the missing folders."""
    require_venv()
    fixture = json.loads((Path(__file__).with_name(documents.DOCLING_PARITY_FIXTURE)).read_text())
    reference: dict[str, Any] = fixture["answers"]
    ours = _sdk_answers(server, tmp_path, (None, "ocr"))
    assert sorted(ours) == sorted(reference)
    for name in sorted(set(reference) - {"scan", "scan:ocr"}):
        assert reference[name]["error"] is None, name
        assert ours[name] == reference[name], name
    failed = {"code": "INFERENCE_ERROR", "message": "Document conversion failed"}
    for name, what, folders in (
        ("scan", "a PDF document", "docling-layout-heron, docling-project--docling-models not found"),
        ("scan:ocr", "a PDF document with OCR", "docling-models, RapidOcr not found"),
    ):
        assert reference[name] == {"data": None, "error": failed}
        refused = ours[name]["refused"]
        assert (refused["type"], refused["status"]) == ("RequestError", 400)
        assert refused["message"].startswith(f"items[0].document: {what} needs docling's weights"), refused
        assert folders in refused["message"]
