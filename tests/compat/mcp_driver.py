"""Run by the compatibility venv's Python 3.12 (not by pytest): an MCP client (the ``mcp``
package's own, over streamable HTTP, as an agent connects to a self-hosted sie-mcp) calls
sie-mcp's tools that need no generation model: ``docs_to_markdown``, ``extract_entities``
and ``redact_pii``.

``python mcp_driver.py MCP_URL CONNECTOR_SECRET CALLS_JSON`` takes a JSON list of
``{"tool": name, "arguments": {...}}`` and prints one JSON list: per call, the tool's
structured answer (``{"ok": ...}``) or the error text it came back with (``{"error": ...}``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


def _answer(result: Any) -> dict[str, Any]:
    text = "\n".join(getattr(part, "text", "") for part in result.content)
    if result.isError:
        return {"error": text}
    if result.structuredContent is not None:
        return {"ok": result.structuredContent}
    return {"ok": json.loads(text)}


async def main(url: str, secret: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {secret}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        answers = []
        for call in calls:
            if call["tool"] not in tools:
                answers.append({"error": f"the server offers no tool {call['tool']!r}: {sorted(tools)}"})
                continue
            answers.append(_answer(await session.call_tool(call["tool"], call["arguments"])))
        return answers


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))))
