//! `--net filtered` end to end: the sandbox's only way out is the supervisor's allow-list
//! proxy. Each test runs real clients (curl, node, npm, the probe) INSIDE a real
//! sandbox against servers on the host's loopback, with a positive control beside each
//! refusal: the same run with the host on the list gets through.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BODY: &str = "hello from the host's loopback stub\n";

/// A plain HTTP server on the host's 127.0.0.1: answers every request with [`BODY`] and
/// counts the connections it accepted.
struct Stub {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn stub() -> Stub {
    stub_on("127.0.0.1:0")
}

/// [`stub`] on another address of the host.
fn stub_on(addr: &str) -> Stub {
    let l = TcpListener::bind(addr).unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            h.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = Vec::new();
                let mut b = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
                    BODY.len()
                );
            });
        }
    });
    Stub { port, hits }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// The filtered profile of these tests: `validate` (repo overlay, no network) with curl and
/// node, and the proxy as the only way out.
fn profile(f: &Fixture, extra: impl FnOnce(&mut toml::Table)) -> PathBuf {
    let spec = Spec::extends("validate")
        .net("filtered")
        .programs(&["curl", "node", "npm"]);
    let mut t: toml::Table = toml::from_str(&spec.to_toml()).unwrap();
    extra(&mut t);
    let p = f.path("filtered.toml");
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    p
}

fn run_in(profile: &Path, repo: &Path, opts: &[&str], argv: &[&str]) -> (Run, serde_json::Value) {
    let report = repo.parent().unwrap().join("net-report.json");
    let _ = std::fs::remove_file(&report);
    let mut o = vec!["--report", report.to_str().unwrap()];
    o.extend_from_slice(opts);
    let r = run_command(sandbox_command(profile, repo, &o, argv), LIMIT);
    let json = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| panic!("no report:\n{r}"));
    (r, json)
}

