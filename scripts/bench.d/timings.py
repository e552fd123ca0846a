#!/usr/bin/env python3
"""Startup by step from sandbox-run's own `--timings` line (used by scripts/bench).

  timings.py OUT.json RUNS -- SANDBOX-RUN-COMMAND-WITH---timings...

Runs the command RUNS times (stdout to /dev/null) and parses, from stderr, the line

  sandbox-run: timings: plan 1.20ms, cgroup 0.31ms, stage 2 started 2.10ms, ...,
               rlimits, caps, no_new_privs 0.10ms, ..., cgroup removal 0.40ms; total 9.80ms

Steps are taken in the order printed, whatever their names (a name may contain commas).
Writes {"runs", "total_ms": {"median", "p10", "p90"}, "steps": [{"step", "median", "p10",
"p90", "parallel"}], "failed"} to OUT.json.
"""
import json
import re
import statistics
import subprocess
import sys

STEP = re.compile(r"(.+?) (\d+(?:\.\d+)?)ms(?: \((.+?) (\d+(?:\.\d+)?)ms\))?(?:, |$)")


def parse(line):
    """[(step, ms, parallel)]: a step may carry, in parentheses, work done meanwhile on the other
    core (`cgroup 0.04ms (its leaf beside stage 2 0.70ms)`), which is its own row, flagged
    parallel: it is not on the way to the workload, so not in the sum."""
    m = re.search(r"timings: (.*); total (\d+(?:\.\d+)?)ms", line)
    if not m:
        return None
    steps = []
    for s in STEP.finditer(m.group(1)):
        steps.append((s.group(1), float(s.group(2)), False))
        if s.group(3):
            steps.append((f"{s.group(1)}: {s.group(3)}", float(s.group(4)), True))
    return steps, float(m.group(2))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main():
    out, runs, sep, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    assert sep == "--" and cmd
    order, per_step, totals, failed, parallel = [], {}, [], 0, set()
    for _ in range(runs):
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, errors="replace")
        parsed = None
        for line in r.stderr.splitlines():
            parsed = parse(line) or parsed
        if r.returncode != 0 or not parsed:
            failed += 1
            continue
        steps, total = parsed
        totals.append(total)
        for name, ms, par in steps:
            if name not in per_step:
                order.append(name)
                per_step[name] = []
                if par:
                    parallel.add(name)
            per_step[name].append(ms)
    res = {"runs": len(totals), "failed": failed, "steps": []}
    if totals:
        res["total_ms"] = {"median": statistics.median(totals), "p10": pct(totals, 0.1),
                           "p90": pct(totals, 0.9)}
        for name in order:
            xs = per_step[name]
            res["steps"].append({"step": name, "median": statistics.median(xs),
                                 "p10": pct(xs, 0.1), "p90": pct(xs, 0.9),
                                 "parallel": name in parallel})
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
