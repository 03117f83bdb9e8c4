"""Record what transformers' own OWLv2 and Grounding DINO processors, models and
post-processing answer on the tiny detection models, into
tests/fixtures/detection_parity.json (the parity tests compare Sift with it).

The reference server (sie-server 0.10.1) runs the same classes, but through the
torchvision image processors, and PyPI's torchvision does not import beside this
project's torch; so the answers are transformers' own, one image per call, with
the reference's steps around them written out here: OWLv2's queries
``a photo of <label>``, its pre-shrink of images beyond twice its square (PIL
Lanczos, reducing_gap 3), boxes scaled by the padded square; Grounding DINO's
prompt ``label. label.`` and its phrase-to-label mapping; the wire box
``[int(x1), int(y1), int(x2 - x1), int(y2 - y1)]``. Re-record after changing the
tiny models, the images or the cases:

    PYTHONPATH=server/src:. .venv/bin/python scripts/record_detection_parity.py
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "detection_parity.json"


def _owlv2(folder: Path, case: dict[str, Any], image: Any) -> list[dict[str, Any]]:
    import torch
    from PIL import Image
    from transformers import Owlv2ForObjectDetection, Owlv2Processor
    from transformers.models.owlv2.image_processing_pil_owlv2 import Owlv2ImageProcessorPil

    from sift_server.adapters._detection_rules import owl_queries, shrunk_size

    image_processor = Owlv2ImageProcessorPil.from_pretrained(folder)
    processor = Owlv2Processor.from_pretrained(folder, image_processor=image_processor)
    model = Owlv2ForObjectDetection.from_pretrained(folder).eval()
    width, height = image.size
    size = shrunk_size(width, height, 2 * int(image_processor.size["height"]))
    if size is not None:
        image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    options = case["options"]
    threshold = options.get("score_threshold", options.get("threshold", 0.1))
    inputs = processor(images=[image], text=[owl_queries(case["labels"])], return_tensors="pt")
    with torch.inference_mode():
        outputs = model(**inputs)
    side = max(width, height)
    found = image_processor.post_process_object_detection(
        outputs=outputs, target_sizes=torch.tensor([(side, side)]), threshold=threshold
    )[0]
    return [
        {"label": case["labels"][label], "score": score, "box": box}
        for box, score, label in zip(
            found["boxes"].tolist(), found["scores"].tolist(), found["labels"].tolist(), strict=True
        )
    ]


def _grounding_dino(folder: Path, case: dict[str, Any], image: Any) -> list[dict[str, Any]]:
    import torch
    from transformers import GroundingDinoForObjectDetection, GroundingDinoProcessor
    from transformers.models.grounding_dino.image_processing_pil_grounding_dino import (
        GroundingDinoImageProcessorPil,
    )

    from sift_server.adapters._detection_rules import canonical_label, grounding_prompt

    processor = GroundingDinoProcessor.from_pretrained(
        folder, image_processor=GroundingDinoImageProcessorPil.from_pretrained(folder)
    )
    model = GroundingDinoForObjectDetection.from_pretrained(folder).eval()
    options = case["options"]
    prompt = grounding_prompt(case["labels"], case["instruction"])
    inputs = processor(images=[image], text=[prompt], return_tensors="pt")
    with torch.inference_mode():
        outputs = model(**inputs)
    found = processor.post_process_grounded_object_detection(
        outputs,
        inputs["input_ids"],
        threshold=options.get("box_threshold", 0.25),
        text_threshold=options.get("text_threshold", 0.25),
        target_sizes=[(image.height, image.width)],
    )[0]
    return [
        {"label": canonical_label(phrase, case["labels"]), "score": score, "box": box}
        for box, score, phrase in zip(
            found["boxes"].tolist(), found["scores"].tolist(), found["text_labels"], strict=True
        )
    ]


def main() -> None:
    import transformers
    from PIL import Image

    from tests.fixtures.detection_cases import detection_cases, image_bytes
    from tests.fixtures.tiny_detection import (
        TINY_GROUNDING_DINO,
        TINY_OWLV2,
        build_tiny_grounding_dino,
        build_tiny_owlv2,
    )

    answers: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            TINY_OWLV2: build_tiny_owlv2(Path(tmp) / "owlv2"),
            TINY_GROUNDING_DINO: build_tiny_grounding_dino(Path(tmp) / "gd"),
        }
        for case in detection_cases():
            run = _owlv2 if case["model"] == TINY_OWLV2 else _grounding_dino
            items = []
            for name in case["images"]:
                image = Image.open(io.BytesIO(image_bytes(name)[0])).convert("RGB")
                items.append(run(folders[case["model"]], case, image))
            answers[case["name"]] = items
    payload = {"recorded_with": {"transformers": transformers.__version__}, "answers": answers}
    FIXTURE.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {FIXTURE}: {sum(len(objs) for items in answers.values() for objs in items)} objects")


if __name__ == "__main__":
    main()