fn connections(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["sandbox"]["network"]["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn entry(report: &serde_json::Value, host: &str, port: u16) -> serde_json::Value {
    connections(report)
        .into_iter()
        .find(|c| c["host"] == host && c["port"] == port)
        .unwrap_or_else(|| panic!("no connection entry for {host}:{port} in {report:#}"))
}

fn ready(tool: &str) -> Option<PathBuf> {
    if !sandbox_works() {
        return None;
    }
    let p = which(tool);
    if p.is_none() {
        skip_tool(&format!("{tool} is not installed"));
    }
    p
}

/// A server on the host's loopback is reachable only when its exact `127.0.0.1:PORT` is on
/// the list; without it: a 403 naming the rule and the fix, one stderr line for two
/// requests, a report entry, and no connection at the stub.
#[test]
fn host_loopback_is_reachable_only_by_its_literal() {
    if ready("curl").is_none() {
        return;
    }
    let f = Fixture::new("net-literal");
    let repo = f.repo("repo");
    let p = profile(&f, |_| {});
    let s = stub();
    let url = format!("http://127.0.0.1:{}/", s.port);
    let lit = format!("127.0.0.1:{}", s.port);
    // NO_PROXY covers loopback (the sandbox's own servers); this URL means the host's.
    let curl = ["curl", "-sS", "--noproxy", "", url.as_str(), url.as_str()];

    let (r, rep) = run_in(&p, &repo, &["--allow-host", &lit], &curl);
    r.assert_code(0);
    assert_eq!(r.stdout, format!("{BODY}{BODY}"), "{r}");
    assert_eq!(s.hits.load(Ordering::SeqCst), 2);
    let e = entry(&rep, "127.0.0.1", s.port);
    assert_eq!(e["allowed"], true, "{e}");
    assert_eq!(e["count"], 2, "{e}");
    assert!(
        e["bytes_down"].as_u64().unwrap() > 2 * BODY.len() as u64,
        "{e}"
    );
    assert_eq!(rep["sandbox"]["network"]["mode"], "filtered");
    assert!(rep["sandbox"]["network"]["allow"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!(lit)));

    // The control: another port on the list is not this one.
    let other = format!("127.0.0.1:{}", s.port.wrapping_add(1).max(1));
    let (r, rep) = run_in(&p, &repo, &["--allow-host", &other], &curl);
    assert_eq!(
        s.hits.load(Ordering::SeqCst),
        2,
        "the stub was reached:\n{r}"
    );
    assert!(
        r.stdout
            .contains(&format!("denied GET 127.0.0.1:{}", s.port)),
        "{r}"
    );
    assert!(r.stdout.contains("rule: not on the allow-list"), "{r}");
    assert!(
        r.stdout.contains(&format!("fix: add --allow-host {lit}")),
        "{r}"
    );
    let line = format!(
        "sandbox-run: network: denied GET 127.0.0.1:{} (not on the allow-list of profile {}; add --allow-host {lit})",
        s.port,
        p.display()
    );
    assert_eq!(
        r.stderr.matches(&line).count(),
        1,
        "one line per host:\n{r}"
    );
    let e = entry(&rep, "127.0.0.1", s.port);
    assert_eq!(e["allowed"], false, "{e}");
    assert_eq!(e["count"], 2, "{e}");
    assert_eq!(e["reason"], "not on the allow-list", "{e}");
}

/// A name on the list that resolves to a loopback address is refused (the DNS-rebinding
/// guard), unless the address itself is on the list as a literal.
#[test]
fn a_name_resolving_to_loopback_is_refused() {
    if ready("curl").is_none() {
        return;
    }
    let f = Fixture::new("net-rebind");
    let repo = f.repo("repo");
    let p = profile(&f, |_| {});
    let s = stub();
    let name = format!("localhost:{}", s.port);
    let url = format!("http://localhost:{}/", s.port);
    let curl = ["curl", "-sS", "--noproxy", "", url.as_str()];

    let (r, rep) = run_in(&p, &repo, &["--allow-host", &name], &curl);
    assert_eq!(
        s.hits.load(Ordering::SeqCst),
        0,
        "the stub was reached:\n{r}"
    );
    assert!(r.stdout.contains("a loopback address"), "{r}");
    assert!(r.stdout.contains("rule: localhost resolves to"), "{r}");
    assert!(
        r.stderr.contains(&format!(
            "sandbox-run: network: denied GET localhost:{} (localhost resolves to",
            s.port
        )),
        "{r}"
    );
    let e = entry(&rep, "localhost", s.port);
    assert_eq!(e["allowed"], false, "{e}");
    assert!(
        e["reason"].as_str().unwrap().contains("a loopback address"),
        "{e}"
    );

    // The control: with its addresses listed as literals, the name works.
    let v4 = format!("127.0.0.1:{}", s.port);
    let v6 = format!("[::1]:{}", s.port);
    let (r, rep) = run_in(
        &p,
        &repo,
        &[
            "--allow-host",
            &name,
            "--allow-host",
            &v4,
            "--allow-host",
            &v6,
        ],
        &curl,
    );
    r.assert_code(0);
    assert_eq!(r.stdout, BODY, "{r}");
    assert_eq!(entry(&rep, "localhost", s.port)["allowed"], true);
}

/// A host that is not on the list is refused before it is even resolved, with the line the
/// contract gives; the profile's own list still applies beside `--allow-host`.
#[test]
fn a_name_not_on_the_list_is_denied() {
    if ready("curl").is_none() {
        return;
    }
    let f = Fixture::new("net-notlisted");
    let repo = f.repo("repo");
    let p = profile(&f, |t| {
        t["network"].as_table_mut().unwrap().insert(
            "allow".into(),
            toml::Value::Array(vec!["listed.invalid".into()]),
        );
    });
    let (r, rep) = run_in(
        &p,
        &repo,
        &["--allow-host", "also.invalid:8443"],
        &["curl", "-sS", "https://not-listed.invalid/"],
    );
    assert_eq!(r.code, Some(56), "curl: CONNECT refused:\n{r}");
    let line = format!(
        "sandbox-run: network: denied CONNECT not-listed.invalid:443 (not on the allow-list of profile {}; add --allow-host not-listed.invalid)",
        p.display()
    );
    assert!(r.stderr.contains(&line), "{r}");
    let e = entry(&rep, "not-listed.invalid", 443);
    assert_eq!(e["allowed"], false);
    assert_eq!(
        rep["sandbox"]["network"]["allow"],
        serde_json::json!(["listed.invalid", "also.invalid:8443"])
    );
    // Listed, but nothing by that name: resolving fails and says so (no way around the list).
    let (r, _) = run_in(&p, &repo, &[], &["curl", "-sS", "https://listed.invalid/"]);
    assert!(
        r.stderr
            .contains("denied CONNECT listed.invalid:443 (listed.invalid does not resolve"),
        "{r}"
    );
}

/// A self-signed TLS server on the host's loopback (openssl s_server), killed when dropped.
struct TlsServer {
    port: u16,
    child: std::process::Child,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_server(f: &Fixture) -> Option<TlsServer> {
    let openssl = which("openssl")?;
    let (key, cert) = (f.path("key.pem"), f.path("cert.pem"));
    let ok = Command::new(&openssl)
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").ok()?;
        l.local_addr().ok()?.port()
    };
    let child = Command::new(&openssl)
        .args(["s_server", "-www", "-quiet", "-accept"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let server = TlsServer { port, child };
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(server);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Node through the proxy, as a program that does not read the proxy variables by itself
/// has to: `http.request` in absolute form, and `https` over a CONNECT tunnel with the TLS
/// server name given on the command line.
const NODE_CLIENT: &str = r#"
const http = require('http'), tls = require('tls');
const proxy = new URL(process.env.HTTPS_PROXY);
const [mode, target, sni] = process.argv.slice(2);
const fail = (what) => (e) => { console.log(`${what} error ${e.code || e.message}`); process.exit(3); };
if (mode === 'http') {
  // Host names the URL's host, as proxy clients send it (Node would send the proxy's).
  const headers = { host: new URL(target).host };
  http.get({ host: proxy.hostname, port: proxy.port, path: target, headers }, (res) => {
    let b = ''; res.on('data', (d) => (b += d));
    res.on('end', () => { console.log(`http ${res.statusCode} ${b.trim()}`); });
  }).on('error', fail('http'));
} else {
  const req = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: target });
  req.on('connect', (res, socket) => {
    if (res.statusCode !== 200) { console.log(`connect ${res.statusCode}`); process.exit(4); }
    const opts = { socket, rejectUnauthorized: false };
    if (sni) opts.servername = sni;
    const t = tls.connect(opts, () => {
      t.write('GET / HTTP/1.0\r\n\r\n');
      let b = ''; t.on('data', (d) => (b += d));
      t.on('end', () => { console.log(`https ${b.split('\r\n')[0]}`); });
    });
    t.on('error', fail('tls'));
  });
  req.on('error', fail('connect'));
  req.end();
}
"#;

/// A tunnel whose TLS ClientHello names another host than the CONNECT is cut (a fatal TLS
/// alert, the stderr line, a report entry); the same tunnel with the matching name, or
/// with no name, goes through. curl's https goes through the proxy too.
#[test]
fn tls_through_the_proxy_and_a_mismatched_sni() {
    if ready("node").is_none() || ready("curl").is_none() {
        return;
    }
    let f = Fixture::new("net-sni");
    let Some(tls) = tls_server(&f) else {
        skip_tool("openssl cannot run a TLS server here");
        return;
    };
    let repo = f.repo("repo");
    std::fs::write(repo.join("client.js"), NODE_CLIENT).unwrap();
    let p = profile(&f, |_| {});
    let port = tls.port;
    let allow = [
        "--allow-host".to_string(),
        format!("localhost:{port}"),
        "--allow-host".to_string(),
        format!("127.0.0.1:{port}"),
        "--allow-host".to_string(),
        format!("[::1]:{port}"),
    ];
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let target = format!("localhost:{port}");

    let (r, rep) = run_in(
        &p,
        &repo,
        &allow,
        &["node", "client.js", "https", &target, "localhost"],
    );
    assert!(r.stdout.contains("https HTTP/1.0 200 ok"), "{r}");
    assert_eq!(entry(&rep, "localhost", port)["allowed"], true);

    let (r, rep) = run_in(
        &p,
        &repo,
        &allow,
        &["node", "client.js", "https", &target, "evil.example"],
    );
    assert!(r.stdout.contains("tls error"), "{r}");
    assert!(
        r.stderr.contains(&format!(
            "sandbox-run: network: denied CONNECT localhost:{port} (the TLS server name \"evil.example\" differs from the CONNECT host"
        )),
        "{r}"
    );
    let e = entry(&rep, "localhost", port);
    assert_eq!(e["allowed"], false, "{rep:#}");
    assert!(e["reason"].as_str().unwrap().contains("differs"), "{e}");

    // An address literal with no server name is no mismatch.
    let lit = format!("127.0.0.1:{port}");
    let (r, _) = run_in(&p, &repo, &allow, &["node", "client.js", "https", &lit]);
    assert!(r.stdout.contains("https HTTP/1.0 200 ok"), "{r}");

    // curl, by the proxy variables alone.
    let url = format!("https://localhost:{port}/");
    let (r, _) = run_in(
        &p,
        &repo,
        &allow,
        &[
            "curl",
            "-sSk",
            "--noproxy",
            "",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url,
        ],
    );
    assert_eq!(r.stdout, "200", "{r}");
}

/// Node's `http.request` in absolute form through the proxy; a host off the list gets the
/// 403 body.
#[test]
fn node_http_request_through_the_proxy() {
    if ready("node").is_none() {
        return;
    }
    let f = Fixture::new("net-node");
    let repo = f.repo("repo");
    std::fs::write(repo.join("client.js"), NODE_CLIENT).unwrap();
    let p = profile(&f, |_| {});
    let s = stub();
    let url = format!("http://127.0.0.1:{}/x", s.port);
    let lit = format!("127.0.0.1:{}", s.port);
    let (r, rep) = run_in(
        &p,
        &repo,
        &["--allow-host", &lit],
        &["node", "client.js", "http", &url],
    );
    assert!(
        r.stdout.contains(&format!("http 200 {}", BODY.trim())),
        "{r}"
    );
    assert_eq!(entry(&rep, "127.0.0.1", s.port)["count"], 1);
    let (r, _) = run_in(&p, &repo, &[], &["node", "client.js", "http", &url]);
    assert!(
        r.stdout
            .contains("http 403 sandbox-run: network: denied GET"),
        "{r}"
    );
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
}

/// Nothing leaves but through the proxy: no route out of the sandbox's namespace for TCP or
/// UDP (with landlock's port rules opened, so the namespace alone is tested), and raw,
/// packet, MPTCP and vsock sockets refused. The positive control: the probe reaches the
/// proxy's port on its own loopback.
#[test]
fn nothing_leaves_but_through_the_proxy() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("net-leaks");
    let repo = f.repo("repo");
    let s = stub();
    let p = f.profile(
        &Spec::extends("validate")
            .net("filtered")
            .tcp_connect(&[443, 53, s.port]),
    );
    let lit = format!("127.0.0.1:{}", s.port);
    // Another loopback port is on the list (it appears inside, tests/loopback_ports.rs); the
    // stub's is not.
    let other = format!("127.0.0.1:{}", s.port.wrapping_add(1).max(1024));
    let opts = ["--allow-host", other.as_str()];
    run_probe(&p, &repo, &opts, &["tcp-connect", "127.0.0.1:3128"]).assert_ok();
    for args in [
        vec!["tcp-connect", "1.1.1.1:443"],
        vec!["tcp-connect", "8.8.8.8:53"],
        // the host's stub, not on the list, by a direct connection
        vec!["tcp-connect", lit.as_str()],
        vec!["udp-send", "8.8.8.8:53"],
        vec!["raw-socket"],
        vec!["packet-socket"],
        vec!["mptcp-connect", "1.1.1.1:443"],
        vec!["vsock-bind"],
    ] {
        let r = run_probe(&p, &repo, &opts, &args);
        r.assert_refused();
    }
    assert_eq!(s.hits.load(Ordering::SeqCst), 0);
}

/// The real-world positive control: `npm view` against the configured registry, with the
/// registry's host allowed (taken from npm's own configuration); denied without it.
#[test]
fn npm_view_through_the_proxy() {
    let Some(npm) = ready("npm") else { return };
    let out = Command::new(&npm)
        .args(["config", "get", "registry"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let registry = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let Some(host) = registry
        .strip_prefix("https://")
        .and_then(|r| r.split(['/', ':']).next())
        .filter(|h| !h.is_empty())
        .map(str::to_string)
    else {
        skip_tool("npm has no https registry configured");
        return;
    };
    let reachable = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 443))
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(5)).is_ok());
    if !reachable {
        skip_tool("the npm registry is not reachable from this host");
        return;
    }
    let f = Fixture::new("net-npm");
    let repo = f.repo("repo");
    let p = profile(&f, |t| {
        t["gate"].as_table_mut().unwrap().insert(
            "npm_subcommands".into(),
            toml::Value::Array(vec!["view".into()]),
        );
    });
    let argv = ["npm", "view", "semver", "version"];
    let (r, rep) = run_in(
        &p,
        &repo,
        &["--allow-host", &host, "--timeout", "60s"],
        &argv,
    );
    r.assert_code(0);
    assert!(
        r.stdout.trim().split('.').count() == 3,
        "a version:\n{}",
        r.stdout
    );
    let e = entry(&rep, &host, 443);
    assert_eq!(e["allowed"], true);
    assert!(e["bytes_down"].as_u64().unwrap() > 0, "{e}");

    let (r, rep) = run_in(&p, &repo, &["--timeout", "60s"], &argv);
    assert_ne!(r.code, Some(0), "{}", r.stdout);
    assert!(r.stderr.contains(&format!(
        "sandbox-run: network: denied CONNECT {host}:443 (not on the allow-list"
    )));
    assert_eq!(entry(&rep, &host, 443)["allowed"], false);
}

