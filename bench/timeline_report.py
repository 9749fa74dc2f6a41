#!/usr/bin/env python3
"""Where the attention kernels' time per work item goes: reads the clock stamps of a
FLAMIA_TIMELINE build (kernels/common/timeline.h; bench_forward_kernel / bench_backward_kernel
with FLAMIA_TIMELINE_OUT=FILE) and prints the mean length of each phase of a work item, in
microseconds, with the SM clock calibrated from the kernel's measured time (--kernel-ms).

    python3 bench/timeline_report.py backward FILE --kernel-ms 1.81 [--json OUT]
    python3 bench/timeline_report.py forward FILE --kernel-ms 0.57 [--json OUT]

Backward (one slot per CTA): 0 entry, 1 first step ready, 2 steps done, 3 dK/dV written (key
warpgroups' first thread); 4 scales stored, 5 steps done, 6 reductions complete (dQ warpgroup);
7-14 cycles per CTA of each counter (COUNTERS; the step phases reported per step).
Forward (one slot per work item): consumer c in {0, 1}: 3c item ready, 3c + 1 key tiles done,
3c + 2 outputs written. Event 15: SM << 32 | steps (backward) or key tiles (forward).
"""
from __future__ import annotations

import argparse
import json
import struct
from collections import defaultdict
from pathlib import Path

SLOTS = 1 << 16
EVENTS = 16
# The backward's counters (kernels/common/timeline.h, enum Counter), events 7.., cycles per CTA.
COUNTERS = ["key warpgroups wait for a free hand-off buffer",
            "dQ warpgroup waits for a full hand-off buffer",
            "step: start to S and dP's first half landed",
            "step: P rebuild and dS, first 32 queries",
            "step: dP's second half",
            "step: dS, last 32 queries",
            "step: H, rescales, dV and dK products, hand-off",
            "step: next loads landed and the barrier"]
FIRST_COUNTER = 7


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


def phase_report(per_sm: dict[int, list[list[int]]], end_of, kernel_ms: float, record,
                 names: tuple[str, str, str, str, str]) -> dict:
    """Mean phase lengths over the items of every SM, in turn: record(r, next_r, us, phases)
    appends item r's phases (next_r: the SM's next item or None) and returns (count, loop us)
    for a line through the item's loop time. names: the item count's key, the fit's key, its
    fixed and per-count parts, the mean count's key."""
    for rs in per_sm.values():
        rs.sort(key=lambda r: r[0])  # one SM's items run in turn
    spans = {sm: [(r[0], end_of(r)) for r in rs] for sm, rs in per_sm.items()}
    ghz = clock_ghz(spans, kernel_ms)
    us = lambda cycles: cycles / ghz / 1e3  # noqa: E731
    phases: dict[str, list[float]] = defaultdict(list)
    points = []
    for rs in per_sm.values():
        for i, r in enumerate(rs):
            points.append(record(r, rs[i + 1] if i + 1 < len(rs) else None, us, phases))
    a, b = fit(points)
    items, fit_key, fixed, per_count, mean_count = names
    return {
        items: sum(len(rs) for rs in per_sm.values()),
        "sms": len(per_sm),
        "clock_ghz": round(ghz, 4),
        "mean_us": {k: round(mean(v), 3) for k, v in phases.items()},
        fit_key: {fixed: round(a, 3), per_count: round(b, 3)},
        mean_count: round(mean([x for x, _ in points]), 2),
    }


def by_sm(rows: list[list[int]], keep=lambda r: True) -> dict[int, list[list[int]]]:
    per_sm: dict[int, list[list[int]]] = defaultdict(list)
    for r in rows:
        if keep(r):
            per_sm[place(r)[0]].append(r)
    return per_sm


def backward_report(rows: list[list[int]], kernel_ms: float) -> dict:
    end_of = lambda r: max(r[3], r[6])  # noqa: E731

    def record(r, following, us, phases):
        end = end_of(r)
        phases["prologue (entry -> first step ready)"].append(us(r[1] - r[0]))
        phases["steps (key warpgroups)"].append(us(r[2] - r[1]))
        phases["key epilogue (dK, dV stores)"].append(us(r[3] - r[2]))
        phases["dQ warpgroup after the key steps"].append(us(r[5] - r[2]))
        phases["dQ final reduction wait"].append(us(r[6] - r[5]))
        phases["end (steps done -> CTA done)"].append(us(end - r[2]))
        phases["dQ warpgroup start (entry -> scales stored)"].append(us(r[4] - r[0]))
        phases["CTA (entry -> done)"].append(us(end - r[0]))
        steps = place(r)[1]
        for c, name in enumerate(COUNTERS):
            cycles = r[FIRST_COUNTER + c]
            if name.startswith("step:"):
                phases[name + " (per step)"].append(us(cycles) / max(steps, 1))
            else:
                phases[name].append(us(cycles))
        if following:
            phases["gap to the next CTA on the SM"].append(us(following[0] - end))
        return place(r)[1], us(r[2] - r[1])

    ran = by_sm(rows, lambda r: all(r[e] for e in range(7)))  # not the CTAs without work
    return phase_report(ran, end_of, kernel_ms, record,
                        ("ctas", "steps_fit_us", "per_cta", "per_step", "mean_steps"))


def forward_report(rows: list[list[int]], kernel_ms: float) -> dict:
    def record(r, following, us, phases):
        phases["consumer 0: key-tile loop"].append(us(r[1] - r[0]))
        phases["consumer 0: epilogue"].append(us(r[2] - r[1]))
        if r[3]:
            phases["consumer 1 starts after consumer 0"].append(us(r[3] - r[0]))
            phases["consumer 1 ends after consumer 0"].append(us(r[5] - r[2]))
        if following:
            phases["consumer 0: wait for the next item"].append(us(following[0] - r[2]))
        return place(r)[1], us(r[1] - r[0])

    return phase_report(by_sm(rows), lambda r: max(r[2], r[5]), kernel_ms, record,
                        ("items", "loop_fit_us", "per_item", "per_key_tile", "mean_key_tiles"))


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
