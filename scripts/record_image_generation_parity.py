"""Record what transformers' own classes answer on a tiny image-to-text model, one
image per call, into tests/fixtures/<family>_parity.json (the parity tests compare
Sift with it). One driver, one entry per family in FAMILIES: how to build and load
the tiny model, its cases and catalog defaults, and how the reference server's steps
answer one image.

- ``donut``: sie-server 0.10.1's ``donut`` adapter runs these same classes: the decoder
  prompt from ``options.task`` (the instruction as the question of ``<s_docvqa>``),
  ``generate`` with its settings (the decoder's positions as ``max_length``, the
  unknown token banned, ``num_beams``), the decoded text without end, padding and
  first task tokens, then ``token2json`` and its entities.
- ``florence2``: the reference runs Microsoft's repository code, which Sift does not
  (docs/models.md, "Florence-2 and Donut"); these are transformers' own classes with
  the reference's steps around them: the prompt from ``options.task`` (or an
  instruction, through ``<DocVQA>``), greedy or beam search, the decoded text with its
  special tokens, ``post_process_generation`` and the task's entities and objects.
- ``lighton_ocr``: the reference's ``transformers`` profile of LightOnOCR-2: the chat
  template over its system prompt, the image and the instruction, greedy ``generate``,
  the new tokens decoded without special tokens, one ``markdown`` entity.
- ``paddleocr_vl``: the reference's ``paddleocr_vl`` adapter runs the checkpoint's
  repository code, which Sift does not; these are transformers' native classes with
  its steps around them: one user turn with the image and the task's prompt (or the
  instruction), greedy ``generate``, the new tokens decoded without special tokens,
  one entity labelled ``markdown`` or by its task.
- ``glm_ocr``: the reference's ``transformers`` profile of GLM-OCR (its ``glm_ocr``
  adapter): one user turn with the PIL image and the user text (or the instruction)
  through the processor's ``apply_chat_template(tokenize=True)``, greedy (or beam)
  ``generate``, the new tokens decoded without special tokens, one ``markdown`` entity.
  The processor is the checkpoint's class built from its parts with no video processor
  (the stock loader needs torchvision), so both sides read the same pixel values.
- ``mineru``: the reference's ``mineru_vl`` adapter (MinerU2.5, a Qwen2-VL checkpoint):
  one user turn with the image and the task's prompt (its table, written out here) or
  the instruction, ``generate`` greedy (or beam) with ``repetition_penalty=1.0`` and
  transformers' ``no_repeat_ngram_size`` (the reference's 100; the tiny catalog's 2, so
  that the ban fires), the new tokens decoded without special tokens, one entity
  labelled ``mineru_`` and the task. The processor as GLM-OCR's: built from its parts.

The wire mapping of each family is sift_server's (adapters/_<family>_rules.py), shared
with the adapter. Re-record after changing a tiny model, the images or the cases:

    PYTHONPATH=server/src:. .venv/bin/python scripts/record_image_generation_parity.py FAMILY
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# One image answered: (the loaded model and processor, the case, the PIL image) -> the recorded item.
Answer = Callable[[Any, Any, Mapping[str, Any], Mapping[str, Any], Any], dict[str, Any]]


@dataclass(frozen=True)
class Family:
    build: Callable[[Path], Path]
    load: Callable[[Path], tuple[Any, Any]]
    cases: Callable[[], list[dict[str, Any]]]
    catalog_options: Callable[[], dict[str, Any]]
    answer: Answer


def _donut() -> Family:
    from tests.fixtures.tiny_donut import build_tiny_donut, catalog_options, donut_cases

    def load(folder: Path) -> tuple[Any, Any]:
        from transformers import DonutProcessor, VisionEncoderDecoderModel

        return VisionEncoderDecoderModel.from_pretrained(folder).eval(), DonutProcessor.from_pretrained(folder)

    def answer(model: Any, processor: Any, case: Mapping[str, Any], defaults: Mapping[str, Any], image: Any) -> Any:
        import torch

        from sift_server.adapters._donut_rules import clean_sequence, fallback_json, resolve_request, wire_entities

        request = resolve_request(
            case["options"],
            case["instruction"],
            default_task=defaults["task"],
            max_new_tokens=defaults["max_new_tokens"],
            num_beams=defaults["num_beams"],
        )
        tokenizer = processor.tokenizer
        pixels = processor(image, return_tensors="pt").pixel_values
        prompt = tokenizer(request.prompt, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.inference_mode():
            generated = model.generate(
                pixels,
                decoder_input_ids=prompt,
                max_length=model.decoder.config.max_position_embeddings,
                max_new_tokens=request.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                use_cache=True,
                bad_words_ids=[[tokenizer.unk_token_id]],
                return_dict_in_generate=True,
                num_beams=request.num_beams,
            )
        text = processor.batch_decode(generated.sequences)[0]
        sequence = clean_sequence(text, tokenizer.eos_token, tokenizer.pad_token)
        try:
            parsed = processor.token2json(sequence)
        except (ValueError, KeyError, AttributeError):
            parsed = fallback_json(sequence)
        return {"text": text, "parsed": parsed, "entities": wire_entities(parsed, request.task)}

    return Family(build_tiny_donut, load, donut_cases, catalog_options, answer)


def _florence2() -> Family:
    from tests.fixtures.tiny_florence2 import build_tiny_florence2, catalog_options, florence2_cases

    def load(folder: Path) -> tuple[Any, Any]:
        from transformers import Florence2ForConditionalGeneration, Florence2Processor

        return Florence2ForConditionalGeneration.from_pretrained(folder).eval(), Florence2Processor.from_pretrained(
            folder
        )

    def answer(model: Any, processor: Any, case: Mapping[str, Any], defaults: Mapping[str, Any], image: Any) -> Any:
        import torch

        from sift_server.adapters._florence2_rules import resolve_request, wire_answer

        request = resolve_request(
            case["options"],
            case["instruction"],
            default_task=defaults["task"],
            max_new_tokens=defaults["max_new_tokens"],
            num_beams=defaults["num_beams"],
        )
        inputs = processor(text=request.prompt, images=image, return_tensors="pt")
        with torch.inference_mode():
            generated = model.generate(
                **inputs, max_new_tokens=request.max_new_tokens, num_beams=request.num_beams, do_sample=False
            )
        text = processor.batch_decode(generated, skip_special_tokens=False)[0]
        parsed = processor.post_process_generation(text, task=request.task, image_size=image.size)
        entities, objects = wire_answer(parsed, request.task)
        return {"text": text, "parsed": parsed, "entities": entities, "objects": objects}

    return Family(build_tiny_florence2, load, florence2_cases, catalog_options, answer)


def _lighton_ocr() -> Family:
    from tests.fixtures.tiny_lighton_ocr import build_tiny_lighton_ocr, catalog_options, lighton_ocr_cases

    def load(folder: Path) -> tuple[Any, Any]:
        from transformers import LightOnOcrForConditionalGeneration, LightOnOcrProcessor

        return LightOnOcrForConditionalGeneration.from_pretrained(folder).eval(), LightOnOcrProcessor.from_pretrained(
            folder
        )

    def answer(model: Any, processor: Any, case: Mapping[str, Any], defaults: Mapping[str, Any], image: Any) -> Any:
        import torch

        from sift_server.adapters._ocr_vl_rules import (
            LIGHTON_SYSTEM_PROMPT,
            lighton_messages,
            lighton_request,
            wire_entities,
        )

        request = lighton_request(
            case["options"],
            case["instruction"],
            max_new_tokens=defaults["max_new_tokens"],
            num_beams=defaults["num_beams"],
        )
        messages = lighton_messages(LIGHTON_SYSTEM_PROMPT, request.text)
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=text, images=[image], return_tensors="pt")
        prompt_length = inputs["input_ids"].shape[1]
        with torch.inference_mode():
            generated = model.generate(
                **inputs, max_new_tokens=request.max_new_tokens, do_sample=False, num_beams=request.num_beams
            )
        decoded = processor.decode(generated[0, prompt_length:], skip_special_tokens=True)
        return {"text": decoded, "entities": wire_entities(decoded, request.label)}

    return Family(build_tiny_lighton_ocr, load, lighton_ocr_cases, catalog_options, answer)


def _paddleocr_vl() -> Family:
    from tests.fixtures.tiny_paddleocr_vl import build_tiny_paddleocr_vl, catalog_options, paddleocr_vl_cases

    def load(folder: Path) -> tuple[Any, Any]:
        from transformers import AutoTokenizer, PaddleOCRVLForConditionalGeneration, PaddleOCRVLProcessor
        from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import (
            PaddleOCRVLImageProcessorPil,
        )

        # Built from its parts: AutoImageProcessor (from_pretrained's path) asks for torchvision.
        tokenizer = AutoTokenizer.from_pretrained(folder)
        processor = PaddleOCRVLProcessor(
            image_processor=PaddleOCRVLImageProcessorPil.from_pretrained(folder),
            tokenizer=tokenizer,
            chat_template=tokenizer.chat_template,
        )
        return PaddleOCRVLForConditionalGeneration.from_pretrained(folder).eval(), processor

    def answer(model: Any, processor: Any, case: Mapping[str, Any], defaults: Mapping[str, Any], image: Any) -> Any:
        import torch

        from sift_server.adapters._ocr_vl_rules import paddle_messages, paddle_request, wire_entities

        request = paddle_request(
            case["options"],
            case["instruction"],
            default_task=defaults["task"],
            max_new_tokens=defaults["max_new_tokens"],
            num_beams=defaults["num_beams"],
        )
        text = processor.apply_chat_template(paddle_messages(request.text), add_generation_prompt=True, tokenize=False)
        inputs = processor(text=text, images=[image], return_tensors="pt")
        prompt_length = inputs["input_ids"].shape[1]
        with torch.inference_mode():
            generated = model.generate(
                **inputs,
                max_new_tokens=request.max_new_tokens,
                do_sample=False,
                num_beams=request.num_beams,
                use_cache=True,
            )
        decoded = processor.decode(generated[0, prompt_length:], skip_special_tokens=True)
        return {"text": decoded, "entities": wire_entities(decoded, request.label)}

    return Family(build_tiny_paddleocr_vl, load, paddleocr_vl_cases, catalog_options, answer)


def _glm_ocr() -> Family:
    from tests.fixtures.tiny_glm_ocr import build_tiny_glm_ocr, catalog_options, glm_ocr_cases

    def load(folder: Path) -> tuple[Any, Any]:
        from transformers import Glm46VProcessor, GlmOcrForConditionalGeneration
        from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil

        from sift_server.adapters._image_only_processor import load_image_only_processor

        processor = load_image_only_processor(folder, Glm46VProcessor, Glm46VImageProcessorPil, "glm-ocr")
        return GlmOcrForConditionalGeneration.from_pretrained(folder).eval(), processor

    def answer(model: Any, processor: Any, case: Mapping[str, Any], defaults: Mapping[str, Any], image: Any) -> Any:
        import torch

        from sift_server.adapters._ocr_vl_rules import GLM_USER_TEXT, wire_entities

        options = case["options"]
        text = case["instruction"] or GLM_USER_TEXT
        messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]
        inputs = processor.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        prompt_length = inputs["input_ids"].shape[1]
        with torch.inference_mode():
            generated = model.generate(
                **inputs,
                max_new_tokens=options.get("max_new_tokens", defaults["max_new_tokens"]),
                do_sample=False,
                num_beams=options.get("num_beams", defaults["num_beams"]),
            )
        decoded = processor.decode(generated[0, prompt_length:], skip_special_tokens=True)
        return {"text": decoded, "entities": wire_entities(decoded, "markdown")}

    return Family(build_tiny_glm_ocr, load, glm_ocr_cases, catalog_options, answer)


# The reference's MinerU prompts and labels (sie-server 0.10.1, adapters/mineru_vl), written
# out apart from sift_server's table so that the recording checks it.
_MINERU_PROMPTS = {
    "[default]": ("\nText Recognition:", "mineru_text"),
    "table": ("\nTable Recognition:", "mineru_table"),
    "equation": ("\nFormula Recognition:", "mineru_equation"),
    "image": ("\nImage Analysis:", "mineru_image"),
    "chart": ("\nImage Analysis:", "mineru_chart"),
    "[layout]": ("\nLayout Detection:", "mineru_layout"),
}


def _mineru() -> Family:
    from tests.fixtures.tiny_mineru import build_tiny_mineru, catalog_options, mineru_cases

    def load(folder: Path) -> tuple[Any, Any]:
        from transformers import Qwen2VLForConditionalGeneration, Qwen2VLProcessor
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        from sift_server.adapters._image_only_processor import load_image_only_processor

        processor = load_image_only_processor(folder, Qwen2VLProcessor, Qwen2VLImageProcessorPil, "mineru")
        return Qwen2VLForConditionalGeneration.from_pretrained(folder).eval(), processor

    def answer(model: Any, processor: Any, case: Mapping[str, Any], defaults: Mapping[str, Any], image: Any) -> Any:
        import torch

        from sift_server.adapters._ocr_vl_rules import wire_entities

        options = case["options"]
        prompt, label = _MINERU_PROMPTS[options.get("task", defaults["task"])]
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": case["instruction"] or prompt}]}
        ]
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=text, images=[image], return_tensors="pt")
        prompt_length = inputs["input_ids"].shape[1]
        with torch.inference_mode():
            generated = model.generate(
                **inputs,
                max_new_tokens=options.get("max_new_tokens", defaults["max_new_tokens"]),
                num_beams=options.get("num_beams", defaults["num_beams"]),
                use_cache=True,
                do_sample=False,
                repetition_penalty=1.0,
                no_repeat_ngram_size=defaults["no_repeat_ngram_size"],
            )
        decoded = processor.decode(generated[0, prompt_length:], skip_special_tokens=True)
        return {"text": decoded, "entities": wire_entities(decoded, label)}

    return Family(build_tiny_mineru, load, mineru_cases, catalog_options, answer)


FAMILIES: dict[str, Callable[[], Family]] = {
    "donut": _donut,
    "florence2": _florence2,
    "glm_ocr": _glm_ocr,
    "lighton_ocr": _lighton_ocr,
    "mineru": _mineru,
    "paddleocr_vl": _paddleocr_vl,
}


def record(name: str) -> Path:
    import transformers
    from PIL import Image

    from tests.fixtures.tiny_detection import detection_images

    family = FAMILIES[name]()
    defaults = family.catalog_options()
    answers: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model, processor = family.load(family.build(Path(tmp) / name))
        for case in family.cases():
            items = []
            for image_name in case["images"]:
                image = Image.open(io.BytesIO(detection_images()[image_name][0])).convert("RGB")
                items.append(family.answer(model, processor, case, defaults, image))
            answers[case["name"]] = items
    fixture = ROOT / "tests" / "fixtures" / f"{name}_parity.json"
    payload = {"recorded_with": {"transformers": transformers.__version__}, "answers": answers}
    fixture.write_text(json.dumps(payload, indent=1) + "\n")
    return fixture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(FAMILIES))
    print(f"wrote {record(parser.parse_args().family)}")


if __name__ == "__main__":
    main()
