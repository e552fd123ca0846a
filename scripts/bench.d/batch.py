#!/usr/bin/env python3
"""Does a run get slower after many runs? (used by scripts/bench)

  batch.py OUT.json ROUNDS -- COMMAND...

Each round: a 0.2 s pause, then 50 runs of COMMAND back to back, each timed alone (wall
clock, from fork to reap). Leaked state (cgroup leaves, mounts, fds, anything a run leaves for
the next to walk through) shows as runs 41-50 being slower than runs 1-10 of the same batch;
comparing inside one batch keeps the machine's load drift out of it.

Writes {"first10_ms", "last10_ms", "all_ms", "first_run_ms" (medians), "failed"} to OUT.json.
"""
import json
import statistics
import subprocess
import sys
import time


def main():
    out, rounds, sep, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    assert sep == "--" and cmd
    batches = []
    failed = 0
    for _ in range(rounds):
        time.sleep(0.2)
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            rc = subprocess.call(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            times.append((time.perf_counter() - t0) * 1000)
            failed += rc != 0
        batches.append(times)
    med = statistics.median
    res = {
        "rounds": rounds,
        "first_run_ms": med(b[0] for b in batches),
        "first10_ms": med(t for b in batches for t in b[:10]),
        "last10_ms": med(t for b in batches for t in b[-10:]),
        "all_ms": med(t for b in batches for t in b),
        "failed": failed,
        "batches": batches,
    }
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
