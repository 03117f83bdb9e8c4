"""Run by a Python that has the released ``sie-sdk`` (not by pytest): detection
cases through ``SIEClient.extract``, black-box, against one server URL.

``python detection_driver.py URL [API_KEY] < CASES_JSON``, the cases as
tests/fixtures/detection_cases.py makes them with each image base64-encoded
(``{"data", "format"}``), handed to the SDK as bytes, one item per image. Prints
one JSON object: per case, the items' ``objects`` and ``entities`` as the SDK returns them (or the
error it raised), and the raw answer's status and error code (a msgpack post).
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _items(case: dict[str, Any]) -> list[dict[str, Any]]:
    if "texts" in case:
        return [{"text": text} for text in case["texts"]]
    return [
        {"images": [{"data": base64.b64decode(image["data"]), "format": image["format"]}]} for image in case["images"]
    ]


def _raw(url: str, api_key: str | None, case: dict[str, Any]) -> dict[str, Any]:
    import httpx
    import msgpack

    params: dict[str, Any] = {"labels": case["labels"], "options": case["options"]}
    if case.get("instruction"):
        params["instruction"] = case["instruction"]
    body = msgpack.packb({"items": _items(case), "params": params}, use_bin_type=True)
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    response = httpx.post(f"{url}/v1/extract/{case['model']}", content=body, headers=headers, timeout=120)
    out: dict[str, Any] = {"status": response.status_code}
    if response.status_code != 200:
        try:
            error = response.json()
        except ValueError:
            error = msgpack.unpackb(response.content, raw=False)
        detail = error.get("detail", error) if isinstance(error, dict) else {}
        out["code"] = detail.get("code") if isinstance(detail, dict) else None
    return out


def main(url: str, cases: list[dict[str, Any]], api_key: str | None = None) -> dict[str, Any]:
    import sie_sdk
    from sie_sdk import SIEClient

    results: dict[str, Any] = {"sie_sdk_version": sie_sdk.get_sdk_version()}
    with SIEClient(url, api_key=api_key, timeout_s=120) as client:
        for case in cases:
            entry: dict[str, Any] = {"raw": _raw(url, api_key, case)}
            try:
                answers = client.extract(
                    case["model"],
                    _items(case),
                    labels=case["labels"] or None,
                    instruction=case.get("instruction"),
                    options=case["options"] or None,
                )
                entry["objects"] = [_plain(answer.get("objects")) for answer in answers]
                entry["entities"] = [_plain(answer.get("entities")) for answer in answers]
            except Exception as exc:  # the case may expect it
                entry["error"] = f"{type(exc).__name__}: {exc}"
            results[case["name"]] = entry
    return results


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.load(sys.stdin), sys.argv[2] if len(sys.argv) > 2 else None)))
