#!/usr/bin/env python3
"""SVG chart of one benchmark run, from its raw results (Python 3 stdlib only).

    bench/plot.py bench/results/hits-20261124-154719            # writes chart.svg there
    bench/plot.py DIR --out bench/charts/hits.svg [--name hits]
    bench/plot.py DIR --charts-dir bench/charts                  # + bench/charts/NAME.svg
    bench/plot.py --selftest                                     # fixtures in bench/plot_fixtures/

DIR is a results directory a bench script wrote (bench/results/NAME-DATE/).
NAME (from --name, else the directory name without -DATE) picks the spec
below: which file holds the per-run table (raw.tsv, grid-raw.tsv, ...),
which columns group the rows (object size, scenario, clients) and which
columns are plotted. Every panel is a set of horizontal bars, one per row
and group, of the median over the runs (the same medians the scripts
print), coloured by proxy (calmcache, NGINX, Varnish, other), its value
written next to it, and, per group, the ratio of calmcache's best row to
NGINX's best row. When DIR holds origin-timeline.tsv (bench/microcache,
bench/stampede: lib.sh's origin sampler, GET /__origin/stats every 0.5 s)
a line chart follows with the origin's requests over time for each row
(the first run of each row). bench/soak gets line charts of its RSS and
descriptor series instead; bench/scaling line charts with a log x axis
(req/s, p99, CPU per request against connections and objects held) and
bars of RSS per idle connection. The title carries the bench, the number of
runs, and the versions block of the run (versions.txt).

The output depends only on the input files: no clock, no randomness, a
fixed number format, so re-running it on the same results gives the same
bytes (bench/charts/*.svg are committed).
"""

import math
import os
import re
import statistics
import sys
from xml.sax.saxutils import escape

# ------------------------------------------------------------------ specs ----


def col(name):
    def get(r):
        return num(r.get(name))

    get.__name__ = name
    return get


def ratio(a, b, scale=1.0):
    def get(r):
        x, y = num(r.get(a)), num(r.get(b))
        if x is None or not y:
            return None
        return x / y * scale

    return get


def rss_per_object(r):
    before, after, n = num(r.get("rss_before_kb")), num(r.get("rss_after_kb")), num(r.get("objects"))
    if before is None or after is None or not n:
        return None
    return (after - before) * 1024.0 / n


def stored_mib_s(r):
    b, s = num(r.get("stored_bytes")), num(r.get("seconds"))
    if b is None or not s:
        return None
    return b / s / 1048576.0


# A panel: (title, unit, value function, True when higher is better).
RPS = ("throughput", "req/s", col("rps"), True)
P99 = ("p99 latency", "ms", col("p99_ms"), False)
ORIGIN = ("origin requests", "requests", col("origin_requests"), False)

