#!/usr/bin/env python3
"""Hold N idle keep-alive HTTP/1.1 connections (Python 3 stdlib only).

    bench/idle_conns.py --port P --path /object --conns 10000 [--batch 500] [--hold 60]

Opens N connections to 127.0.0.1:P, BATCH at a time, sends one GET on each
and reads its whole answer (Content-Length), then keeps them all open and
idle. Prints `ready CONNECTED FAILED` on one line once every connection has
had its answer (or failed), then waits until SIGTERM or until HOLD seconds
pass (a bound), and closes them. bench/scaling reads the proxy's RSS
between `ready` and the close: RSS growth / CONNECTED is the cost of one idle
connection.
"""

import argparse
import asyncio
import signal
import sys


async def one(port, path, timeout):
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    if not head.startswith(b"HTTP/1.1 200"):
        writer.close()
        raise RuntimeError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await asyncio.wait_for(reader.readexactly(length), timeout)
    return writer


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", default="/object")
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--hold", type=float, default=60.0, help="seconds to hold at most")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per connection")
    a = ap.parse_args()
    writers, failed, first_error = [], 0, None
    for start in range(0, a.conns, a.batch):
        n = min(a.batch, a.conns - start)
        done = await asyncio.gather(*(one(a.port, a.path, a.timeout) for _ in range(n)), return_exceptions=True)
        for w in done:
            if isinstance(w, BaseException):
                failed += 1
                first_error = first_error or repr(w)
            else:
                writers.append(w)
    if first_error:
        print(f"first error: {first_error}", file=sys.stderr)
    print(f"ready {len(writers)} {failed}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), a.hold)
    except asyncio.TimeoutError:
        pass
    for w in writers:
        w.close()


if __name__ == "__main__":
    asyncio.run(main())
