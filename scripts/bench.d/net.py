#!/usr/bin/env python3
"""What the --net filtered proxy costs (issue 12; used by scripts/bench).

  net.py OUT.json WORKDIR HELPER CONN_N ROUNDS BULK_MIB BULK_ROUNDS HOLD_N RSS_REPEAT \
      -- SANDBOX-RUN-COMMAND...

HELPER is scripts/bench.d/net.c compiled; SANDBOX-RUN-COMMAND the runner's prefix up to, not
including, its `--`. Servers on the host's 127.0.0.1, each allowed by its literal:
`openssl s_server -www` (a throw-away EC certificate) and the helper's bulk server. Then, the
runs of each measure interleaved (host, sandbox, host, ...) so that drift of the machine's
load hits both alike:
  conn  ROUNDS x (CONN_N sequential TLS connections: connect, CONNECT through the proxy in
        the sandbox, handshake, GET, EOF), timed inside the helper: the median per round;
  bulk  BULK_ROUNDS x one stream of BULK_MIB MiB, timed inside the helper;
  rss   the supervisor's peak RSS (peak_rss.py) with HOLD_N tunnels open at once, each having
        moved 1 MiB, and with none (the proxy idle).
Writes {"conn": {...}, "bulk": {...}, "rss": {...}} to OUT.json; one line on stderr and exit 1
when a run fails.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

PROXY_PORT = "3128"  # the proxy's port on the sandbox's own loopback (src/net/proxy.rs)


def die(msg):
    print(f"bench: network: {msg}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what):
    for _ in range(500):
        if proc.poll() is not None:
            die(f"{what} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.01)
    die(f"{what} does not listen on 127.0.0.1:{port}")


def run(argv, what):
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    line = next((x for x in r.stdout.splitlines() if "=" in x), "")
    if r.returncode != 0 or not line:
        err = (r.stderr.strip().splitlines() or ["no message"])[-1]
        die(f"{what} failed (exit {r.returncode}): {err}")
    return {k: float(v) for k, v in (x.split("=", 1) for x in line.split())}


def main():
    a = sys.argv
    out, work, helper = a[1], a[2], a[3]
    conn_n, rounds, bulk_mib, bulk_rounds, hold_n, rss_repeat = map(int, a[4:10])
    assert a[10] == "--"
    sbx = a[11:]
    here = os.path.dirname(os.path.abspath(__file__))

    key, cert = os.path.join(work, "net-key.pem"), os.path.join(work, "net-cert.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-keyout", key, "-out", cert], capture_output=True)
    if r.returncode != 0:
        die("openssl req failed: " + r.stderr.decode(errors="replace").strip()[-200:])
    tls_port = free_port()
    tls = subprocess.Popen(["openssl", "s_server", "-www", "-quiet", "-accept",
                            f"127.0.0.1:{tls_port}", "-cert", cert, "-key", key],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    port_file = os.path.join(work, "net-bulk.port")
    bulk_srv = subprocess.Popen([helper, "serve-bulk", port_file], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(tls_port, tls, "openssl s_server")
        for _ in range(500):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.01)
        bulk_port = int(open(port_file).read())
        wait_port(bulk_port, bulk_srv, "the bulk server")
        inside = sbx + ["--net", "filtered", "--allow-host", f"127.0.0.1:{tls_port}",
                        "--allow-host", f"127.0.0.1:{bulk_port}", "--"]
        res = {"conn_n": conn_n, "rounds": rounds, "bulk_mib": bulk_mib,
               "bulk_rounds": bulk_rounds, "hold_n": hold_n}

        host_c, proxy_c = [], []
        for _ in range(rounds):
            host_c.append(run([helper, "conn", str(conn_n), "127.0.0.1", str(tls_port)],
                              "TLS connections from the host"))
            proxy_c.append(run(inside + [helper, "conn", str(conn_n), "127.0.0.1", str(tls_port),
                                         PROXY_PORT], "TLS connections through the proxy"))
        res["conn"] = {"host": host_c, "proxy": proxy_c}

        nbytes = str(bulk_mib * 1024 * 1024)
        host_b, proxy_b = [], []
        for _ in range(bulk_rounds):
            host_b.append(run([helper, "bulk", nbytes, "127.0.0.1", str(bulk_port)],
                              "the stream from the host"))
            proxy_b.append(run(inside + [helper, "bulk", nbytes, "127.0.0.1", str(bulk_port),
                                         PROXY_PORT], "the stream through the proxy"))
        res["bulk"] = {"host": host_b, "proxy": proxy_b}

        rss = {}
        for n in (0, hold_n):
            f = os.path.join(work, f"rss-net-{n}.json")
            cmd = inside + [helper, "hold", str(n), str(1 << 20), "1", "127.0.0.1",
                            str(bulk_port), PROXY_PORT]
            subprocess.run([sys.executable, os.path.join(here, "peak_rss.py"), f,
                            str(rss_repeat), "--"] + cmd, check=True)
            d = json.load(open(f))
            if d.get("failed"):
                die(f"{n} tunnels held open: the run failed (exit {d['failed'][0]})")
            rss[str(n)] = d["supervisor_hwm_kib"]
        res["rss_kib"] = rss
    finally:
        for p in (tls, bulk_srv):
            p.kill()
            p.wait()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
