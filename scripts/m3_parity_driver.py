"""Run by the compatibility venv's Python 3.12 (not by pytest): the released ``sie-sdk``
sends each BGE-M3 parity case (tests/adapters/parity/m3_cases.py) to one server and
prints the answers as JSON.

``python m3_parity_driver.py URL SPEC_JSON [API_KEY]`` where the spec is
``{"model", "outputs", "embed": [case...], "score": [case...]}``; prints
``{"embed": {name: [{dense, sparse: {indices, values}, multivector}] | {"error"}},
"score": {name: [score by item] | {"error"}}}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(url: str, spec: dict[str, Any], api_key: str | None = None) -> dict[str, Any]:
    from sie_sdk import SIEClient

    out: dict[str, Any] = {"embed": {}, "score": {}}
    with SIEClient(url, api_key=api_key, timeout_s=120) as client:
        for case in spec["embed"]:
            try:
                results = client.encode(
                    spec["model"],
                    [{"text": text} for text in case["texts"]],
                    output_types=spec["outputs"],
                    instruction=case.get("instruction"),
                    is_query=case["is_query"],
                    options=case.get("options"),
                )
                out["embed"][case["name"]] = [
                    {
                        "dense": result["dense"].tolist(),
                        "sparse": {
                            "indices": result["sparse"]["indices"].tolist(),
                            "values": result["sparse"]["values"].tolist(),
                        },
                        "multivector": result["multivector"].tolist(),
                    }
                    for result in results
                ]
            except Exception as exc:  # recorded, the test decides
                out["embed"][case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
        for case in spec["score"]:
            try:
                result = client.score(
                    spec["model"],
                    {"text": case["query"]},
                    [{"id": str(i), "text": text} for i, text in enumerate(case["texts"])],
                    instruction=case.get("instruction"),
                    options=case.get("options"),
                )
                by_item = sorted(result["scores"], key=lambda entry: int(entry["item_id"]))
                out["score"][case["name"]] = [float(entry["score"]) for entry in by_item]
            except Exception as exc:
                out["score"][case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)))
