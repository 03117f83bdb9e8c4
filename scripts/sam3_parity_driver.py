"""Runs inside the reference environment (Python 3.12, torch + torchvision, transformers
5.16.1, the released sie-server 0.10.1 source on ``sys.path``): reads the SAM 3 cases
from a JSON file, answers them with sie-server's own ``Sam3Adapter`` on the CPU (its
``DetectionPreprocessor`` first, as the server does), and prints the answers as JSON.
Called by scripts/record_sam3_parity.py; not imported by Sift.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _pixels_summary(pixels: Any) -> dict[str, Any]:
    """A few of the processed image's values (the full tensor would bloat the fixture)."""
    flat = pixels.reshape(-1)
    step = max(1, flat.numel() // 48)
    return {
        "shape": list(pixels.shape),
        "sum": float(pixels.double().sum()),
        "abs_sum": float(pixels.double().abs().sum()),
        "samples": [[index, float(flat[index])] for index in range(0, flat.numel(), step)],
    }


def main() -> None:
    import base64

    from sie_server.adapters.sam3 import adapter as sam3
    from sie_server.types.inputs import Item

    # The boxes and scores each (image, label) pair kept, before the wire's integer
    # boxes: recorded so that Sift's unrounded boxes can be compared to 1e-3 px.
    kept: list[dict[str, Any]] = []
    to_objects = sam3._to_objects

    def recording(result: dict[str, Any], label: str, size: tuple[int, int]) -> Any:
        kept.append(
            {
                "label": label,
                "size": list(size),
                "scores": result["scores"].tolist(),
                "boxes": result["boxes"].tolist(),
            }
        )
        return to_objects(result, label, size)

    sam3._to_objects = recording
    Sam3Adapter = sam3.Sam3Adapter

    with open(sys.argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    adapter = Sam3Adapter(spec["folder"], compute_precision="float32", **spec.get("loadtime", {}))
    adapter.load("cpu")
    preprocessor = adapter.get_preprocessor()
    images = {name: (base64.b64decode(data), fmt) for name, (data, fmt) in spec["images"].items()}
    out: dict[str, Any] = {"pixels": {}, "cases": {}}
    for name, (data, fmt) in images.items():
        prepared = preprocessor.prepare([Item(images=[{"data": data, "format": fmt}])], config=None)
        payload = prepared.items[0].payload
        out["pixels"][name] = _pixels_summary(payload.pixel_values) | {"original_size": list(payload.original_size)}
    for case in spec["cases"]:
        items = [Item(images=[{"data": images[name][0], "format": images[name][1]}]) for name in case["images"]]
        prepared = preprocessor.prepare(items, config=None)
        kept.clear()
        try:
            result = adapter.extract(
                items, labels=case["labels"], options=case["options"], prepared_items=prepared.items
            )
        except ValueError as error:
            out["cases"][case["name"]] = {"error": str(error)}
            continue
        out["cases"][case["name"]] = {
            "objects": [[dict(obj) for obj in objects] for objects in result.objects],
            "kept": list(kept),
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