SPECS = {
    "hits": dict(group=["size"], group_label="{size} B object", panels=[RPS, P99]),
    "microcache": dict(panels=[RPS, P99, ORIGIN]),
    "stampede": dict(
        group=["scenario"],
        panels=[
            ("clients that waited on the origin", "requests", col("waited"), False),
            ("origin fetches", "requests", col("fetches"), False),
            ("p99 latency", "ms", col("p99_ms"), False),
        ],
    ),
    "stampede-grid": dict(
        file="grid-raw.tsv",
        group=["ttl_s", "rate"],
        group_label="TTL {ttl_s} s, {rate} req/s",
        panels=[
            ("clients that waited on the origin", "requests", col("waited"), False),
            ("origin fetches per lifetime", "fetches", ratio("fetches", "lifetimes"), False),
        ],
    ),
    # one group per protocol (the ALPN each row negotiated): h2 against h2
    "h2": dict(group=["alpn"], group_label="{alpn}", panels=[RPS, P99, ("proxy CPU per request", "us", col("cpu_us_per_req"), False)]),
    "websocket": dict(
        group=["clients"],
        group_label="{clients} tunnels",
        panels=[
            ("round-trip p99", "ms", col("p99_ms"), False),
            ("RSS per tunnel", "B", col("rss_per_conn_b"), False),
            ("proxy CPU over the row", "s", col("cpu_s"), False),
        ],
    ),
    "cachefill": dict(panels=[("new content stored", "MiB/s", stored_mib_s, True), P99]),
    "diskhits": dict(panels=[RPS, P99]),
    # one group per trace; NGINX holds more than its max_size (its manager lags): see objects held
    "hitratio": dict(
        group=["trace"],
        group_label="{trace}",
        panels=[
            ("miss ratio", "%", col("miss_pct"), False),
            ("miss ratio without the scan's own requests", "%", col("zipf_miss_pct"), False),
            ("objects held at the end", "objects", col("objects_held"), True),
        ],
    ),
    "memory": dict(
        group=["size"],
        group_label="{size} B objects",
        panels=[
            ("RSS growth per object", "B", rss_per_object, False),
            ("accounted per object", "B", ratio("accounted_bytes", "objects"), False),
        ],
    ),
    "fleet": dict(panels=[RPS, P99, ("origin requests", "requests", col("origin"), False)]),
    # the first panel is the budget: calmcache/NGINX compares the rows best at it
    "overload": dict(
        panels=[
            ("origin peak concurrency", "requests", col("origin_peak"), False),
            ("hot set p99", "ms", col("hot_p99_ms"), False),
            ("hot set errors", "requests", col("hot_errors"), False),
            ("crawler pages served", "requests", col("crawl_ok"), True),
        ]
    ),
    "failstorm": dict(
        group=["scenario"],
        panels=[
            ("origin requests", "requests", col("origin"), False),
            ("slowest client", "ms", col("max_ms"), False),
        ],
    ),
    "artillery-ws": dict(
        panels=[
            ("echo p99", "ms", col("p99_ms"), False),
            ("proxy CPU", "s", col("cpu_s"), False),
        ]
    ),
    # one calmcache row per run: the two loads become two rows
    "purge": dict(
        melt=[
            ("calm-baseline", {"rps": "base_rps", "p99_ms": "base_p99_ms"}),
            ("calm-during-purges", {"rps": "purge_rps", "p99_ms": "purge_p99_ms"}),
        ],
        panels=[RPS, P99],
    ),
    "soak": dict(series=True),
    # curves against connections and objects held (log x), idle RSS as bars
    "scaling": dict(curves=True),
}

# ----------------------------------------------------------------- input ----


def num(v):
    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def read_tsv(path):
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    if not lines:
        return []
    head = lines[0].split("\t")
    return [dict(zip(head, line.split("\t"))) for line in lines[1:]]


def read_versions(d):
    """One line from versions.txt: calmcache, nginx, varnish, date, cpu."""
    path = os.path.join(d, "versions.txt")
    if not os.path.exists(path):
        return ""
    v = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^(\S+)\s+(.*)$", line.rstrip())
            if m and not line.startswith("#") and m.group(1) not in v:
                v[m.group(1)] = m.group(2)
    parts = []
    if "calmcache" in v:
        parts.append("calmcache " + re.sub(r"\s*\(.*\)$", "", v["calmcache"]))
    if "nginx" in v:
        parts.append(v["nginx"])
    if "varnishd" in v:
        m = re.search(r"varnish-[0-9.]+", v["varnishd"])
        parts.append(m.group(0) if m else v["varnishd"])
    for k in ("wrk", "kernel", "cpu", "date"):
        if k in v:
            parts.append(("" if k in ("cpu", "date") else k + " ") + v[k])
    return " · ".join(parts)


def proxy_of(row):
    r = row.lower()
    if r.startswith("calm") or r.startswith("fleet"):
        return "calmcache"
    if r.startswith("nginx") and "ceiling" not in r:
        return "NGINX"
    if r.startswith("varnish"):
        return "Varnish"
    return "other"


COLOURS = {
    "calmcache": ["#1f5fa8", "#5b93d6", "#0d3b73", "#8db8ea", "#3a78c2"],
    "NGINX": ["#2e8b3a", "#74bf7a", "#1b5e20", "#a5d6a7"],
    "Varnish": ["#c0392b", "#e57373"],
    "other": ["#7a7a7a", "#b0b0b0", "#555555"],
}


def colour_map(rows):
    seen = {}
    out = {}
    for row in rows:
        p = proxy_of(row)
        i = seen.get(p, 0)
        seen[p] = i + 1
        shades = COLOURS[p]
        out[row] = shades[i % len(shades)]
    return out


def fmt(x):
    if x is None:
        return "NA"
    a = abs(x)
    if x == int(x) and a < 1e15:
        return f"{int(x):,}"
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    if a == 0:
        return "0"
    return f"{x:.3f}"


def group_key(spec, r):
    return tuple(r.get(c, "") for c in spec.get("group", []))


