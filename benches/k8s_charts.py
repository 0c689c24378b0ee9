#!/usr/bin/env python3
"""Charts of benches/k8s_load.sh's results: one SVG per profile, with the standard library only.

create-list and watch-churn: write throughput, write p99 latency and (watch-churn) watch-event
lag p99 against the number of clients (log scale), one line per backend. A point drawn hollow
is a run with faults (failed requests, incomplete lists, watch events missing, unexpected,
duplicated or out of order); a run that gave no figures at all is named under the chart.
Several runs of the same backend and concurrency are drawn as their median.
density: the datastore's RSS at the end of the window and its CPU over it, one bar per backend
(the last run of each), and kube-apiserver's beside them; where the datastore's figure sums
processes that share memory (PostgreSQL), its PSS is drawn inside the RSS bar.

Usage: benches/k8s_charts.py [--out DIR] RESULTS.jsonl...   (default DIR: /tmp/k8s_load-charts)
Prints the path of every chart it writes.
"""

import argparse
import json
import math
import os
import statistics
import sys
from xml.sax.saxutils import escape

# One colour per backend, the same in every chart (then a fallback cycle).
COLOURS = {
    "mem_etcd": "#1f77b4",
    "etcd": "#d62728",
    "mem_etcd3": "#17becf",
    "etcd3": "#ff7f0e",
    "kine": "#2ca02c",
    "kine_pg": "#9467bd",
}
FALLBACK = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#393b79", "#637939"]
ORDER = list(COLOURS)


def colour(label, seen):
    if label in COLOURS:
        return COLOURS[label]
    if label not in seen:
        seen[label] = FALLBACK[len(seen) % len(FALLBACK)]
    return seen[label]


def backend_key(label):
    return (ORDER.index(label) if label in ORDER else len(ORDER), label)


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: {e}")
    return rows


def fmt(v):
    """A tick label: 1,500 / 20 / 2.5 / 0.25."""
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 10 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2g}"


def linear_ticks(hi):
    """0 .. a round number at or above hi, in 4-6 steps of 1, 2 or 5 x 10^k."""
    if hi <= 0:
        return [0, 1]
    raw = hi / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    top = step * math.ceil(hi / step - 1e-9)
    return [i * step for i in range(int(round(top / step)) + 1)]


