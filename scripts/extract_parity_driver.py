"""Run by the reference venv's Python (not by pytest): the released ``sie-sdk``
sends each case of a spec to one server and prints the answers as JSON.

``python extract_parity_driver.py URL SPEC_JSON [API_KEY]`` where the spec is
``{"cases": [{"model", "texts", "labels", "output_schema", "options"}]}``;
prints ``[{"items": [...]} | {"error": "..."}]``, one per case.
"""

from __future__ import annotations

import json
import sys
from typing import Any

_FIELDS = ("entities", "relations", "classifications", "objects", "data")


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "__dict__"):
        return _plain(vars(value))
    return value


def main(url: str, spec: dict[str, Any], api_key: str | None = None) -> list[dict[str, Any]]:
    from sie_sdk import SIEClient

    answers: list[dict[str, Any]] = []
    with SIEClient(url, api_key=api_key, timeout_s=120) as client:
        for case in spec["cases"]:
            try:
                results = client.extract(
                    case["model"],
                    [{"text": text} for text in case["texts"]],
                    labels=case.get("labels"),
                    output_schema=case.get("output_schema"),
                    options=case.get("options"),
                )
                items = [{key: _plain(result.get(key)) for key in _FIELDS} for result in results]
                answers.append({"items": items})
            except Exception as exc:  # recorded, the test decides
                answers.append({"error": f"{type(exc).__name__}: {exc}"})
    return answers


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)))
