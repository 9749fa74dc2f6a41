#!/usr/bin/env python3
"""Summarizes an Nsight Compute source-page CSV (`ncu -i R --page source --print-source sass
--csv`): warp-stall samples and executed instructions summed by opcode, then the hottest single
instructions. Used by scripts/gpu-sass-profile.
    sass_hotspots.py FILE.csv [--top N]
"""
import argparse
import collections
import csv
import re
import sys

PREDICATE = re.compile(r"^@!?U?P[0-9T]+\s+")


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def opcode(source):
    return PREDICATE.sub("", source.strip()).split(" ")[0].split(".")[0]


def find_column(header, *needles):
    for i, name in enumerate(header):
        if all(n.lower() in name.lower() for n in needles):
            return i
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if "Source" in r), None)
    if start is None:
        sys.exit("no source table in %s:\n%s" % (args.csv, "\n".join(map(str, rows[:10]))))
    header = rows[start]
    source = header.index("Source")
    samples = find_column(header, "Warp Stall Sampling (All")
    not_issued = find_column(header, "Warp Stall Sampling (Not")
    executed = find_column(header, "Instructions Executed")
    print("columns:", "; ".join(header))
    table = [r for r in rows[start + 1 :] if len(r) == len(header) and r[source].strip()]
    by_op = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r in table:
        entry = by_op[opcode(r[source])]
        entry[0] += 1
        for k, col in enumerate((samples, not_issued, executed)):
            if col is not None:
                entry[k + 1] += number(r[col])
    total = sum(e[1] for e in by_op.values()) or 1.0
    print("\nopcode        static  stall-samples(all)   %      not-issued   executed")
    for name, (count, s, n, e) in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        print("%-12s %7d %14.0f %6.1f %12.0f %12.0f" % (name, count, s, 100 * s / total, n, e))
    print("\nhottest instructions (all samples):")
    reasons = [i for i, name in enumerate(header)
               if "stall" in name.lower() and i not in (samples, not_issued)]
    if samples is not None:
        for r in sorted(table, key=lambda r: -number(r[samples]))[: args.top]:
            top = sorted(reasons, key=lambda i: -number(r[i]))[:3]
            why = ", ".join("%s=%.0f" % (header[i], number(r[i])) for i in top if number(r[i]))
            print("%8.0f  %s  %-60s %s" % (number(r[samples]), r[0], r[source].strip(), why))


if __name__ == "__main__":
    main()
