"""One tiny generation model (tests/fixtures/tiny_generator.py), exported to OpenVINO
once per session, and one ``sift serve`` that serves it for the route tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_generator import TINY_GENERATOR, build_tiny_generator, catalog_entry, export_openvino

pytest.importorskip("openvino_genai")


@dataclass(frozen=True)
class Generator:
    hf: Path
    ov: Path


@pytest.fixture(scope="package")
def generator(tmp_path_factory: pytest.TempPathFactory) -> Generator:
    root = tmp_path_factory.mktemp("generator")
    hf = build_tiny_generator(root / "hf")
    return Generator(hf, export_openvino(hf, root / "ov"))


@pytest.fixture(scope="package")
def server(generator: Generator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("generation-serve")
    catalog = root / "catalog"
    catalog.mkdir()
    (catalog / "generator.yaml").write_text(
        catalog_entry(TINY_GENERATOR, generator.ov, "options:\n  max_new_tokens_cap: 64\n")
    )
    proc = start_server(["--catalog", str(catalog), "--preload", TINY_GENERATOR], root / "server.log")
    yield proc
    proc.stop()


class Reference:
    """transformers' own greedy ``generate`` at fp32: the answers the routes must equal."""

    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def ids_of(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def greedy(self, prompt_ids: list[int], max_new_tokens: int) -> tuple[str, list[int]]:
        import torch

        inputs = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = self.model.generate(
                inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new_tokens, do_sample=False
            )
        ids = out[0, len(prompt_ids) :].tolist()
        return str(self.tokenizer.decode(ids, skip_special_tokens=True)), ids


@pytest.fixture(scope="package")
def reference(generator: Generator) -> Reference:
    return Reference(generator.hf)
