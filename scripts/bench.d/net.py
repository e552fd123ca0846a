#!/usr/bin/env python3
"""What the --net filtered proxy costs (used by scripts/bench).

  net.py OUT.json WORKDIR HELPER CONN_N ROUNDS BULK_MIB BULK_ROUNDS HOLD_N RSS_REPEAT \
      -- SANDBOX-RUN-COMMAND...

HELPER is scripts/bench.d/net.c compiled; SANDBOX-RUN-COMMAND the runner's prefix up to, not
including, its `--`. Servers on the host's 127.0.0.1, each allowed by its literal:
`openssl s_server -www` (an EC certificate for IP 127.0.0.1 signed by a throw-away test CA),
the helper's bulk server, its HTTPS server (the same certificate) and its plain splice
forwarder to the bulk server (the floor of any relay). Then, the runs of each measure
interleaved (host, sandbox, host, ...) so that drift of the machine's load hits both alike.
"Injecting": the sandbox run has `--secret BENCH_API_KEY=<both TLS servers> --ca-certs <the
test CA>` instead of the allow-list (the caller's BENCH_API_KEY a random 40-character value),
so the proxy terminates TLS, verifies the server and replaces the placeholder the helper
sends in `x-api-key` in every request; each injecting run's --report must count one
replacement per request, or the script fails.
  conn  ROUNDS x (CONN_N sequential TLS connections: connect, CONNECT through the proxy in
        the sandbox, handshake, GET, EOF), timed inside the helper: the median per round;
        direct, through the proxy (a plain tunnel), through an injecting connection;
  bulk  BULK_ROUNDS x one stream of BULK_MIB MiB, timed inside the helper: direct, through the
        C forwarder, through the proxy;
  tls   BULK_ROUNDS x one HTTPS download of BULK_MIB MiB: direct, through the proxy (a
        plain tunnel), through an injecting connection.
        Each stream also records the CPU seconds of the client, the server and the relay (the
        forwarder's own figure; for the proxy, the sandbox-run run's CPU from rusage, less the
        client's and less that of a run moving one byte);
  rss   the supervisor's peak RSS (peak_rss.py) with HOLD_N tunnels open at once, each having
        moved 1 MiB, and with none (the proxy idle).
Writes {"conn": {...}, "bulk": {...}, "tls": {...}, "rss": {...}} to OUT.json; one line on stderr and exit 1
when a run fails.
"""
import json
import os
import random
import resource
import socket
import statistics
import string
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


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv, what):
    """run() plus the CPU seconds of the whole process tree (every level waits for its own)."""
    c0 = children_cpu()
    d = run(argv, what)
    d["tree_cpu_s"] = children_cpu() - c0
    return d


def cpu_lines(path, seen, what):
    """The cpu_s of the next line a server appends to PATH (it writes once its client has
    closed: wait a little)."""
    for _ in range(300):
        try:
            lines = open(path).read().split()
        except OSError:
            lines = []
        if len(lines) > seen:
            return float(lines[seen].split("=", 1)[1])
        time.sleep(0.01)
    die(f"{what}: no CPU figure in {path}")


def openssl(argv, what):
    r = subprocess.run(["openssl"] + argv, stdin=subprocess.DEVNULL, capture_output=True)
    if r.returncode != 0:
        die(f"openssl {what} failed: " + r.stderr.decode(errors="replace").strip()[-200:])


def make_certs(work):
    """A test CA and a leaf for 127.0.0.1 (subjectAltName IP:127.0.0.1) signed by it, both EC
    P-256: the servers' certificate, which an injecting run's proxy verifies (--ca-certs CA)."""
    f = lambda n: os.path.join(work, n)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(["req", "-x509"] + ec + ["-days", "2", "-subj", "/CN=sandbox-run bench test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", f("net-ca-key.pem"), "-out", f("net-ca.pem")], "req (the test CA)")
    openssl(["req", "-new"] + ec + ["-subj", "/CN=127.0.0.1", "-keyout", f("net-key.pem"),
             "-out", f("net-leaf.csr")], "req (the leaf)")
    with open(f("net-leaf.ext"), "w") as e:
        e.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")
    openssl(["x509", "-req", "-in", f("net-leaf.csr"), "-CA", f("net-ca.pem"), "-CAkey",
             f("net-ca-key.pem"), "-CAcreateserial", "-days", "1", "-extfile", f("net-leaf.ext"),
             "-out", f("net-cert.pem")], "x509 (signing the leaf)")
    return f("net-ca.pem"), f("net-cert.pem"), f("net-key.pem")


