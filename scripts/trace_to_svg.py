#!/usr/bin/env python3
"""Draws a Chrome trace written by stream_core::trace::Trace as an SVG timeline: a row
per stream (grouped by GPU), a bar per operation coloured by what it is, a tick per fork
and join point with its arrow, and a millisecond axis. Python's standard library only.

    python3 scripts/trace_to_svg.py pipeline.trace.json pipeline.trace.svg
"""
import json
import sys
from html import escape

COLOURS = {
    "copy_to_device": "#4e79a7",
    "copy_to_host": "#59a14f",
    "copy_device": "#76b7b2",
    "kernel": "#f28e2b",
    "fill": "#bab0ac",
    "collective": "#b07aa1",
    "staged": "#a0cbe8",
}
LEFT, RIGHT, TOP, ROW, BAR = 150, 20, 40, 34, 22


def colour(event):
    return COLOURS.get(event["name"]) or COLOURS.get(event["cat"], "#9c755f")


def main(src, dst, width=1200):
    events = json.load(open(src))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    gpus = {e["pid"]: e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "process_name"}
    rows = sorted(names)
    row_of = {track: i for i, track in enumerate(rows)}
    slices = [e for e in events if e["ph"] == "X"]
    if not slices:
        sys.exit(f"{src}: no operations")
    t0 = min(e["ts"] for e in slices)
    t1 = max(e["ts"] + e["dur"] for e in slices)
    scale = (width - LEFT - RIGHT) / (t1 - t0)
    x = lambda ts: LEFT + (ts - t0) * scale
    y = lambda track: TOP + row_of[track] * ROW
    height = TOP + len(rows) * ROW + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for track in rows:
        gpu = gpus.get(track[0], f"GPU {track[0]}").split(":")[0]
        out.append(f'<text x="8" y="{y(track) + BAR - 6}">{escape(gpu)} · {escape(names[track])}</text>')
        out.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y(track) + BAR + 4}" '
                   f'y2="{y(track) + BAR + 4}" stroke="#eee"/>')
    # A staged copy's chunks lie inside the copy's bar: drawn after it, in its lower half.
    for e in sorted(slices, key=lambda e: e["cat"] == "staged"):
        track = (e["pid"], e["tid"])
        top, h = (y(track) + BAR / 2, BAR / 2) if e["cat"] == "staged" else (y(track), BAR)
        if e["dur"] > 0:
            w = max(e["dur"] * scale, 0.8)
            out.append(f'<rect x="{x(e["ts"]):.2f}" y="{top}" width="{w:.2f}" height="{h}" '
                       f'fill="{colour(e)}" stroke="white" stroke-width="0.4">'
                       f'<title>{escape(e["name"])} {e["dur"]:.1f} us</title></rect>')
        else:
            out.append(f'<line x1="{x(e["ts"]):.2f}" x2="{x(e["ts"]):.2f}" y1="{y(track) - 2}" '
                       f'y2="{y(track) + BAR + 2}" stroke="black" stroke-width="1.5"/>')
    ends = {}
    for e in events:
        if e["ph"] in "sf":
            ends.setdefault(e["id"], {})[e["ph"]] = e
    for pair in ends.values():
        if "s" in pair and "f" in pair:
            a, b = pair["s"], pair["f"]
            ya, yb = y((a["pid"], a["tid"])) + BAR / 2, y((b["pid"], b["tid"])) + BAR / 2
            out.append(f'<line x1="{x(a["ts"]):.2f}" y1="{ya}" x2="{x(b["ts"]):.2f}" y2="{yb}" '
                       f'stroke="black" stroke-width="1" stroke-dasharray="3,2"/>')
    axis = TOP + len(rows) * ROW + 8
    out.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{axis}" y2="{axis}" stroke="black"/>')
    span_ms = (t1 - t0) / 1e3
    step = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 1e9) if span_ms / s <= 12)
    tick = 0.0
    while tick <= span_ms + 1e-9:
        tx = x(t0 + tick * 1e3)
        out.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{axis}" y2="{axis + 5}" stroke="black"/>')
        out.append(f'<text x="{tx:.1f}" y="{axis + 18}" text-anchor="middle">{tick:g} ms</text>')
        tick += step
    legend = [("upload", COLOURS["copy_to_device"]), ("kernel", COLOURS["kernel"]),
              ("download", COLOURS["copy_to_host"]), ("device copy", COLOURS["copy_device"]),
              ("fill", COLOURS["fill"]), ("collective", COLOURS["collective"]),
              ("staged chunk", COLOURS["staged"])]
    lx = LEFT
    for label, c in legend:
        out.append(f'<rect x="{lx}" y="12" width="12" height="12" fill="{c}"/>')
        out.append(f'<text x="{lx + 16}" y="22">{label}</text>')
        lx += 30 + 8 * len(label)
    out.append(f'<text x="{lx}" y="22">| fork/join point, dashed: its arrow</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")
    print(f"{dst}: {len(slices)} operations on {len(rows)} streams, {span_ms:.2f} ms")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
