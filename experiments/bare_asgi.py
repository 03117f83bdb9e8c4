"""A bare ASGI endpoint: what HTTP alone costs under the same server as Sift (issue 20).
Reads the JSON body and answers a fixed 384-float embedding in the native envelope.

    cd experiments && taskset -c 0 ../.venv/bin/python -m uvicorn bare_asgi:app --port 18790 \\
        --loop uvloop --http httptools --log-level warning --no-access-log
    .venv/bin/python experiments/request_cost.py http://127.0.0.1:18790 tiny/embedder json 32 5
"""

from __future__ import annotations

import json
from typing import Any

ANSWER = json.dumps({"items": [{"dense": {"dims": 384, "dtype": "float32", "values": [0.0123456] * 384}}]}).encode()
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    json.loads(body)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})
