"""Named profiles through the released ``sie-sdk`` 0.10.1, unchanged: a profile by path
(``model:profile``) and by ``options``, the request's options over the profile's, an unknown
profile refused, and ``list_models`` naming each profile. Its own ``sift serve`` (the tiny
embedder with two profiles); the SDK runs in its own virtual environment, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.compat.conftest import COMPAT_PYTHON, require_venv
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

PROFILES = "profiles:\n  half: {options: {output_dtype: float16}}\n  binary: {options: {output_dtype: binary}}\n"

DRIVER = """
import json, sys
from sie_sdk import RequestError, SIEClient

url, model = sys.argv[1], sys.argv[2]
out = {}
with SIEClient(url, timeout_s=60) as client:
    def dtype(name, **kwargs):
        return str(client.encode(name, {"text": "hello profiles"}, **kwargs)["dense"].dtype)

    out["plain"] = dtype(model)
    out["path"] = dtype(model + ":half")
    out["option"] = dtype(model, options={"profile": "half"})
    out["request_wins"] = dtype(model + ":half", options={"output_dtype": "float32"})
    out["param_wins"] = dtype(model, options={"profile": "half"}, output_dtype="int8")
    try:
        dtype(model, options={"profile": "nope"})
    except RequestError as error:
        out["unknown"] = [type(error).__name__, error.status_code, error.code, str(error)]
    out["listed"] = sorted(info["name"] for info in client.list_models())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    require_venv()
    root = tmp_path_factory.mktemp("compat-profiles")
    entry = write_catalog_entry(root / "catalog", build_tiny_embedder(root / "model"))
    entry.write_text(entry.read_text() + PROFILES)
    proc = start_server(["--catalog", str(root / "catalog"), "--model", TINY_EMBEDDER], root / "serve.log")
    yield proc
    proc.stop()


def test_profiles_through_the_released_sdk(server: ServerProcess) -> None:
    done = subprocess.run(
        [str(COMPAT_PYTHON), "-c", DRIVER, server.url, TINY_EMBEDDER],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["plain"] == "float32"
    assert result["path"] == "float16" and result["option"] == "float16"
    assert result["request_wins"] == "float32" and result["param_wins"] == "int8"
    name, status, code, message = result["unknown"]
    assert (name, status, code) == ("RequestError", 400, "INVALID_INPUT")
    assert "Unknown profile 'nope'" in message
    assert {TINY_EMBEDDER, f"{TINY_EMBEDDER}:binary", f"{TINY_EMBEDDER}:half", "docling:ocr"} <= set(result["listed"])
