"""The plain rules of SAM 3 detection as the reference server applies them
(sie-server 0.10.1's ``sam3`` adapter), free of torch: the image processor's
settings Sift reproduces, the prompts built from labels, the threshold, and the
wire objects from the kept boxes (clipped to the image, then truncated).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sift_server.adapters._refusal import UnservableModel

# Catalog default: Sam3Processor.post_process_object_detection's default threshold.
SAM3_SCORE_THRESHOLD = 0.3
# The model types whose folders ``Sam3Model`` reads (a ``sam3_video`` config holds the detector's).
SAM3_MODEL_TYPES = ("sam3", "sam3_video")
# What ``Sam3ImageProcessor`` does when its saved config does not say otherwise.
_DEFAULTS: dict[str, Any] = {
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
    "do_center_crop": None,
    "do_pad": None,
    "resample": 2,
    "rescale_factor": 1 / 255,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "size": {"height": 1008, "width": 1008},
}
_PROCESSOR_TYPES = ("Sam3ImageProcessor", "Sam3ImageProcessorFast")
_BILINEAR = 2


@dataclass(frozen=True, slots=True)
class Sam3Pixels:
    """What ``Sam3ImageProcessor`` does to an image, read from the folder: resize to
    ``height`` × ``width`` (bilinear, antialiased), then ``(x · rescale − mean) / std``
    fused as the processor fuses it."""

    height: int
    width: int
    rescale_factor: float
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]


def read_pixels_config(folder: Path) -> Sam3Pixels:
    """The folder's image processor settings, or ``UnservableModel`` for any Sift
    does not reproduce exactly (another resampling, no resize or normalisation, padding)."""
    path = folder / "preprocessor_config.json"
    if not path.is_file():
        raise UnservableModel(f"sam3 cannot serve {folder}: it has no preprocessor_config.json")
    saved = json.loads(path.read_text(encoding="utf-8"))
    config = _DEFAULTS | saved
    kind = saved.get("image_processor_type")
    if kind is not None and kind not in _PROCESSOR_TYPES:
        raise UnservableModel(f"sam3 cannot serve {folder}: its image processor is {kind!r}, not Sam3ImageProcessor")
    for flag in ("do_resize", "do_rescale", "do_normalize"):
        if config[flag] is not True:
            raise UnservableModel(f"sam3 cannot serve {folder}: its image processor sets {flag} to {config[flag]!r}")
    for flag in ("do_center_crop", "do_pad"):
        if config[flag]:
            raise UnservableModel(f"sam3 cannot serve {folder}: its image processor sets {flag}")
    if config["resample"] != _BILINEAR:
        raise UnservableModel(
            f"sam3 cannot serve {folder}: its image processor resamples with {config['resample']!r}, not bilinear (2)"
        )
    size = config["size"]
    if not isinstance(size, Mapping) or set(size) != {"height", "width"}:
        raise UnservableModel(f"sam3 cannot serve {folder}: its image processor's size {size!r} is not height × width")
    height, width = size["height"], size["width"]
    if not all(isinstance(side, int) and not isinstance(side, bool) and side > 0 for side in (height, width)):
        raise UnservableModel(f"sam3 cannot serve {folder}: its image processor's size {size!r} is not two sides")
    return Sam3Pixels(
        height=height,
        width=width,
        rescale_factor=_number(folder, "rescale_factor", config["rescale_factor"]),
        image_mean=_triple(folder, "image_mean", config["image_mean"]),
        image_std=_triple(folder, "image_std", config["image_std"]),
    )


def _number(folder: Path, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise UnservableModel(f"sam3 cannot serve {folder}: its image processor's {name} is {value!r}")
    return float(value)


def _triple(folder: Path, name: str, value: Any) -> tuple[float, float, float]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value] * 3
    if not isinstance(value, list) or len(value) != 3:
        raise UnservableModel(f"sam3 cannot serve {folder}: its image processor's {name} is {value!r}")
    first, second, third = (_number(folder, name, part) if name == "image_std" else float(part) for part in value)
    return first, second, third


def label_prompts(labels: Sequence[str]) -> list[tuple[str, str]]:
    """``(label, prompt)`` per distinct label in request order: the prompt is the
    label stripped; the label goes back to the caller as sent."""
    prompts: dict[str, str] = {}
    for label in labels:
        prompts.setdefault(label, label.strip())
    return list(prompts.items())


def clipped_box(box: Sequence[float], width: int, height: int) -> tuple[float, float, float, float]:
    """A kept ``[x1, y1, x2, y2]`` in pixels, each coordinate clipped to the image."""
    x1, y1, x2, y2 = (float(value) for value in box)
    return (
        min(max(x1, 0.0), width),
        min(max(y1, 0.0), height),
        min(max(x2, 0.0), width),
        min(max(y2, 0.0), height),
    )


def sam3_object(label: str, score: float, box: Sequence[float], width: int, height: int) -> dict[str, Any]:
    """One entry of an item's ``objects``: the box clipped to the image, then the wire's
    ``[int(x1), int(y1), int(x2 − x1), int(y2 − y1)]`` (truncated toward zero)."""
    x1, y1, x2, y2 = clipped_box(box, width, height)
    return {"label": label, "score": float(score), "bbox": [int(x1), int(y1), int(x2 - x1), int(y2 - y1)]}


def by_score(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An image's objects, highest score first (ties keep label, then query, order)."""
    return sorted(objects, key=lambda found: found["score"], reverse=True)
