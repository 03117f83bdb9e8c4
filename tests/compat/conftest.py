"""One ``sift serve`` and one cluster (a gateway with one worker) for all the compatibility
modules: every tiny model they use in one catalog, each under a name of its own, behind an API
key (the drivers send it). The three modules form one xdist unit (tests/fixtures/parallel.py), so
one worker starts these once; package scope stops them when that worker leaves tests/compat.

The released ``sie-sdk`` needs Python 3.12: it runs in its own virtual environment
(``.venv/sie-compat``, made by ``scripts/bootstrap.sh``), in a subprocess."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sift_server.cluster.local import LocalCluster
from tests.adapters.parity.cases import GLINER2_MODEL, GLINER_BI_MODEL, NLI_MODEL
from tests.adapters.parity.decoder_cases import (
    EMBEDDER,
    MISTRAL_EMBEDDER,
    MXBAI_RERANKER,
    RERANKER,
    ZERANK_RERANKER,
    embedder_entry,
    mistral_embedder_entry,
    mxbai_reranker_entry,
    reranker_entry,
    zerank_entry,
)
from tests.adapters.parity.m3_cases import MODEL as M3_MODEL
from tests.adapters.parity.m3_cases import entry as m3_entry
from tests.cluster.conftest import add_worker, start_cluster, wait_workers
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_colpali import TINY_COLPALI, TINY_COLQWEN2, build_tiny_colpali, build_tiny_colqwen2
from tests.fixtures.tiny_colsmol import TINY_COLSMOL, build_tiny_colsmol
from tests.fixtures.tiny_colvision import MAX_PIXELS, MIN_PIXELS, TINY_COLQWEN2_5, build_tiny_colqwen2_5
from tests.fixtures.tiny_decoder import (
    build_tiny_mistral_embedder,
    build_tiny_mxbai_reranker,
    build_tiny_qwen3_embedder,
    build_tiny_qwen3_reranker,
    build_tiny_zerank,
)
from tests.fixtures.tiny_detection import (
    TINY_GROUNDING_DINO,
    TINY_OWLV2,
    build_tiny_grounding_dino,
    build_tiny_owlv2,
)
from tests.fixtures.tiny_donut import TINY_DONUT, build_tiny_donut
from tests.fixtures.tiny_donut import catalog_options as donut_options
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry
from tests.fixtures.tiny_florence2 import TINY_FLORENCE2, build_tiny_florence2
from tests.fixtures.tiny_florence2 import catalog_options as florence2_options
from tests.fixtures.tiny_gliner2_v2 import MODEL as GLINER2_V2_MODEL
from tests.fixtures.tiny_gliner2_v2 import build_tiny_gliner2_v2
from tests.fixtures.tiny_glm_ocr import TINY_GLM_OCR, build_tiny_glm_ocr
from tests.fixtures.tiny_glm_ocr import catalog_options as glm_ocr_options
from tests.fixtures.tiny_images import TINY_CLIP, TINY_SIGLIP, build_tiny_clip, build_tiny_siglip
from tests.fixtures.tiny_lighton_ocr import TINY_LIGHTON_OCR, build_tiny_lighton_ocr
from tests.fixtures.tiny_lighton_ocr import catalog_options as lighton_ocr_options
from tests.fixtures.tiny_m3 import build_tiny_m3
from tests.fixtures.tiny_mineru import TINY_MINERU, build_tiny_mineru
from tests.fixtures.tiny_mineru import catalog_options as mineru_options
from tests.fixtures.tiny_models import (
    build_tiny_cross_encoder,
    build_tiny_gliner,
    build_tiny_gliner2,
    build_tiny_gliner_bi,
    build_tiny_nli,
    build_tiny_sparse_encoder,
)
from tests.fixtures.tiny_nomic import TINY_NOMIC, TINY_NOMIC_RAW, build_tiny_nomic
from tests.fixtures.tiny_paddleocr_vl import TINY_PADDLEOCR_VL, build_tiny_paddleocr_vl
from tests.fixtures.tiny_paddleocr_vl import catalog_options as paddleocr_vl_options
from tests.fixtures.tiny_qwen3_vl import (
    TINY_QWEN3_VL_EMBEDDER,
    TINY_QWEN3_VL_RERANKER,
    build_tiny_qwen3_vl_embedder,
    build_tiny_qwen3_vl_reranker,
)
from tests.fixtures.tiny_sam3 import TINY_SAM3, build_tiny_sam3
from tests.fixtures.tiny_topk import TINY_TOPK, build_tiny_topk

ROOT = Path(__file__).resolve().parents[2]
COMPAT_VENV = Path(os.environ.get("SIFT_SIE_COMPAT_VENV", ROOT / ".venv" / "sie-compat"))
COMPAT_PYTHON = COMPAT_VENV / "bin" / "python"
# The interpreter bootstrap.sh builds the venv with (sie-sdk 0.10.1 needs Python 3.12).
PYTHON312 = Path(os.environ.get("SIFT_PYTHON312", Path.home() / ".pyenv/versions/3.12.1/bin/python3.12"))
KEY = "s3cret"
RERANK, NER, SPARSE = "tiny/reranker", "tiny/gliner", "tiny/sparse"
# What the cluster's worker serves: test_sie_sdk's models, the image models, GLM-OCR and MinerU.
CLUSTER_MODELS = (
    TINY_EMBEDDER,
    RERANK,
    NER,
    TINY_CLIP,
    TINY_SIGLIP,
    EMBEDDER,
    RERANKER,
    MISTRAL_EMBEDDER,
    MXBAI_RERANKER,
    ZERANK_RERANKER,
    M3_MODEL,
    TINY_COLPALI,
    TINY_COLQWEN2,
    TINY_COLQWEN2_5,
    TINY_COLSMOL,
    TINY_QWEN3_VL_EMBEDDER,
    TINY_QWEN3_VL_RERANKER,
    TINY_TOPK,
    TINY_NOMIC,
    TINY_NOMIC_RAW,
    TINY_GLM_OCR,
    TINY_MINERU,
)
EXTRACTORS = (
    NLI_MODEL,
    GLINER2_MODEL,
    GLINER_BI_MODEL,
    TINY_OWLV2,
    TINY_GROUNDING_DINO,
    TINY_FLORENCE2,
    TINY_DONUT,
    GLINER2_V2_MODEL,
    TINY_LIGHTON_OCR,
    TINY_PADDLEOCR_VL,
    TINY_SAM3,
)
# The sparse embedders of the integrations (test_integrations) use it.
SPARSE_MODELS = (SPARSE,)


def require_venv() -> None:
    if COMPAT_PYTHON.exists():
        return
    if PYTHON312.exists():
        pytest.fail(f"{COMPAT_VENV} is missing although {PYTHON312} exists: run scripts/bootstrap.sh")
    pytest.skip(f"no Python 3.12 ({PYTHON312}) for the released sie-sdk")


def _entry(name: str, adapter: str, folder: Path, task: str, extra: str = "") -> str:
    return f"name: {name}\nadapter: {adapter}\n{extra}source:\n  path: {folder}\ntasks: [{task}]\n"


def _options(options: dict[str, object]) -> str:
    return "options:\n" + "".join(f"  {key}: {json.dumps(value)}\n" for key, value in options.items())


@pytest.fixture(scope="package")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_venv()
    root = tmp_path_factory.mktemp("compat")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "embedder"))
    entries = {
        "reranker": _entry(RERANK, "cross-encoder", build_tiny_cross_encoder(root / "reranker"), "score"),
        # test_sie_sdk asks for entities at any score; the bi-encoder's parity cases were recorded at 0.3.
        "gliner": _entry(NER, "gliner", build_tiny_gliner(root / "gliner"), "extract") + "options:\n  threshold: 0.0\n",
        "nli": _entry(NLI_MODEL, "nli", build_tiny_nli(root / "nli"), "extract"),
        "gliner2": _entry(GLINER2_MODEL, "gliner2", build_tiny_gliner2(root / "gliner2"), "extract"),
        "gliner2-v2": _entry(GLINER2_V2_MODEL, "gliner2-v2", build_tiny_gliner2_v2(root / "gliner2-v2"), "extract"),
        "gliner-bi": _entry(GLINER_BI_MODEL, "gliner", build_tiny_gliner_bi(root / "bi"), "extract")
        + "options:\n  threshold: 0.3\n",
        "clip": _entry(TINY_CLIP, "clip", build_tiny_clip(root / "clip"), "encode", "backend: torch\n"),
        "sparse": _entry(SPARSE, "sparse-encoder", build_tiny_sparse_encoder(root / "sparse"), "encode"),
        "siglip": _entry(TINY_SIGLIP, "clip", build_tiny_siglip(root / "siglip"), "encode", "backend: torch\n"),
        "owlv2": _entry(TINY_OWLV2, "owlv2", build_tiny_owlv2(root / "owlv2"), "extract"),
        "grounding-dino": _entry(
            TINY_GROUNDING_DINO, "grounding-dino", build_tiny_grounding_dino(root / "gd"), "extract"
        ),
    }
    entries["florence2"] = _entry(
        TINY_FLORENCE2, "florence2", build_tiny_florence2(root / "florence2"), "extract"
    ) + _options(florence2_options())
    entries["donut"] = _entry(TINY_DONUT, "donut", build_tiny_donut(root / "donut"), "extract") + _options(
        donut_options()
    )
    entries["lighton-ocr"] = _entry(
        TINY_LIGHTON_OCR, "lighton-ocr", build_tiny_lighton_ocr(root / "lighton-ocr"), "extract"
    ) + _options(lighton_ocr_options())
    entries["paddleocr-vl"] = _entry(
        TINY_PADDLEOCR_VL, "paddleocr-vl", build_tiny_paddleocr_vl(root / "paddleocr-vl"), "extract"
    ) + _options(paddleocr_vl_options())
    entries["glm-ocr"] = _entry(TINY_GLM_OCR, "glm-ocr", build_tiny_glm_ocr(root / "glm-ocr"), "extract") + _options(
        glm_ocr_options()
    )
    entries["mineru"] = _entry(TINY_MINERU, "mineru", build_tiny_mineru(root / "mineru"), "extract") + _options(
        mineru_options()
    )
    entries["qwen3-embedder"] = f"name: {EMBEDDER}\n" + embedder_entry(str(build_tiny_qwen3_embedder(root / "q3e")))
    entries["qwen3-reranker"] = f"name: {RERANKER}\n" + reranker_entry(str(build_tiny_qwen3_reranker(root / "q3r")))
    entries["mistral-embedder"] = f"name: {MISTRAL_EMBEDDER}\n" + mistral_embedder_entry(
        str(build_tiny_mistral_embedder(root / "mistral"))
    )
    entries["mxbai-reranker"] = f"name: {MXBAI_RERANKER}\n" + mxbai_reranker_entry(
        str(build_tiny_mxbai_reranker(root / "mxbai"))
    )
    entries["zerank"] = f"name: {ZERANK_RERANKER}\n" + zerank_entry(str(build_tiny_zerank(root / "zerank")))
    entries["bge-m3"] = f"name: {M3_MODEL}\n" + m3_entry(str(build_tiny_m3(root / "m3")))
    for model, build in ((TINY_COLPALI, build_tiny_colpali), (TINY_COLQWEN2, build_tiny_colqwen2)):
        slug = model.replace("/", "-")
        entries[slug] = _entry(model, "colpali", build(root / slug), "encode, score")
    colqwen2_5 = build_tiny_colqwen2_5(root / "colqwen2_5")
    entries["colqwen2_5"] = _entry(TINY_COLQWEN2_5, "colpali-engine", colqwen2_5, "encode, score") + _options(
        {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}
    )
    entries["colsmol"] = _entry(TINY_COLSMOL, "colpali-engine", build_tiny_colsmol(root / "colsmol"), "encode, score")
    entries["qwen3-vl-embedder"] = _entry(
        TINY_QWEN3_VL_EMBEDDER, "qwen3-vl-embedder", build_tiny_qwen3_vl_embedder(root / "q3vle"), "encode"
    )
    entries["qwen3-vl-reranker"] = _entry(
        TINY_QWEN3_VL_RERANKER, "qwen3-vl-reranker", build_tiny_qwen3_vl_reranker(root / "q3vlr"), "score"
    )
    entries["topk-embed"] = _entry(TINY_TOPK, "topk-embed", build_tiny_topk(root / "topk"), "encode, score")
    entries["sam3"] = _entry(TINY_SAM3, "sam3", build_tiny_sam3(root / "sam3"), "extract")
    nomic = build_tiny_nomic(root / "nomic")
    for name, normalize in ((TINY_NOMIC, True), (TINY_NOMIC_RAW, False)):
        entries[name.replace("/", "-")] = _entry(name, "sentence-embedder", nomic, "encode", "backend: torch\n") + (
            _options({"query_prefix": "search_query: ", "document_prefix": "search_document: ", "normalize": normalize})
        )
    for name, text in entries.items():
        (catalog / f"{name}.yaml").write_text(text)
    return catalog


def _model_args(catalog: Path, models: tuple[str, ...]) -> list[str]:
    default, *others = models
    return ["--catalog", str(catalog), "--model", default, *(arg for name in others for arg in ("--preload", name))]


@pytest.fixture(scope="package")
def direct(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``sift serve`` with every model of the catalog loaded."""
    root = tmp_path_factory.mktemp("compat-serve")
    models = CLUSTER_MODELS + EXTRACTORS + SPARSE_MODELS
    # Some thirty models load one after another: minutes on a loaded two-core machine.
    proc = start_server([*_model_args(catalog, models), "--api-key", KEY], root / "serve.log", ready_timeout=600)
    yield proc
    proc.stop()


@pytest.fixture(scope="package")
def gateway(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A gateway (with the API key) and one worker serving ``CLUSTER_MODELS``."""
    root = tmp_path_factory.mktemp("compat-cluster")
    args = _model_args(catalog, CLUSTER_MODELS)
    # The gateway loads no model: the catalog and the default model only (it refuses --preload).
    cluster = start_cluster(root, 0, [], ["--catalog", str(catalog), "--model", CLUSTER_MODELS[0], "--api-key", KEY])
    try:
        add_worker(cluster, "w-compat", [*args, "--no-calibrate", "--torch-threads", "1"])
        for model in CLUSTER_MODELS:
            wait_workers(cluster, model, {"w-compat"}, headers={"Authorization": f"Bearer {KEY}"})
        yield cluster
    finally:
        cluster.stop()
