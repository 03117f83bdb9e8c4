"""The released ``sie-sdk`` 0.10.1 (Python 3.12, ``.venv/sie-compat``) against ``sift
serve`` on the tiny NLI, GLiNER2 and bi-encoder GLiNER models: every parity case's
answer equals the released sie-server's recorded one (tests/adapters/parity), and a
request a model cannot serve comes back as the SDK's error, not an answer."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.parity.cases import CASES, GLINER2_MODEL, GLINER_BI_MODEL, NLI_MODEL
from tests.adapters.parity.compare import assert_same, recorded
from tests.compat.test_sie_sdk import COMPAT_PYTHON, _require_venv
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_models import build_tiny_gliner2, build_tiny_gliner_bi, build_tiny_nli

DRIVER = Path(__file__).resolve().parents[2] / "scripts" / "extract_parity_driver.py"
REFUSED = {"name": "nli-with-schema", "model": NLI_MODEL, "texts": ["x"], "output_schema": {"type": "object"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    _require_venv()
    root = tmp_path_factory.mktemp("compat-extractors")
    catalog = root / "catalog"
    catalog.mkdir()
    entries = {
        NLI_MODEL: f"adapter: nli\nsource: {{path: {build_tiny_nli(root / 'nli')}}}\n",
        GLINER2_MODEL: f"adapter: gliner2\nsource: {{path: {build_tiny_gliner2(root / 'gliner2')}}}\n",
        GLINER_BI_MODEL: f"adapter: gliner\nsource: {{path: {build_tiny_gliner_bi(root / 'bi')}}}\n"
        "options:\n  threshold: 0.3\n",
    }
    args = ["--catalog", str(catalog), "--model", NLI_MODEL]
    for index, (name, entry) in enumerate(entries.items()):
        (catalog / f"{index}.yaml").write_text(f"name: {name}\n{entry}tasks: [extract]\n")
        args += ["--preload", name]
    proc = start_server(args, root / "serve.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def answers(server: ServerProcess) -> dict[str, dict[str, Any]]:
    cases = [*CASES, REFUSED]
    done = subprocess.run(
        [str(COMPAT_PYTHON), str(DRIVER), server.url, json.dumps({"cases": cases})],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return {case["name"]: answer for case, answer in zip(cases, json.loads(done.stdout), strict=True)}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_the_sdk_gets_the_references_answers(answers: dict[str, dict[str, Any]], case: dict[str, Any]) -> None:
    answer = answers[case["name"]]
    assert "error" not in answer, answer
    assert_same(answer["items"], recorded()[case["name"]])


def test_a_schema_for_a_model_without_one_is_the_sdks_error(answers: dict[str, dict[str, Any]]) -> None:
    error = answers[REFUSED["name"]]["error"]
    assert "output_schema" in error
