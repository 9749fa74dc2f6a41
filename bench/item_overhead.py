#!/usr/bin/env python3
"""The fixed cost per work item of the attention kernels, apart from their cost per key tile
(forward) or per step (backward): both kernels timed alone (bench_forward_kernel,
bench_backward_kernel fp8) on equal documents of several lengths with the same total tokens, so
that every length has the same number of work items and only the tiles per item change; then a
least-squares line time = items_per_sm * (per_item + tiles_per_item * per_tile), causal and not.

    python3 bench/item_overhead.py --json OUT.json [--build build] [--lengths 1024,2048,4096,8192]
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOTAL_TOKENS = 32768
HEADS = 16
HEAD_DIM = 128
SMS = 132                  # H200
FORWARD_QUERY_ROWS = 128   # forward work item: one query tile of one head (head dim 128)
FORWARD_KEYS = 128         # forward key tile
BACKWARD_KEYS = 128        # backward CTA: one key tile of one KV head
BACKWARD_QUERY_ROWS = 64   # backward step: one query tile


def kernel_ms(binary: Path, length: int, causal: bool) -> float:
    docs = ",".join([str(length)] * (TOTAL_TOKENS // length))
    args = [str(binary), "--docs", docs, "--heads-q", str(HEADS), "--heads-kv", str(HEADS),
            "--head-dim", str(HEAD_DIM)] + ([] if causal else ["--full"])
    out = subprocess.run(args, capture_output=True, text=True, timeout=300).stdout
    return float(json.loads(out.strip().splitlines()[-1])["ms"])


def tiles_per_item(length: int, rows: int, keys: int, causal: bool) -> float:
    """Mean key tiles (forward) or query steps (backward) per work item of a document."""
    items = length // rows
    if not causal:
        return length / keys
    # causal: item m visits the tiles up to its diagonal (forward) or from it (backward)
    return sum((m + 1) * rows / keys for m in range(items)) / items


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of y = a + b x: (a, b)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--lengths", default="1024,2048,4096,8192")
    opts = ap.parse_args()
    lengths = [int(x) for x in opts.lengths.split(",")]
    build = Path(opts.build)
    kernels = {"forward": (build / "bench_forward_kernel", FORWARD_QUERY_ROWS, FORWARD_KEYS),
               "backward": (build / "bench_backward_kernel", BACKWARD_KEYS, BACKWARD_QUERY_ROWS)}
    results = {"command": "python3 bench/item_overhead.py", "sms": SMS, "runs": {}, "fits": {}}
    for kernel, (binary, item_rows, tile_keys) in kernels.items():
        for causal in (True, False):
            label = f"{kernel}_{'causal' if causal else 'full'}"
            points = []
            for length in lengths:
                ms = kernel_ms(binary, length, causal)
                items_per_sm = TOTAL_TOKENS // item_rows * HEADS / SMS
                tiles = tiles_per_item(length, item_rows, tile_keys, causal)
                us_per_item = 1000.0 * ms / items_per_sm
                results["runs"][f"{label}_{length}"] = {"ms": ms, "tiles_per_item": tiles,
                                                        "us_per_item": us_per_item}
                points.append((tiles, us_per_item))
            per_item, per_tile = fit(points)
            results["fits"][label] = {"per_item_us": per_item, "per_tile_us": per_tile}
            print(f"{label:17s} per item {per_item:6.2f} us, per tile {per_tile:5.3f} us  " +
                  " ".join(f"{int(x)}:{y:.1f}" for x, y in points), flush=True)
    Path(opts.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
