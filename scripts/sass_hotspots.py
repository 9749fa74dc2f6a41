#!/usr/bin/env python3
"""Summarizes an Nsight Compute source-page CSV (`ncu -i R --page source --print-source sass
--csv`): warp-stall samples and executed instructions summed by opcode, then the hottest single
instructions. Used by scripts/gpu-sass-profile.
    sass_hotspots.py FILE.csv [--top N]
With --ranges, sums them instead over address ranges of the kernel (START-END, hexadecimal
offsets from its first instruction as `cuobjdump -sass` prints them, END exclusive), as percent
of all samples, each with its hottest instructions: the time of a loop's phases, read off the
SASS (docs/results-log.md, session 17, attributes the backward's time this way).
    sass_hotspots.py FILE.csv --ranges 0x38c0-0x4280 0x4280-0x4660 ... [--top N]
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


def by_ranges(header, table, source, samples, not_issued, executed, ranges, top):
    address = header.index("Address")
    reasons = stall_reasons(header)
    base = int(table[0][address], 16)
    rows = [(int(r[address], 16) - base, r[source].strip(), number(r[samples]),
             number(r[not_issued]), number(r[executed]), [number(r[i]) for i in reasons])
            for r in table]
    total = sum(r[2] for r in rows) or 1.0
    print("range                samples%  not-issued%  executed(M)  top stall reasons (% of all)")
    for text in ranges:
        lo, hi = (int(x, 16) for x in text.split("-"))
        inside = [r for r in rows if lo <= r[0] < hi]
        by_reason = [sum(r[5][k] for r in inside) for k in range(len(reasons))]
        main_reasons = sorted(range(len(reasons)), key=lambda k: -by_reason[k])[:3]
        print("%-20s %8.1f %12.1f %12.1f  %s" % (
            text, 100 * sum(r[2] for r in inside) / total, 100 * sum(r[3] for r in inside) / total,
            sum(r[4] for r in inside) / 1e6,
            ", ".join("%s %.1f" % (header[reasons[k]], 100 * by_reason[k] / total)
                      for k in main_reasons if by_reason[k])))
        for r in sorted(inside, key=lambda r: -r[2])[:top]:
            why = sorted(range(len(reasons)), key=lambda k: -r[5][k])[:2]
            print("    %#7x %8.0f  %-60s %s" % (r[0], r[2], r[1][:60], ", ".join(
                "%s=%.0f" % (header[reasons[k]], r[5][k]) for k in why if r[5][k])))


def stall_reasons(header):
    """The per-reason sample columns (stall_*, all samples, not the not-issued copies)."""
    return [i for i, name in enumerate(header)
            if name.startswith("stall_") and "Not Issued" not in name]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--ranges", nargs="+", default=[])
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
    table = [r for r in rows[start + 1 :] if len(r) == len(header) and r[source].strip()]
    if args.ranges:
        by_ranges(header, table, source, samples, not_issued, executed, args.ranges, args.top)
        return
    print("columns:", "; ".join(header))
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
