"""Run by the compatibility venv's Python 3.12 (not by pytest): the released ``sie-sdk``
sends each decoder-family parity case (tests/adapters/parity/decoder_cases.py) to one
server and prints the answers as JSON.

``python decoder_parity_driver.py URL SPEC_JSON [API_KEY]`` where the spec is
``{"embedder", "reranker", "embed": [case...], "score": [case...]}``; prints
``{"embed": {name: vectors | {"error"}}, "score": {name: [score by item] | {"error"}}}``.
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
                    spec["embedder"],
                    [{"text": text} for text in case["texts"]],
                    instruction=case.get("instruction"),
                    is_query=case["is_query"],
                    options=case.get("options"),
                )
                out["embed"][case["name"]] = [result["dense"].tolist() for result in results]
            except Exception as exc:  # recorded, the test decides
                out["embed"][case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
        for case in spec["score"]:
            try:
                result = client.score(
                    spec["reranker"],
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
