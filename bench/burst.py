#!/usr/bin/env python3
"""N clients at once on one URL: opens N HTTP/1.1 connections first, then sends
one GET on each at the same moment and times every answer from that moment.
Prints one JSON line: requests, statuses, failed (no complete answer),
median_ms, p90_ms, max_ms. Standard library only."""
import argparse
import asyncio
import json
import statistics
import time
from urllib.parse import urlsplit


async def one(host, port, path, go, timeout):
    reader, writer = await asyncio.open_connection(host, port)
    await go.wait()
    start = time.monotonic()
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = int(head.split(b" ", 2)[1])
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length is not None:
            await asyncio.wait_for(reader.readexactly(length), timeout)
        else:
            await asyncio.wait_for(reader.read(), timeout)
        return status, (time.monotonic() - start) * 1000.0
    except Exception:
        return None, (time.monotonic() - start) * 1000.0
    finally:
        writer.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    u = urlsplit(args.url)
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    go = asyncio.Event()
    tasks = [asyncio.create_task(one(u.hostname, u.port or 80, path, go, args.timeout)) for _ in range(args.n)]
    # Let every connection open before the requests leave together.
    await asyncio.sleep(0.5)
    go.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    times, statuses, failed = [], {}, 0
    for r in results:
        if isinstance(r, BaseException) or r[0] is None:
            failed += 1
            continue
        statuses[str(r[0])] = statuses.get(str(r[0]), 0) + 1
        times.append(r[1])
    times.sort()
    pick = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 1) if times else None
    print(json.dumps({
        "requests": args.n,
        "statuses": statuses,
        "failed": failed,
        "median_ms": round(statistics.median(times), 1) if times else None,
        "p90_ms": pick(0.9),
        "max_ms": round(times[-1], 1) if times else None,
    }))


asyncio.run(main())