def log_ticks(lo, hi):
    """Powers of ten, with 2 and 5 between them when the range spans less than three."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1, 2, 5) if b - a < 3 else (1,)
    return [m * 10**e for e in range(a, b + 1) for m in mults if lo <= m * 10**e <= hi] or [lo, hi]


class Panel:
    """One plot: x is the client count (log), y a metric (linear from 0, or log when the values
    span more than 30x)."""

    W, H = 330, 250
    L, R, T, B = 62, 14, 30, 42

    def __init__(self, x0, y0, title, ylabel, xs, values):
        self.x0, self.y0, self.title, self.ylabel = x0, y0, title, ylabel
        lo_x, hi_x = min(xs), max(xs)
        if lo_x == hi_x:
            lo_x, hi_x = lo_x / 2, hi_x * 2
        else:
            pad = (math.log10(hi_x) - math.log10(lo_x)) * 0.08
            lo_x, hi_x = 10 ** (math.log10(lo_x) - pad), 10 ** (math.log10(hi_x) + pad)
        self.lx, self.hx = math.log10(lo_x), math.log10(hi_x)
        self.xticks = sorted(set(xs))
        pos = [v for v in values if v > 0]
        self.ylog = len(pos) >= 2 and max(pos) / min(pos) > 30
        if self.ylog:
            lo = 10 ** math.floor(math.log10(min(pos)))
            hi = 10 ** math.ceil(math.log10(max(pos)))
            self.yticks = log_ticks(lo, hi)
            self.ly, self.hy = math.log10(lo), math.log10(hi)
        else:
            self.yticks = linear_ticks(max(values, default=1) * 1.05)
            self.ly, self.hy = 0, self.yticks[-1]

    def px(self, x):
        f = (math.log10(x) - self.lx) / (self.hx - self.lx)
        return self.x0 + self.L + f * (self.W - self.L - self.R)

    def py(self, y):
        if self.ylog:
            y = math.log10(max(y, 10**self.ly))
        f = (y - self.ly) / (self.hy - self.ly) if self.hy > self.ly else 0
        return self.y0 + self.H - self.B - f * (self.H - self.T - self.B)

    def frame(self, out):
        left, right = self.x0 + self.L, self.x0 + self.W - self.R
        top, bottom = self.y0 + self.T, self.y0 + self.H - self.B
        out.append(f'<text x="{(left + right) / 2:.1f}" y="{self.y0 + 18}" class="title">{escape(self.title)}</text>')
        for t in self.yticks:
            y = self.py(t)
            out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" class="grid"/>')
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="ytick">{fmt(t)}</text>')
        for t in self.xticks:
            x = self.px(t)
            out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" class="grid"/>')
            out.append(f'<text x="{x:.1f}" y="{bottom + 16}" class="xtick">{fmt(t)}</text>')
        out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" class="frame"/>')
        out.append(f'<text x="{(left + right) / 2:.1f}" y="{bottom + 34}" class="axis">clients (log scale)</text>')
        scale = ", log scale" if self.ylog else ""
        cy = (top + bottom) / 2
        out.append(f'<text x="{self.x0 + 14}" y="{cy:.1f}" class="axis" transform="rotate(-90 {self.x0 + 14} {cy:.1f})">{escape(self.ylabel + scale)}</text>')

    def line(self, out, points, col):
        """points: (x, y, faulty) sorted by x."""
        if len(points) > 1:
            d = " ".join(f"{self.px(x):.1f},{self.py(y):.1f}" for x, y, _ in points)
            out.append(f'<polyline points="{d}" fill="none" stroke="{col}" stroke-width="2"/>')
        for x, y, faulty in points:
            fill = "white" if faulty else col
            out.append(f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="4" fill="{fill}" stroke="{col}" stroke-width="2"/>')


STYLE = """<style>
text { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; fill: #222; }
.title { font-size: 14px; font-weight: bold; text-anchor: middle; }
.head { font-size: 16px; font-weight: bold; }
.sub { font-size: 12px; fill: #555; }
.axis { font-size: 12px; text-anchor: middle; }
.xtick { font-size: 11px; text-anchor: middle; }
.ytick { font-size: 11px; text-anchor: end; }
.legend { font-size: 12px; }
.note { font-size: 11px; fill: #555; }
.grid { stroke: #e3e3e3; stroke-width: 1; }
.frame { fill: none; stroke: #888; stroke-width: 1; }
</style>"""


def svg(width, height, body):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">\n{STYLE}\n'
            f'<rect width="{width}" height="{height}" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def get(row, path):
    for k in path.split("."):
        row = (row or {}).get(k)
    return row


def load_chart(profile, rows, seen):
    metrics = [("write throughput", "writes/s", "write.per_s"),
               ("write latency p99", "ms", "write.p99_ms")]
    if profile == "watch-churn":
        metrics.append(("watch event lag p99", "ms", "watch.lag_p99_ms"))
    good = [r for r in rows if not r.get("failed") and get(r, metrics[0][2]) is not None]
    failed = [r for r in rows if r not in good]
    if not good:
        return None
    backends = sorted({r.get("label") or "?" for r in good}, key=backend_key)
    xs = [r["clients"] for r in good]
    n_obj = sorted({r.get("objects") for r in good})
    vb = sorted({r.get("value_bytes") for r in good})

    width = 20 + Panel.W * len(metrics) + 170
    height = 58 + Panel.H + 26 + 16 * len(failed)
    what = {"create-list": "ConfigMaps created by N clients, then listed back",
            "watch-churn": "ConfigMaps created, updated twice and deleted by N clients under watches"}[profile]
    body = [f'<text x="20" y="24" class="head">kube-apiserver on each datastore: {profile}</text>',
            f'<text x="20" y="42" class="sub">{escape(what)}; '
            f'{"/".join(str(n) for n in n_obj)} objects of {"/".join(str(v) for v in vb)} bytes per run '
            f'(benches/k8s_load.sh). Hollow point: the run had faults (see its JSON line).</text>']
    for i, (title, unit, path) in enumerate(metrics):
        vals = [get(r, path) for r in good if get(r, path) is not None]
        p = Panel(20 + i * Panel.W, 50, title, unit, xs, vals)
        p.frame(body)
        for b in backends:
            by_x = {}
            for r in good:
                v = get(r, path)
                if (r.get("label") or "?") == b and v is not None:
                    by_x.setdefault(r["clients"], []).append((v, bool(r.get("faults"))))
            pts = [(x, statistics.median(v for v, _ in by_x[x]), any(f for _, f in by_x[x]))
                   for x in sorted(by_x)]
            p.line(body, pts, colour(b, seen))
    lx = 20 + Panel.W * len(metrics) + 16
    for j, b in enumerate(backends):
        y = 50 + Panel.T + 8 + j * 22
        c = colour(b, seen)
        body.append(f'<line x1="{lx}" y1="{y}" x2="{lx + 26}" y2="{y}" stroke="{c}" stroke-width="2"/>')
        body.append(f'<circle cx="{lx + 13}" cy="{y}" r="4" fill="{c}" stroke="{c}" stroke-width="2"/>')
        body.append(f'<text x="{lx + 34}" y="{y + 4}" class="legend">{escape(b)}</text>')
    for k, r in enumerate(failed):
        why = r.get("failed") or "no figures"
        body.append(f'<text x="20" y="{50 + Panel.H + 18 + 16 * k}" class="note">no figures: '
                    f'{escape(str(r.get("label")))} at {r.get("clients")} clients ({escape(why[:140])})</text>')
    return svg(width, height, body)


def density_chart(rows, seen):
    good = [r for r in rows if not r.get("failed") and r.get("density") and r.get("datastore")]
    failed = [r for r in rows if r not in good]
    if not good:
        return None
    # The last run of each backend.
    last = {}
    for r in good:
        last[r.get("label") or "?"] = r
    backends = sorted(last, key=backend_key)
    panels = [("datastore RSS", "MiB at the end of the window", "datastore"),
              ("datastore CPU", "% of one core over the window", "density.datastore_cpu_pct"),
              ("kube-apiserver RSS", "MiB at the end of the window", "apiserver"),
              ("kube-apiserver CPU", "% of one core over the window", "density.apiserver_cpu_pct")]
    # Two rows of two panels, each wide enough for a bar and its name per backend.
    pw, ph, top = max(320, 80 + 64 * len(backends)), 260, 50
    width = 40 + pw * 2
    height = top + 2 * ph + 28 + 16 * len(failed)
    d0 = last[backends[0]]["density"]
    body = [f'<text x="20" y="24" class="head">kube-apiserver on each datastore: density (at rest)</text>',
            f'<text x="20" y="42" class="sub">{d0["configmaps"]} ConfigMaps and {d0["leases"]} node Leases, '
            f'every Lease renewed every {d0["renew_interval_s"]:g} s; CPU over a {d0["window_s"]:.0f} s window '
            f'(benches/k8s_load.sh, PROFILES=density)</text>']
    L, R, T, B = 60, 10, 30, 50
    for i, (title, unit, path) in enumerate(panels):
        x0, y0 = 20 + (i % 2) * pw, top + (i // 2) * ph
        # Memory panels: RSS, and PSS where the figure sums processes sharing memory.
        bars = []
        for b in backends:
            v = get(last[b], path)
            if isinstance(v, dict):
                shared = v.get("procs", 0) > v.get("pids", 0) and v.get("pss_mib")
                bars.append((v.get("rss_mib") or 0, v.get("pss_mib") if shared else None))
            else:
                bars.append((v or 0, None))
        ticks = linear_ticks(max([v for v, _ in bars] + [0.1]) * 1.1)
        left, right, y_top, bottom = x0 + L, x0 + pw - R, y0 + T, y0 + ph - B
        def py(v):
            return bottom - (v / ticks[-1]) * (bottom - y_top)
        body.append(f'<text x="{(left + right) / 2:.1f}" y="{y0 + 18}" class="title">{escape(title)}</text>')
        for t in ticks:
            body.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{right}" y2="{py(t):.1f}" class="grid"/>')
            body.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" class="ytick">{fmt(t)}</text>')
        slot = (right - left) / len(backends)
        for j, (b, (v, pss)) in enumerate(zip(backends, bars)):
            bx, bw, c = left + j * slot + slot * 0.15, slot * 0.7, colour(b, seen)
            label = f"{v:.1f}" if "cpu" in path else fmt(round(v))
            if pss is not None:
                body.append(f'<rect x="{bx:.1f}" y="{py(v):.1f}" width="{bw:.1f}" height="{bottom - py(v):.1f}" fill="{c}" fill-opacity="0.3"/>')
                body.append(f'<rect x="{bx:.1f}" y="{py(pss):.1f}" width="{bw:.1f}" height="{bottom - py(pss):.1f}" fill="{c}"/>')
                body.append(f'<text x="{bx + bw / 2:.1f}" y="{py(pss) - 4:.1f}" class="xtick">PSS {fmt(round(pss))}</text>')
                label = f"RSS {fmt(round(v))}"
            else:
                body.append(f'<rect x="{bx:.1f}" y="{py(v):.1f}" width="{bw:.1f}" height="{bottom - py(v):.1f}" fill="{c}"/>')
            body.append(f'<text x="{bx + bw / 2:.1f}" y="{py(v) - 4:.1f}" class="xtick">{label}</text>')
            body.append(f'<text x="{bx + bw / 2:.1f}" y="{bottom + 15}" class="xtick">{escape(b)}</text>')
        body.append(f'<rect x="{left}" y="{y_top}" width="{right - left}" height="{bottom - y_top}" class="frame"/>')
        cy = (y_top + bottom) / 2
        body.append(f'<text x="{x0 + 14}" y="{cy:.1f}" class="axis" transform="rotate(-90 {x0 + 14} {cy:.1f})">{escape(unit)}</text>')
    if any(isinstance(get(last[b], "datastore"), dict) and get(last[b], "datastore").get("procs", 0) >
           get(last[b], "datastore").get("pids", 0) for b in backends):
        body.append(f'<text x="20" y="{top + 2 * ph + 2}" class="note">Pale bar: RSS summed over processes '
                    f'that share memory (PostgreSQL\'s shared buffers count in each backend\'s RSS);</text>')
        body.append(f'<text x="20" y="{top + 2 * ph + 16}" class="note">the solid bar inside it: their PSS, '
                    f'which counts each shared page once.</text>')
    for k, r in enumerate(failed):
        body.append(f'<text x="20" y="{top + 2 * ph + 32 + 16 * k}" class="note">no figures: '
                    f'{escape(str(r.get("label")))} ({escape(str(r.get("failed") or "no figures")[:140])})</text>')
    return svg(width, height, body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/k8s_load-charts", help="directory for the SVG files")
    ap.add_argument("results", nargs="+", help="JSON lines written by benches/k8s_load.sh")
    args = ap.parse_args()
    rows = read_rows(args.results)
    os.makedirs(args.out, exist_ok=True)
    seen = {}
    wrote = 0
    for profile in ("create-list", "watch-churn", "density"):
        sel = [r for r in rows if r.get("profile") == profile]
        if not sel:
            continue
        doc = density_chart(sel, seen) if profile == "density" else load_chart(profile, sel, seen)
        if doc is None:
            print(f"k8s_charts: {profile}: no run with figures, no chart", file=sys.stderr)
            continue
        path = os.path.join(args.out, f"{profile}.svg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(doc)
        print(path)
        wrote += 1
    if wrote == 0:
        print("k8s_charts: nothing to draw", file=sys.stderr)


if __name__ == "__main__":
    main()
