"""Run by the compatibility venv's Python 3.12 (not by pytest): the released ``sie-sdk``
sends each ColPali-family parity case (tests/adapters/parity/colpali_cases.py) to one
server and prints the answers as JSON.

``python colpali_parity_driver.py URL SPEC_JSON [API_KEY] < IMAGES_JSON`` where the spec is
``{"models", "embed": [case...], "score": [case...]}`` and stdin the parity images as
base64 PNGs; prints ``{model: {"embed": {name: [multivector] | {"error"}}, "score":
{name: [score by item] | {"error"}}}}``.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any


def _items(items: list[dict[str, Any]], images: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for item in items:
        entry: dict[str, Any] = {"text": item["text"]} if "text" in item else {}
        if "images" in item:
            entry["images"] = [{"data": images[i], "format": "png"} for i in item["images"]]
        out.append(entry)
    return out


def main(url: str, spec: dict[str, Any], images: list[bytes], api_key: str | None = None) -> dict[str, Any]:
    from sie_sdk import SIEClient

    out: dict[str, Any] = {}
    with SIEClient(url, api_key=api_key, timeout_s=120) as client:
        for model in spec["models"]:
            answers: dict[str, Any] = {"embed": {}, "score": {}}
            for case in spec["embed"]:
                try:
                    results = client.encode(
                        model,
                        _items(case["items"], images),
                        output_types=["multivector"],
                        is_query=case["is_query"],
                        options=case.get("options") or None,
                    )
                    answers["embed"][case["name"]] = [result["multivector"].tolist() for result in results]
                except Exception as exc:  # recorded, the test decides
                    answers["embed"][case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
            for case in spec["score"]:
                try:
                    candidates = [{"id": str(i), **item} for i, item in enumerate(_items(case["items"], images))]
                    result = client.score(model, {"text": case["query"]}, candidates)
                    by_item = sorted(result["scores"], key=lambda entry: int(entry["item_id"]))
                    answers["score"][case["name"]] = [float(entry["score"]) for entry in by_item]
                except Exception as exc:
                    answers["score"][case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
            out[model] = answers
    return out


if __name__ == "__main__":
    pictures = [base64.b64decode(data) for data in json.load(sys.stdin)]
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]), pictures, sys.argv[3] if len(sys.argv) > 3 else None)))