/// `--allow-host` without an allow-list mode is an error; host mode warns and is named.
#[test]
fn modes_on_the_command_line() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("net-modes");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    for net in ["none", "host"] {
        let r = run_probe(
            &p,
            &repo,
            &["--net", net, "--allow-host", "a.example"],
            &["pid"],
        );
        assert_eq!(r.code(), Some(125), "{r}");
        assert!(r.run.stderr.contains("use --net filtered"), "{r}");
    }
    let r = run_probe(&p, &repo, &["--allow-host", "a..example"], &["pid"]);
    assert_eq!(r.code(), Some(125), "{r}");
    // `--allow-host` switches a profile without network to filtered
    let rep = probe_report(&f, &p, &repo, &["--allow-host", "a.example"]);
    assert_eq!(rep["sandbox"]["network"]["mode"], "filtered");
    assert_eq!(
        rep["sandbox"]["network"]["allow"],
        serde_json::json!(["a.example"])
    );
    let rep = probe_report(&f, &p, &repo, &["--net", "host"]);
    assert_eq!(rep["sandbox"]["network"]["mode"], "host");
    let r = run_probe(&p, &repo, &["--net", "host"], &["pid"]);
    assert!(
        r.run.stderr.contains("sandbox-run: network: host mode"),
        "{r}"
    );
    // the proxy variables cannot be turned off
    let r = run_probe(
        &p,
        &repo,
        &[
            "--net",
            "filtered",
            "--env",
            "HTTPS_PROXY=http://elsewhere:1",
            "--env",
            "no_proxy=*",
        ],
        &["getenv", "HTTPS_PROXY"],
    );
    assert!(r.assert_ok().contains("http://127.0.0.1:3128"), "{r}");
    let r = run_probe(
        &p,
        &repo,
        &["--net", "filtered", "--env", "no_proxy=*"],
        &["getenv", "no_proxy"],
    );
    assert!(r.assert_ok().contains("localhost,127.0.0.1,::1"), "{r}");
}

