"""scripts/text-order's helper.

probes BIN MAP          one tracefs uprobe definition per function of BIN, from lld's
                        link map MAP (the binary is stripped)
order BIN MAP TRACE     the ordering file from the uprobe hits in TRACE: the functions the
                        supervisors ran (the processes that ran `main`), in first-hit order,
                        then those only their forks ran
"""
import collections
import re
import subprocess
import sys


def functions(binary, link_map):
    """{address: [names]} of the symbols in .text (from lld's -Map output, whose lines are
    `VMA LMA Size Align` then an output section, an input section `file:(section)` or, more
    indented, a symbol), and the executable LOAD segments of the binary."""
    segs = []
    for line in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        p = line.split()
        if p and p[0] == "LOAD" and "E" in p[6:]:
            segs.append((int(p[2], 16), int(p[1], 16), int(p[5], 16)))  # vaddr, offset, size
    names = collections.defaultdict(list)
    out = None
    row = re.compile(r"\s*([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+\d+( +)(\S.*)")
    with open(link_map) as f:
        for line in f:
            m = row.fullmatch(line.rstrip("\n"))
            if not m:
                continue
            depth, what = len(m.group(2)), m.group(3)
            if depth < 4:
                out = what
            elif depth > 12 and out == ".text":
                names[int(m.group(1), 16)].append(what)
    return names, segs


def probes(binary, link_map, limit=None):
    names, segs = functions(binary, link_map)
    addrs = sorted(names)
    if limit is not None:
        # the first `limit` and `main` (what `order` starts from): for testing the script
        main = [a for a, n in names.items() if "main" in n]
        addrs = sorted(set(addrs[:limit]) | set(main))
    for addr in addrs:
        for vaddr, off, size in segs:
            if vaddr <= addr < vaddr + size:
                print(f"p:textorder/f{addr:x} {binary}:0x{addr - vaddr + off:x}")


def order(binary, link_map, trace):
    names, _ = functions(binary, link_map)
    main = [a for a, n in names.items() if "main" in n]
    if len(main) != 1:
        sys.exit("text_order: no single `main` symbol")
    hits = []
    for line in open(trace):
        m = re.match(r"\s*.+-(\d+)\s+\[\d+\].*?: f([0-9a-f]+):", line)
        if m:
            hits.append((int(m.group(1)), int(m.group(2), 16)))
    supervisors = {pid for pid, a in hits if a == main[0]}
    if not supervisors:
        sys.exit("text_order: no run reached main (were the uprobes hit?)")
    first, rest, seen = [], [], set()
    for pid, a in hits:
        if pid in supervisors and a not in seen:
            seen.add(a)
            first.append(a)
    for pid, a in hits:
        if a not in seen:
            seen.add(a)
            rest.append(a)
    for a in first + rest:
        for n in names[a]:
            print(n)
    print(f"text_order: {len(supervisors)} runs; {len(first)} functions in the supervisor, "
          f"{len(rest)} more in its forks", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["probes"] and len(sys.argv) in (4, 5):
        probes(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) == 5 else None)
    elif sys.argv[1:2] == ["order"] and len(sys.argv) == 5:
        order(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
