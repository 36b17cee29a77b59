#!/usr/bin/env python3
"""Draws a titan memory snapshot (profiling.enable_memory_snapshot) as one self-contained HTML page.

    scripts/memviz.py SNAPSHOT.json -o out.html

The page holds an inline SVG: allocated bytes over the recorded allocation events, stacked by
category, with the peak marked; and tables of the live bytes by owner (category and layer) at the
peak and at the snapshot, and of the largest live blocks. Python 3 standard library only.
"""
import argparse
import html
import json
import sys

COLORS = {
    "parameters": "#4e79a7",
    "gradients": "#f28e2b",
    "optimizer_state": "#59a14f",
    "activations": "#e15759",
    "workspace": "#b07aa1",
    "other": "#9c755f",
    "untracked": "#bab0ac",
}
WIDTH, HEIGHT = 960, 360
LEFT, RIGHT, TOP, BOTTOM = 80, 180, 20, 40


def human(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


def chart(snap):
    """The stacked area chart of the timeline, as an <svg> element."""
    timeline = snap["timeline"]
    categories = [c for c in snap["categories"] if any(timeline["bytes"][c])]
    events = timeline["event"]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if not events:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="60"><text x="10" y="30">' \
               "no timeline: the allocator was not recording</text></svg>"
    x0, x1 = events[0], max(events[-1], events[0] + 1)
    totals = [sum(timeline["bytes"][c][i] for c in categories) for i in range(len(events))]
    y_max = max(max(totals), snap["peak"]["allocated_bytes"], 1)

    def x(e):
        return LEFT + (e - x0) / (x1 - x0) * plot_w

    def y(b):
        return TOP + plot_h - b / y_max * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             'font-family="sans-serif" font-size="11">']
    below = [0] * len(events)
    for c in categories:
        above = [below[i] + timeline["bytes"][c][i] for i in range(len(events))]
        top_edge = " ".join(f"{x(events[i]):.1f},{y(above[i]):.1f}" for i in range(len(events)))
        bottom_edge = " ".join(f"{x(events[i]):.1f},{y(below[i]):.1f}" for i in reversed(range(len(events))))
        parts.append(f'<polygon points="{top_edge} {bottom_edge}" fill="{COLORS.get(c, "#888")}" '
                     f'fill-opacity="0.85"><title>{html.escape(c)}</title></polygon>')
        below = above
    for k in range(5):
        b = y_max * k / 4
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(b):.1f}" y2="{y(b):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y(b) + 4:.1f}" text-anchor="end">{human(b)}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#444"/>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" stroke="#444"/>')
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 8}">event {x0}</text>')
    parts.append(f'<text x="{LEFT + plot_w}" y="{HEIGHT - 8}" text-anchor="end">event {events[-1]}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">'
                 "allocation and free events since recording started</text>")

    peak = snap["peak"]
    if x0 <= peak["event"] <= x1:
        px, py = x(peak["event"]), y(peak["allocated_bytes"])
        parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#000" '
                     'stroke-dasharray="4,3"/>')
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="#000"/>')
        anchor = "end" if px > LEFT + plot_w * 0.7 else "start"
        dx = -6 if anchor == "end" else 6
        parts.append(f'<text x="{px + dx:.1f}" y="{max(py - 6, TOP + 10):.1f}" text-anchor="{anchor}" '
                     f'font-weight="bold">peak {human(peak["allocated_bytes"])}</text>')

    for i, c in enumerate(categories):
        ly = TOP + 14 + i * 18
        parts.append(f'<rect x="{WIDTH - RIGHT + 16}" y="{ly - 10}" width="12" height="12" '
                     f'fill="{COLORS.get(c, "#888")}"/>')
        parts.append(f'<text x="{WIDTH - RIGHT + 34}" y="{ly}">{html.escape(c)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def owner_table(title, owners, total):
    rows = []
    for o in owners:
        share = 100.0 * o["bytes"] / total if total else 0.0
        owner = o["owner"] or "-"
        rows.append(f'<tr><td><span class="sw" style="background:{COLORS.get(o["category"], "#888")}"></span>'
                    f'{html.escape(o["category"])}</td><td>{html.escape(owner)}</td>'
                    f'<td class="n">{human(o["bytes"])}</td><td class="n">{share:.1f}%</td>'
                    f'<td class="n">{human(o["requested_bytes"])}</td><td class="n">{o["count"]}</td></tr>')
    return (f"<h2>{html.escape(title)}</h2><table><tr><th>category</th><th>owner (layer)</th><th>bytes</th>"
            "<th>share</th><th>requested</th><th>blocks</th></tr>" + "".join(rows) + "</table>")


def largest_table(blocks):
    rows = "".join(f'<tr><td>{html.escape(b["category"])}</td><td>{html.escape(b["owner"] or "-")}</td>'
                   f'<td class="n">{human(b["bytes"])}</td><td class="n">{human(b["requested_bytes"])}</td></tr>'
                   for b in blocks)
    return ("<h2>Largest live blocks at the snapshot</h2><table><tr><th>category</th><th>owner (module)</th>"
            "<th>bytes</th><th>requested</th></tr>" + rows + "</table>")


def page(snap, source):
    t = snap["totals"]
    rec = snap["recording"]
    when = f'step {snap["step"]}' if snap["step"] >= 0 else "no step"
    summary = (f'<p>{html.escape(source)}: {html.escape(snap["reason"] or "snapshot")}, {when}, rank {snap["rank"]}. '
               f'Allocated {human(t["allocated_bytes"])}, peak {human(t["peak_allocated_bytes"])}, '
               f'reserved {human(t["reserved_bytes"])}; {t["num_allocs"]} allocations '
               f'({t["num_cache_hits"]} from the cache). Recorded {rec["events"]} events over '
               f'{rec["seconds"]:.2f} s; each timeline point stands for up to {rec["timeline_stride"]} '
               "event(s), keeping the highest.</p>")
    style = ("body{font-family:sans-serif;margin:20px;max-width:1000px}table{border-collapse:collapse;margin-bottom:16px}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}td.n{text-align:right}"
             ".sw{display:inline-block;width:10px;height:10px;margin-right:6px}")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>titan memory snapshot</title>"
            f"<style>{style}</style></head><body><h1>titan memory snapshot</h1>{summary}"
            f"{chart(snap)}"
            + owner_table(f'Live at the peak ({human(snap["peak"]["allocated_bytes"])}, event {snap["peak"]["event"]})',
                          snap["peak"]["by_owner"], snap["peak"]["allocated_bytes"])
            + owner_table(f'Live at the snapshot ({human(t["allocated_bytes"])})', snap["by_owner"],
                          t["allocated_bytes"])
            + largest_table(snap["largest"]) + "</body></html>\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", help="a rank<r>_memory_snapshot.json that titan wrote")
    parser.add_argument("-o", "--output", required=True, help="the HTML page to write")
    args = parser.parse_args()
    try:
        with open(args.snapshot) as f:
            snap = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"memviz: cannot read {args.snapshot}: {e}")
    if snap.get("format") != "titan memory snapshot":
        sys.exit(f"memviz: {args.snapshot} is not a titan memory snapshot (no \"format\": \"titan memory snapshot\")")
    with open(args.output, "w") as f:
        f.write(page(snap, args.snapshot))


if __name__ == "__main__":
    main()
