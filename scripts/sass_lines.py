#!/usr/bin/env python3
"""Where a kernel loop's instructions come from, without a GPU: the SASS of one function (from
a library or object built with -lineinfo, as the project's builds are) attributed to source
lines through nvdisasm's line table, for the loops (backward branches) of that function.
    sass_lines.py LIBRARY --function REGEX                 # the function's loops, largest first
    sass_lines.py LIBRARY --function REGEX --loop N [--top K] [--by-file]
LIBRARY: a library, an object, a cubin, or nvdisasm -g text (.txt).
Counts are static (every path of the loop, the masked and the unmasked ones alike), per source
line: the line's opcodes and its text. Only the innermost location is known (no inlining
chain), so a helper's line stands for every caller inlined there. nvdisasm and cuobjdump come
from PATH, else from PyPI's nvidia-cuda-nvdisasm / nvidia-cuda-cuobjdump (nvidia/cu13/bin).
"""
import argparse
import collections
import pathlib
import re
import subprocess
import sys
import tempfile

from sass_compare import cuobjdump
from sass_hotspots import opcode  # (this folder's; the same opcode rule)

SECTION = re.compile(r"^//-+ \.text\.(\S+) -+")
LOCATION = re.compile(r'//## File "([^"]+)", line (\d+)')
INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+([^;]*);")
BRANCH_TARGET = re.compile(r"\bBRA(?:\.\S+)?\s+(?:!?U?P\w+,\s*)?(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")
LABEL = re.compile(r"^\.L_x_(\d+):")
LABEL_TARGET = re.compile(r"`\(\.L_x_(\d+)\)")
MIN_LOOP = 64  # instructions: shorter backward branches are spin waits


def nvdisasm():
    tool = pathlib.Path(cuobjdump()).with_name("nvdisasm")
    return str(tool) if tool.exists() else "nvdisasm"


def disassemble(library, pattern):
    """(function name, [(address, text, (file, line) or None)], {label: address})."""
    if library.endswith(".txt"):  # nvdisasm -g output already
        found = parse(pathlib.Path(library).read_text(), pattern)
        return found or sys.exit(f"sass_lines.py: no function matches {pattern!r}")
    with tempfile.TemporaryDirectory() as folder:
        if library.endswith(".cubin"):
            cubins = [pathlib.Path(library)]
        else:
            subprocess.run([cuobjdump(), "-xelf", "all", str(pathlib.Path(library).resolve())],
                           cwd=folder, check=True, capture_output=True)
            cubins = sorted(pathlib.Path(folder).glob("*.cubin"))
        for cubin in cubins:
            text = subprocess.run([nvdisasm(), "-g", "-c", str(cubin)], check=True,
                                  capture_output=True, text=True).stdout
            found = parse(text, pattern)
            if found:
                return found
    sys.exit(f"sass_lines.py: no function matches {pattern!r}")


def parse(text, pattern):
    name, instructions, labels, location = None, [], {}, None
    matches = []
    for line in text.splitlines():
        section = SECTION.match(line)
        if section:
            if name:
                matches.append((name, instructions, labels))
            name = section.group(1) if re.search(pattern, section.group(1)) else None
            instructions, labels, location = [], {}, None
            continue
        if not name:
            continue
        label = LABEL.match(line.strip())
        if label:
            labels[label.group(1)] = None  # the next instruction's address
            continue
        found = LOCATION.search(line)
        if found:
            location = (found.group(1).split("/src/")[-1], int(found.group(2)))
            continue
        found = INSTRUCTION.match(line)
        if found:
            address = int(found.group(1), 16)
            for key in [k for k, v in labels.items() if v is None]:
                labels[key] = address
            instructions.append((address, " ".join(found.group(2).split()), location))
    if name:
        matches.append((name, instructions, labels))
    if len(matches) > 1:
        sys.exit("sass_lines.py: several functions match: " + " ".join(m[0] for m in matches))
    return matches[0] if matches else None


def loops(instructions, labels, min_loop=MIN_LOOP):
    """[(first index, last index)] of backward branches, largest first."""
    index = {address: i for i, (address, _, _) in enumerate(instructions)}
    found = []
    for i, (address, text, _) in enumerate(instructions):
        if "BRA" not in text:
            continue
        label = LABEL_TARGET.search(text)
        target = labels.get(label.group(1)) if label else None
        if target is None:
            hexa = BRANCH_TARGET.search(text)
            target = int(hexa.group(1), 16) if hexa and hexa.group(1) else None
        if target is not None and target < address and i - index.get(target, i) >= min_loop:
            found.append((index[target], i))
    return sorted(set(found), key=lambda r: r[0] - r[1])


def source_text(cache, root, file, line):
    if file not in cache:
        path = root / "src" / file
        cache[file] = path.read_text().splitlines() if path.exists() else []
    lines = cache[file]
    return lines[line - 1].strip()[:72] if 0 < line <= len(lines) else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library")
    parser.add_argument("--function", required=True, help="regex on the mangled name (one match)")
    parser.add_argument("--loop", type=int, help="which loop (the listing's number)")
    parser.add_argument("--top", type=int, default=40, help="source lines shown")
    parser.add_argument("--by-file", action="store_true", help="totals per source file too")
    parser.add_argument("--min-loop", type=int, default=MIN_LOOP,
                        help="instructions; shorter backward branches are not listed")
    args = parser.parse_args()
    name, instructions, labels = disassemble(args.library, args.function)
    ranges = loops(instructions, labels, args.min_loop)
    print(name)
    for number, (first, last) in enumerate(ranges):
        print(f"  loop {number}: {instructions[first][0]:#x}-{instructions[last][0]:#x}, "
              f"{last - first + 1} instructions")
    if args.loop is None:
        return
    first, last = ranges[args.loop]
    per_line = collections.defaultdict(collections.Counter)
    for _, text, location in instructions[first:last + 1]:
        per_line[location][opcode(text)] += 1
    root = pathlib.Path(__file__).resolve().parent.parent
    cache = {}
    total = last - first + 1
    if args.by_file:
        per_file = collections.Counter()
        for location, counts in per_line.items():
            per_file[location[0] if location else "?"] += sum(counts.values())
        for file, count in per_file.most_common():
            print(f"{count:6d} {100 * count / total:5.1f}%  {file}")
    ranked = sorted(per_line.items(), key=lambda item: -sum(item[1].values()))
    for location, counts in ranked[:args.top]:
        where = f"{location[0]}:{location[1]}" if location else "?"
        ops = " ".join(f"{o} {c}" for o, c in counts.most_common(4))
        text = source_text(cache, root, *location) if location else ""
        print(f"{sum(counts.values()):5d}  {where:44s} {ops:36s} | {text}")


if __name__ == "__main__":
    main()
