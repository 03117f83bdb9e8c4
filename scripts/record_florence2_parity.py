"""Record what transformers' own Florence-2 processor, ``generate`` and
``post_process_generation`` answer on the tiny Florence-2, one image per call,
into tests/fixtures/florence2_parity.json (the parity tests compare Sift with it).

The reference server (sie-server 0.10.1) runs Microsoft's repository code for
Florence-2, which Sift does not run (docs/models.md, "Florence-2 and Donut"): these
answers are transformers' own classes, with the reference's steps around them: the
prompt from ``options.task`` (or an instruction, through ``<DocVQA>``), greedy or beam
search with its ``max_new_tokens``/``num_beams``, the decoded text with its special
tokens, and the task's answer as the wire's entities and objects
(sift_server.adapters._florence2_rules, shared with the adapter). Re-record after
changing the tiny model, the images or the cases:

    PYTHONPATH=server/src:. .venv/bin/python scripts/record_florence2_parity.py
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "florence2_parity.json"


def main() -> None:
    import torch
    import transformers
    from PIL import Image
    from transformers import Florence2ForConditionalGeneration, Florence2Processor

    from sift_server.adapters._florence2_rules import resolve_request, wire_answer
    from tests.fixtures.tiny_detection import detection_images
    from tests.fixtures.tiny_florence2 import build_tiny_florence2, catalog_options, florence2_cases

    defaults = catalog_options()
    answers: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_florence2(Path(tmp) / "florence2")
        processor = Florence2Processor.from_pretrained(folder)
        model = Florence2ForConditionalGeneration.from_pretrained(folder).eval()
        for case in florence2_cases():
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
                inputs = processor(text=request.prompt, images=image, return_tensors="pt")
                with torch.inference_mode():
                    generated = model.generate(
                        **inputs, max_new_tokens=request.max_new_tokens, num_beams=request.num_beams, do_sample=False
                    )
                text = processor.batch_decode(generated, skip_special_tokens=False)[0]
                parsed = processor.post_process_generation(text, task=request.task, image_size=image.size)
                entities, objects = wire_answer(parsed, request.task)
                items.append({"text": text, "parsed": parsed, "entities": entities, "objects": objects})
            answers[case["name"]] = items
    payload = {"recorded_with": {"transformers": transformers.__version__}, "answers": answers}
    FIXTURE.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