def group_name(spec, key):
    cols = spec.get("group", [])
    if not cols:
        return ""
    label = spec.get("group_label")
    if label:
        return label.format(**dict(zip(cols, key)))
    return ", ".join(key)


def table(spec, records):
    """[(group key, [row...])], {(group, row): [median per panel]}, runs."""
    if "melt" in spec:
        melted = []
        for r in records:
            for name, cols in spec["melt"]:
                m = dict(r)
                m["row"] = name
                for k, c in cols.items():
                    m[k] = r.get(c)
                melted.append(m)
        records = melted
    groups, rows_of, values = [], {}, {}
    runs = set()
    for r in records:
        g = group_key(spec, r)
        row = r.get("row", "")
        runs.add(r.get("run", "1"))
        if g not in rows_of:
            groups.append(g)
            rows_of[g] = []
        if row not in rows_of[g]:
            rows_of[g].append(row)
        for i, panel in enumerate(spec["panels"]):
            v = panel[2](r)
            if v is not None:
                values.setdefault((g, row, i), []).append(v)
    med = {k: statistics.median(v) for k, v in values.items()}
    # the peers first, calmcache last (run 1's order within each proxy)
    order = {"other": 0, "NGINX": 1, "Varnish": 2, "calmcache": 3}
    return [(g, sorted(rows_of[g], key=lambda r: order[proxy_of(r)])) for g in groups], med, len(runs)


# ------------------------------------------------------------------- svg ----

FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'


class Svg:
    def __init__(self):
        self.parts = []

    def text(self, x, y, s, size=12, anchor="start", weight="normal", fill="#222"):
        w = ' font-weight="bold"' if weight == "bold" else ""
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{w} fill="{fill}">{escape(s)}</text>'
        )

    def rect(self, x, y, w, h, fill, title=None):
        t = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" fill="{fill}">{t}</rect>')

    def line(self, x1, y1, x2, y2, stroke="#999", width=1, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" stroke-width="{width}"{d}/>'
        )

    def polyline(self, pts, stroke, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        p = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        self.parts.append(f'<polyline points="{p}" fill="none" stroke="{stroke}" stroke-width="2"{d}/>')

    def render(self, width, height):
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" {FONT}>'
        )
        bg = f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>'
        return "\n".join([head, bg] + self.parts + ["</svg>"]) + "\n"


LABEL_W = 210
PANEL_W = 330
ROW_H = 18
GROUP_H = 22
MARGIN = 16


def header(svg, width, title, subtitle, y=24):
    svg.text(MARGIN, y, title, size=16, weight="bold")
    # the versions line can be long: split it over two lines at a separator
    lines = [subtitle]
    if len(subtitle) * 6.2 > width - 2 * MARGIN and " · " in subtitle:
        cut = subtitle.rfind(" · ", 0, int((width - 2 * MARGIN) / 6.2))
        if cut > 0:
            lines = [subtitle[:cut], subtitle[cut + 3 :]]
    for i, line in enumerate(lines):
        svg.text(MARGIN, y + 20 + 15 * i, line, size=11, fill="#555")
    return y + 20 + 15 * len(lines)


def legend(svg, x, y, proxies):
    for p in ("calmcache", "NGINX", "Varnish", "other"):
        if p not in proxies:
            continue
        svg.rect(x, y - 10, 12, 12, COLOURS[p][0])
        svg.text(x + 16, y, p, size=12)
        x += 30 + 7.5 * len(p)
    return y


def best(values, higher):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return max(vals) if higher else min(vals)


