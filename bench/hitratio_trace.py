#!/usr/bin/env python3
"""Seeded request traces for bench/hitratio.

Writes DIR/<trace>/warm.txt and DIR/<trace>/measure.txt (one request path a
line) and DIR/traces.tsv (one line per trace: name, alpha, objects, requests,
warm-up requests, scan length, where the scan starts in the measured part).

A trace is `requests` draws from a Zipf(alpha) popularity over `objects`
objects (/o/<id>; rank -> id through a seeded permutation, so the hot set is
not the low ids), the first `warm` of them a warm-up whose misses are not
counted. A `-scan` trace is the same draws (same seed) with a one-time scan
inserted in the middle of the measured part: `scan` unique paths
(/scan/<trace>/<n>) requested once each, back to back, never again.
"""

import argparse
import os
import random


def zipf_cum_weights(objects, alpha):
    total = 0.0
    cum = []
    for rank in range(1, objects + 1):
        total += 1.0 / rank**alpha
        cum.append(total)
    return cum


def write_lines(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--objects", type=int, default=10000)
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--warm", type=int, default=25000)
    ap.add_argument("--scan", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--alphas", default="0.8,1.0")
    a = ap.parse_args()
    if not 0 < a.warm < a.requests:
        ap.error("--warm must be between 0 and --requests")
    os.makedirs(a.dir, exist_ok=True)
    rows = ["trace\talpha\tobjects\trequests\twarm\tscan\tscan_at"]
    for alpha in [float(x) for x in a.alphas.split(",")]:
        rng = random.Random(f"{a.seed}-{alpha}")
        ids = list(range(1, a.objects + 1))
        rng.shuffle(ids)
        ranks = rng.choices(range(a.objects), cum_weights=zipf_cum_weights(a.objects, alpha), k=a.requests)
        paths = [f"/o/{ids[r]}" for r in ranks]
        warm, measure = paths[: a.warm], paths[a.warm :]
        base = f"zipf{alpha:g}"
        for name, scan in ((base, 0), (f"{base}-scan", a.scan)):
            at = len(measure) // 2
            burst = [f"/scan/{name}/{n}" for n in range(scan)]
            measured = measure[:at] + burst + measure[at:]
            os.makedirs(os.path.join(a.dir, name), exist_ok=True)
            write_lines(os.path.join(a.dir, name, "warm.txt"), warm)
            write_lines(os.path.join(a.dir, name, "measure.txt"), measured)
            rows.append(f"{name}\t{alpha:g}\t{a.objects}\t{len(warm) + len(measured)}\t{len(warm)}\t{scan}\t{at if scan else 0}")
    write_lines(os.path.join(a.dir, "traces.tsv"), rows)


if __name__ == "__main__":
    main()
