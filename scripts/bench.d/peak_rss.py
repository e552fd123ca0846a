#!/usr/bin/env python3
"""Peak memory of sandbox-run's own processes while a workload runs (used by scripts/bench).

  peak_rss.py OUT.json REPEAT -- SANDBOX-RUN-COMMAND...

Starts the command REPEAT times (environment and cwd inherited) and samples, every 2 ms while
it runs, /proc/PID/status of the supervisor (the process started) and of its descendants that
are still the sandbox-run binary (stage 2 and the sandbox's pid 1: same argv[0]; the workload
has exec'd something else). VmHWM is the kernel's high-water mark of resident memory of that
one process, so the last sample of a process is its peak up to then.

Also runs the command once under `/usr/bin/time -f %M` (when present): the maximum resident
size over the process and all its waited-for descendants, the workload included.

Writes {"supervisor_hwm_kib": max, "helpers_hwm_kib": max, "time_maxrss_kib": n|null,
"runs": [...]} to OUT.json.
"""
import json
import os
import subprocess
import sys
import tempfile
import time


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def argv0(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0].decode(errors="replace"))
    except OSError:
        return ""


def sample_run(cmd):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    sup_name = argv0(p.pid) or os.path.basename(cmd[0])
    sup_hwm = 0
    helpers = {}  # pid -> hwm
    samples = 0
    while p.poll() is None:
        h = status_kib(p.pid, "VmHWM")
        if h:
            sup_hwm = max(sup_hwm, h)
        stack = children(p.pid)
        while stack:
            c = stack.pop()
            stack += children(c)
            if argv0(c) == sup_name:
                h = status_kib(c, "VmHWM")
                if h:
                    helpers[c] = max(helpers.get(c, 0), h)
        samples += 1
        time.sleep(0.002)
    return {
        "rc": p.returncode,
        "samples": samples,
        "supervisor_hwm_kib": sup_hwm,
        "helpers_hwm_kib": max(helpers.values(), default=0),
        "helpers_seen": len(helpers),
    }


def main():
    out, repeat, sep, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    assert sep == "--" and cmd
    runs = [sample_run(cmd) for _ in range(repeat)]
    tmaxrss = None
    if os.access("/usr/bin/time", os.X_OK):
        with tempfile.NamedTemporaryFile("r") as t:
            r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", t.name] + cmd,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            if r.returncode == 0:
                try:
                    tmaxrss = int(t.read().split()[-1])
                except (ValueError, IndexError):
                    pass
    res = {
        "command": cmd,
        "supervisor_hwm_kib": max(r["supervisor_hwm_kib"] for r in runs),
        "helpers_hwm_kib": max(r["helpers_hwm_kib"] for r in runs),
        "time_maxrss_kib": tmaxrss,
        "failed": [r["rc"] for r in runs if r["rc"] != 0],
        "runs": runs,
    }
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