def bars(svg, spec, groups, med, top, colours):
    panels = spec["panels"]
    y0 = top
    for i, (title, unit, _, higher) in enumerate(panels):
        x = LABEL_W + i * PANEL_W
        svg.text(x, y0, f"{title}, {unit}", size=12, weight="bold")
        svg.text(x, y0 + 14, "higher is better" if higher else "lower is better", size=10, fill="#777")
    y = y0 + 26
    for g, rows in groups:
        name = group_name(spec, g)
        svg.line(MARGIN, y + 4, LABEL_W + len(panels) * PANEL_W - 10, y + 4, stroke="#ddd")
        if name:
            svg.text(MARGIN, y + 17, name, size=12, weight="bold")
        # as the scripts print them: calmcache's best row against NGINX's
        # best row, best by the first panel (req/s), in every panel
        pick = {}
        for p in ("calmcache", "NGINX"):
            cand = [(med[(g, r, 0)], r) for r in rows if proxy_of(r) == p and (g, r, 0) in med]
            if cand:
                v = best([c[0] for c in cand], panels[0][3])
                pick[p] = next(r for c, r in cand if c == v)
        for i in range(len(panels)):
            if len(pick) < 2:
                break
            calm, ngx = med.get((g, pick["calmcache"], i)), med.get((g, pick["NGINX"], i))
            if calm is not None and ngx is not None:
                r = f"{calm / ngx:.2f}x" if calm and ngx else f"{fmt(calm)} vs {fmt(ngx)}"
                svg.text(LABEL_W + i * PANEL_W, y + 17, f"calmcache/NGINX {r}", size=11, fill="#444")
        y += GROUP_H
        scale = {}
        for i in range(len(panels)):
            vals = [med.get((g, r, i)) for r in rows]
            scale[i] = max([v for v in vals if v is not None] + [0])
        for r in rows:
            svg.text(LABEL_W - 8, y + 13, r, size=12, anchor="end")
            for i, (title, unit, _, _) in enumerate(panels):
                v = med.get((g, r, i))
                x = LABEL_W + i * PANEL_W
                if v is None:
                    svg.text(x, y + 13, "NA", size=11, fill="#999")
                    continue
                w = (PANEL_W - 90) * (v / scale[i]) if scale[i] > 0 else 0
                svg.rect(x, y + 2, w, ROW_H - 4, colours[r], title=f"{r}: {fmt(v)} {unit}")
                svg.text(x + w + 4, y + 13, fmt(v), size=11)
            y += ROW_H
        y += 6
    return y


def nice_ticks(hi, n=5):
    if hi <= 0:
        return [0, 1]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks, t = [], 0.0
    while t < hi + step * 0.999:
        ticks.append(round(t, 10))
        t += step
    return ticks


def line_chart(svg, x0, y0, w, h, series, colours, title, xlabel, ylabel):
    """series: [(label, [(x, y)])]."""
    svg.text(x0, y0, title, size=12, weight="bold")
    top, left, bottom, right = y0 + 14, x0 + 56, y0 + h - 30, x0 + w - 10
    xs = [p[0] for _, pts in series for p in pts] or [0, 1]
    ys = [p[1] for _, pts in series for p in pts] or [0, 1]
    xt, yt = nice_ticks(max(xs)), nice_ticks(max(ys))
    xmax, ymax = xt[-1] or 1, yt[-1] or 1
    for t in yt:
        yy = bottom - (bottom - top) * t / ymax
        svg.line(left, yy, right, yy, stroke="#eee")
        svg.text(left - 4, yy + 4, fmt(t), size=10, anchor="end", fill="#555")
    for t in xt:
        xx = left + (right - left) * t / xmax
        svg.line(xx, bottom, xx, bottom + 4, stroke="#999")
        svg.text(xx, bottom + 15, fmt(t), size=10, anchor="middle", fill="#555")
    svg.line(left, bottom, right, bottom, stroke="#999")
    svg.line(left, top, left, bottom, stroke="#999")
    svg.text((left + right) / 2, bottom + 28, xlabel, size=10, anchor="middle", fill="#555")
    svg.parts.append(
        f'<text x="{x0 + 10:.1f}" y="{(top + bottom) / 2:.1f}" font-size="10" text-anchor="middle" fill="#555" '
        f'transform="rotate(-90 {x0 + 10:.1f} {(top + bottom) / 2:.1f})">{escape(ylabel)}</text>'
    )
    # legend: one line per series under the x axis, with its last value
    ly = bottom + 44
    for label, pts in series:
        dash = None if proxy_of(label) == "calmcache" else ("6,3" if proxy_of(label) == "NGINX" else "2,3")
        svg.polyline([(left + (right - left) * px / xmax, bottom - (bottom - top) * py / ymax) for px, py in pts], colours[label], dash)
        svg.line(left, ly - 4, left + 18, ly - 4, stroke=colours[label], width=2, dash=dash)
        last = f" (last: {fmt(pts[-1][1])} at {fmt(pts[-1][0])} s)" if pts else ""
        svg.text(left + 22, ly, label + last, size=10)
        ly += 14
    return ly


