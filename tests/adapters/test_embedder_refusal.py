"""The sentence-embedder refuses, at load and with the reason, a folder it cannot
serve exactly (issue 31: a Qwen3-Embedding-layout folder loaded and answered
mean-pooled vectors without a word). Each case is a folder that
sentence-transformers itself serves differently from what the adapter computes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from sift_server.errors import ModelLoadFailed
from tests.adapters.conftest import load_context, serving_one_entry
from tests.fixtures.tiny_decoder import build_tiny_qwen3_embedder
from tests.fixtures.tiny_embedder import build_tiny_embedder, minilm_folder


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3_embedder(tmp_path_factory.mktemp("qwen3_embedder"))


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_embedder(tmp_path_factory.mktemp("bert_embedder"))


def _variant(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text()) if path.is_file() else {}
    data.update(changes)
    path.write_text(json.dumps(data))


def test_qwen3_embedding_layout_is_refused_with_the_reason(qwen3_dir: Path) -> None:
    with pytest.raises(UnservableModel) as raised:
        SentenceEmbedderAdapter.load(load_context(qwen3_dir))
    message = str(raised.value)
    assert "lasttoken" in message
    assert "decoder-embedder" in message


def test_an_entry_pooling_option_does_not_override_the_folders_own(qwen3_dir: Path) -> None:
    with pytest.raises(UnservableModel, match="lasttoken"):
        SentenceEmbedderAdapter.load(load_context(qwen3_dir, pooling="mean"))


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (
            lambda d: _edit_json(
                d / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False, pooling_mode_weightedmean_tokens=True
            ),
            "weightedmean",
        ),
        (lambda d: _edit_json(d / "1_Pooling" / "config.json", pooling_mode_cls_token=True), "more than one"),
        (lambda d: _edit_json(d / "tokenizer_config.json", padding_side="left"), "left"),
        (lambda d: _edit_json(d / "config.json", is_decoder=True), "decoder"),
        (
            lambda d: _edit_json(
                d / "config_sentence_transformers.json", prompts={"query": "q: "}, default_prompt_name="query"
            ),
            "default_prompt_name",
        ),
        (lambda d: _edit_json(d / "sentence_bert_config.json", do_lower_case=True), "do_lower_case"),
        (
            lambda d: (d / "modules.json").write_text(
                json.dumps(
                    [
                        *json.loads((d / "modules.json").read_text()),
                        {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
                    ]
                )
            ),
            "Dense",
        ),
        (lambda d: _edit_json(d / "config.json", auto_map={"AutoModel": "modeling.CustomModel"}), "repository code"),
    ],
    ids=[
        "weightedmean",
        "two-modes",
        "left-padding",
        "decoder",
        "default-prompt",
        "lowercase",
        "dense-module",
        "auto-map",
    ],
)
def test_what_the_adapter_does_not_compute_is_refused(
    bert_dir: Path, tmp_path: Path, edit: object, reason: str
) -> None:
    folder = _variant(bert_dir, tmp_path / "variant")
    edit(folder)  # type: ignore[operator]
    with pytest.raises(UnservableModel, match=reason):
        SentenceEmbedderAdapter.load(load_context(folder))


def test_served_folders_still_load(bert_dir: Path) -> None:
    assert SentenceEmbedderAdapter.load(load_context(bert_dir)).info.dims["dense"] == 32
    assert SentenceEmbedderAdapter.load(load_context(minilm_folder(), 256)).info.dims["dense"] == 384


async def test_a_server_with_it_as_default_model_fails_at_start_saying_why(qwen3_dir: Path, tmp_path: Path) -> None:
    entry = f"adapter: sentence-embedder\nsource:\n  path: {qwen3_dir}\ntasks: [encode]\nbackend: torch\n"
    with pytest.raises(ModelLoadFailed, match=r"lasttoken.*decoder-embedder"):
        async with serving_one_entry(tmp_path, "tiny/qwen3", entry):
            pass
