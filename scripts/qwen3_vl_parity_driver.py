"""Run by the compatibility venv's Python 3.12 (not by pytest): the released ``sie-sdk``
sends each Qwen3-VL parity case (tests/adapters/parity/qwen3_vl_cases.py) to one server and
prints the answers as JSON.

``python qwen3_vl_parity_driver.py URL SPEC_JSON [API_KEY] < IMAGES_JSON`` where the spec is
``{"embedder", "reranker", "encode": [case...], "score": [case...]}`` and stdin the parity
images as base64 PNGs; prints ``{"encode": {name: [vector] | {"error"}}, "score": {name:
[score by item] | {"error"}}}``.
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

    out: dict[str, Any] = {"encode": {}, "score": {}}
    with SIEClient(url, api_key=api_key, timeout_s=120) as client:
        for case in spec["encode"]:
            try:
                results = client.encode(
                    spec["embedder"],
                    _items(case["items"], images),
                    output_types=["dense"],
                    instruction=case.get("instruction"),
                )
                out["encode"][case["name"]] = [result["dense"].tolist() for result in results]
            except Exception as exc:  # recorded, the test decides
                out["encode"][case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
        for case in spec["score"]:
            try:
                candidates = [{"id": str(i), **item} for i, item in enumerate(_items(case["items"], images))]
                options = {"max_seq_length": case["max_seq_length"]} if "max_seq_length" in case else None
                result = client.score(
                    spec["reranker"],
                    {"text": case["query"]},
                    candidates,
                    instruction=case.get("instruction"),
                    options=options,
                )
                by_item = sorted(result["scores"], key=lambda entry: int(entry["item_id"]))
                out["score"][case["name"]] = [float(entry["score"]) for entry in by_item]
            except Exception as exc:
                out["score"][case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


if __name__ == "__main__":
    pictures = [base64.b64decode(data) for data in json.load(sys.stdin)]
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]), pictures, sys.argv[3] if len(sys.argv) > 3 else None)))
