"""Run by the released sie-sdk's interpreter (.venv/sie-compat): extract with document items
(the bytes and their format hint, as ``sie_sdk/documents.py`` sends them) from the ``docling``
model, once per profile named, and print what the SDK returns as JSON. Arguments: the server's
URL, then a JSON list of ``{"name", "path", "format", "profile"}`` cases (profile null for the
default). A request the server refuses is recorded as its error class, status and message."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from sie_sdk import RequestError, SIEClient


def main() -> None:
    url, cases = sys.argv[1], json.loads(sys.argv[2])
    client = SIEClient(url, timeout_s=600)
    out: dict[str, Any] = {}
    for case in cases:
        model = "docling" if case["profile"] is None else f"docling:{case['profile']}"
        item = {"document": {"data": Path(case["path"]).read_bytes(), "format": case["format"]}}
        try:
            result = client.extract(model, item)
        except RequestError as exc:
            status = getattr(exc, "status_code", None)
            out[case["name"]] = {"refused": {"type": type(exc).__name__, "status": status, "message": str(exc)}}
            continue
        out[case["name"]] = {"data": result.get("data"), "error": result.get("error")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
