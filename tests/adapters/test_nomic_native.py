"""The published Nomic layout (nomic-embed-text-v1.5) under ``sentence-embedder`` on
transformers' own ``NomicBertModel``: a tiny random folder in that layout (its ``auto_map``
naming the publisher's code, which is never run) answers as sentence-transformers with
``trust_remote_code`` over the publisher's code does (recorded once by
scripts/record_nomic_parity.py: tests/adapters/parity/nomic_reference.json), within 1e-5, in
process and over HTTP; each config or weight it cannot serve exactly is refused at load."""

from __future__ import annotations

import base64
import dataclasses
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sift_server.adapters._nomic_native import is_nomic_layout
from sift_server.adapters._refusal import UnservableModel
from sift_server.adapters.base import EncodeTask
from sift_server.adapters.sentence_embedder import SentenceEmbedderAdapter
from tests.adapters.conftest import load_context, serving_one_entry
from tests.adapters.multivector_tasks import run
from tests.adapters.parity.nomic_cases import CASES, DOCUMENT_PREFIX, FIXTURE, QUERY_PREFIX, TOL
from tests.fixtures.tiny_nomic import HIDDEN, TINY_NOMIC, build_tiny_nomic, nomic_config

JSON = {"Accept": "application/json"}
PREFIXES = {"query_prefix": QUERY_PREFIX, "document_prefix": DOCUMENT_PREFIX}


@cache
def recorded() -> dict[str, np.ndarray]:
    data = json.loads((Path(__file__).parent / "parity" / FIXTURE).read_text())
    return {
        name: np.frombuffer(base64.b64decode(packed["f32"]), dtype="<f4").reshape(packed["rows"], -1)
        for name, packed in data["vectors"].items()
    }


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_nomic(tmp_path_factory.mktemp("nomic") / "model")


@pytest.fixture(scope="module")
def adapters(folder: Path) -> dict[bool, SentenceEmbedderAdapter]:
    return {
        normalize: SentenceEmbedderAdapter.load(load_context(folder, normalize=normalize, **PREFIXES))
        for normalize in (True, False)
    }


def test_the_fixture_is_the_published_layout(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    assert is_nomic_layout(config)
    assert not list(folder.rglob("*.py"))
    assert not is_nomic_layout({**config, "model_type": "bert"})
    assert not is_nomic_layout({k: v for k, v in config.items() if k != "auto_map"})


def test_the_recording_was_not_normalized_where_asked() -> None:
    norms = np.linalg.norm(recorded()["documents_raw"], axis=1)
    assert np.all(np.abs(norms - 1) > 1e-3)
    np.testing.assert_allclose(np.linalg.norm(recorded()["documents"], axis=1), 1, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_encode_equals_the_reference(adapters: dict[bool, SentenceEmbedderAdapter], case: dict[str, Any]) -> None:
    adapter = adapters[case["normalize"]]
    (items,) = run(adapter, EncodeTask(texts=case["texts"], is_query=case["is_query"]))
    got = np.stack([np.asarray(item) for item in items])
    assert got.shape == (len(case["texts"]), HIDDEN)
    np.testing.assert_allclose(got, recorded()[case["name"]], atol=TOL, rtol=0)


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_the_fp32_exports_equal_the_reference(folder: Path, backend: str) -> None:
    """The native class exports (the publisher's code is never traced): ``auto`` may choose these runtimes."""
    context = dataclasses.replace(load_context(folder, **PREFIXES), backend=backend, precision="fp32")
    adapter = SentenceEmbedderAdapter.load(context)
    assert adapter.info.runtime["backend"] == backend
    for case in [case for case in CASES if case["normalize"]]:
        (items,) = run(adapter, EncodeTask(texts=case["texts"], is_query=case["is_query"]))
        np.testing.assert_allclose(np.stack(items), recorded()[case["name"]], atol=TOL, rtol=0)


def test_the_long_text_was_cut(adapters: dict[bool, SentenceEmbedderAdapter]) -> None:
    (case,) = [case for case in CASES if case["name"] == "truncated"]
    prepared = adapters[True].prepare(EncodeTask(texts=case["texts"]))
    assert prepared.item_costs[0] == adapters[True].max_length


@pytest.mark.parametrize("normalize", [True, False])
async def test_http_encode_equals_the_reference(folder: Path, tmp_path: Path, normalize: bool) -> None:
    options = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in {**PREFIXES, "normalize": normalize}.items())
    entry = (
        f"adapter: sentence-embedder\nbackend: torch\nsource:\n  path: {folder}\ntasks: [encode]\noptions:\n{options}"
    )
    async with serving_one_entry(tmp_path, TINY_NOMIC, entry) as client:
        info = (await client.get(f"/v1/models/{TINY_NOMIC}")).json()
        assert info["dims"]["dense"] == HIDDEN, info
        for case in [case for case in CASES if case["normalize"] == normalize]:
            body = {
                "items": [{"text": text} for text in case["texts"]],
                "params": {"options": {"is_query": case["is_query"]}},
            }
            response = await client.post(f"/v1/encode/{TINY_NOMIC}", json=body, headers=JSON)
            assert response.status_code == 200, response.text
            got = np.stack([item["dense"]["values"] for item in response.json()["items"]])
            np.testing.assert_allclose(got, recorded()[case["name"]], atol=TOL, rtol=0)


def _load(folder: Path) -> SentenceEmbedderAdapter:
    return SentenceEmbedderAdapter.load(load_context(folder))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"attn_pdrop": 0.1}, "attn_pdrop = 0.1; the publisher's attention applies that dropout even in eval mode"),
        ({"attn_pdrop": None}, "attn_pdrop"),
        ({"qkv_proj_bias": True}, "qkv_proj_bias = True"),
        ({"mlp_fc1_bias": True}, "mlp_fc1_bias = True"),
        ({"prenorm": True}, "prenorm = True"),
        ({"activation_function": "gelu"}, "activation_function = 'gelu'"),
        ({"rotary_emb_fraction": 0.5}, "rotary_emb_fraction = 0.5"),
        ({"rotary_emb_interleaved": True}, "rotary_emb_interleaved = True"),
        ({"rotary_emb_scale_base": 512}, "rotary_emb_scale_base = 512"),
        ({"rotary_scaling_factor": 2.0}, "rotary_scaling_factor = 2.0"),
        ({"num_heads_kv": 1}, "num_heads_kv = 1"),
        ({"register_tokens": 4}, "keys Sift cannot translate exactly: register_tokens"),
        ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1000.0, "factor": 2.0}}, "rope_parameters"),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, "rotary_emb_base asks for"),
    ],
)
def test_a_config_it_cannot_translate_exactly_is_refused(tmp_path: Path, change: dict[str, Any], reason: str) -> None:
    config = nomic_config()
    if change.get("attn_pdrop", 0) is None:
        del config["attn_pdrop"]  # the publisher's default (GPT2Config's) is 0.1
        reason = "attn_pdrop = 0.1"
    else:
        config.update(change)
    folder = build_tiny_nomic(tmp_path / "model", config=config)
    with pytest.raises(UnservableModel, match="NomicBertModel") as refused:
        _load(folder)
    assert reason in str(refused.value)


