"""Closed-loop load with raw HTTP/1.1 keep-alive connections: a client cheap enough (about 0.07
of a core at 2,000 requests/s) that the server, not the client, is measured. Pinned to CPU 1.
Usage: raw_closed_loop.py URL MODEL IN_FLIGHT SECONDS (one msgpack encode of one sentence per request)."""
import asyncio
import os
import sys
import time

import msgpack
import uvloop

os.sched_setaffinity(0, {1})
url, model, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
host, port = url.split("//")[1].split(":")
TEXTS = ["The quick brown fox jumps over the lazy dog number %d." % i for i in range(64)]
def req(i):
    body = msgpack.packb({"items": [{"text": TEXTS[i % 64]}]})
    return (f"POST /v1/encode/{model} HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\nAccept: application/msgpack\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
REQS = [req(i) for i in range(64)]
async def main():
    count = 0
    lat = []
    stop = time.perf_counter() + secs
    async def worker(k):
        nonlocal count
        r, w = await asyncio.open_connection(host, int(port))
        i = k
        while time.perf_counter() < stop:
            t = time.perf_counter()
            w.write(REQS[i % 64])
            head = await r.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            cl = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    cl = int(line.split(b":")[1])
            await r.readexactly(cl)
            lat.append(time.perf_counter() - t)
            count += 1; i += n
        w.close()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(n)))
    return count, time.perf_counter() - t0, sorted(lat)
cnt, el, lat = uvloop.run(main())
c = os.times()
print(f"in_flight={n} requests={cnt} req/s={cnt/el:.1f} secs={el:.2f} p50_ms={lat[len(lat)//2]*1000:.2f} client_cpu={(c.user+c.system)/el:.2f}")
