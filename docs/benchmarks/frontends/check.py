"""Bit-equal answers of two servers, then a burst of 16 one-text requests on 16 connections
opened beforehand (SO_REUSEPORT spreads them over the front-ends), read back from the
engine's forward trace.

    python check.py URL_SINGLE URL_SPLIT MODEL TRACE_OF_SPLIT"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx

url_a, url_b, model, trace = sys.argv[1:5]
rng = random.Random(1)
WORDS = ["alpha", "beta", "gamma", "delta", "search", "rank", "passage", "meaning", "query", "document"]
bodies = [
    {"items": [{"text": " ".join(rng.choices(WORDS, k=rng.randint(1, 30)))} for _ in range(rng.randint(1, 4))]}
    for _ in range(40)
]


def vectors(url: str) -> list[list[Any]]:
    with httpx.Client() as client:
        answers = [
            client.post(f"{url}/v1/encode/{model}", json=body, headers={"accept": "application/json"}).json()
            for body in bodies
        ]
    return [[item["dense"]["values"] for item in answer["items"]] for answer in answers]


def trace_lines() -> list[str]:
    return Path(trace).read_text().splitlines()


async def burst(n: int) -> None:
    clients = [httpx.AsyncClient() for _ in range(n)]  # one connection each, opened first
    for client in clients:
        await client.get(f"{url_b}/readyz")
    await asyncio.sleep(0.5)
    await asyncio.gather(
        *(
            client.post(f"{url_b}/v1/encode/{model}", json={"items": bodies[i]["items"][:1]})
            for i, client in enumerate(clients)
        )
    )
    for client in clients:
        await client.aclose()


print("bit-equal vectors:", vectors(url_a) == vectors(url_b), "requests", len(bodies))
before = len(trace_lines())
asyncio.run(burst(16))
time.sleep(0.5)
records = [json.loads(line) for line in trace_lines()[before:]]
print(
    f"burst of 16 requests -> {len(records)} forwards; requests per forward:", [len(r["request_ids"]) for r in records]
)
