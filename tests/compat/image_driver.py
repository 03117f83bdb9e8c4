"""Run by a Python that has the released ``sie-sdk`` (not by pytest): image encode
cases through ``SIEClient.encode``, black-box, against one server URL (Sift, or
the reference server when ``scripts/record_image_parity.py`` records).

``python image_driver.py URL [API_KEY] < CASES_JSON`` prints one JSON object: per
case, the SDK's dense vectors (or the error it raised), and the raw answer's status,
error code and ``usage`` (the SDK drops ``usage``; a raw msgpack post keeps it). With
an API key, the SDK and the raw post both send it.
Images arrive base64-encoded in the cases and are handed to the SDK as bytes.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any


def _items(case: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    for item in case["items"]:
        out: dict[str, Any] = {}
        if "text" in item:
            out["text"] = item["text"]
        if "images" in item:
            out["images"] = [
                {"data": base64.b64decode(image["data"]), "format": image["format"]} for image in item["images"]
            ]
        items.append(out)
    return items


def _raw(url: str, api_key: str | None, model: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    import httpx
    import msgpack

    body = msgpack.packb({"items": items, "params": {"output_types": ["dense"]}}, use_bin_type=True)
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    response = httpx.post(f"{url}/v1/encode/{model}", content=body, headers=headers, timeout=60)
    out: dict[str, Any] = {"status": response.status_code}
    if response.status_code == 200:
        out["usage"] = msgpack.unpackb(response.content, raw=False).get("usage")
    else:
        error = response.json()
        detail = error.get("detail", error) if isinstance(error, dict) else {}
        out["code"] = detail.get("code") if isinstance(detail, dict) else None
    return out


def main(url: str, cases: list[dict[str, Any]], api_key: str | None = None) -> dict[str, Any]:
    import sie_sdk
    from sie_sdk import SIEClient

    results: dict[str, Any] = {"sie_sdk_version": sie_sdk.get_sdk_version()}
    with SIEClient(url, api_key=api_key, timeout_s=60) as client:
        for case in cases:
            items = _items(case)
            entry: dict[str, Any] = {"raw": _raw(url, api_key, case["model"], items)}
            try:
                answers = client.encode(case["model"], items, output_types=["dense"])
                entry["dense"] = [answer["dense"].tolist() for answer in answers]
            except Exception as exc:  # the case may expect it
                entry["error"] = f"{type(exc).__name__}: {exc}"
            results[case["name"]] = entry
    return results


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.load(sys.stdin), sys.argv[2] if len(sys.argv) > 2 else None)))