def timeline(path):
    """{group: {row: [(t_s, requests)]}} of the first run of each row."""
    out = {}
    first_run = {}
    for r in read_tsv(path):
        g, row, run = r.get("group", "-"), r.get("row", ""), r.get("run", "1")
        t, n = num(r.get("t_unix")), num(r.get("requests"))
        if t is None or n is None:
            continue
        key = (g, row)
        if key not in first_run:
            first_run[key] = run
        if first_run[key] != run:
            continue
        out.setdefault(g, {}).setdefault(row, []).append((t, n))
    for g in out:
        for row, pts in out[g].items():
            t0 = pts[0][0]
            out[g][row] = [(t - t0, n) for t, n in pts]
    return out


# ------------------------------------------------------------------ main ----


def bench_name(d):
    base = os.path.basename(os.path.normpath(d))
    return re.sub(r"-\d{8}-\d{6}$", "", base)


def chart_soak(d, svg, y, width):
    series = {}
    for f in sorted(os.listdir(d)):
        m = re.match(r"^series-(.+)\.tsv$", f)
        if m:
            series[m.group(1)] = read_tsv(os.path.join(d, f))
    if not series:
        raise SystemExit(f"{d}: no series-*.tsv")
    names = sorted(series, key=lambda p: (proxy_of(p) != "calmcache", p))
    colours = colour_map(names)
    rss = [(p, [(num(r["t_s"]), num(r["rss_kb"]) / 1024.0) for r in series[p]]) for p in names]
    fds = [(p, [(num(r["t_s"]), num(r["fds"])) for r in series[p]]) for p in names]
    legend(svg, MARGIN, y, {proxy_of(p) for p in names})
    y += 20
    half = (width - 3 * MARGIN) / 2
    a = line_chart(svg, MARGIN, y, half, 260, rss, colours, "proxy RSS, MiB", "seconds into the run", "MiB")
    b = line_chart(svg, 2 * MARGIN + half, y, half, 260, fds, colours, "open descriptors", "seconds into the run", "descriptors")
    return max(a, b) + 10


# The curves of bench/scaling: (curve, x label), and its panels (title, unit,
# raw.tsv column, True when higher is better).
SCALING_CURVES = [("conns", "open connections (log)"), ("objects", "objects held, Zipf s = 1.0 (log)")]
SCALING_PANELS = [
    ("throughput", "req/s", "rps", True),
    ("p99 latency", "ms", "p99_ms", False),
    ("proxy CPU per request", "us", "cpu_us_per_req", False),
]


def scaling_medians(records, curve, column):
    """{row: [(x, median over runs)]}, x ascending."""
    vals = {}
    for r in records:
        x, v = num(r.get("x")), num(r.get(column))
        if r.get("curve") == curve and x and v is not None:
            vals.setdefault(r.get("row", ""), {}).setdefault(x, []).append(v)
    return {row: sorted((x, statistics.median(v)) for x, v in xs.items()) for row, xs in vals.items()}


def log_chart(svg, x0, y0, w, h, series, colours, title, xlabel):
    """series: [(label, [(x, y)])], x > 0 on a log axis, y from 0."""
    svg.text(x0, y0, title, size=12, weight="bold")
    top, left, bottom, right = y0 + 14, x0 + 56, y0 + h - 30, x0 + w - 10
    xs = [p[0] for _, pts in series for p in pts] or [1, 10]
    ys = [p[1] for _, pts in series for p in pts] or [0, 1]
    lo, hi = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    hi = max(hi, lo + 1)
    yt = nice_ticks(max(ys))
    ymax = yt[-1] or 1

    def px(x):
        return left + (right - left) * (math.log10(x) - lo) / (hi - lo)

    def py(y):
        return bottom - (bottom - top) * y / ymax

    for t in yt:
        svg.line(left, py(t), right, py(t), stroke="#eee")
        svg.text(left - 4, py(t) + 4, fmt(t), size=10, anchor="end", fill="#555")
    for e in range(lo, hi + 1):
        svg.line(px(10**e), bottom, px(10**e), bottom + 4, stroke="#999")
        svg.text(px(10**e), bottom + 15, fmt(10**e), size=10, anchor="middle", fill="#555")
    svg.line(left, bottom, right, bottom, stroke="#999")
    svg.line(left, top, left, bottom, stroke="#999")
    svg.text((left + right) / 2, bottom + 28, xlabel, size=10, anchor="middle", fill="#555")
    for label, pts in series:
        dash = None if proxy_of(label) == "calmcache" else ("6,3" if proxy_of(label) == "NGINX" else "2,3")
        svg.polyline([(px(x), py(y)) for x, y in pts], colours[label], dash)
        for x, y in pts:
            svg.rect(px(x) - 2, py(y) - 2, 4, 4, colours[label], title=f"{label}: {fmt(y)} at {fmt(x)}")
    return bottom + 36