def injected(path, want, what):
    """The placeholders the proxy replaced in the run whose --report is PATH: every request of
    an injecting run carries one, so WANT of them (a figure for a connection that was not
    terminated would prove nothing)."""
    try:
        secrets = json.load(open(path))["sandbox"].get("secrets") or []
    except (OSError, ValueError, KeyError) as e:
        die(f"{what}: no report ({e})")
    n = sum(x.get("injections", 0) for x in secrets if x.get("name") == "BENCH_API_KEY")
    if n != want:
        die(f"{what}: the proxy replaced {n} placeholder(s), not {want} (report: secrets = "
            f"{json.dumps(secrets)})")
    os.unlink(path)
    return n


def port_of(path, proc, what):
    for _ in range(500):
        if os.path.exists(path) and open(path).read().strip():
            break
        time.sleep(0.01)
    port = int(open(path).read())
    wait_port(port, proc, what)
    return port


def main():
    a = sys.argv
    out, work, helper = a[1], a[2], a[3]
    conn_n, rounds, bulk_mib, bulk_rounds, hold_n, rss_repeat = map(int, a[4:10])
    assert a[10] == "--"
    sbx = a[11:]
    here = os.path.dirname(os.path.abspath(__file__))

    ca, cert, key = make_certs(work)
    # The caller's value of the secret: never inside; the helper inside sends the placeholder.
    secret = "sk-bench-" + "".join(
        random.SystemRandom().choice(string.ascii_letters + string.digits) for _ in range(31))
    os.environ["BENCH_API_KEY"] = secret
    tls_port = free_port()
    tls = subprocess.Popen(["openssl", "s_server", "-www", "-quiet", "-accept",
                            f"127.0.0.1:{tls_port}", "-cert", cert, "-key", key],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    port_file = os.path.join(work, "net-bulk.port")
    https_file = os.path.join(work, "net-https.port")
    fwd_file = os.path.join(work, "net-fwd.port")
    for f in (port_file, https_file, fwd_file):
        for stale in (f, f + ".cpu"):
            if os.path.exists(stale):
                os.unlink(stale)
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bulk_srv = subprocess.Popen([helper, "serve-bulk", port_file], **quiet)
    https_srv = subprocess.Popen([helper, "serve-tls", https_file, cert, key], **quiet)
    servers = [tls, bulk_srv, https_srv]
    try:
        wait_port(tls_port, tls, "openssl s_server")
        bulk_port = port_of(port_file, bulk_srv, "the bulk server")
        https_port = port_of(https_file, https_srv, "the HTTPS server")
        fwd = subprocess.Popen([helper, "fwd", fwd_file, str(bulk_port)], **quiet)
        servers.append(fwd)
        fwd_port = port_of(fwd_file, fwd, "the C forwarder")
        inside = sbx + ["--net", "filtered", "--allow-host", f"127.0.0.1:{tls_port}",
                        "--allow-host", f"127.0.0.1:{bulk_port}",
                        "--allow-host", f"127.0.0.1:{https_port}",
                        "--pass-env", "BENCH_API_KEY", "--"]
        # The same servers through an injecting connection: the proxy terminates TLS with its
        # per-run CA, verifies the servers against the test CA and replaces the placeholder.
        report = os.path.join(work, "net-inject-report.json")
        inject = sbx + ["--net", "filtered", "--secret",
                        f"BENCH_API_KEY=127.0.0.1:{tls_port},127.0.0.1:{https_port}",
                        "--ca-certs", ca, "--report", report, "--"]
        res = {"conn_n": conn_n, "rounds": rounds, "bulk_mib": bulk_mib,
               "bulk_rounds": bulk_rounds, "hold_n": hold_n}

        host_c, proxy_c, inject_c = [], [], []
        for _ in range(rounds):
            host_c.append(run([helper, "conn", str(conn_n), "127.0.0.1", str(tls_port)],
                              "TLS connections from the host"))
            proxy_c.append(run(inside + [helper, "conn", str(conn_n), "127.0.0.1", str(tls_port),
                                         PROXY_PORT], "TLS connections through the proxy"))
            inject_c.append(run(inject + [helper, "conn", str(conn_n), "127.0.0.1", str(tls_port),
                                          PROXY_PORT], "TLS connections through an injecting connection"))
            injected(report, conn_n, "TLS connections through an injecting connection")
        res["conn"] = {"host": host_c, "proxy": proxy_c, "inject": inject_c}

        nbytes = str(bulk_mib * 1024 * 1024)
        # The servers write a line for every connection, the probes of wait_port's too: count
        # from what is there once those have ended.
        time.sleep(0.3)
        srv_cpu = {}
        for path in (port_file, https_file, fwd_file):
            try:
                srv_cpu[path] = len(open(path + ".cpu").read().split())
            except OSError:
                srv_cpu[path] = 0

        def server_cpu(path, what):
            v = cpu_lines(path + ".cpu", srv_cpu[path], what)
            srv_cpu[path] += 1
            return v

        def through_proxy(argv, what, base, prefix=inside):
            """A run through the proxy; relay_cpu_s is the run's CPU less the client's and less
            BASE (the same run moving one byte: sandbox-run's own start and end)."""
            d = timed(prefix + argv, what)
            d["relay_cpu_s"] = max(0.0, d["tree_cpu_s"] - d["cpu_s"] - base)
            return d

        def base_of(argv, path, what, prefix=inside):
            d = timed(prefix + argv, what)
            server_cpu(path, what)
            return d["tree_cpu_s"] - d["cpu_s"]

        host_b, fwd_b, proxy_b, host_t, proxy_t, inject_t = [], [], [], [], [], []
        bulk_argv = lambda n, port: [helper, "bulk", n, "127.0.0.1", str(port)]
        tls_argv = lambda n, port: [helper, "tls-bulk", n, f"/{n}", "127.0.0.1", str(port)]
        for _ in range(bulk_rounds):
            d = run(bulk_argv(nbytes, bulk_port), "the stream from the host")
            d["server_cpu_s"] = server_cpu(port_file, "the bulk server")
            host_b.append(d)
            d = run(bulk_argv(nbytes, fwd_port), "the stream through the C forwarder")
            d["server_cpu_s"] = server_cpu(port_file, "the bulk server")
            d["relay_cpu_s"] = server_cpu(fwd_file, "the C forwarder")
            fwd_b.append(d)
            base = base_of(bulk_argv("1", bulk_port) + [PROXY_PORT],
                           port_file, "one byte through the proxy")
            d = through_proxy(bulk_argv(nbytes, bulk_port) + [PROXY_PORT],
                              "the stream through the proxy", base)
            d["server_cpu_s"] = server_cpu(port_file, "the bulk server")
            proxy_b.append(d)

            d = run(tls_argv(nbytes, https_port), "the HTTPS download from the host")
            d["server_cpu_s"] = server_cpu(https_file, "the HTTPS server")
            host_t.append(d)
            base = base_of(tls_argv("1", https_port) + [PROXY_PORT],
                           https_file, "one byte of HTTPS through the proxy")
            d = through_proxy(tls_argv(nbytes, https_port) + [PROXY_PORT],
                              "the HTTPS download through the proxy", base)
            d["server_cpu_s"] = server_cpu(https_file, "the HTTPS server")
            proxy_t.append(d)
            base = base_of(tls_argv("1", https_port) + [PROXY_PORT], https_file,
                           "one byte of HTTPS through an injecting connection", inject)
            injected(report, 1, "one byte of HTTPS through an injecting connection")
            d = through_proxy(tls_argv(nbytes, https_port) + [PROXY_PORT],
                              "the HTTPS download through an injecting connection", base, inject)
            injected(report, 1, "the HTTPS download through an injecting connection")
            d["server_cpu_s"] = server_cpu(https_file, "the HTTPS server")
            inject_t.append(d)
        res["bulk"] = {"host": host_b, "fwd": fwd_b, "proxy": proxy_b}
        res["tls"] = {"host": host_t, "proxy": proxy_t, "inject": inject_t}
        res["cpus"] = os.cpu_count()

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
        for p in servers:
            p.kill()
            p.wait()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
