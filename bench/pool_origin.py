#!/usr/bin/env python3
"""An origin with a fixed worker pool, like PHP-FPM with pm.max_children = 4:
bench/overload's origin.

Every GET (except /__origin/*) waits for one of --workers workers, holds it for
--service-ms (a page that takes 100 ms to make), then answers a page in the
format of `calmcache origin` (so mixload's body checks pass). A request that
finds every worker busy queues, in arrival order, for as long as it takes: the
pool can never make more than --workers pages at once, and a proxy that sends
more only makes every page slower.

GET /__origin/stats answers one JSON line:
  requests       pages answered since the last reset
  in_flight      requests received and not yet answered (queued + in service)
  peak_in_flight the most requests received and not yet answered at once since
                 the last reset: the concurrency a proxy put on the origin
  peak_busy      the most workers busy at once (never above --workers)
  p50_ms/p99_ms/max_ms  time from a request's arrival to its answer (queue wait +
                 service), over the requests answered since the last reset
  by_segment     pages answered per first path segment ({"hot": 12, "miss": 2000}):
                 how many of the origin's pages went to which load
POST /__origin/reset zeroes the counters and peaks (the in-flight count stays).

HTTP/1.1 with keepalive, asyncio, no third-party modules; listens on 127.0.0.1.
"""

import argparse
import asyncio
import json
import time


class Pool:
    def __init__(self, workers, service_s):
        self.workers = workers
        self.service_s = service_s
        self.sem = asyncio.Semaphore(workers)
        self.in_flight = 0
        self.busy = 0
        self.reset()

    def reset(self):
        self.requests = 0
        self.peak_in_flight = self.in_flight
        self.peak_busy = self.busy
        self.latencies = []
        self.by_segment = {}

    async def serve(self, path):
        arrived = time.monotonic()
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            # asyncio.Semaphore wakes waiters in FIFO order.
            async with self.sem:
                self.busy += 1
                self.peak_busy = max(self.peak_busy, self.busy)
                try:
                    await asyncio.sleep(self.service_s)
                finally:
                    self.busy -= 1
        finally:
            self.in_flight -= 1
        self.requests += 1
        segment = path.lstrip("/").split("/", 1)[0]
        self.by_segment[segment] = self.by_segment.get(segment, 0) + 1
        self.latencies.append((time.monotonic() - arrived) * 1000.0)
        return page(path, self.requests)

    def stats(self):
        lat = sorted(self.latencies)

        def pct(p):
            if not lat:
                return 0.0
            rank = max(1, min(len(lat), -(-len(lat) * p // 100)))
            return round(lat[int(rank) - 1], 3)

        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "peak_busy": self.peak_busy,
            "workers": self.workers,
            "p50_ms": pct(50),
            "p99_ms": pct(99),
            "max_ms": round(lat[-1], 3) if lat else 0.0,
            "by_segment": self.by_segment,
        }


def page(path, n):
    safe = "".join(c for c in path if c.isalnum() or c in "/-_.")
    now = time.time()
    return (
        "<!doctype html>\n<html><head><title>calmcache origin</title></head><body>\n"
        f"<h1>A slow page: {safe}</h1>\n<p>Generated at {now:.3f} (unix time), "
        f"request #{n} to the origin.</p>\n</body></html>\n"
    )


def response(status, body, ctype):
    data = body.encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


async def read_request(reader):
    """(method, path) of the next request, or None at the end of the connection."""
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) < 2:
        return None
    length = 0
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip() or 0)
    if length:
        await reader.readexactly(length)
    return parts[0], parts[1]


async def handle(pool, reader, writer):
    try:
        while True:
            req = await read_request(reader)
            if req is None:
                break
            method, target = req
            path = target.split("?", 1)[0]
            if path == "/__origin/stats":
                out = response("200 OK", json.dumps(pool.stats()) + "\n", "application/json")
            elif path == "/__origin/reset" and method == "POST":
                pool.reset()
                out = response("200 OK", "reset\n", "text/plain")
            else:
                body = await pool.serve(path)
                out = response("200 OK", body, "text/html; charset=utf-8")
            writer.write(out)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--service-ms", type=float, default=100.0)
    args = ap.parse_args()
    pool = Pool(args.workers, args.service_ms / 1000.0)
    server = await asyncio.start_server(
        lambda r, w: handle(pool, r, w), "127.0.0.1", args.port, backlog=4096
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
