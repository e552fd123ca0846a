//! A listed host that echoes a secret's value (an error quoting the key header) must hand the
//! command its placeholder, never the value, whatever the framing of the answer and whatever
//! path it takes back. A node client INSIDE a real sandbox sends the placeholder it finds in
//! its environment; a stub on the host's loopback receives the real value and echoes it in a
//! header and in the body, framed three ways:
//! - `identity`: `Content-Length`, the plain case;
//! - `chunked`: a chunk boundary falls inside the value;
//! - `gzip`: the body compressed (`Content-Encoding: gzip`), whatever the request asked.
//!
//! Each framing goes over every path an answer takes: TLS terminated through the proxy's
//! CONNECT (`connect`), TLS straight to the listed loopback port (`direct`), plain HTTP through
//! the proxy (`plain`) and plain HTTP straight to the listed loopback port (`plain-direct`).
//!
//! Beside each, in the same sandbox run, the control: the same stub answer through the same
//! path from a twin stub that no secret is listed for, echoing a value-shaped string the
//! client sent itself. The command reads it back whole (node undoes chunked and gzip), which
//! shows the echo really reaches the command through that framing and path.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NAME: &str = "SBX_ECHO_API_KEY";
const PREFIX: &str = "sk-ant-api03-";
/// What the client sends the control stub: the shape of a key, no secret.
const CONTROL: &str = "sk-ant-api03-CONTROLvalueCONTROLvalueCONTROLvalueCONTROLvalue00";

fn real_value() -> String {
    let mut b = [0u8; 48];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let rest: String = b
        .iter()
        .map(|x| alphabet[*x as usize % alphabet.len()] as char)
        .collect();
    format!("{PREFIX}{rest}")
}

/// Each request head a stub received.
type Seen = Arc<Mutex<Vec<String>>>;

struct Stub {
    port: u16,
    seen: Seen,
}

/// A TLS config whose certificate for 127.0.0.1 a fresh test CA signed (written to `ca`).
fn tls_config(ca: &Path) -> Arc<rustls::ServerConfig> {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sandbox-run echo test CA");
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    std::fs::write(ca, ca_cert.pem()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    Arc::new(config)
}

/// A stub on 127.0.0.1: TLS with `tls`, else plain HTTP.
fn stub(tls: Option<Arc<rustls::ServerConfig>>) -> Stub {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let (s, tls) = (s.clone(), tls.clone());
            std::thread::spawn(move || match tls {
                Some(cfg) => {
                    let conn = rustls::ServerConnection::new(cfg).unwrap();
                    echo(rustls::StreamOwned::new(conn, c), &s);
                }
                None => echo(c, &s),
            });
        }
    });
    Stub { port, seen }
}

/// Read one request head; answer with its `x-api-key` echoed in a header and in the body,
/// framed as its `?f=` asks, and close.
fn echo(mut s: impl Read + Write, seen: &Seen) {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    seen.lock().unwrap().push(head.clone());
    let key = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-api-key")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let framing = head
        .split_once("?f=")
        .and_then(|(_, r)| r.split([' ', '&']).next())
        .unwrap_or("identity")
        .to_string();
    let body = format!("{{\"error\":\"invalid x-api-key: {key}\"}}\n");
    let mut out =
        format!("HTTP/1.1 401 Unauthorized\r\nX-Echo: {key}\r\nConnection: close\r\n").into_bytes();
    match framing.as_str() {
        "chunked" => {
            // the boundary inside the value, and a chunk extension
            let at = body.find(&key).unwrap_or(0) + key.len() / 2;
            let (x, y) = body.split_at(at);
            out.extend_from_slice(
                format!(
                    "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{x}\r\n{:x};ext=1\r\n{y}\r\n0\r\n\r\n",
                    x.len(),
                    y.len()
                )
                .as_bytes(),
            );
        }
        "gzip" => {
            let gz = gzip(body.as_bytes());
            out.extend_from_slice(
                format!(
                    "Content-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                    gz.len()
                )
                .as_bytes(),
            );
            out.extend_from_slice(&gz);
        }
        _ => out
            .extend_from_slice(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes()),
    }
    let _ = s.write_all(&out);
    let _ = s.flush();
}

