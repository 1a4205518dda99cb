#!/usr/bin/env python3
"""Origin fetches per object per lifetime, for bench/fleet-many (issue 30).

Reads the origin's fetch log (catalog-origin's GET /__origin/log: one line per
fetch, `unix_ms path variant bytes`) and the purges the bench made
(`unix_ms prefix` per line; none for products without a purge), and prints
one JSON object.

An object is a (path, variant) pair: a Vary'd URL has one object per
Accept-Language value. Its fetches, in time order, are grouped greedily into
lifetimes: a fetch opens a new lifetime when it is the object's first, or
comes at least (1 - margin) x TTL after the fetch that opened the current
lifetime (the TTL window; the margin lets a refresh a little ahead of expiry,
as calmcache's XFetch/SUS does, open the next lifetime rather than count as a
duplicate), or comes after a purge whose prefix covers the path and which
was made after that opening fetch (a purge starts a new lifetime). Every
other fetch is a duplicate: a second node (or a second request) fetching
what the fleet already fetched in this lifetime.

fetches_per_lifetime = fetches / lifetimes (1.00 = every object fetched once
per lifetime by the whole fleet; N nodes that never share approach N).
Printed for all objects, for the small ones and for the large ones
(bytes >= 1 MiB).

--explain adds "duplicates": the duplicate fetches (small and large) by
what came between them and their lifetime's opening fetch, first match:
  purge_between  a purge of another prefix (a fleet's prefix purge makes
                 every copy Redis held from before it unusable: the
                 purged_before epoch)
  within_1s      less than 1 s after the opening fetch (a race for the
                 lease, or a node that did not ask: breaker open)
  near_restart   within 3 s after --restart-ms (a node restarted)
  later          none of these (a copy evicted from Redis, a piece
                 missing: pieces.bad in /status; a lease wait cut short)
"""

import argparse
import json
import sys
from collections import defaultdict

LARGE = 1 << 20


def load_fetches(path):
    fetches = defaultdict(list)
    with open(path) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) != 4:
                continue
            ms, p, variant, size = int(parts[0]), parts[1], parts[2], int(parts[3])
            fetches[(p, variant)].append((ms, size))
    return fetches


def load_purges(path):
    purges = []
    if path:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    purges.append((int(parts[0]), parts[1]))
    return sorted(purges)


def count(fetches, purges, ttl_ms, margin):
    """Per class (all/small/large): [fetches, lifetimes, objects, bytes]."""
    out = {k: [0, 0, 0, 0] for k in ("all", "small", "large")}
    window = ttl_ms * (1.0 - margin)
    for (path, _variant), items in fetches.items():
        items.sort()
        mine = [t for t, prefix in purges if path.startswith(prefix)]
        opened = None
        lifetimes = 0
        for t, _size in items:
            purged = opened is not None and any(opened < p <= t for p in mine)
            if opened is None or t - opened >= window or purged:
                opened = t
                lifetimes += 1
        size = items[-1][1]
        for k in ("all", "large" if size >= LARGE else "small"):
            c = out[k]
            c[0] += len(items)
            c[1] += lifetimes
            c[2] += 1
            c[3] += sum(s for _, s in items)
    return out


def explain(fetches, purges, ttl_ms, margin, restart_ms):
    """Duplicate fetches by cause (see the module doc), per size class."""
    out = {k: {} for k in ("small", "large")}
    window = ttl_ms * (1.0 - margin)
    every = [t for t, _ in purges]
    for (path, _variant), items in fetches.items():
        items.sort()
        mine = [t for t, prefix in purges if path.startswith(prefix)]
        opened = None
        for t, size in items:
            purged = opened is not None and any(opened < p <= t for p in mine)
            if opened is None or t - opened >= window or purged:
                opened = t
                continue
            if any(opened < p <= t for p in every):
                why = "purge_between"
            elif t - opened < 1000:
                why = "within_1s"
            elif restart_ms is not None and 0 <= t - restart_ms < 3000:
                why = "near_restart"
            else:
                why = "later"
            c = out["large" if size >= LARGE else "small"]
            c[why] = c.get(why, 0) + 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="the origin's fetch log")
    ap.add_argument("--purges", help="file of `unix_ms prefix` lines")
    ap.add_argument("--ttl", type=float, required=True, help="TTL, seconds")
    ap.add_argument("--margin", type=float, default=0.25, help="share of the TTL a refresh may come early (default 0.25)")
    ap.add_argument("--explain", action="store_true", help="add the duplicate fetches by cause")
    ap.add_argument("--restart-ms", type=int, help="unix ms a node was restarted (for --explain)")
    a = ap.parse_args()
    fetches, purges = load_fetches(a.log), load_purges(a.purges)
    counts = count(fetches, purges, a.ttl * 1000, a.margin)
    res = {}
    for k, (n, life, objs, size) in counts.items():
        res[k] = {
            "fetches": n,
            "lifetimes": life,
            "objects": objs,
            "origin_mib": round(size / 1048576, 1),
            "fetches_per_lifetime": round(n / life, 3) if life else None,
        }
    if a.explain:
        res["duplicates"] = explain(fetches, purges, a.ttl * 1000, a.margin, a.restart_ms)
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
