#!/usr/bin/env python3
"""Reads `ptxas -v` output (stdin) for one source and prints the kernel functions that spill or
serialize their wgmma (C7512-C7516; the injected waits, C7517, are information). Exit 1 when a
production function does: the test instruments' instantiations (kDebugPHat,
kDebugProbabilities) are listed but pass. scripts/spill-check runs it per source.
    ptxas_report.py SOURCE < ptxas-log
"""
import re
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGISTERS = re.compile(r"Used (\d+) registers")
SERIALIZED = re.compile(r"\((C751[2-6])\).*?function '([^']+)'")
# The test instruments' instantiations (Itanium mangling of the template flags after the head
# dim): backward_kernel<D, kBf16Grad, kDebugPHat, ...>, forward_kernel<D, kDebugProbabilities,
# ...>: which flag is the instrument's.
DEBUG_FLAG = {"backward_kernel": 1, "forward_kernel": 0}
KERNEL = re.compile(r"(backward_kernel|forward_kernel)ILi\d+E((?:Lb[01]E)+)")


def is_debug(name):
    m = KERNEL.search(name)
    if not m:
        return False
    flags = re.findall(r"Lb([01])E", m.group(2))
    return flags[DEBUG_FLAG[m.group(1)]] == "1"


def report(source, lines):
    """(printed lines, whether a production function spills or serializes)."""
    function, rows, serialized, out, bad = None, [], set(), [], False
    for line in lines:
        m = ENTRY.search(line)
        if m:
            function = m.group(1)
            continue
        m = FRAME.search(line)
        if m and function:
            rows.append([function, *map(int, m.groups()), None])
            continue
        m = REGISTERS.search(line)
        if m and rows and rows[-1][4] is None:
            rows[-1][4] = int(m.group(1))
        m = SERIALIZED.search(line)
        if m:
            serialized.add((m.group(2), m.group(1)))
        if "error" in line.lower() and "ptxas" in line:
            out.append(line.rstrip())
            bad = True
    spilling = [r for r in rows if r[2] or r[3]]
    out.append(f"{source.split('/')[-1]}: {len(rows)} functions, {len(spilling)} spill")
    for name, stack, stores, loads, registers in spilling:
        tag = "debug" if is_debug(name) else "PRODUCTION"
        out.append(f"  {tag}: {name} regs={registers} stack={stack} spill stores={stores} "
                   f"loads={loads}")
        bad |= not is_debug(name)
    for name, code in sorted(serialized):
        tag = "debug" if is_debug(name) else "PRODUCTION"
        out.append(f"  {tag}: {name} wgmma serialized ({code})")
        bad |= not is_debug(name)
    return out, bad


def main():
    lines, bad = report(sys.argv[1], sys.stdin)
    print("\n".join(lines))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
