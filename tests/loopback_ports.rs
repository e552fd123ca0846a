//! Listed host ports on loopback appear on the sandbox's own loopback: with `--allow-host
//! 127.0.0.1:PORT`, a client inside that ignores the proxy variables (Node's built-in `fetch`,
//! a raw connect of the probe) connects straight to `127.0.0.1:PORT` and reaches the host's
//! server there, through the supervisor, logged in the report like a proxied connection.
//! Beside each: the refusal of a port not listed (ECONNREFUSED from the sandbox's own kernel,
//! and nothing at the host's server).

mod common;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BODY: &str = "hello from a service on the host's loopback\n";
const LIMIT: Duration = Duration::from_secs(60);

/// A plain HTTP server on the host's loopback answering [`BODY`], counting its connections.
struct Stub {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn stub() -> Stub {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
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

/// `--net filtered` on `validate` with node, and the probe.
fn setup(name: &str) -> Option<(Fixture, PathBuf, PathBuf)> {
    if !sandbox_works() {
        return None;
    }
    if which("node").is_none() {
        skip_tool("node is not installed");
        return None;
    }
    let f = Fixture::new(name);
    let repo = f.repo("repo");
    // Node's built-in fetch: it ignores the proxy variables, and NO_PROXY names the loopback.
    std::fs::write(
        repo.join("fetch.js"),
        "fetch(process.argv[2]).then(r => r.text()).then(t => process.stdout.write(t), \
         e => { console.log('ERR', (e.cause && e.cause.code) || e.message); process.exit(3) })\n",
    )
    .unwrap();
    let p = f.profile(
        &Spec::extends("validate")
            .net("filtered")
            .programs(&["node"]),
    );
    Some((f, repo, p))
}

fn run_in(
    f: &Fixture,
    p: &Path,
    repo: &Path,
    opts: &[&str],
    argv: &[&str],
) -> (Run, serde_json::Value) {
    let report = f.path("report.json");
    let _ = std::fs::remove_file(&report);
    let mut o = vec!["--report", report.to_str().unwrap()];
    o.extend_from_slice(opts);
    let r = run_command(sandbox_command(p, repo, &o, argv), LIMIT);
    let json: serde_json::Value = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| panic!("no report:\n{r}"));
    schema::assert_valid_report(&json);
    (r, json)
}

fn entry(report: &serde_json::Value, host: &str, port: u16) -> Option<serde_json::Value> {
    report["sandbox"]["network"]["connections"]
        .as_array()?
        .iter()
        .find(|c| c["host"] == host && c["port"] == port)
        .cloned()
}

/// Node's fetch inside, straight to 127.0.0.1:PORT, gets the host's answer; the report logs
/// the connection. The control: a port not listed is refused inside and never reaches the
/// host's server there.
#[test]
fn a_client_ignoring_the_proxy_reaches_a_listed_loopback_port() {
    let Some((f, repo, p)) = setup("lport-fetch") else {
        return;
    };
    let (listed, other) = (stub(), stub());
    let lit = format!("127.0.0.1:{}", listed.port);
    let url = format!("http://127.0.0.1:{}/", listed.port);
    let (r, rep) = run_in(
        &f,
        &p,
        &repo,
        &["--allow-host", &lit],
        &["node", "fetch.js", &url],
    );
    r.assert_code(0);
    assert_eq!(r.stdout, BODY, "{r}");
    assert_eq!(listed.hits.load(Ordering::SeqCst), 1);
    let e = entry(&rep, "127.0.0.1", listed.port).unwrap_or_else(|| panic!("{rep:#}"));
    assert_eq!(e["allowed"], true, "{e}");
    assert_eq!(e["count"], 1, "{e}");
    assert_eq!(
        e["reason"],
        format!("allow-list: {lit} (loopback port)"),
        "{e}"
    );
    assert!(e["bytes_down"].as_u64().unwrap() > BODY.len() as u64, "{e}");

    // The refusal: the other server's port, not on the list, in a run where the first is.
    let url = format!("http://127.0.0.1:{}/", other.port);
    let (r, rep) = run_in(
        &f,
        &p,
        &repo,
        &["--allow-host", &lit],
        &["node", "fetch.js", &url],
    );
    r.assert_code(3);
    assert_eq!(r.stdout.trim(), "ERR ECONNREFUSED", "{r}");
    assert_eq!(
        other.hits.load(Ordering::SeqCst),
        0,
        "the host's server was reached"
    );
    assert!(entry(&rep, "127.0.0.1", other.port).is_none(), "{rep:#}");
    // and a raw connect of the probe says the same
    let target = format!("127.0.0.1:{}", other.port);
    let probe = run_probe(
        &p,
        &repo,
        &["--allow-host", &lit],
        &["tcp-connect", &target],
    );
    probe.assert_errno(&[libc::ECONNREFUSED]);
    assert_eq!(
        other.hits.load(Ordering::SeqCst),
        0,
        "the host's server was reached"
    );
}

/// `localhost:PORT` is both loopback addresses inside; Node's fetch of `localhost` (IPv6
/// first where the sandbox has it) reaches a server on the host's 127.0.0.1.
#[test]
fn localhost_with_a_port_reaches_the_host_on_either_address() {
    let Some((f, repo, p)) = setup("lport-localhost") else {
        return;
    };
    let s = stub();
    let name = format!("localhost:{}", s.port);
    let url = format!("http://localhost:{}/", s.port);
    let (r, rep) = run_in(
        &f,
        &p,
        &repo,
        &["--allow-host", &name],
        &["node", "fetch.js", &url],
    );
    r.assert_code(0);
    assert_eq!(r.stdout, BODY, "{r}");
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
    let e = entry(&rep, "localhost", s.port).unwrap_or_else(|| panic!("{rep:#}"));
    assert_eq!(e["count"], 1, "{e}");
}

/// Ports below 1024 are bound inside too (pid 1 may, in the sandbox's own namespaces, rootless
/// as well); the host's side has nothing there, so the connection is closed, not refused.
#[test]
fn a_privileged_port_is_bound_inside() {
    let Some((_f, repo, p)) = setup("lport-low") else {
        return;
    };
    let probe = run_probe(
        &p,
        &repo,
        &["--allow-host", "127.0.0.1:1"],
        &["tcp-connect", "127.0.0.1:1"],
    );
    probe.assert_ok();
}

/// The proxy's own port cannot be a loopback port: a plan-time error, nothing run.
#[test]
fn the_proxy_port_is_refused_at_plan_time() {
    let Some((_f, repo, p)) = setup("lport-3128") else {
        return;
    };
    let r = run_command(
        sandbox_command(
            &p,
            &repo,
            &["--allow-host", "127.0.0.1:3128"],
            &["node", "fetch.js", "x"],
        ),
        LIMIT,
    );
    r.assert_code(125);
    assert!(
        r.stderr
            .contains("127.0.0.1:3128: port 3128 on the sandbox's loopback is its proxy's"),
        "{r}"
    );
    assert_eq!(r.stderr.lines().count(), 1, "{r}");
}

/// The attack: the command tries to take a listed port inside (to answer, itself, the
/// connections meant for the host's service): the port is pid 1's, handed to the supervisor
/// before the command existed, and cannot be bound again. The control: the next port, not
/// listed, serves the command's own loopback as always.
#[test]
fn the_command_cannot_take_a_listed_port() {
    let Some((_f, repo, p)) = setup("lport-steal") else {
        return;
    };
    let s = stub();
    let lit = format!("127.0.0.1:{}", s.port);
    let port = s.port.to_string();
    let free = s.port.wrapping_add(1).max(1024).to_string();
    let opts = ["--allow-host", lit.as_str()];
    run_probe(&p, &repo, &opts, &["tcp-loopback", "127.0.0.1", &free]).assert_ok();
    run_probe(&p, &repo, &opts, &["tcp-loopback", "127.0.0.1", &port])
        .assert_errno(&[libc::EADDRINUSE]);
    assert_eq!(s.hits.load(Ordering::SeqCst), 0);
}
