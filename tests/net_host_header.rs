//! `--net filtered` end to end: a plain-HTTP request through the proxy reaches only the host
//! its URL names. A shared front end on the list routes by the `Host` header, so a request
//! for an allowed URL with `Host: metadata.google.internal` is domain fronting: curl INSIDE a
//! real sandbox sends it to a stub on the host's loopback (on the list), and the proxy refuses
//! it with a 403 before the stub sees a byte; the same request with the right `Host` passes.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BODY: &str = "hello from the host's loopback stub\n";

/// A plain HTTP server on the host's 127.0.0.1 that keeps every request head it receives
/// (and every connection, even one that sends nothing).
struct Stub {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

fn stub() -> Stub {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let h = h.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = Vec::new();
                let mut b = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                h.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).into_owned());
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
                    BODY.len()
                );
            });
        }
    });
    Stub { port, heads }
}

impl Stub {
    fn received(&self) -> Vec<String> {
        // The stub's thread records a connection once it ends or sends its head.
        std::thread::sleep(Duration::from_millis(100));
        self.heads.lock().unwrap().clone()
    }
}

fn curl() -> Option<PathBuf> {
    if !sandbox_works() {
        return None;
    }
    let p = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("curl"))
            .find(|f| f.is_file())
    });
    if p.is_none() {
        skip_tool("curl is not installed");
    }
    p
}

/// `validate` (repo overlay) with curl, and the proxy as the only way out.
fn profile(f: &Fixture) -> PathBuf {
    let spec = Spec::extends("validate")
        .net("filtered")
        .programs(&["curl"]);
    let p = f.path("filtered.toml");
    std::fs::write(&p, spec.to_toml()).unwrap();
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

fn entry(report: &serde_json::Value, port: u16, allowed: bool) -> serde_json::Value {
    report["sandbox"]["network"]["connections"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["host"] == "127.0.0.1" && c["port"] == port && c["allowed"] == allowed)
        .cloned()
        .unwrap_or_else(|| panic!("no entry for 127.0.0.1:{port} ({allowed}) in {report:#}"))
}

#[test]
fn the_host_header_must_name_the_allowed_host() {
    if curl().is_none() {
        return;
    }
    let f = Fixture::new("net-host-header");
    let repo = f.repo("repo");
    let p = profile(&f);
    let s = stub();
    let url = format!("http://127.0.0.1:{}/x", s.port);
    let lit = format!("127.0.0.1:{}", s.port);
    // curl through the proxy (HTTP_PROXY inside; NO_PROXY would cover 127.0.0.1) sends the
    // absolute-form URL with the Host header it is given.
    let with_host = |host: &str| {
        let h = format!("Host: {host}");
        let argv = [
            "curl",
            "-sS",
            "--noproxy",
            "",
            "-H",
            h.as_str(),
            "-w",
            " status=%{http_code}",
            url.as_str(),
        ];
        run_in(&p, &repo, &["--allow-host", &lit], &argv)
    };

    // The control: the right Host (the port is not 80, so it is part of it) gets through.
    let (r, rep) = with_host(&lit);
    r.assert_code(0);
    assert_eq!(r.stdout, format!("{BODY} status=200"), "{r}");
    let got = s.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("GET /x HTTP/1.1\r\n"), "{got:?}");
    assert!(got[0].contains(&format!("\r\nHost: {lit}\r\n")), "{got:?}");
    assert_eq!(entry(&rep, s.port, true)["count"], 1);

    // The attack: an allowed URL, another host in the header.
    let (r, rep) = with_host("metadata.google.internal");
    r.assert_code(0);
    assert_eq!(s.received().len(), 1, "the stub was reached:\n{r}");
    let reason = "the Host header names metadata.google.internal, not the host the request was \
                  allowed for (127.0.0.1)";
    assert!(r.stdout.ends_with(" status=403"), "{r}");
    assert!(
        r.stdout
            .contains(&format!("denied GET {lit}\nrule: {reason}")),
        "{r}"
    );
    assert!(
        r.stdout.contains(&format!("fix: send `Host: {lit}`")),
        "{r}"
    );
    let line = format!("sandbox-run: network: denied GET {lit} ({reason}; send `Host: {lit}`");
    assert_eq!(r.stderr.matches(&line).count(), 1, "one line:\n{r}");
    let e = entry(&rep, s.port, false);
    assert_eq!(e["reason"], reason, "{e}");
    assert_eq!(e["count"], 1, "{e}");

    // The same host on another port: the header leaves the port out, so it means port 80.
    let (r, _) = with_host("127.0.0.1");
    assert_eq!(s.received().len(), 1, "the stub was reached:\n{r}");
    assert!(r.stdout.ends_with(" status=403"), "{r}");
    assert!(
        r.stdout.contains(&format!(
            "rule: the Host header names port 80, not the port the request was allowed for ({lit})"
        )),
        "{r}"
    );

    // Not a host at all: a 400 with the reason, and still nothing at the stub.
    let (r, _) = with_host("user@127.0.0.1");
    assert_eq!(s.received().len(), 1, "the stub was reached:\n{r}");
    assert!(r.stdout.ends_with(" status=400"), "{r}");
    assert!(r.stdout.contains("has user information"), "{r}");
}
