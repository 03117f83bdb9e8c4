"""Run by the released sie-sdk's interpreter (.venv/sie-compat): extract with document items
as a user writes them (a path, whose suffix the SDK turns into the hint; bytes with an explicit
format), print what the SDK returns as JSON. Arguments: the server's URL, then the paths."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sie_sdk import RequestError, SIEClient


def main() -> None:
    url, paths = sys.argv[1], [Path(arg) for arg in sys.argv[2:]]
    client = SIEClient(url, timeout_s=300)
    out: dict[str, object] = {}
    results = client.extract("docling", [{"id": path.name, "document": str(path)} for path in paths])
    out["by_path"] = [{"id": r.get("id"), "data": r.get("data"), "error": r.get("error")} for r in results]
    one = client.extract("docling", {"document": {"data": paths[0].read_bytes(), "format": "docx"}})
    out["by_bytes"] = {"data": one.get("data"), "error": one.get("error")}
    try:
        client.extract("docling", {"document": {"data": paths[0].read_bytes(), "format": "pdf"}})
        out["contradiction"] = None
    except RequestError as exc:
        out["contradiction"] = {"type": type(exc).__name__, "message": str(exc)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
