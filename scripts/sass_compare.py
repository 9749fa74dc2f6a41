#!/usr/bin/env python3
"""Compares the SASS of two builds function by function, instruction by instruction: which
kernels are identical, and for the others the instruction count and the opcodes that moved.
For "this change leaves those kernels' SASS unchanged" claims and for reading what a change did
to the ones it touched. Input: libraries, objects or `cuobjdump -sass` text files.
    sass_compare.py BUILD_A BUILD_B [--filter REGEX] [--opcodes N]
Addresses and encodings are ignored; register names are not (a renamed register is a change).
cuobjdump comes from PATH, else from PyPI's nvidia-cuda-cuobjdump (nvidia/cu13/bin).
"""
import argparse
import collections
import pathlib
import re
import shutil
import subprocess
import sys

from sass_hotspots import opcode  # (this folder's; the same opcode rule)

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+([^;]*);")


def parse(sass_text):
    """{function name: [instruction text without address or encoding]}."""
    functions, current = {}, None
    for line in sass_text.splitlines():
        match = FUNCTION.search(line)
        if match:
            current = functions.setdefault(match.group(1), [])
            continue
        match = INSTRUCTION.match(line)
        if match and current is not None:
            current.append(" ".join(match.group(1).split()))
    return functions


def cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia  # PyPI's CUDA packages
        for root in nvidia.__path__:
            candidate = pathlib.Path(root) / "cu13" / "bin" / "cuobjdump"
            if candidate.exists():
                return str(candidate)
    except ImportError:
        pass
    sys.exit("sass_compare.py: no cuobjdump (PATH, or pip install nvidia-cuda-cuobjdump)")


def read(path):
    if path.endswith((".sass", ".txt")):
        return pathlib.Path(path).read_text()
    return subprocess.run([cuobjdump(), "-sass", path], check=True, capture_output=True,
                          text=True).stdout


def compare(a, b, pattern, opcodes):
    names = sorted(n for n in set(a) | set(b) if re.search(pattern, n))
    same = [n for n in names if a.get(n) == b.get(n)]
    lines = [f"{len(same)} identical, {len(names) - len(same)} different "
             f"(of {len(names)} functions matching {pattern!r})"]
    for name in names:
        if name in same:
            continue
        if name not in a or name not in b:
            lines.append(f"only in {'B' if name not in a else 'A'}: {name}")
            continue
        count_a, count_b = collections.Counter(map(opcode, a[name])), collections.Counter(
            map(opcode, b[name]))
        moved = sorted(((count_b[o] - count_a[o], o) for o in set(count_a) | set(count_b)
                        if count_b[o] != count_a[o]), key=lambda m: (-abs(m[0]), m[1]))
        delta = " ".join(f"{o} {d:+d}" for d, o in moved[:opcodes])
        delta = delta or "(same opcodes; operands or order differ)"
        lines.append(f"{name}: {len(a[name])} -> {len(b[name])} instructions; {delta}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_a")
    parser.add_argument("build_b")
    parser.add_argument("--filter", default="", help="regex on the (mangled) function names")
    parser.add_argument("--opcodes", type=int, default=8, help="opcode deltas shown per function")
    args = parser.parse_args()
    a, b = parse(read(args.build_a)), parse(read(args.build_b))
    print("\n".join(compare(a, b, args.filter, args.opcodes)))


if __name__ == "__main__":
    main()
