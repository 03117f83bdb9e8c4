"""Record what transformers' own Donut processor, ``generate`` and ``token2json``
answer on the tiny Donut, one image per call, into tests/fixtures/donut_parity.json
(the parity tests compare Sift with it).

The steps are the reference server's (sie-server 0.10.1's ``donut`` adapter, which
runs these same classes): the decoder prompt from ``options.task`` (with the
instruction as the question of ``<s_docvqa>``), ``generate`` with its settings (the
decoder's positions as ``max_length``, ``max_new_tokens``, the unknown token banned,
``num_beams``), the decoded text without end, padding and first task tokens, then
``token2json`` and its entities (sift_server.adapters._donut_rules, shared with the
adapter). Re-record after changing the tiny model, the images or the cases:

    PYTHONPATH=server/src:. .venv/bin/python scripts/record_donut_parity.py
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "donut_parity.json"


def main() -> None:
    import torch
    import transformers
    from PIL import Image
    from transformers import DonutProcessor, VisionEncoderDecoderModel

    from sift_server.adapters._donut_rules import clean_sequence, fallback_json, resolve_request, wire_entities
    from tests.fixtures.tiny_detection import detection_images
    from tests.fixtures.tiny_donut import build_tiny_donut, catalog_options, donut_cases

    defaults = catalog_options()
    answers: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_donut(Path(tmp) / "donut")
        processor = DonutProcessor.from_pretrained(folder)
        model = VisionEncoderDecoderModel.from_pretrained(folder).eval()
        tokenizer = processor.tokenizer
        for case in donut_cases():
            request = resolve_request(
                case["options"],
                case["instruction"],
                default_task=defaults["task"],
                max_new_tokens=defaults["max_new_tokens"],
                num_beams=defaults["num_beams"],
            )
            items = []
            for name in case["images"]:
                image = Image.open(io.BytesIO(detection_images()[name][0])).convert("RGB")
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
                items.append({"text": text, "parsed": parsed, "entities": wire_entities(parsed, request.task)})
            answers[case["name"]] = items
    payload = {"recorded_with": {"transformers": transformers.__version__}, "answers": answers}
    FIXTURE.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
