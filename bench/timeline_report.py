#!/usr/bin/env python3
"""Where the attention kernels' time per work item goes: reads the clock stamps of a
FLAMIA_TIMELINE build (kernels/common/timeline.h; bench_forward_kernel / bench_backward_kernel
with FLAMIA_TIMELINE_OUT=FILE) and prints the mean length of each phase of a work item, in
microseconds, with the SM clock calibrated from the kernel's measured time (--kernel-ms).

    python3 bench/timeline_report.py backward FILE --kernel-ms 1.81 [--json OUT]
    python3 bench/timeline_report.py forward FILE --kernel-ms 0.57 [--json OUT]

Backward (one slot per CTA): 0 entry, 1 first step ready, 2 steps done, 3 dK/dV written, 7
cycles waiting for a free hand-off buffer (key warpgroups' first thread); 4 scales stored, 5
steps done, 6 reductions complete, 8 cycles waiting for a full hand-off buffer (dQ warpgroup).
Forward (one slot per work item): consumer c in {0, 1}: 3c item ready, 3c + 1 key tiles done,
3c + 2 outputs written. Event 9: SM << 32 | steps (backward) or key tiles (forward).
"""
from __future__ import annotations

import argparse
import json
import struct
from collections import defaultdict
from pathlib import Path

SLOTS = 1 << 16
EVENTS = 10


def read_slots(path: Path) -> list[list[int]]:
    raw = path.read_bytes()
    values = struct.unpack(f"<{SLOTS * EVENTS}Q", raw[: SLOTS * EVENTS * 8])
    rows = [list(values[i * EVENTS:(i + 1) * EVENTS]) for i in range(SLOTS)]
    return [r for r in rows if r[0] != 0 and r[EVENTS - 1] != 0]


def place(row: list[int]) -> tuple[int, int]:
    return row[EVENTS - 1] >> 32, row[EVENTS - 1] & 0xFFFFFFFF


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of y = a + b x: (a, b)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def clock_ghz(per_sm: dict[int, list[tuple[int, int]]], kernel_ms: float) -> float:
    """Cycles per ns: the busiest SM's span (first start to last end) over the kernel's time."""
    span = max(max(e for _, e in spans) - min(s for s, _ in spans) for spans in per_sm.values())
    return span / (kernel_ms * 1e6)


def backward_report(rows: list[list[int]], kernel_ms: float) -> dict:
    per_sm: dict[int, list[list[int]]] = defaultdict(list)
    for r in rows:
        if all(r[e] for e in range(7)):  # CTAs that ran (not the empty ones)
            per_sm[place(r)[0]].append(r)
    spans = {sm: [(r[0], max(r[3], r[6])) for r in rs] for sm, rs in per_sm.items()}
    ghz = clock_ghz(spans, kernel_ms)
    us = lambda cycles: cycles / ghz / 1e3  # noqa: E731
    phases: dict[str, list[float]] = defaultdict(list)
    step_points = []
    for sm, rs in per_sm.items():
        rs.sort(key=lambda r: r[0])
        for i, r in enumerate(rs):
            steps = place(r)[1]
            end = max(r[3], r[6])
            phases["prologue (entry -> first step ready)"].append(us(r[1] - r[0]))
            phases["steps (key warpgroups)"].append(us(r[2] - r[1]))
            phases["key epilogue (dK, dV stores)"].append(us(r[3] - r[2]))
            phases["dQ warpgroup after the key steps"].append(us(r[5] - r[2]))
            phases["dQ final reduction wait"].append(us(r[6] - r[5]))
            phases["end (steps done -> CTA done)"].append(us(end - r[2]))
            phases["dQ warpgroup start (entry -> scales stored)"].append(us(r[4] - r[0]))
            phases["CTA (entry -> done)"].append(us(end - r[0]))
            phases["key warpgroups wait for a free hand-off buffer"].append(us(r[7]))
            phases["dQ warpgroup waits for a full hand-off buffer"].append(us(r[8]))
            if i + 1 < len(rs):
                phases["gap to the next CTA on the SM"].append(us(rs[i + 1][0] - end))
            step_points.append((steps, us(r[2] - r[1])))
    a, b = fit(step_points)
    return {
        "ctas": sum(len(rs) for rs in per_sm.values()),
        "sms": len(per_sm),
        "clock_ghz": round(ghz, 4),
        "mean_us": {k: round(mean(v), 3) for k, v in phases.items()},
        "steps_fit_us": {"per_cta": round(a, 3), "per_step": round(b, 3)},
        "mean_steps": round(mean([s for s, _ in step_points]), 2),
    }


def forward_report(rows: list[list[int]], kernel_ms: float) -> dict:
    per_sm: dict[int, list[list[int]]] = defaultdict(list)
    for r in rows:
        per_sm[place(r)[0]].append(r)
    spans = {sm: [(r[0], max(r[2], r[5])) for r in rs] for sm, rs in per_sm.items()}
    ghz = clock_ghz(spans, kernel_ms)
    us = lambda cycles: cycles / ghz / 1e3  # noqa: E731
    phases: dict[str, list[float]] = defaultdict(list)
    loop_points = []
    for sm, rs in per_sm.items():
        rs.sort(key=lambda r: r[0])  # one SM's items run in turn
        for i, r in enumerate(rs):
            tiles = place(r)[1]
            phases["consumer 0: key-tile loop"].append(us(r[1] - r[0]))
            phases["consumer 0: epilogue"].append(us(r[2] - r[1]))
            if r[3]:
                phases["consumer 1 starts after consumer 0"].append(us(r[3] - r[0]))
                phases["consumer 1 ends after consumer 0"].append(us(r[5] - r[2]))
            if i + 1 < len(rs):
                phases["consumer 0: wait for the next item"].append(us(rs[i + 1][0] - r[2]))
            loop_points.append((tiles, us(r[1] - r[0])))
    a, b = fit(loop_points)
    return {
        "items": sum(len(rs) for rs in per_sm.values()),
        "sms": len(per_sm),
        "clock_ghz": round(ghz, 4),
        "mean_us": {k: round(mean(v), 3) for k, v in phases.items()},
        "loop_fit_us": {"per_item": round(a, 3), "per_key_tile": round(b, 3)},
        "mean_key_tiles": round(mean([t for t, _ in loop_points]), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernel", choices=["forward", "backward"])
    ap.add_argument("file", type=Path)
    ap.add_argument("--kernel-ms", type=float, required=True)
    ap.add_argument("--json")
    opts = ap.parse_args()
    rows = read_slots(opts.file)
    report = (backward_report if opts.kernel == "backward" else forward_report)(rows,
                                                                               opts.kernel_ms)
    text = json.dumps(report, indent=1)
    print(text)
    if opts.json:
        Path(opts.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