def chart_scaling(d, svg, y, width):
    records = read_tsv(os.path.join(d, "raw.tsv"))
    rows = []
    for r in records:
        if r.get("row") not in rows:
            rows.append(r["row"])
    colours = colour_map(rows)
    legend(svg, MARGIN, y, {proxy_of(r) for r in rows})
    # one line per row under the legend: its dash
    lx = MARGIN
    for r in rows:
        dash = None if proxy_of(r) == "calmcache" else ("6,3" if proxy_of(r) == "NGINX" else "2,3")
        svg.line(lx, y + 16, lx + 18, y + 16, stroke=colours[r], width=2, dash=dash)
        svg.text(lx + 22, y + 20, r, size=11)
        lx += 40 + 7 * len(r)
    y += 40
    pw = (width - 2 * MARGIN) / len(SCALING_PANELS)
    for curve, xlabel in SCALING_CURVES:
        if not any(r.get("curve") == curve for r in records):
            continue
        bottom = y
        for i, (title, unit, column, higher) in enumerate(SCALING_PANELS):
            med = scaling_medians(records, curve, column)
            series = [(r, med[r]) for r in rows if med.get(r)]
            better = "higher" if higher else "lower"
            b = log_chart(svg, MARGIN + i * pw, y, pw - 8, 220, series, colours, f"{title}, {unit} ({better} is better)", xlabel)
            bottom = max(bottom, b)
        y = bottom + 10
    idle = scaling_medians(records, "idle", "rss_per_conn_b")
    if idle:
        svg.text(MARGIN, y, "RSS per idle keep-alive connection, B (lower is better)", size=12, weight="bold")
        y += 10
        top = max(v for pts in idle.values() for _, v in pts) or 1
        for r in [r for r in rows if r in idle]:
            x, v = idle[r][-1]
            svg.text(LABEL_W - 8, y + 13, f"{r} ({fmt(x)} conns)", size=12, anchor="end")
            w = (PANEL_W * 1.5) * v / top
            svg.rect(LABEL_W, y + 2, w, ROW_H - 4, colours[r], title=f"{r}: {fmt(v)} B")
            svg.text(LABEL_W + w + 4, y + 13, fmt(v), size=11)
            y += ROW_H
    return y + 10


def spec_name(d, name=None):
    """The spec for DIR: --name, else the directory's; stampede's sus-grid
    profile writes grid-raw.tsv only."""
    name = name or bench_name(d)
    if name == "stampede" and os.path.exists(os.path.join(d, "grid-raw.tsv")) and not os.path.exists(os.path.join(d, "raw.tsv")):
        name = "stampede-grid"
    return name