/// What [`run_with_hosts`] needs: curl, root (to bind over /etc/hosts) and `unshare`, whose
/// path it returns; `None` after saying which one is missing.
fn hosts_ready() -> Option<PathBuf> {
    ready("curl")?;
    if !is_root() {
        skip(
            "root",
            "binding over /etc/hosts in a mount namespace of the test needs root",
        );
        return None;
    }
    let unshare = which("unshare");
    if unshare.is_none() {
        skip_tool("unshare is not installed");
    }
    unshare
}

/// `curl -sS URL` in a sandbox run with OPTS, inside a mount namespace of the test where
/// HOSTS is bound over /etc/hosts (root only): names resolve as the test says, on the host
/// side too, where the proxy resolves them.
fn run_with_hosts(
    unshare: &Path,
    hosts: &Path,
    profile: &Path,
    repo: &Path,
    report: &Path,
    opts: &[String],
    url: &str,
) -> (Run, serde_json::Value) {
    let mut c = Command::new(unshare);
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
        .arg(hosts)
        .arg(BIN)
        .arg("--profile")
        .arg(profile)
        .arg("--repo")
        .arg(repo)
        .arg("--report")
        .arg(report)
        .args(opts)
        .args([
            "--",
            "curl",
            "-sS",
            "--max-time",
            "20",
            "--noproxy",
            "",
            url,
        ])
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e")
        .current_dir(repo)
        .stdin(Stdio::null());
    let r = run_command(c, LIMIT);
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    (r, rep)
}

