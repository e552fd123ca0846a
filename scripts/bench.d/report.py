#!/usr/bin/env python3
"""Medians, ratios and the targets (PASS/MISS) from one scripts/bench run.

  report.py WORKDIR

Reads what scripts/bench left in WORKDIR (meta.tsv, hf-*.json from hyperfine --export-json,
internal.tsv, rss-*.json, steps.json, net.json), prints the tables (Markdown, readable as text) and
writes WORKDIR/summary.json. Only reports: no exit status depends on a timing.
"""
import json
import os
import statistics
import sys

# In the order scripts/bench passes them to hyperfine. bwrap: as users write it (the everyday
# baseline); bwrap-same: given the profile's binds one by one (the same work).
RUNNERS = ["bare", "bwrap", "bwrap-same", "sandbox-run"]
MIB = 1024 * 1024


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt_ms(v):
    if v is None:
        return "n/a"
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def fmt_ratio(a, b):
    if a is None or b is None or b <= 0:
        return "n/a"
    return f"{a / b:.2f}x"


def fmt_add(a, b):
    if a is None or b is None:
        return "n/a"
    return f"{a - b:+.2f}"


def mib(kib):
    return "n/a" if kib is None else f"{kib / 1024:.1f} MiB"


def main():
    work = sys.argv[1]
    meta = {}
    with open(os.path.join(work, "meta.tsv")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            meta[k] = v
    summary = {"meta": meta, "wall_ms": {}, "targets": []}
    out = []
    p = out.append

    p(f"## sandbox-run benchmark ({meta.get('mode', '?')})")
    p("")
    p(f"- host: Linux {meta.get('kernel')}, {meta.get('cpus')} CPUs; load average "
      f"{meta.get('load_start')} at the start, {meta.get('load_end')} at the end")
    p(f"- sandbox-run {meta.get('sbx_version')} ({meta.get('sbx_bin')}); "
      f"profile scripts/bench.d/bench.toml (extends validate); layers: {meta.get('layers')}")
    if meta.get("notes"):
        for n in meta["notes"].split(" | "):
            p(f"- NOTE: {n}")
    p(f"- {meta.get('bwrap_version')}, {meta.get('hyperfine_version')}; every command starts from "
      f"`env -i PATH=/usr/bin:/bin HOME=<empty dir>`, timed whole from outside by hyperfine "
      f"(wall clock, `--shell=none`)")
    p("")

    # --- wall times -------------------------------------------------------------------------
    rows = [
        ("true", "`true` (startup floor)", 1),
        ("node", "`node empty.js`", 1),
        ("npm", "`npm --version`", 1),
        ("syscalls", f"syscall helper, whole command ({meta.get('syscall_n')} getppid + {meta.get('syscall_n')} stat)", 1),
        ("seq50", "50 x `true` back to back, per run", 50),
        ("par50", "50 x `true` two at a time, per run", 50),
    ]
    p("### Wall time per run, median (ms)")
    p("")
    p("bwrap: as users write it (`--unshare-all --die-with-parent --new-session`, /usr and /etc "
      "read-only, `--proc`, `--dev`, tmpfs /tmp, the repo bound, `--clearenv`); bwrap-same: given "
      "the profile's read-only binds one by one. Added = median minus bare's median.")
    p("")
    p("| workload | runs | bare | bwrap | bwrap-same | sandbox-run | bwrap added | "
      "bwrap-same added | sandbox-run added | sandbox-run added / bwrap's | / bwrap-same's |")
    p("|---|---|---|---|---|---|---|---|---|---|---|")
    wall = {}
    for key, label, per in rows:
        data = load_json(os.path.join(work, f"hf-{key}.json"))
        med, nruns = {}, "n/a"
        if data:
            for runner, r in zip(RUNNERS, data.get("results", [])):
                if r.get("times"):
                    med[runner] = statistics.median(r["times"]) * 1000 / per
                    nruns = str(len(r["times"]))
        b, w, ws, s = (med.get(k) for k in RUNNERS)
        wall[key] = {"bare": b, "bwrap": w, "bwrap-same": ws, "sandbox-run": s, "runs": nruns}
        add = lambda x: None if x is None or b is None else x - b
        p(f"| {label} | {nruns} | {fmt_ms(b)} | {fmt_ms(w)} | {fmt_ms(ws)} | {fmt_ms(s)} | "
          f"{fmt_add(w, b)} | {fmt_add(ws, b)} | {fmt_add(s, b)} | {fmt_ratio(add(s), add(w))} | "
          f"{fmt_ratio(add(s), add(ws))} |")
    summary["wall_ms"] = wall
    p("")
    p("The 50-run rows divide the median of the whole batch (driven by `xargs -n1 -P1` or `-P2`) "
      "by 50.")
    p("")
    p("Spread of the same runs: 25th-75th percentile per run (ms)")
    p("")
    p("| workload | bare | bwrap | bwrap-same | sandbox-run |")
    p("|---|---|---|---|---|")
    for key, label, per in rows:
        data = load_json(os.path.join(work, f"hf-{key}.json"))
        cells = []
        for runner, r in zip(RUNNERS, (data or {}).get("results", [])):
            ts = sorted(x * 1000 / per for x in r.get("times") or [])
            if len(ts) >= 2:
                q = statistics.quantiles(ts, n=4, method="inclusive")
                cells.append(f"{fmt_ms(q[0])}-{fmt_ms(q[2])}")
                wall[key][runner + "_iqr"] = [q[0], q[2]]
            else:
                cells.append("n/a")
        cells += ["n/a"] * (len(RUNNERS) - len(cells))
        p(f"| {label} | " + " | ".join(cells) + " |")
    p("")
    p("CPU time per run, user + system (ms, mean; hyperfine's rusage of the command and its "
      "waited-for descendants. bwrap: mostly its own setup, since it exits without reaping its payload, "
      "whose usage then never reaches the caller)")
    p("")
    p("| workload | bare | bwrap | bwrap-same | sandbox-run |")
    p("|---|---|---|---|---|")
    for key, label, per in rows:
        data = load_json(os.path.join(work, f"hf-{key}.json"))
        cells = []
        for runner, r in zip(RUNNERS, (data or {}).get("results", [])):
            if r.get("user") is not None and r.get("system") is not None:
                u, sy = r["user"] * 1000 / per, r["system"] * 1000 / per
                cells.append(f"{fmt_ms(u)} + {fmt_ms(sy)}")
                wall[key][runner + "_cpu_ms"] = [u, sy]
            else:
                cells.append("n/a")
        cells += ["n/a"] * (len(RUNNERS) - len(cells))
        p(f"| {label} | " + " | ".join(cells) + " |")
    p("")

    # --- syscall helper timed inside -------------------------------------------------------------
    internal = {k: [] for k in RUNNERS}
    try:
        with open(os.path.join(work, "internal.tsv")) as f:
            for line in f:
                runner, kv = line.rstrip("\n").split("\t", 1)
                d = dict(x.split("=", 1) for x in kv.split())
                internal.setdefault(runner, []).append({k: float(v) for k, v in d.items()})
    except OSError:
        pass
    inside = {}
    if any(internal.values()):
        p(f"### Syscall helper timed inside (median over {meta.get('internal_rounds')} processes "
          f"per runner, interleaved; each process: median of 10 rounds)")
        p("")
        p("| runner | getppid (ns/call) | stat (ns/call) | both loops (ms) | loops vs bare | loops vs bwrap |")
        p("|---|---|---|---|---|---|")
        for r in RUNNERS:
            xs = internal.get(r) or []
            if not xs:
                continue
            m = {k: statistics.median(x[k] for x in xs) for k in ("getppid_ns", "stat_ns", "loop_ms")}
            inside[r] = m
        for r in RUNNERS:
            if r in inside:
                m = inside[r]
                base = inside.get("bare", {}).get("loop_ms")
                bw = inside.get("bwrap", {}).get("loop_ms")
                p(f"| {r} | {m['getppid_ns']:.0f} | {m['stat_ns']:.0f} | {m['loop_ms']:.1f} | "
                  f"{fmt_ratio(m['loop_ms'], base)} | {fmt_ratio(m['loop_ms'], bw)} |")
        p("")
    summary["syscalls_inside"] = inside

    # --- memory and size --------------------------------------------------------------------------
    p("### Memory and size")
    p("")
    sup = []
    for name, label in (("sleep", f"`sleep {meta.get('sleep_s')}`"),
                        ("head", "`head -c 32M /dev/zero` (output through the supervisor)"),
                        ("npm", "`npm --version`")):
        d = load_json(os.path.join(work, f"rss-{name}.json"))
        if not d:
            continue
        sup.append(d["supervisor_hwm_kib"])
        summary[f"rss_{name}"] = d
        p(f"- {label}: supervisor peak RSS (VmHWM, sampled every 2 ms) {mib(d['supervisor_hwm_kib'])}; "
          f"stage 2 / sandbox pid 1 {mib(d['helpers_hwm_kib'] or None)}; "
          f"`/usr/bin/time -f %M` {mib(d['time_maxrss_kib'])} (max over sandbox-run and every "
          f"waited-for descendant, the workload included)")
    stripped = int(meta["stripped_bytes"]) if meta.get("stripped_bytes") else None
    unstripped = int(meta["unstripped_bytes"]) if meta.get("unstripped_bytes") else None
    if stripped:
        p(f"- release binary: {unstripped / MIB:.2f} MiB as built, {stripped / MIB:.2f} MiB stripped "
          f"(static, {meta.get('sbx_bin_kind')})")
    p("")

    # --- startup steps ----------------------------------------------------------------------------
    tim = load_json(os.path.join(work, "timings.json"))
    if tim and tim.get("steps"):
        tot = sum(x["median"] for x in tim["steps"] if not x.get("parallel")) or 1
        tm = tim["total_ms"]
        p(f"### Startup of `sandbox-run --timings -- true` by step (sandbox-run's own clock, "
          f"median of {tim['runs']} runs)")
        p("")
        p(f"Total as sandbox-run reports it: median {tm['median']:.2f} ms (p10 {tm['p10']:.2f}, "
          f"p90 {tm['p90']:.2f}). Shares are of the sum of the step medians ({tot:.2f} ms); a "
          f"step marked meanwhile ran on the other core during the one above it, and is not in "
          f"the sum.")
        p("")
        p("| step | median ms | p10 | p90 | share |")
        p("|---|---|---|---|---|")
        for x in tim["steps"]:
            share = "meanwhile" if x.get("parallel") else f"{100 * x['median'] / tot:.0f} %"
            p(f"| {x['step']} | {x['median']:.2f} | {x['p10']:.2f} | {x['p90']:.2f} | {share} |")
        if tim.get("failed"):
            p("")
            p(f"{tim['failed']} run(s) failed or printed no timings line.")
        p("")
        summary["timings"] = tim
    elif meta.get("timings_note"):
        p(f"### Startup by step: {meta['timings_note']}")
        p("")
    steps = load_json(os.path.join(work, "steps.json"))
    if steps and "steps" in steps:
        tot = sum(s["ms"] for s in steps["steps"]) or 1
        p(f"### Syscalls of `sandbox-run -- true` by step (strace -f -ttt, median of {steps['runs']} "
          f"runs)")
        p("")
        p(f"Under strace the whole run takes {steps['total_ms']:.1f} ms and {steps['syscalls']} "
          f"syscalls; ptrace inflates every syscall, so steps with many syscalls look dearer than "
          f"they are: the counts are exact, the times indicative"
          + ("." if tim and tim.get("steps") else " (sandbox-run has no `--timings`)."))
        p("")
        p("| step | ms under strace | share | syscalls |")
        p("|---|---|---|---|")
        for s in steps["steps"]:
            p(f"| {s['step']} | {s['ms']:.1f} | {100 * s['ms'] / tot:.0f} % | {s['syscalls']} |")
        if steps.get("meanwhile"):
            s = steps["meanwhile"]
            p(f"| {s['step']} (its syscalls are counted in the steps above too) | {s['ms']:.1f} | "
              f"meanwhile | {s['syscalls']} |")
        if steps.get("missing_milestones"):
            p("")
            p("Steps whose closing milestone was not found (their time is counted in the next step): "
              + ", ".join(steps["missing_milestones"]))
        p("")
        summary["steps"] = steps
    elif meta.get("steps_note"):
        p(f"### Startup by step: {meta['steps_note']}")
        p("")

    # --- runs 1-10 vs 41-50 of one batch -----------------------------------------------------------
    batch = {r: load_json(os.path.join(work, f"batch-{r}.json")) for r in RUNNERS}
    if any(batch.values()):
        p(f"### 50 runs of `true` back to back, each timed alone (median ms over "
          f"{meta.get('batch_rounds')} batch(es), each after a 0.2 s pause)")
        p("")
        p("| runner | first run | runs 1-10 | runs 41-50 | 41-50 vs 1-10 | all 50 | failed |")
        p("|---|---|---|---|---|---|---|")
        for r in RUNNERS:
            b = batch.get(r)
            if b:
                p(f"| {r} | {fmt_ms(b['first_run_ms'])} | {fmt_ms(b['first10_ms'])} | "
                  f"{fmt_ms(b['last10_ms'])} | {fmt_ratio(b['last10_ms'], b['first10_ms'])} | "
                  f"{fmt_ms(b['all_ms'])} | {b['failed']} |")
                summary[f"batch_{r}"] = {k: v for k, v in b.items() if k != "batches"}
        p("")

    # --- leaks ------------------------------------------------------------------------------------
    leaves = meta.get("leaked_leaves")
    mounts = meta.get("mount_delta")
    p(f"### After the 50-run batches ({meta.get('batch_runs')} sandbox-run runs)")
    p("")
    p(f"- cgroup leaves of exited sandbox-run processes left behind: {leaves}; host mount table: "
      f"{mounts} entries")
    p("")

    # --- network: the --net filtered proxy ----------------------------------------------------------
    net = load_json(os.path.join(work, "net.json"))
    net_targets = []
    if net:
        med = statistics.median
        ch = med(x["conn_us"] for x in net["conn"]["host"]) / 1000
        cp = med(x["conn_us"] for x in net["conn"]["proxy"]) / 1000
        bh = med(x["mib_s"] for x in net["bulk"]["host"])
        bp = med(x["mib_s"] for x in net["bulk"]["proxy"])
        fwd = net["bulk"].get("fwd") or []
        bf = med(x["mib_s"] for x in fwd) if fwd else None
        tls = net.get("tls") or {}
        th = med(x["mib_s"] for x in tls["host"]) if tls else None
        tp = med(x["mib_s"] for x in tls["proxy"]) if tls else None
        ci = med(x["conn_us"] for x in net["conn"]["inject"]) / 1000 if net["conn"].get("inject") else None
        ti = med(x["mib_s"] for x in tls["inject"]) if tls.get("inject") else None
        idle, busy = net["rss_kib"]["0"], net["rss_kib"][str(net["hold_n"])]
        gib = net["bulk_mib"] / 1024

        def per_gib(runs, key):
            v = [x[key] for x in runs if key in x]
            return med(v) / gib if v else None

        p("### Network: the `--net filtered` proxy")
        p("")
        p("Servers on the host's 127.0.0.1, each allowed by its literal (`--allow-host 127.0.0.1:PORT`): "
          "`openssl s_server -www` (EC P-256 certificate for IP 127.0.0.1, signed by a test CA), "
          "a bulk TCP server, an HTTPS server (the same certificate, 16 KiB TLS records) and a plain C forwarder to the bulk server "
          "(splice through a 1 MiB pipe per direction, a thread per direction: the floor of any "
          "relay), all in scripts/bench.d/net.c. The client (the same helper) runs on the host, "
          "connecting directly, or inside the sandbox through the proxy (HTTP CONNECT on the "
          "sandbox's 127.0.0.1:3128); it times itself, so no process start is in the figures. "
          "Host and sandbox runs interleaved. An injecting connection: the run has "
          "`--secret BENCH_API_KEY=127.0.0.1:PORT --ca-certs CA` (the servers' certificate is "
          "signed by a test CA), the client sends `x-api-key: <placeholder>` in every request, "
          "and the proxy terminates TLS with its per-run CA, verifies the server, replaces the "
          "placeholder and encrypts again (checked once per run: the report's injections > 0).")
        p("")
        p("| measure | host, direct | sandbox, through the proxy | proxy vs direct |")
        p("|---|---|---|---|")
        p(f"| one TLS connection (connect, CONNECT, handshake, GET, EOF), median of "
          f"{net['conn_n']} sequential x {net['rounds']} round(s), ms | {ch:.2f} | {cp:.2f} | "
          f"{cp - ch:+.2f} ms |")
        if ci is not None:
            p(f"| the same through an injecting connection (the placeholder replaced in each "
              f"request), ms | {ch:.2f} | {ci:.2f} (injecting) | {ci - ch:+.2f} ms; "
              f"{ci - cp:+.2f} ms over the plain tunnel |")
        p(f"| {net['bulk_mib']} MiB in one raw TCP stream (a CONNECT tunnel), median of "
          f"{net['bulk_rounds']} runs, MiB/s | {bh:.0f} | {bp:.0f} | {100 * bp / bh:.0f} % |")
        if bf:
            p(f"| the same stream through the C forwarder on the host (no sandbox), MiB/s | {bh:.0f} | "
              f"{bf:.0f} (C forwarder) | {100 * bf / bh:.0f} % |")
        if tls:
            p(f"| {net['bulk_mib']} MiB HTTPS download (TLS 1.3, one stream), median of "
              f"{len(tls['host'])} runs, MiB/s | {th:.0f} | {tp:.0f} | {100 * tp / th:.0f} % |")
            if ti is not None:
                p(f"| the same download through an injecting connection (decrypted and encrypted "
                  f"again by the proxy), MiB/s | {th:.0f} | {ti:.0f} (injecting) | "
                  f"{100 * ti / th:.0f} % |")
        p("")
        p("Per run (MiB/s), raw TCP, host: " + ", ".join(f"{x['mib_s']:.0f}" for x in net["bulk"]["host"])
          + "; proxy: " + ", ".join(f"{x['mib_s']:.0f}" for x in net["bulk"]["proxy"])
          + ("; C forwarder: " + ", ".join(f"{x['mib_s']:.0f}" for x in fwd) if fwd else "")
          + ("; HTTPS, host: " + ", ".join(f"{x['mib_s']:.0f}" for x in tls["host"])
             + "; proxy: " + ", ".join(f"{x['mib_s']:.0f}" for x in tls["proxy"]) if tls else "")
          + ("; injecting: " + ", ".join(f"{x['mib_s']:.0f}" for x in tls["inject"])
             if tls.get("inject") else ""))
        p("")
        bound = {}
        if fwd and "cpu_s" in net["bulk"]["host"][0]:
            cpus = net.get("cpus") or os.cpu_count() or 1
            rows = [("raw TCP", net["bulk"])]
            if tls:
                rows.append(("HTTPS", tls))
            if tls.get("inject"):
                rows.append(("HTTPS, injecting", {"host": tls["host"], "proxy": tls["inject"]}))
            p("Where the time goes: CPU seconds per GiB moved (medians; the relay's is sandbox-run's "
              "CPU from rusage less the client's and less that of a run moving one byte). Direct, "
              "client and server each have a CPU: the slower one, max(client, server), sets the "
              f"pace. Through a relay, three parties share {cpus} CPUs: at best min(1 / max(client, "
              f"server, relay), {cpus} / (client + server + relay)) GiB/s. The ceiling below is the "
              "ratio of the two: what the relay's CPU cost alone allows, with perfect scheduling "
              "and nothing else running.")
            p("")
            p("| stream | client | server | relay: the proxy | relay: C forwarder | ceiling through the proxy, % of direct |")
            p("|---|---|---|---|---|---|")
            for name, d in rows:
                c = per_gib(d["host"], "cpu_s")
                sv = per_gib(d["host"], "server_cpu_s")
                rp = per_gib(d["proxy"], "relay_cpu_s")
                rf = per_gib(d["fwd"], "relay_cpu_s") if d.get("fwd") else None
                if c and sv and rp:
                    pace = max(c, sv)
                    bound[name] = 100 * min(pace / max(c, sv, rp), cpus * pace / (c + sv + rp), 1.0)
                else:
                    bound[name] = None
                p(f"| {name} | {c:.3f} | {sv:.3f} | {rp:.3f} | "
                  f"{'%.3f' % rf if rf is not None else 'n/a'} | "
                  f"{'%.0f %%' % bound[name] if bound[name] is not None else 'n/a'} |")
            p("")
        p(f"- supervisor peak RSS (VmHWM): {mib(idle)} with the proxy idle, {mib(busy)} with "
          f"{net['hold_n']} tunnels open at once, each having moved 1 MiB "
          f"({(busy - idle) / net['hold_n']:.0f} KiB per tunnel)")
        p("")
        summary["network"] = {"conn_ms": {"host": ch, "proxy": cp},
                              "bulk_mib_s": {"host": bh, "proxy": bp, "c_forwarder": bf},
                              "https_mib_s": {"host": th, "proxy": tp, "inject": ti},
                              "inject_conn_ms": ci,
                              "cpu_ceiling_pct": bound,
                              "rss_kib": net["rss_kib"], "raw": net}
        why = ""
        if bf:
            why = f"; a plain C splice forwarder: {100 * bf / bh:.0f} %"
        if bound.get("raw TCP") is not None:
            why += f"; what the relay's CPU cost allows on {net.get('cpus')} CPUs: {bound['raw TCP']:.0f} %"
        net_targets = [
            ("proxy's added cost per TLS connection (median; reported, no target)",
             f"{cp - ch:+.2f} ms ({cp:.2f} vs {ch:.2f} ms)", None),
            ("throughput through the proxy >= 80 % of direct, raw TCP stream (100 MiB)",
             f"{100 * bp / bh:.0f} % ({bp:.0f} vs {bh:.0f} MiB/s{why})", bp >= 0.8 * bh),
        ]
        if tls:
            net_targets.append(
                ("throughput through the proxy >= 80 % of direct, HTTPS download (100 MiB)",
                 f"{100 * tp / th:.0f} % ({tp:.0f} vs {th:.0f} MiB/s)", tp >= 0.8 * th))
        if ci is not None:
            net_targets.append(
                ("added cost of one injected HTTPS request over a plain tunnel <= +2 ms "
                 "(a new connection: handshake, one request; median)",
                 f"{ci - cp:+.2f} ms ({ci:.2f} injecting vs {cp:.2f} ms tunnel; direct {ch:.2f} ms)",
                 ci - cp <= 2))
        if ti is not None:
            net_targets.append(
                (f"HTTPS download through an injecting connection >= 70 % of direct "
                 f"({net['bulk_mib']} MiB)",
                 f"{100 * ti / th:.0f} % ({ti:.0f} vs {th:.0f} MiB/s; plain tunnel "
                 f"{100 * tp / th:.0f} %)", ti >= 0.7 * th))
        net_targets.append(
            (f"supervisor peak RSS with {net['hold_n']} tunnels <= 3 MiB",
             f"{mib(busy)} (proxy idle: {mib(idle)}; {(busy - idle) / net['hold_n']:.0f} KiB per tunnel)",
             busy <= 3 * 1024))
    elif meta.get("net_note"):
        p(f"### Network: {meta['net_note']}")
        p("")
        net_targets = [("the --net filtered proxy", meta["net_note"], None)]

    # --- a workflow runner's step -----------------------------------------------------------------
    wfr = None
    try:
        with open(os.path.join(work, "wfr.txt")) as f:
            text = f.read()
        wfr = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "-":
                wfr[f"{parts[0]} - {parts[2]}"] = float(parts[3])
            elif len(parts) == 3 and parts[0] in ("bare", "direct", "report", "runner"):
                wfr[parts[0]] = float(parts[1])
        if "runner - bare" not in wfr:
            wfr = None
    except (OSError, ValueError):
        wfr = None
    if wfr:
        p("### A step of examples/workflow-runner (its bench.js, `true`, median ms, interleaved)")
        p("")
        p("| bare spawn | sandbox-run | + --report read back | runStep | runStep - bare |")
        p("|---|---|---|---|---|")
        p(f"| {wfr['bare']:.2f} | {wfr['direct']:.2f} | {wfr['report']:.2f} | {wfr['runner']:.2f} | "
          f"{wfr['runner - bare']:+.2f} |")
        p("")
        summary["workflow_runner"] = wfr

    # --- targets ----------------------------------------------------------------------------------
    def verdict(ok):
        return "n/a" if ok is None else ("PASS" if ok else "MISS")

    targets = []
    t = wall.get("true", {})
    s_true, cpu = t.get("sandbox-run"), t.get("sandbox-run_cpu_ms")
    targets.append(("`true` under sandbox-run <= 4 ms wall (median)",
                    f"{fmt_ms(s_true)} ms (bare {fmt_ms(t.get('bare'))}, bwrap {fmt_ms(t.get('bwrap'))}, "
                    f"bwrap-same {fmt_ms(t.get('bwrap-same'))})",
                    None if s_true is None else s_true <= 4))
    targets.append(("`true` under sandbox-run <= 3 ms CPU (user + system, mean)",
                    "n/a" if not cpu else f"{cpu[0] + cpu[1]:.2f} ms ({cpu[0]:.2f} user + {cpu[1]:.2f} system)",
                    None if not cpu else cpu[0] + cpu[1] <= 3))
    n = wall.get("node", {})
    if None not in (n.get("bare"), n.get("bwrap"), n.get("bwrap-same"), n.get("sandbox-run")):
        sa, wa, wsa = (n[k] - n["bare"] for k in ("sandbox-run", "bwrap", "bwrap-same"))
        targets.append(("added latency on `node empty.js` <= 1.0x bwrap's as users write it",
                        f"sandbox-run {sa:+.2f} ms, bwrap {wa:+.2f} ms ({fmt_ratio(sa, wa)})",
                        None if wa <= 0 else sa <= wa))
        targets.append(("added latency on `node empty.js` <= 0.6x bwrap's given the same binds",
                        f"sandbox-run {sa:+.2f} ms, bwrap-same {wsa:+.2f} ms ({fmt_ratio(sa, wsa)})",
                        None if wsa <= 0 else sa <= 0.6 * wsa))
    if wfr:
        targets.append(("per-step overhead of examples/workflow-runner <= +5 ms (median)",
                        f"{wfr['runner - bare']:+.2f} ms (sandbox-run alone {wfr['direct - bare']:+.2f} ms)",
                        wfr["runner - bare"] <= 5))
    elif meta.get("wfr_note"):
        targets.append(("per-step overhead of examples/workflow-runner <= +5 ms",
                        meta["wfr_note"], None))
    if None not in (t.get("bare"), t.get("bwrap-same"), t.get("sandbox-run")):
        sa, wa = t["sandbox-run"] - t["bare"], t["bwrap-same"] - t["bare"]
        targets.append(("added latency on `true` <= bubblewrap's given the same binds",
                        f"sandbox-run {sa:+.2f} ms, bwrap-same {wa:+.2f} ms ({fmt_ratio(sa, wa)})", sa <= wa))
    if "bare" in inside and "sandbox-run" in inside:
        r = inside["sandbox-run"]["loop_ms"] / inside["bare"]["loop_ms"]
        sc = wall.get("syscalls", {})
        whole = ""
        if sc.get("bare") and sc.get("sandbox-run"):
            whole = f"; whole command {100 * (sc['sandbox-run'] / sc['bare'] - 1):+.1f} %"
        targets.append(("syscall-heavy program <= 5 % slower than bare",
                        f"{100 * (r - 1):+.1f} % (loops timed inside{whole})", r <= 1.05))
    else:
        targets.append(("syscall-heavy program <= 5 % slower than bare", "n/a", None))
    if sup:
        targets.append(("supervisor peak RSS <= 3 MiB", mib(max(sup)),
                        max(sup) <= 3 * 1024))
    else:
        targets.append(("supervisor peak RSS <= 3 MiB", "n/a", None))
    if stripped:
        targets.append(("stripped binary <= 5 MiB", f"{stripped / MIB:.2f} MiB", stripped <= 5 * MIB))
    s50, s1 = wall.get("seq50", {}).get("sandbox-run"), t.get("sandbox-run")
    b = batch.get("sandbox-run")
    name = "50 back-to-back runs no slower per run than one run (runs 41-50 vs 1-10; 5 % noise margin; no leaks)"
    if b:
        hf_note = f"; hyperfine: {s50:.2f} ms per run in a batch vs {s1:.2f} ms alone" if s50 and s1 else ""
        ok = b["last10_ms"] <= 1.05 * b["first10_ms"] and leaves == "0" and b["failed"] == 0
        targets.append((name, f"{b['last10_ms']:.2f} vs {b['first10_ms']:.2f} ms "
                              f"({b['last10_ms'] / b['first10_ms']:.2f}x); leaked cgroup leaves {leaves}, "
                              f"host mounts {mounts}{hf_note}", ok))
    else:
        targets.append((name, "n/a", None))
    targets += net_targets
    p("### Targets")
    p("")
    p("| target | measured | verdict |")
    p("|---|---|---|")
    for name, measured, ok in targets:
        p(f"| {name} | {measured} | {verdict(ok)} |")
        summary["targets"].append({"target": name, "measured": measured, "verdict": verdict(ok)})
    print("\n".join(out))
    with open(os.path.join(work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
