"""Prototype, not the feature: N `sift serve` front-end processes (HTTP, decode, validate,
tokenize, answer) on one SO_REUSEPORT port hand each Prepared to one engine process that
runs the real ModelEngine (batch formation untouched) over multiprocessing connections
(pickled tuples: ("b", arrival) when a request's headers arrive at a front-end, ("e",) when
it leaves ingress, ("s", ...) the Prepared; back: outputs or the error, queue and inference
time). Measurement only: docs/benchmarks/frontends.md.

    python proto.py engine SOCK                  # SIFT_* settings as for sift serve
    python proto.py frontend SOCK                # one per front-end
    python proto.py run N                        # engine + N front-ends, until SIGTERM
Front-ends load their own copy of the adapter for prepare (a prepare-only load is what is
missing for the real feature)."""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.engine.ingress import IngressBoard
from sift_server.engine.model_engine import ModelEngine, RequestTiming, Ticket
from sift_server.forward_io import Prepared


async def engine_main(path: str) -> None:
    settings = Settings()
    state = build_state(settings)
    await state.registry.load_now(settings.default_model)
    _, engine = state.registry.ready_engine(settings.default_model)
    loop = asyncio.get_running_loop()
    listener = Listener(path, family="AF_UNIX")
    print("engine ready", flush=True)

    def serve(conn: Connection) -> None:
        def reply(key: int, ticket: Ticket, fut: asyncio.Future[list[Any]]) -> None:
            if fut.cancelled():
                return
            error = fut.exception()
            timing = ticket.timing
            body = (key, error, None if error else fut.result(), timing.queue_s, timing.inference_s)
            conn.send_bytes(pickle.dumps(body, protocol=5))

        def readable() -> None:
            while conn.poll(0):
                message = pickle.loads(conn.recv_bytes())
                if message[0] == "b":  # a request's headers arrived at a front-end
                    engine.scheduler.header_arrived(message[1])
                    continue
                if message[0] == "e":  # it left ingress (admitted below, or refused there)
                    engine.ingress._ended()
                    continue
                _, key, costs, compat, payload, tokens, lane, rid = message
                prepared = Prepared(costs, compat, payload, tokens, lane)
                try:
                    ticket = engine.submit(prepared, request_id=rid, lane=lane)
                except Exception as error:
                    conn.send_bytes(pickle.dumps((key, error, None, 0.0, 0.0)))
                    continue
                ticket.future.add_done_callback(lambda fut, k=key, t=ticket: reply(k, t, fut))

        loop.add_reader(conn.fileno(), readable)

    while True:
        conn = await loop.run_in_executor(None, listener.accept)
        serve(conn)


def frontend_main(path: str) -> None:
    from sift_server.api.app import create_app
    from sift_server.server import DrainingServer, uvicorn_config

    settings = Settings()
    state = build_state(settings)
    conn = Client(path, family="AF_UNIX")
    pending: dict[int, tuple[asyncio.Future[list[Any]], RequestTiming]] = {}
    ids = itertools.count()
    reading: list[bool] = []

    def readable() -> None:
        while conn.poll(0):
            key, error, outputs, queue_s, inference_s = pickle.loads(conn.recv_bytes())
            fut, timing = pending.pop(key)
            timing.queue_s, timing.inference_s = queue_s, inference_s
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(outputs)

    def remote_submit(prepared: Prepared, *, request_id: str, lane: str | None = None, ingress: Any = None) -> Ticket:
        loop = asyncio.get_running_loop()
        if not reading:
            loop.add_reader(conn.fileno(), readable)
            reading.append(True)
        now = time.monotonic()
        key = next(ids)
        fut: asyncio.Future[list[Any]] = loop.create_future()
        timing = RequestTiming()
        pending[key] = (fut, timing)
        body = (
            "s",
            key,
            prepared.item_costs,
            prepared.compat_key,
            prepared.payload,
            prepared.input_tokens,
            lane,
            request_id,
        )
        conn.send_bytes(pickle.dumps(body, protocol=5))
        if ingress is not None:
            ingress.end()  # after the submit, so the engine never sees a gap
        return Ticket(request_id, prepared, fut, now, now, [], timing)

    factory = state.registry._engine_factory

    class RemoteIngress:
        """The engine's ingress count, fed from this front-end's headers."""

        def header_arrived(self, now: float) -> None:
            conn.send_bytes(pickle.dumps(("b", now)))

        def ingress_ended(self) -> None:
            conn.send_bytes(pickle.dumps(("e",)))

    def remote_factory(*args: Any) -> ModelEngine:
        engine = factory(*args)
        engine.submit = remote_submit  # type: ignore[method-assign]
        if os.environ.get("PROTO_INGRESS", "1") == "1":
            engine.ingress = IngressBoard(RemoteIngress())
        return engine

    state.registry._engine_factory = remote_factory
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((settings.host, settings.port))
    sock.listen(2048)
    DrainingServer(uvicorn_config(create_app(state), settings), state).run(sockets=[sock])


def run(n: int) -> None:
    path = f"/tmp/sift-frontends-engine-{os.getpid()}.sock"
    engine = subprocess.Popen([sys.executable, __file__, "engine", path], stdout=subprocess.PIPE, text=True)
    assert engine.stdout is not None
    while "engine ready" not in engine.stdout.readline():
        pass
    fronts = [subprocess.Popen([sys.executable, __file__, "frontend", path]) for _ in range(n)]
    stop = asyncio.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.is_set() and all(p.poll() is None for p in [engine, *fronts]):
            time.sleep(0.2)
    finally:
        for p in fronts:
            p.terminate()
        for p in fronts:
            p.wait(10)
        engine.terminate()
        engine.wait(10)
        os.unlink(path)


if __name__ == "__main__":
    if sys.argv[1] == "engine":
        from sift_server.server import run_event_loop

        run_event_loop(engine_main(sys.argv[2]))
    elif sys.argv[1] == "frontend":
        frontend_main(sys.argv[2])
    else:
        run(int(sys.argv[2]))