/// A name resolving to the host's own address on its LAN is refused, though it is on the
/// list and its address is of no special range (this project's VM: 192.0.2.2/24, a
/// documentation range, the one kind [`special`] lets through): a service of the host bound
/// to all its addresses, or a neighbour on the LAN, is no more reachable through a name than
/// one on loopback. The control: the address listed as a literal reaches the same server.
#[test]
fn a_name_resolving_to_the_hosts_own_network_is_refused() {
    use sandbox_run::net::allow::{host_networks, special};
    let Some(unshare) = hosts_ready() else {
        return;
    };
    let Some(own) = host_networks()
        .unwrap()
        .into_iter()
        .map(|n| n.ip)
        .find(|ip| ip.is_ipv4() && special(*ip).is_none())
    else {
        skip_tool("the host has no IPv4 address outside the special ranges");
        return;
    };
    let f = Fixture::new("net-own-network");
    let repo = f.repo("repo");
    let p = profile(&f, |_| {});
    let s = stub_on(&format!("{own}:0"));
    let hosts = f.write(
        "hosts",
        &format!("127.0.0.1 localhost\n{own} lan.test.invalid\n"),
    );
    let report = f.path("lan-report.json");
    let url = format!("http://lan.test.invalid:{}/", s.port);
    let name = format!("lan.test.invalid:{}", s.port);
    let (r, rep) = run_with_hosts(
        &unshare,
        &hosts,
        &p,
        &repo,
        &report,
        &["--allow-host".into(), name.clone()],
        &url,
    );
    assert_eq!(
        s.hits.load(Ordering::SeqCst),
        0,
        "the host was reached:\n{r}"
    );
    assert!(
        r.stderr.contains(&format!(
            "denied GET {name} (lan.test.invalid resolves to {own}, an address of the host's own network ("
        )),
        "{r}"
    );
    assert!(
        r.stdout.contains("rule: lan.test.invalid resolves to"),
        "{r}"
    );
    let e = entry(&rep, "lan.test.invalid", s.port);
    assert_eq!(e["allowed"], false, "{e}");

    // The control: with the address listed as a literal, the same name reaches the server.
    let (r, rep) = run_with_hosts(
        &unshare,
        &hosts,
        &p,
        &repo,
        &report,
        &[
            "--allow-host".into(),
            name,
            "--allow-host".into(),
            format!("{own}:{}", s.port),
        ],
        &url,
    );
    assert_eq!(r.stdout, BODY, "{r}");
    assert_eq!(entry(&rep, "lan.test.invalid", s.port)["allowed"], true);
}

