"""``sift bench floor``: the least a Python server on Sift's own stack can spend
per one-text encode request, to set Sift's cost per request against.

A bare ASGI app under the same uvicorn (httptools, uvloop) that reads the JSON body with
msgspec, tokenizes the texts with Sift's own adapter (``prepare``), queues them, runs
whatever is queued as one forward of Sift's own adapter in one executor thread as soon as the
previous forward ends (continuous batching, no policy, no limits, no validation, no error
envelopes, no metrics, no trace), and answers ``{"items": [{"dense": [...]}]}``. Everything it
leaves out is work the contract asks of Sift, so this is a floor, not a competitor: what is
left between it and Sift is the price of that work on this CPU (docs/benchmarks/request-cost.md).

    SIFT_BACKEND=onnx:fp32 taskset -c 0 sift bench floor --catalog DIR --model MODEL --port PORT

Any GET answers ``ok`` (readiness); any other request is one encode.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import msgspec

from sift_server.adapters.base import EncodeTask
from sift_server.forward_io import Part, Prepared

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]

HELP = "serve the floor: one adapter's encode behind a bare ASGI app, to set Sift's per-request cost against"


class Encoder(Protocol):
    """What the floor needs of an adapter."""

    def prepare(self, task: EncodeTask) -> Prepared: ...

    def forward(self, parts: Sequence[Part]) -> list[list[Any]]: ...


class _Item(msgspec.Struct):
    text: str


class _Body(msgspec.Struct):
    items: list[_Item]


class Batcher:
    """Continuous batching and nothing else: whatever is queued runs as one forward
    as soon as the previous one ends. Lives on one event loop."""

    def __init__(self, adapter: Encoder, executor: Executor) -> None:
        self._adapter = adapter
        self._executor = executor
        self._queued: list[tuple[Prepared, asyncio.Future[list[Any]]]] = []
        self._running = False
        self.forwards = 0  # forwards started, for tests and curiosity

    def submit(self, prepared: Prepared) -> asyncio.Future[list[Any]]:
        """The request's outputs, one per item, once its forward has run."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[Any]] = loop.create_future()
        self._queued.append((prepared, waiter))
        # Soon, not now: requests that arrive in the same loop turn share the forward.
        loop.call_soon(self._run_queued)
        return waiter

    def _run_queued(self) -> None:
        if self._running or not self._queued:
            return
        batch, self._queued = self._queued, []
        self._running = True
        self.forwards += 1
        parts = [Part(prepared, 0, len(prepared.item_costs)) for prepared, _ in batch]
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._adapter.forward, parts)

        def done(finished: asyncio.Future[list[list[Any]]]) -> None:
            self._running = False
            error = finished.exception()
            for index, (_, waiter) in enumerate(batch):
                if error is not None:
                    waiter.set_exception(error)
                else:
                    waiter.set_result(finished.result()[index])
            self._run_queued()

        future.add_done_callback(done)


def make_app(adapter: Encoder, batcher: Batcher) -> App:
    """The floor's ASGI app: ``adapter`` prepares each request, ``batcher`` runs its forwards."""
    decoder = msgspec.json.Decoder(_Body)
    encoder = msgspec.json.Encoder()

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] == "GET":  # readiness
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = decoder.decode(b"".join(chunks))
        prepared = adapter.prepare(EncodeTask([item.text for item in body.items]))
        vectors = await batcher.submit(prepared)
        content = encoder.encode({"items": [{"dense": vector.tolist()} for vector in vectors]})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    return app


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from sift_bench.run.ceiling import load_model

    adapter = load_model(args.model, list(args.catalog), torch_threads=1)
    with ThreadPoolExecutor(max_workers=1) as executor:
        app = make_app(adapter, Batcher(adapter, executor))
        uvicorn.run(app, host=args.host, port=args.port, http="httptools", loop="uvloop", log_level="warning",
                    access_log=False)  # fmt: skip
    return 0


def add_floor(commands: Any) -> None:
    """Add ``floor`` to ``sift bench``'s subcommands."""
    floor = commands.add_parser("floor", help=HELP, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    floor.add_argument("--catalog", type=Path, action="append", required=True, metavar="DIR",
                       help="a model catalog folder (repeatable)")  # fmt: skip
    floor.add_argument("--model", required=True, help="the catalog's model to encode with")
    floor.add_argument("--host", default="127.0.0.1")
    floor.add_argument("--port", type=int, default=8090)
    floor.set_defaults(handler=_serve)