def chart(d, name=None):
    name = spec_name(d, name)
    spec = SPECS.get(name)
    if spec is None:
        raise SystemExit(f"plot.py: no chart spec for bench '{name}' (known: {', '.join(sorted(SPECS))})")
    svg = Svg()
    versions = read_versions(d)
    if spec.get("series"):
        width = 2 * LABEL_W + 2 * PANEL_W
        y = header(svg, width, f"bench/{name}: memory and descriptors over the run", versions)
        y = chart_soak(d, svg, y + 16, width)
        return svg.render(int(width), int(y + MARGIN))
    if spec.get("curves"):
        width = 3 * PANEL_W + 2 * MARGIN
        runs = len({r.get("run") for r in read_tsv(os.path.join(d, "raw.tsv"))})
        y = header(svg, width, f"bench/{name}: cost against connections and objects held (median of {runs} run{'s' if runs != 1 else ''})", versions)
        y = chart_scaling(d, svg, y + 16, width)
        return svg.render(int(width), int(y + MARGIN))
    path = os.path.join(d, spec.get("file", "raw.tsv"))
    if not os.path.exists(path):
        raise SystemExit(f"plot.py: {path} missing")
    groups, med, runs = table(spec, read_tsv(path))
    if not groups:
        raise SystemExit(f"plot.py: {path} has no rows")
    width = LABEL_W + len(spec["panels"]) * PANEL_W + MARGIN
    what = f"median of {runs} run{'s' if runs != 1 else ''}"
    y = header(svg, width, f"bench/{name} ({what} per row)", versions)
    all_rows = []
    for _, rows in groups:
        all_rows += [r for r in rows if r not in all_rows]
    colours = colour_map(all_rows)
    proxies = {proxy_of(r) for r in all_rows}
    legend(svg, MARGIN, y + 16, proxies)
    if {"calmcache", "NGINX"} <= proxies:
        note = f"calmcache/NGINX: calmcache's best row / NGINX's best row, best by {spec['panels'][0][0]}"
        svg.text(MARGIN, y + 36, note, size=11, fill="#555")
    y = bars(svg, spec, groups, med, y + 62, colours)
    tl = os.path.join(d, "origin-timeline.tsv")
    if os.path.exists(tl):
        per_group = timeline(tl)
        # the order of the table's groups (one-column groups), else by name
        seen = [k[0] for k, _ in groups if len(k) == 1]
        for g in sorted(per_group, key=lambda k: (seen.index(k) if k in seen else len(seen), k)):
            rows = per_group[g]
            labels = [r for r in all_rows if r in rows] + sorted(r for r in rows if r not in all_rows)
            cmap = colour_map(labels)
            cmap.update({r: colours[r] for r in labels if r in colours})
            title = "origin requests since the run started (first run of each row)"
            if g not in ("-", ""):
                title += f": {g}"
            y = line_chart(svg, MARGIN, y + 16, width - 2 * MARGIN, 240, [(r, rows[r]) for r in labels], cmap, title, "seconds", "requests")
    return svg.render(int(width), int(y + MARGIN))


def selftest():
    import tempfile
    import xml.dom.minidom

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot_fixtures")
    fixtures = sorted(os.listdir(here))
    assert fixtures, "no fixtures"
    with tempfile.TemporaryDirectory() as tmp:
        for f in fixtures:
            d = os.path.join(here, f)
            a = chart(d)
            b = chart(d)
            assert a == b, f"{f}: output differs between two calls"
            out = os.path.join(tmp, f + ".svg")
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(a)
            doc = xml.dom.minidom.parse(out)
            texts = "".join(n.firstChild.data for n in doc.getElementsByTagName("text") if n.firstChild)
            assert "calmcache" in texts and "bench/" in texts, f"{f}: no legend or title"
            assert re.search(r"\d{4}-\d\d-\d\dT", texts), f"{f}: no date of the run"
            lines = len(doc.getElementsByTagName("polyline"))
            if os.path.exists(os.path.join(d, "origin-timeline.tsv")) or spec_name(d) in ("soak", "scaling"):
                assert lines > 0, f"{f}: no line chart"
            print(f"ok   {f}: {len(a)} bytes, {len(doc.getElementsByTagName('rect'))} rects, {lines} lines")
    # the median and ratio arithmetic
    spec = SPECS["hits"]
    recs = [
        {"size": "1024", "run": str(k), "row": row, "rps": str(v), "p99_ms": "1"}
        for k, (row, v) in enumerate([("calm", 3), ("calm", 1), ("calm", 2), ("nginx", 4), ("nginx", "NA")])
    ]
    groups, med, runs = table(spec, recs)
    assert groups == [(("1024",), ["nginx", "calm"])], groups
    assert med[(("1024",), "calm", 0)] == 2 and med[(("1024",), "nginx", 0)] == 4, med
    assert fmt(86052.94) == "86,053" and fmt(2.934) == "2.93" and fmt(0.2091) == "0.209"
    print("ok   medians, formats")


def main(argv):
    if argv[1:] == ["--selftest"]:
        selftest()
        return 0
    args, out, name, charts, quiet = [], None, None, None, False
    it = iter(argv[1:])
    for a in it:
        if a == "--out":
            out = next(it)
        elif a == "--name":
            name = next(it) or None
        elif a == "--charts-dir":
            charts = next(it)
        elif a == "--quiet-unknown":
            quiet = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            args.append(a)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = args[0]
    name = spec_name(d, name)
    if quiet and name not in SPECS:
        print(f"chart: bench/{name} has no chart")
        return 0
    svg = chart(d, name)
    outs = [out or os.path.join(d, "chart.svg")]
    if charts:
        os.makedirs(charts, exist_ok=True)
        outs.append(os.path.join(charts, name + ".svg"))
    for o in outs:
        tmp = o + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(svg)
        os.replace(tmp, o)
        print(f"chart: {o}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