/// A name that resolves to the cloud metadata address (169.254.169.254) is refused, though
/// it is on the list; the names resolve that way in the test's own mount namespace (a bind
/// over /etc/hosts there, which needs root). The control: a name from the same hosts file
/// that resolves to the stub's address, listed as a literal, reaches the stub.
#[test]
fn a_name_resolving_to_cloud_metadata_is_refused() {
    let Some(unshare) = hosts_ready() else {
        return;
    };
    let f = Fixture::new("net-metadata");
    let repo = f.repo("repo");
    let p = profile(&f, |_| {});
    let s = stub();
    let hosts = f.write(
        "hosts",
        "127.0.0.1 localhost stub.test.invalid\n169.254.169.254 metadata.test.invalid\n",
    );
    let report = f.path("meta-report.json");
    let run = |opts: &[String], url: &str| {
        run_with_hosts(&unshare, &hosts, &p, &repo, &report, opts, url)
    };
    let (r, rep) = run(
        &["--allow-host".into(), "metadata.test.invalid:80".into()],
        "http://metadata.test.invalid/latest/meta-data/",
    );
    assert!(
        r.stderr.contains("denied GET metadata.test.invalid:80 (metadata.test.invalid resolves to 169.254.169.254, a link-local address"),
        "{r}"
    );
    assert!(
        r.stdout
            .contains("rule: metadata.test.invalid resolves to 169.254.169.254"),
        "{r}"
    );
    assert_eq!(entry(&rep, "metadata.test.invalid", 80)["allowed"], false);

    let url = format!("http://stub.test.invalid:{}/", s.port);
    let (r, rep) = run(
        &[
            "--allow-host".into(),
            format!("stub.test.invalid:{}", s.port),
            "--allow-host".into(),
            format!("127.0.0.1:{}", s.port),
        ],
        &url,
    );
    assert_eq!(r.stdout, BODY, "{r}");
    assert_eq!(entry(&rep, "stub.test.invalid", s.port)["allowed"], true);
}

