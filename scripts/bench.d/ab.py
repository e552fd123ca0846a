#!/usr/bin/env python3
"""Interleaved A/B of two sandbox-run binaries (used by scripts/bench-ab).

  ab.py REPO PROFILE HOME BWRAP ROUNDS TRUE_RUNS NODE_RUNS TIMINGS_RUNS OLD NEW

Each round runs bare, bubblewrap as users write it, OLD and NEW in a fresh random order per
iteration, so that whatever the machine does meanwhile falls on all four alike; the workload
is `true`, then `node empty.js` (skipped when NODE_RUNS is 0). Runs are spawned directly from
a clean environment and timed from outside (wall, median per runner). Then OLD and NEW
alternate `--timings -- true` runs, and the step medians are printed side by side.
"""
import os
import random
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timings  # noqa: E402


def bwrap_argv(bwrap, repo):
    a = [bwrap, "--unshare-all", "--die-with-parent", "--new-session",
         "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for p in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]:
        if os.path.islink(p):
            a += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            a += ["--ro-bind", p, p]
    return a + ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", repo, repo,
                "--chdir", repo, "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
                "--setenv", "HOME", "/tmp", "--"]


def spawn(argv, env):
    """Wall ms and CPU ms (user + system of the waited-for tree) of one run; exit must be 0."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, env)
    _, status = os.waitpid(pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench-ab: {' '.join(argv)} failed (exit {os.waitstatus_to_exitcode(status)})")
    return wall, (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000


def main():
    repo, profile, home, bwrap = sys.argv[1:5]
    rounds, true_runs, node_runs, timings_runs = map(int, sys.argv[5:9])
    old, new = sys.argv[9:11]
    env = {"PATH": "/usr/bin:/bin", "HOME": home}
    os.chdir(repo)
    runners = {"bare": [], "bwrap": bwrap_argv(bwrap, repo),
               "old": [old, "--profile", profile, "--"], "new": [new, "--profile", profile, "--"]}
    print("| workload, round | bare | bwrap added | old added | new added | new - old "
          "| old / bwrap | new / bwrap | old CPU | new CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for wname, wl, n in [("`true`", ["true"], true_runs), ("`node empty.js`", ["node", "empty.js"], node_runs)]:
        for rnd in range(1, rounds + 1):
            if n == 0:
                continue
            wall = {k: [] for k in runners}
            cpu = {k: [] for k in runners}
            for _ in range(n):
                order = list(runners)
                random.shuffle(order)
                for k in order:
                    w, c = spawn(runners[k] + wl, env)
                    wall[k].append(w)
                    cpu[k].append(c)
            med = {k: statistics.median(v) for k, v in wall.items()}
            add = {k: med[k] - med["bare"] for k in runners}
            ratio = lambda k: f"{add[k] / add['bwrap']:.2f}x" if add["bwrap"] > 0 else "n/a"
            print(f"| {wname}, {n} runs each, round {rnd} | {med['bare']:.2f} | +{add['bwrap']:.2f} "
                  f"| +{add['old']:.2f} | +{add['new']:.2f} | {add['new'] - add['old']:+.2f} "
                  f"| {ratio('old')} | {ratio('new')} | {statistics.mean(cpu['old']):.2f} "
                  f"| {statistics.mean(cpu['new']):.2f} |")
    if timings_runs == 0:
        return
    steps = {"old": {}, "new": {}}
    order = {"old": [], "new": []}
    totals = {"old": [], "new": []}
    for _ in range(timings_runs):
        o = ["old", "new"]
        random.shuffle(o)
        for k in o:
            b = old if k == "old" else new
            r = subprocess.run([b, "--timings", "--profile", profile, "--", "true"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, errors="replace")
            parsed = None
            for line in r.stderr.splitlines():
                parsed = timings.parse(line) or parsed
            if r.returncode != 0 or not parsed:
                continue
            got, total = parsed
            totals[k].append(total)
            for name, ms, par in got:
                if name not in steps[k]:
                    steps[k][name] = []
                    order[k].append(name + (" (meanwhile)" if par else ""))
                steps[k][name].append(ms)
    print()
    print(f"`--timings -- true`, {timings_runs} alternating runs of each, medians in ms:")
    print()
    print("| step | old | new |")
    print("|---|---|---|")
    # old's order, with each step only new has placed after the step new printed before it
    names = list(order["old"])
    prev = None
    for nme in order["new"]:
        if nme not in names:
            names.insert(names.index(prev) + 1 if prev in names else len(names), nme)
        prev = nme
    for label in names:
        key = label.removesuffix(" (meanwhile)")
        cell = lambda k: f"{statistics.median(steps[k][key]):.2f}" if key in steps[k] else ""
        print(f"| {label} | {cell('old')} | {cell('new')} |")
    if totals["old"] and totals["new"]:
        print(f"| total as sandbox-run counts it | {statistics.median(totals['old']):.2f} "
              f"| {statistics.median(totals['new']):.2f} |")


if __name__ == "__main__":
    main()
