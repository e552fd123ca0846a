#!/usr/bin/env python3
"""Split one sandbox-run start into steps from `strace -f -ttt` logs (used by scripts/bench).

  strace_steps.py OUT.json TRACE...

sandbox-run has no --timings yet, so the steps are cut at milestone syscalls seen from outside:

  supervisor: profile, gate, plan   execve of sandbox-run   -> first mkdir under /sys/fs/cgroup
  cgroup leaf: create + limits      that mkdir              -> clone of stage 2
                                    (cgroup v1 as root: made after the clone, meanwhile; shown
                                    apart, from that mkdir to the supervisor's next write)
  stage 2: spawn + exec             clone of stage 2        -> unshare
  namespaces (unshare, id maps)     unshare                 -> first mount after it
  mounts + pivot_root               first mount             -> first syscall of the workload process
  workload setup (rlimits, caps)    that                    -> landlock_create_ruleset with rules
  landlock (rules + restrict)       landlock_create_ruleset -> landlock_restrict_self
  fds + seccomp install             landlock_restrict_self  -> execve of the workload
  workload (`true`)                 execve                  -> workload exits
  teardown (reap, cgroup, report)   workload exits          -> sandbox-run exits

ptrace makes every syscall cost tens of microseconds, so steps with many syscalls (mounts,
landlock rules) look dearer than they are natively: the milliseconds and shares are indicative,
the syscall counts are exact. A milestone that is not found (the implementation changed, or a
layer is degraded) gives its step's time to the next step found.
"""
import json
import re
import statistics
import sys

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
STEPS = [
    "supervisor: profile, gate, plan",
    "cgroup leaf: create + limits",
    "stage 2: spawn + exec",
    "namespaces (unshare, id maps)",
    "mounts + pivot_root",
    "workload setup (rlimits, caps, setsid)",
    "landlock (rules + restrict)",
    "fds + seccomp install",
    "workload (true)",
    "teardown (reap, cgroup removal, report)",
]


def parse(path):
    ev = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if m:
                ev.append((int(m.group(1)), float(m.group(2)), m.group(3)))
    return ev


def name(rest):
    m = re.match(r"([a-z_0-9]+)\(", rest)
    return m.group(1) if m else None


def split(ev):
    sup = ev[0][0]
    t = [None] * (len(STEPS) + 1)
    t[0] = ev[0][1]
    t[-1] = ev[-1][1]

    def first(pred, start=0):
        for i in range(start, len(ev)):
            if pred(ev[i]):
                return i
        return None

    is_clone = lambda e: name(e[2]) in ("clone", "clone3", "vfork", "fork") and "CLONE_THREAD" not in e[2]
    i_cg = first(lambda e: e[0] == sup and re.match(r'mkdir\("/sys/fs/cgroup', e[2]))
    i_st2 = first(lambda e: e[0] == sup and is_clone(e))
    i_uns = first(lambda e: name(e[2]) == "unshare")
    i_m1 = first(lambda e: name(e[2]) == "mount", i_uns or 0) if i_uns is not None else None
    # The workload: the process whose last execve is not sandbox-run re-executing itself.
    wl = None
    for p, _, rest in ev:
        if name(rest) == "execve" and "/proc/self/exe" not in rest and p != sup:
            wl = p
    i_wl = first(lambda e: e[0] == wl) if wl else None
    i_ll = first(lambda e: e[0] == wl and e[2].startswith("landlock_create_ruleset({")) if wl else None
    i_llr = first(lambda e: e[0] == wl and name(e[2]) == "landlock_restrict_self") if wl else None
    i_ex = None
    if wl:
        for i, e in enumerate(ev):
            if e[0] == wl and name(e[2]) == "execve":
                i_ex = i
    i_exit = first(lambda e: e[0] == wl and (e[2].startswith("+++") or name(e[2]) == "exit_group"),
                   i_ex or 0) if wl else None
    # cgroup v1 as root: the supervisor makes the leaf once stage 2 is cloned, while stage 2
    # sets up its namespaces. Then the leaf is not a step on the way (it takes no time between
    # the plan and the clone) but work done meanwhile: from the supervisor's first mkdir there
    # to its next write (the leaf's tasks files, sent to stage 2).
    beside = None
    if i_cg is not None and i_st2 is not None and i_cg > i_st2:
        i_sent = first(lambda e: e[0] == sup and name(e[2]) == "write", i_cg)
        if i_sent is not None:
            n = sum(1 for e in ev[i_cg:i_sent + 1] if e[0] == sup and name(e[2]))
            beside = ((ev[i_sent][1] - ev[i_cg][1]) * 1000, n)
        i_cg = i_st2
    marks = [i_cg, i_st2, i_uns, i_m1, i_wl, i_ll, i_llr, i_ex, i_exit]
    idx = [0] + marks + [len(ev)]
    for k, i in enumerate(marks, start=1):
        t[k] = ev[i][1] if i is not None else None
    # prefix[i]: syscalls started before line i ("<... resumed>" and "+++" lines are not)
    prefix = [0]
    for e in ev:
        prefix.append(prefix[-1] + (1 if name(e[2]) else 0))
    # A missing milestone: its step is empty and the next step found takes its time.
    last_t, last_i = t[0], 0
    out = []
    for k in range(len(STEPS)):
        end_t, end_i = t[k + 1], idx[k + 1]
        if end_t is None:
            out.append((0.0, 0))
            continue
        out.append(((end_t - last_t) * 1000, prefix[end_i] - prefix[last_i]))
        last_t, last_i = end_t, end_i
    return out, [STEPS[k] for k, m in enumerate(marks) if m is None], beside


def main():
    out_path, traces = sys.argv[1], sys.argv[2:]
    per = []
    missing = set()
    totals = []
    counts = []
    besides = []
    for tr in traces:
        ev = parse(tr)
        if len(ev) < 2:
            continue
        steps, miss, beside = split(ev)
        per.append(steps)
        if beside:
            besides.append(beside)
        missing.update(miss)
        totals.append((ev[-1][1] - ev[0][1]) * 1000)
        counts.append(sum(1 for e in ev if name(e[2])))
    if not per:
        json.dump({"error": "no usable strace log"}, open(out_path, "w"))
        return
    res = {
        "runs": len(per),
        "total_ms": statistics.median(totals),
        "syscalls": int(statistics.median(counts)),
        "missing_milestones": sorted(missing),
        "steps": [
            {
                "step": STEPS[k],
                "ms": statistics.median(p[k][0] for p in per),
                "syscalls": int(statistics.median(p[k][1] for p in per)),
            }
            for k in range(len(STEPS))
        ],
    }
    if besides:
        res["meanwhile"] = {
            "step": "cgroup leaf: create + limits, by the supervisor while stage 2 sets up",
            "ms": statistics.median(b[0] for b in besides),
            "syscalls": int(statistics.median(b[1] for b in besides)),
        }
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