/// The shipped `adapter` profile: filtered, to the agents' API hosts, with the proxy
/// variables set; a host off its list is refused with the profile named.
#[test]
fn the_adapter_profile_is_filtered_to_the_agents_api_hosts() {
    if ready("curl").is_none() {
        return;
    }
    let f = Fixture::new("net-adapter");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::extends("adapter").programs(&["curl"]));
    let rep = probe_report(&f, &p, &repo, &[]);
    let net = &rep["sandbox"]["network"];
    assert_eq!(net["mode"], "filtered");
    for host in [
        "api.anthropic.com",
        "api.openai.com",
        "generativelanguage.googleapis.com",
    ] {
        assert!(
            net["allow"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(host)),
            "{net}"
        );
    }
    assert!(rep["sandbox"]["namespaces"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("net")));
    let r = run_probe(&p, &repo, &[], &["getenv", "HTTPS_PROXY"]);
    assert!(r.assert_ok().contains("http://127.0.0.1:3128"), "{r}");
    let (r, _) = run_in(&p, &repo, &[], &["curl", "-sS", "https://example.invalid/"]);
    assert!(
        r.stderr
            .contains("denied CONNECT example.invalid:443 (not on the allow-list of profile"),
        "{r}"
    );
}

/// Loopback servers inside the sandbox still work under `filtered`: `NO_PROXY` sends curl
/// straight to the sandbox's own loopback, where node serves.
#[test]
fn loopback_servers_inside_still_work() {
    if ready("node").is_none() || ready("curl").is_none() {
        return;
    }
    let f = Fixture::new("net-inner");
    let repo = f.repo("repo");
    std::fs::write(
        repo.join("inner.js"),
        r#"
const http = require('http'), { execFile } = require('child_process');
const srv = http.createServer((q, r) => r.end('inner ok\n'));
srv.listen(18900, '127.0.0.1', () => {
  execFile('curl', ['-sS', 'http://127.0.0.1:18900/', 'http://localhost:18900/'], (e, out, err) => {
    process.stdout.write(out + err);
    srv.close();
  });
});
"#,
    )
    .unwrap();
    let p = profile(&f, |t| {
        let n = t["network"].as_table_mut().unwrap();
        n.insert("tcp_bind".into(), toml::Value::Array(vec![18900.into()]));
        n.insert("tcp_connect".into(), toml::Value::Array(vec![18900.into()]));
    });
    let (r, rep) = run_in(&p, &repo, &[], &["node", "inner.js"]);
    r.assert_code(0);
    assert_eq!(r.stdout, "inner ok\ninner ok\n", "{r}");
    assert!(connections(&rep).is_empty(), "{rep:#}");
}

