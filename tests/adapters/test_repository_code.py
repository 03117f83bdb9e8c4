"""Repository code (issue 31, item 6): an ``auto_map`` folder runs only when its catalog
entry pins every Python file of the local folder by SHA-256; then it answers as
sentence-transformers with ``trust_remote_code`` does. The folder's code here shifts the
hidden states, so an answer that ignored it (transformers' own BertModel) would differ."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.repository_code import check_repository_code, code_digests
from sift_server.errors import ModelLoadFailed
from sift_server.registry.catalog import CatalogError, load_spec
from tests.adapters.conftest import serving_one_entry
from tests.fixtures.tiny_embedder import build_tiny_embedder

MODELING = '''"""A BERT whose hidden states are shifted: repository code for the tests."""
from transformers import BertConfig, BertModel


class ShiftedBertModel(BertModel):
    config_class = BertConfig

    def forward(self, *args, **kwargs):
        output = super().forward(*args, **kwargs)
        output.last_hidden_state = output.last_hidden_state + 0.5
        return output
'''
JSON = {"Accept": "application/json"}
TEXTS = ["a short query", "a longer document about the folder's own code and what it computes"]


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = build_tiny_embedder(tmp_path_factory.mktemp("repository_code") / "model")
    (folder / "modeling_shifted.py").write_text(MODELING)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_shifted.ShiftedBertModel"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _pins(folder: Path) -> dict[str, str]:
    return {"modeling_shifted.py": hashlib.sha256((folder / "modeling_shifted.py").read_bytes()).hexdigest()}


def _entry(folder: Path, pins: dict[str, str]) -> str:
    lines = "".join(f"\n  {name}: {digest}" for name, digest in pins.items())
    return f"adapter: sentence-embedder\nsource: {{path: {folder}}}\ntasks: [encode]\nrepository_code:{lines}\n"


async def test_pinned_code_answers_as_sentence_transformers_runs_it(code_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(code_dir), device="cpu", trust_remote_code=True).encode(TEXTS)
    plain = SentenceTransformer(str(code_dir), device="cpu", trust_remote_code=False).encode(TEXTS)
    assert np.abs(reference - plain).max() > 1e-2  # the folder's code changes the answer

    async with serving_one_entry(tmp_path, "tiny/code", _entry(code_dir, _pins(code_dir))) as client:
        response = await client.post("/v1/encode/tiny/code", json={"items": [{"text": t} for t in TEXTS]}, headers=JSON)
        info = (await client.get("/v1/models/tiny/code")).json()
    assert response.status_code == 200, response.text
    served = np.array([item["dense"]["values"] for item in response.json()["items"]])
    np.testing.assert_allclose(served, reference, atol=1e-5)
    assert info["runtime"]["backend"] == "torch"


async def test_unpinned_code_is_refused_with_the_digests_to_pin(code_dir: Path, tmp_path: Path) -> None:
    entry = f"adapter: sentence-embedder\nsource: {{path: {code_dir}}}\ntasks: [encode]\n"
    digest = _pins(code_dir)["modeling_shifted.py"]
    with pytest.raises(ModelLoadFailed, match=rf"(?s)pins it.*modeling_shifted.py: {digest}"):
        async with serving_one_entry(tmp_path, "tiny/code", entry):
            pass


def _variant(src: Path, dest: Path) -> Path:
    return Path(shutil.copytree(src, dest))


def test_changed_code_is_refused(code_dir: Path, tmp_path: Path) -> None:
    pins = _pins(code_dir)
    folder = _variant(code_dir, tmp_path / "changed")
    (folder / "modeling_shifted.py").write_text(MODELING.replace("0.5", "0.25"))
    with pytest.raises(UnservableModel, match="changed since it was pinned"):
        check_repository_code(folder, "sentence-embedder", {"AutoModel": "modeling_shifted.ShiftedBertModel"}, pins)


def test_an_unpinned_extra_file_is_refused(code_dir: Path, tmp_path: Path) -> None:
    folder = _variant(code_dir, tmp_path / "extra")
    (folder / "helpers.py").write_text("x = 1\n")
    with pytest.raises(UnservableModel, match=r"(?s)does not pin.*helpers.py"):
        check_repository_code(
            folder, "sentence-embedder", {"AutoModel": "modeling_shifted.ShiftedBertModel"}, _pins(code_dir)
        )


def test_code_from_another_repository_is_refused(code_dir: Path) -> None:
    with pytest.raises(UnservableModel, match="another repository"):
        check_repository_code(
            code_dir, "sentence-embedder", {"AutoModel": "jinaai/jina-bert-implementation--modeling.M"}, _pins(code_dir)
        )


def test_a_class_from_an_unpinned_module_is_refused(code_dir: Path) -> None:
    with pytest.raises(UnservableModel, match=r"other_module\.py is not pinned"):
        check_repository_code(code_dir, "sentence-embedder", {"AutoModel": "other_module.M"}, _pins(code_dir))


def test_a_pinned_file_the_folder_lacks_is_refused(code_dir: Path) -> None:
    pins = {**_pins(code_dir), "gone.py": "ab" * 32}
    with pytest.raises(UnservableModel, match=r"gone\.py, which the folder does not hold"):
        check_repository_code(code_dir, "sentence-embedder", {"AutoModel": "modeling_shifted.ShiftedBertModel"}, pins)


def test_digests_cover_every_python_file(code_dir: Path) -> None:
    assert code_digests(code_dir) == _pins(code_dir)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        (
            "adapter: cross-encoder\nsource: {path: m}\ntasks: [score]\nrepository_code: {a.py: %s}\n" % ("ab" * 32),
            "does not run repository code",
        ),
        (
            "adapter: sentence-embedder\nsource: {path: m}\ntasks: [encode]\nrepository_code: {a.py: abc}\n",
            "SHA-256 hex digest",
        ),
        (
            "adapter: sentence-embedder\nsource: {path: m}\ntasks: [encode]\nbackend: onnx\n"
            "repository_code: {a.py: %s}\n" % ("ab" * 32),
            "runs on torch",
        ),
        (
            "adapter: sentence-embedder\nsource: {hf: org/m}\ntasks: [encode]\nrepository_code: {a.py: %s}\n"
            % ("ab" * 32),
            "pinned commit",
        ),
    ],
    ids=["adapter-without-it", "bad-digest", "onnx", "hub-without-revision"],
)
def test_the_catalog_checks_the_pins(tmp_path: Path, entry: str, error: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(f"name: m\n{entry}")
    with pytest.raises(CatalogError, match=error):
        load_spec(path)


def test_pinned_code_runs_on_torch_under_auto(tmp_path: Path) -> None:
    from sift_server.registry.loader import load_plan

    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\nadapter: sentence-embedder\nsource: {path: m}\ntasks: [encode]\n"
        "repository_code: {a.py: %s}\n" % ("ab" * 32)
    )
    plan = load_plan(load_spec(path))
    assert (plan.backend, plan.first) == ("torch", None)
    assert plan.note is not None and "repository code" in plan.note