/// `bytes` compressed by the host's gzip (the test's own server side, never the sandbox).
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut c = std::process::Command::new("gzip")
        .args(["-c", "-n", "-9"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    c.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

/// The client inside: for each `port sent` pair, one request in `mode` with `x-api-key: sent`
/// (`$K`: the placeholder from its environment), asking for gzip; it prints what it read,
/// bodies decoded as their headers say.
const CLIENT: &str = r#"
const http = require('http'), https = require('https'), net = require('net'),
  tls = require('tls'), zlib = require('zlib');
const [mode, framing, ...jobs] = process.argv.slice(2);
const key = process.env.SBX_ECHO_API_KEY || '';
console.log('KEY=' + key);
function one(tag, port, sent, next) {
  const path = `/echo?f=${framing}`;
  const headers = { 'x-api-key': sent === '$K' ? key : sent, 'accept-encoding': 'gzip' };
  const opts = { host: '127.0.0.1', port: Number(port), path, headers };
  let over = false;
  const fin = (line) => { if (over) return; over = true; console.log(tag + ' ' + line); next(); };
  const done = (res) => {
    const parts = [];
    res.on('data', (d) => parts.push(d));
    res.on('error', (e) => fin('ERROR ' + (e.code || e.message)));
    res.on('end', () => {
      let body = Buffer.concat(parts);
      const enc = res.headers['content-encoding'] || 'identity';
      try { if (enc === 'gzip') body = zlib.gunzipSync(body); }
      catch (e) { fin('ERROR gunzip ' + e.code); return; }
      fin(`STATUS ${res.statusCode} ${enc} ECHO ${res.headers['x-echo']} BODY ${body.toString().trim()}`);
    });
  };
  const fail = (e) => fin('ERROR ' + (e.code || e.message));
  if (mode === 'plain') {
    http.get({ host: '127.0.0.1', port: 3128, path: `http://127.0.0.1:${port}${path}`,
      headers: { ...headers, host: `127.0.0.1:${port}` } }, done).on('error', fail);
  } else if (mode === 'plain-direct') {
    http.get(opts, done).on('error', fail);
  } else if (mode === 'direct') {
    https.get(opts, done).on('error', fail);
  } else {
    const p = net.connect(3128, '127.0.0.1', () =>
      p.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`));
    let got = '';
    const onData = (d) => {
      got += d;
      if (!got.includes('\r\n\r\n')) return;
      p.removeListener('data', onData);
      if (!got.startsWith('HTTP/1.1 200')) { fin('ERROR connect ' + got.split('\r\n')[0]); return; }
      https.get({ ...opts, createConnection: () => tls.connect({ socket: p, host: '127.0.0.1' }) },
        done).on('error', fail);
    };
    p.on('data', onData);
    p.on('error', fail);
  }
}
function run(i) {
  if (i >= jobs.length) return;
  one(i === 0 ? 'SECRET' : 'CONTROL', jobs[i], jobs[i + 1], () => run(i + 2));
}
run(0);
"#;

fn node() -> Option<PathBuf> {
    if !sandbox_works() {
        skip("sandbox", "the sandbox cannot start here");
        return None;
    }
    let p = PathBuf::from("/usr/bin/node");
    if !p.is_file() {
        skip_tool("node is not installed");
        return None;
    }
    Some(p)
}

/// One framing over one path: the secret's stub and its control twin, in one sandbox run.
fn echo_case(framing: &str, mode: &str) {
    let Some(_) = node() else { return };
    let f = Fixture::new(&format!("secret-echo-{framing}-{mode}"));
    let repo = f.repo("repo");
    std::fs::write(repo.join("client.js"), CLIENT).unwrap();
    let profile = f.profile(
        &Spec::extends("validate")
            .net("filtered")
            .programs(&["node"]),
    );
    let tls = mode == "connect" || mode == "direct";
    let ca = f.path("test-ca.pem");
    let cfg = tls.then(|| tls_config(&ca));
    let (secret, control) = (stub(cfg.clone()), stub(cfg));
    let value = real_value();
    let report = f.path("report.json");
    let secret_opt = format!("{NAME}=127.0.0.1:{}", secret.port);
    let allow = format!("127.0.0.1:{}", control.port);
    let mut opts = vec![
        "--report",
        report.to_str().unwrap(),
        "--secret",
        &secret_opt,
        "--allow-host",
        &allow,
    ];
    if tls {
        opts.extend(["--ca-certs", ca.to_str().unwrap()]);
    }
    let (sp, cp) = (secret.port.to_string(), control.port.to_string());
    let argv = ["node", "client.js", mode, framing, &sp, "$K", &cp, CONTROL];
    let mut c = sandbox_command(&profile, &repo, &opts, &argv);
    c.env(NAME, &value);
    let r = run_command(c, LIMIT);
    r.assert_code(0);
    let line = |tag: &str| {
        r.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{tag} ")))
            .unwrap_or_else(|| panic!("no {tag} line:\n{r}"))
            .to_string()
    };
    let placeholder = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("KEY="))
        .unwrap_or_else(|| panic!("no KEY= line:\n{r}"))
        .to_string();
    assert!(
        placeholder.starts_with(PREFIX) && placeholder != value,
        "{r}"
    );

    // The control: the echo reaches the command whole, through this framing and path.
    let got = line("CONTROL");
    assert!(
        got.starts_with("STATUS 401")
            && got.contains(&format!("ECHO {CONTROL} "))
            && got.contains(&format!("invalid x-api-key: {CONTROL}\"")),
        "{framing} over {mode}: the control did not read its echo back: {got}\n{r}"
    );
    if framing == "gzip" {
        assert!(got.contains(" gzip "), "{got}");
    }

    // The secret: the stub had the value, the command never does.
    let heads = secret.seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}\n{r}");
    assert!(
        heads[0].contains(&format!("x-api-key: {value}\r\n")),
        "the stub got no value: {heads:?}"
    );
    assert!(
        !r.stdout.contains(&value) && !r.stderr.contains(&value),
        "{framing} over {mode}: the echoed value reached the command:\n{r}"
    );
    let got = line("SECRET");
    // and the request asked for an answer the scan reads
    assert!(
        heads[0].contains("Accept-Encoding: identity\r\n")
            && !heads[0]
                .to_ascii_lowercase()
                .contains("accept-encoding: gzip"),
        "the request to a secret's host must ask for identity only: {heads:?}"
    );
    let rep = std::fs::read_to_string(&report).unwrap();
    assert!(!rep.contains(&value), "the report shows the value");
    if framing == "gzip" {
        // cut, with one line naming why and what passes; the report's log says so too
        assert!(got.starts_with("ERROR"), "{got}\n{r}");
        let cut = format!(
            "sandbox-run: network: cut a connection to 127.0.0.1:{sp}: its answer is gzip-encoded"
        );
        assert!(r.stderr.contains(&cut), "{r}");
        assert!(r.stderr.contains("only identity passes"), "{r}");
        assert_eq!(r.stderr.matches(&cut).count(), 1, "{r}");
        let rep: serde_json::Value = serde_json::from_str(&rep).unwrap();
        let log = rep["sandbox"]["network"].to_string();
        assert!(
            log.contains("answer cut: its answer is gzip-encoded"),
            "{log}"
        );
    } else {
        assert!(
            got.starts_with("STATUS 401 identity")
                && got.contains(&format!("ECHO {placeholder} "))
                && got.contains(&format!("invalid x-api-key: {placeholder}\"")),
            "{framing} over {mode}: the echo did not come back as the placeholder: {got}\n{r}"
        );
    }
}

#[test]
fn identity_over_terminated_tls() {
    echo_case("identity", "connect");
}

#[test]
fn chunked_over_terminated_tls() {
    echo_case("chunked", "connect");
}

#[test]
fn gzip_over_terminated_tls() {
    echo_case("gzip", "connect");
}

#[test]
fn identity_over_a_loopback_port() {
    echo_case("identity", "direct");
}

#[test]
fn chunked_over_a_loopback_port() {
    echo_case("chunked", "direct");
}

#[test]
fn gzip_over_a_loopback_port() {
    echo_case("gzip", "direct");
}

#[test]
fn identity_over_the_plain_proxy() {
    echo_case("identity", "plain");
}

#[test]
fn chunked_over_the_plain_proxy() {
    echo_case("chunked", "plain");
}

#[test]
fn gzip_over_the_plain_proxy() {
    echo_case("gzip", "plain");
}

#[test]
fn identity_over_a_plain_loopback_port() {
    echo_case("identity", "plain-direct");
}

#[test]
fn chunked_over_a_plain_loopback_port() {
    echo_case("chunked", "plain-direct");
}

#[test]
fn gzip_over_a_plain_loopback_port() {
    echo_case("gzip", "plain-direct");
}