/// A directory served over HTTPS on the host's 127.0.0.1 (python3's http.server wrapped in
/// TLS, a throw-away certificate): what a git host's "dumb HTTP" needs. Each request it
/// answers is one line of its log.
fn https_dir_server(f: &Fixture, dir: &Path) -> Option<(TlsServer, PathBuf)> {
    let (openssl, python) = (which("openssl")?, which("python3")?);
    let (key, cert) = (f.path("git-key.pem"), f.path("git-cert.pem"));
    let ok = Command::new(&openssl)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let (port_file, log) = (f.path("git-server.port"), f.path("git-server.log"));
    const SERVER: &str = r#"
import functools, http.server, ssl, sys
d, cert, key, port_file = sys.argv[1:5]
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=d)
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
with open(port_file + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
__import__("os").rename(port_file + ".tmp", port_file)
s.serve_forever()
"#;
    let child = Command::new(&python)
        .arg("-c")
        .arg(SERVER)
        .arg(dir)
        .arg(&cert)
        .arg(&key)
        .arg(&port_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).ok()?)
        .spawn()
        .ok()?;
    let mut server = TlsServer { port: 0, child };
    for _ in 0..500 {
        if let Some(port) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            server.port = port;
            return Some((server, log));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// `git ls-remote` over HTTPS through the proxy (what a dependency fetched from a git host does), against a bare
/// repository served by "dumb HTTP" on the host's loopback and allowed by its literal; the
/// same command without the entry: the 403 (git names it), the stderr line, the report entry,
/// and no request at the server. No outside git host is needed.
#[test]
fn git_ls_remote_over_https_through_the_proxy() {
    if ready("git").is_none() || ready("env").is_none() {
        return;
    }
    let f = Fixture::new("net-git");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let (src, served) = (f.path("git-src"), f.path("served"));
    std::fs::create_dir_all(&served).unwrap();
    let (src_s, bare) = (src.to_str().unwrap(), served.join("r.git"));
    git(&["init", "-q", src_s]);
    git(&["-C", src_s, "commit", "-q", "--allow-empty", "-m", "one"]);
    let head = git(&["-C", src_s, "rev-parse", "HEAD"]).trim().to_string();
    git(&["clone", "-q", "--bare", src_s, bare.to_str().unwrap()]);
    git(&["-C", bare.to_str().unwrap(), "update-server-info"]);
    let Some((srv, log)) = https_dir_server(&f, &served) else {
        skip_tool("openssl and python3 cannot serve HTTPS here");
        return;
    };
    let requests = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("\"GET /r.git/")
            .count()
    };
    let repo = f.repo("repo");
    let spec = Spec::extends("validate")
        .net("filtered")
        .programs(&["git", "env"]);
    let mut t: toml::Table = toml::from_str(&spec.to_toml()).unwrap();
    t["gate"]
        .as_table_mut()
        .unwrap()
        .insert("wrapped".into(), toml::Value::Array(vec!["git".into()]));
    let p = f.path("git.toml");
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    let url = format!("https://127.0.0.1:{}/r.git", srv.port);
    let lit = format!("127.0.0.1:{}", srv.port);
    // NO_PROXY covers loopback (the sandbox's own servers): unset here, git's https goes
    // through HTTPS_PROXY to the host's loopback. The certificate is a throw-away one.
    let argv = [
        "env",
        "-u",
        "NO_PROXY",
        "-u",
        "no_proxy",
        "git",
        "-c",
        "http.sslVerify=false",
        "ls-remote",
        url.as_str(),
    ];

    let (r, rep) = run_in(&p, &repo, &["--allow-host", &lit], &argv);
    r.assert_code(0);
    assert!(r.stdout.contains(&format!("{head}\tHEAD\n")), "{r}");
    assert!(r.stdout.contains(&format!("{head}\trefs/heads/")), "{r}");
    let seen = requests();
    assert!(seen >= 1, "the server saw no request:\n{r}");
    let e = entry(&rep, "127.0.0.1", srv.port);
    assert_eq!(e["allowed"], true, "{e}");
    assert!(e["bytes_down"].as_u64().unwrap() > 0, "{e}");

    let (r, rep) = run_in(&p, &repo, &[], &argv);
    assert_ne!(r.code, Some(0), "{r}");
    assert!(
        r.stderr.contains("403"),
        "git names the proxy's answer:\n{r}"
    );
    let line = format!(
        "sandbox-run: network: denied CONNECT {lit} (not on the allow-list of profile {}; add --allow-host {lit})",
        p.display()
    );
    assert_eq!(r.stderr.matches(&line).count(), 1, "{r}");
    let e = entry(&rep, "127.0.0.1", srv.port);
    assert_eq!(e["allowed"], false, "{e}");
    assert_eq!(e["reason"], "not on the allow-list", "{e}");
    assert_eq!(requests(), seen, "the server was reached:\n{r}");
}