def test_transformers_own_rotary_keys_are_accepted_where_they_agree(folder: Path, tmp_path: Path) -> None:
    """A config saved by transformers 5 also carries max_position_embeddings (the trained length)
    and rope_parameters: the answers do not change."""
    rope = {"rope_type": "default", "rope_theta": 1000.0}
    config = nomic_config(max_position_embeddings=16, rope_parameters=rope)
    other = build_tiny_nomic(tmp_path / "model", config=config)
    adapter = SentenceEmbedderAdapter.load(load_context(other, **PREFIXES))
    (case,) = [case for case in CASES if case["name"] == "truncated"]
    (items,) = run(adapter, EncodeTask(texts=case["texts"]))
    np.testing.assert_allclose(np.stack(items), recorded()["truncated"], atol=TOL, rtol=0)


def test_mismatched_weights_are_refused(tmp_path: Path) -> None:
    folder = build_tiny_nomic(tmp_path / "model", config=nomic_config(n_inner=300))  # 512 wide, weights 256
    with pytest.raises(UnservableModel, match=r"weight layers\.0\.mlp\.\w+_proj\.weight has shape"):
        _load(folder)


def test_missing_weights_are_refused(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = build_tiny_nomic(tmp_path / "model")
    weights = load_file(str(folder / "model.safetensors"))
    del weights["encoder.layers.1.norm2.bias"]
    save_file(weights, str(folder / "model.safetensors"))
    with pytest.raises(UnservableModel, match=r"missing \['layers\.1\.post_mlp_layernorm\.bias'\]"):
        _load(folder)


def test_extra_weights_are_refused(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = build_tiny_nomic(tmp_path / "model", config=nomic_config(n_layer=1))
    with pytest.raises(UnservableModel, match=r"unexpected \['layers\.1\."):
        _load(folder)
    weights = load_file(str(folder / "model.safetensors"))
    assert "encoder.layers.1.attn.Wqkv.weight" in weights


def test_the_folders_python_never_runs(tmp_path: Path) -> None:
    """Publisher-named files that would fail on import are never imported: the load goes native."""
    folder = build_tiny_nomic(tmp_path / "model")
    for name in ("configuration_hf_nomic_bert.py", "modeling_hf_nomic_bert.py"):
        (folder / name).write_text("raise SystemExit('repository code ran')\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {key: value.split("--", 1)[1] for key, value in config["auto_map"].items()}
    (folder / "config.json").write_text(json.dumps(config))
    adapter = _load(folder)
    (items,) = run(adapter, EncodeTask(texts=["hello"]))
    assert np.asarray(items[0]).shape == (HIDDEN,)
