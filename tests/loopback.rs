//! Loopback inside a sandbox with its own network namespace: test suites start servers on
//! 127.0.0.1 (express/supertest, fastify, Rust's `TcpListener::bind("127.0.0.1:0")`), and under
//! `--net none` bind, listen and connect on the sandbox's own loopback work on any port,
//! ephemeral ones included. The port rules (landlock's `tcp_bind`/`tcp_connect`, seccomp's
//! refusal of `listen`) guard the host's network, so they apply only where it is shared
//! (`--net host`): the controls show they still refuse there.

mod common;

use common::*;
use std::path::Path;

/// Is IPv6 configured on this kernel (then a fresh network namespace's `lo` has `::1`)?
fn kernel_has_ipv6() -> bool {
    Path::new("/proc/net/if_inet6").exists()
        && std::fs::read_to_string("/proc/sys/net/ipv6/conf/default/disable_ipv6")
            .map(|s| s.trim() == "0")
            .unwrap_or(false)
}

/// Under `--net none` with `tcp_bind = []` and `tcp_connect = []` (every shipped profile): a
/// server on an ephemeral and on a fixed port of 127.0.0.1 (and `::1`), a client connecting to
/// it, bytes both ways; `listen` on an unbound socket too. The report still says what was in
/// force: a network namespace, landlock enforced, seccomp's allow-list.
#[test]
fn loopback_servers_work_under_net_none() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("loopback-none");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().tcp_bind(&[]).tcp_connect(&[]));
    for port in ["0", "8080", "1024"] {
        let d = run_probe(
            &p,
            &repo,
            &["--net", "none"],
            &["tcp-loopback", "127.0.0.1", port],
        )
        .assert_ok();
        assert!(d.contains("exchanged=ping/pong"), "{d}");
        if port != "0" {
            assert!(d.starts_with(&format!("port={port} ")), "{d}");
        }
    }
    // the profile's own mode (validate: none) is the same
    run_probe(&p, &repo, &[], &["tcp-loopback", "127.0.0.1", "0"]).assert_ok();
    run_probe(&p, &repo, &["--net", "none"], &["listen-autobind"]).assert_ok();
    if kernel_has_ipv6() {
        for port in ["0", "8081"] {
            run_probe(
                &p,
                &repo,
                &["--net", "none"],
                &["tcp-loopback", "::1", port],
            )
            .assert_ok();
        }
    } else {
        skip_tool("IPv6 is disabled on this kernel: the [::1] half was not tried");
    }

    let v = probe_report(&f, &p, &repo, &["--net", "none"]);
    let sb = &v["sandbox"];
    assert!(
        sb["namespaces"]
            .as_array()
            .is_some_and(|n| n.iter().any(|x| x == "net")),
        "the report must list the network namespace: {sb}"
    );
    assert_eq!(sb["seccomp"]["mode"], "allowlist", "{sb}");
    let fs = &sb["filesystem"];
    if landlock_abi() >= 1 {
        assert!(
            fs["landlock"] == "fully_enforced" || fs["landlock"] == "partially_enforced",
            "landlock must still be enforced under --net none: {fs}"
        );
    }
    // no TCP rules were asked for, so none are reported missing
    assert!(
        !fs["landlock_missing"]
            .as_array()
            .is_some_and(|m| m.iter().any(|x| x == "tcp")),
        "{fs}"
    );
}

/// The control: with the host's network shared and `tcp_bind = []`, binding an ephemeral or a
/// fixed port is refused (landlock, ABI 4+) and so is `listen` (seccomp, any ABI). With one
/// port listed, that port serves (the rules are per port, not a blanket refusal).
#[test]
fn port_rules_still_apply_with_the_host_network() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("loopback-host");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().tcp_bind(&[]).tcp_connect(&[]));
    let host = ["--net", "host"];
    run_probe(&p, &repo, &host, &["listen-autobind"]).assert_errno(&[libc::EPERM]);
    // a free host port, for the fixed-port attempts
    let free = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let free_s = free.to_string();
    let refused = if landlock_abi() >= 4 {
        // landlock refuses the bind itself
        vec![libc::EACCES]
    } else {
        // no TCP rules in this kernel's landlock: the bind passes, seccomp refuses listen
        assert_landlock_reports_missing(&f, &p, &repo, &host, "tcp");
        vec![libc::EPERM]
    };
    for port in ["0", free_s.as_str()] {
        run_probe(&p, &repo, &host, &["tcp-loopback", "127.0.0.1", port]).assert_errno(&refused);
    }
    // control: the port listed in tcp_bind (and connect to any port: tcp_connect empty in
    // host mode means unrestricted) serves on the host's loopback
    let listed = f.profile(&Spec::default().tcp_bind(&[free]).tcp_connect(&[]));
    let d = run_probe(
        &listed,
        &repo,
        &host,
        &["tcp-loopback", "127.0.0.1", &free_s],
    )
    .assert_ok();
    assert!(d.starts_with(&format!("port={free} ")), "{d}");
}

/// A real Node server: `node server-test.js` (a file in the repo, as a test suite runs) starts
/// an http server on port 0 and requests it, under `--net none`, with the built-in-like
/// validate profile; the same script runs on the host for comparison.
#[test]
fn node_http_server_on_an_ephemeral_port_under_net_none() {
    if !sandbox_works() {
        return;
    }
    if which("node").is_none() {
        skip_tool("node is not installed");
        return;
    }
    let f = Fixture::new("loopback-node");
    let repo = f.repo("repo");
    std::fs::write(
        repo.join("server-test.js"),
        r#"'use strict';
const http = require('http');
const server = http.createServer((req, res) => {
  res.setHeader('content-type', 'text/plain');
  res.end('hello ' + req.url);
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  http.get({ host: '127.0.0.1', port, path: '/ping' }, (res) => {
    let body = '';
    res.on('data', (c) => { body += c; });
    res.on('end', () => {
      server.close();
      if (res.statusCode !== 200 || body !== 'hello /ping') {
        console.error('unexpected answer', res.statusCode, body);
        process.exit(1);
      }
      console.log('server-test ok port=' + port);
    });
  }).on('error', (e) => { console.error('request failed:', e.message); process.exit(1); });
});
server.on('error', (e) => { console.error('listen failed:', e.code, e.message); process.exit(1); });
"#,
    )
    .unwrap();
    let host = {
        let mut c = std::process::Command::new("node");
        c.arg("server-test.js").current_dir(&repo);
        run_command(c, LIMIT)
    };
    host.assert_code(0);
    let p = f.profile(&Spec::default().no_probe());
    for opts in [&["--net", "none"][..], &[]] {
        let r = run_command(
            sandbox_command(&p, &repo, opts, &["node", "server-test.js"]),
            LIMIT,
        );
        r.assert_code(0);
        assert!(r.stdout.contains("server-test ok port="), "{r}");
    }
}
