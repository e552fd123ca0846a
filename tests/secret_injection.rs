//! `--secret NAME=HOST` end to end: a node client INSIDE a real sandbox sends the placeholder
//! it finds in its environment; a TLS stub on the host's loopback (its certificate signed by a
//! test CA, which `--ca-certs` passes) receives the real value, in a header and in the request
//! line, whether the client came through the proxy (CONNECT) or straight to the listed port.
//! Beside each positive case, the refusals: the placeholder to another allowed host, in a body,
//! a `Host` header or an absolute-form target naming another host inside the terminated TLS.
//! Each refusal is checked where it matters: the stub receives nothing.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NAME: &str = "SBX_E2E_API_KEY";
const PREFIX: &str = "sk-ant-api03-";

/// A value nobody could match by chance: the prefix and 48 random characters.
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

/// What a stub received: each request, head and body as text.
type Seen = Arc<Mutex<Vec<String>>>;

struct Stub {
    port: u16,
    seen: Seen,
}

/// The test CA (PEM, written to `dir/test-ca-PORT.pem`) and a TLS server on 127.0.0.1 whose
/// certificate it signed; or, with `tls == false`, a plain HTTP server.
fn stub(dir: &Path, tls: bool) -> (Stub, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "sandbox-run e2e test CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
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
    let config = Arc::new(config);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let ca_pem = dir.join(format!("test-ca-{port}.pem"));
    std::fs::write(&ca_pem, ca_cert.pem()).unwrap();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let s = s.clone();
            let config = config.clone();
            std::thread::spawn(move || {
                if tls {
                    let conn = rustls::ServerConnection::new(config).unwrap();
                    serve(rustls::StreamOwned::new(conn, c), &s);
                } else {
                    serve(c, &s);
                }
            });
        }
    });
    (Stub { port, seen }, ca_pem)
}

/// Read one request (head and a Content-Length body), record it, answer 200.
fn serve(mut s: impl Read + Write, seen: &Seen) {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    seen.lock()
        .unwrap()
        .push(String::from_utf8_lossy(&buf).to_string());
    let _ =
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nstub: ok\n");
    let _ = s.flush();
}

/// The client inside: node (no shell passes the gate), reading the placeholder from its
/// environment. `mode`: `connect` (TLS through the proxy's CONNECT), `direct` (TLS straight
/// to the listed port), `plain` (absolute-form plain HTTP through the proxy). `$K` in the
/// options stands for the variable's value.
const CLIENT: &str = r#"
const net = require('net'), tls = require('tls');
const [mode, port, json] = process.argv.slice(2);
const o = JSON.parse(json || '{}');
const key = process.env.SBX_E2E_API_KEY || '';
const sub = (s) => s.split('$K').join(key);
console.log('KEY=' + key);
const body = sub(o.body || '');
const target = sub(o.target || (mode === 'plain' ? `http://127.0.0.1:${port}/v1?k=$K` : '/v1?k=$K'));
const host = o.host || `127.0.0.1:${port}`;
const auth = o.nokey ? '' : `x-api-key: ${key}\r\n`;
const head = `POST ${target} HTTP/1.1\r\nHost: ${host}\r\n${auth}` +
  `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
function talk(sock) {
  let out = '';
  sock.on('data', (d) => { out += d; });
  sock.on('end', () => console.log('ANSWER ' + out.split('\r\n')[0]));
  sock.on('error', (e) => console.log('ERROR ' + (e.code || e.message)));
  sock.write(head + body);
}
if (mode === 'direct') {
  talk(tls.connect({ host: '127.0.0.1', port: Number(port) }));
} else if (mode === 'plain') {
  talk(net.connect(3128, '127.0.0.1'));
} else {
  const p = net.connect(3128, '127.0.0.1', () => p.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`));
  let got = '';
  const onData = (d) => {
    got += d;
    if (!got.includes('\r\n\r\n')) return;
    p.removeListener('data', onData);
    if (!got.startsWith('HTTP/1.1 200')) { console.log('ANSWER ' + got.split('\r\n')[0]); p.end(); return; }
    talk(tls.connect({ socket: p, host: '127.0.0.1' }));
  };
  p.on('data', onData);
}
"#;

fn node() -> Option<PathBuf> {
    if !sandbox_works() {
        return None;
    }
    let p = PathBuf::from("/usr/bin/node");
    if !p.is_file() {
        skip_tool("node is not installed");
        return None;
    }
    Some(p)
}

struct Setup {
    f: Fixture,
    repo: PathBuf,
    profile: PathBuf,
    value: String,
}

fn setup(name: &str) -> Setup {
    let f = Fixture::new(name);
    let repo = f.repo("repo");
    std::fs::write(repo.join("client.js"), CLIENT).unwrap();
    let spec = Spec::extends("validate")
        .net("filtered")
        .programs(&["node"]);
    let profile = f.profile(&spec);
    Setup {
        f,
        repo,
        profile,
        value: real_value(),
    }
}

impl Setup {
    /// Run the client with `opts`; the caller's environment has the real value.
    fn client(&self, opts: &[&str], args: &[&str]) -> (Run, serde_json::Value) {
        let report = self.f.path("report.json");
        let _ = std::fs::remove_file(&report);
        let mut o = vec!["--report", report.to_str().unwrap()];
        o.extend_from_slice(opts);
        let mut argv = vec!["node", "client.js"];
        argv.extend_from_slice(args);
        let mut c = sandbox_command(&self.profile, &self.repo, &o, &argv);
        c.env(NAME, &self.value);
        let r = run_command(c, LIMIT);
        let json = std::fs::read_to_string(&report)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| panic!("no report:\n{r}"));
        (r, json)
    }
}

fn secret_opt(port: u16) -> String {
    format!("{NAME}=127.0.0.1:{port}")
}

fn misdirected(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["sandbox"]["secret_misdirected"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Through the proxy and straight to the listed port: the stub gets the real value in the
/// header and in the request line; the command only ever saw a placeholder of the same shape;
/// the report counts the injections and never shows the value.
#[test]
fn the_listed_host_receives_the_real_value() {
    let Some(_) = node() else { return };
    let s = setup("secret-inject");
    let (a, ca) = stub(s.f.path("").as_path(), true);
    let secret = secret_opt(a.port);
    let port = a.port.to_string();
    let mut placeholders = Vec::new();
    for mode in ["connect", "direct"] {
        let (r, rep) = s.client(
            &["--secret", &secret, "--ca-certs", ca.to_str().unwrap()],
            &[mode, &port],
        );
        r.assert_code(0);
        assert!(r.stdout.contains("ANSWER HTTP/1.1 200"), "{mode}: {r}");
        let seen = a.seen.lock().unwrap().pop().unwrap_or_default();
        assert!(
            seen.contains(&format!("x-api-key: {}", s.value)),
            "{mode}: the stub got no real value in the header:\n{seen}\n{r}"
        );
        assert!(
            seen.contains(&format!("/v1?k={} HTTP/1.1", s.value)),
            "{mode}: not in the request line:\n{seen}"
        );
        let inside = r
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("KEY="))
            .unwrap()
            .to_string();
        assert_ne!(inside, s.value, "the real value entered the sandbox");
        assert_eq!(inside.len(), s.value.len(), "{inside}");
        assert!(inside.starts_with(PREFIX), "{inside}");
        placeholders.push(inside);
        let text = rep.to_string();
        assert!(!text.contains(&s.value), "the report shows the value");
        assert!(!r.stderr.contains(&s.value), "stderr shows the value");
        let secrets = rep["sandbox"]["secrets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let e = secrets
            .iter()
            .find(|e| e["name"] == NAME)
            .unwrap_or_else(|| panic!("no secrets entry: {rep:#}"));
        assert!(e["injections"].as_u64().unwrap() >= 2, "{e}");
    }
    assert_ne!(
        placeholders[0], placeholders[1],
        "the placeholder is per run"
    );
}

/// The placeholder sent to another allowed host is refused with 403, named on stderr and in
/// the report, and that host receives nothing. The positive control is the test above.
#[test]
fn the_placeholder_to_another_host_is_refused() {
    let Some(_) = node() else { return };
    let s = setup("secret-misdirected");
    let (a, ca) = stub(s.f.path("").as_path(), true);
    let (b, _) = stub(s.f.path("").as_path(), false);
    let secret = secret_opt(a.port);
    let other = format!("127.0.0.1:{}", b.port);
    let opts = [
        "--secret",
        &secret,
        "--ca-certs",
        ca.to_str().unwrap(),
        "--allow-host",
        &other,
    ];
    // control: the same request to the other host without the placeholder passes
    let port = b.port.to_string();
    let json = format!(r#"{{"target":"http://127.0.0.1:{port}/ok","nokey":true}}"#);
    let (r, _) = s.client(&opts, &["plain", &port, &json]);
    assert!(r.stdout.contains("ANSWER HTTP/1.1 200"), "{r}");
    let seen_before = b.seen.lock().unwrap().len();
    assert_eq!(seen_before, 1);
    let (r, rep) = s.client(&opts, &["plain", &port]);
    assert!(r.stdout.contains("ANSWER HTTP/1.1 403"), "{r}");
    assert_eq!(
        b.seen.lock().unwrap().len(),
        seen_before,
        "the other host received the request"
    );
    assert!(
        r.stderr.contains(NAME),
        "no stderr line naming the secret:\n{r}"
    );
    let m = misdirected(&rep);
    assert!(
        m.iter()
            .any(|e| e["secret"] == NAME && e["host"] == "127.0.0.1" && e["port"] == b.port),
        "no secret_misdirected entry: {rep:#}"
    );
    assert!(!rep.to_string().contains(&s.value));
    assert!(a.seen.lock().unwrap().is_empty());
}

/// Inside the terminated TLS, the request must name the host it was allowed for: a `Host`
/// header or an absolute-form target naming another host is refused (domain fronting), and
/// a body carrying the placeholder is refused (values go in the request line and headers
/// only). The stub receives none of them.
#[test]
fn terminated_requests_name_their_host_and_keep_bodies_clean() {
    let Some(_) = node() else { return };
    let s = setup("secret-host");
    let (a, ca) = stub(s.f.path("").as_path(), true);
    let secret = secret_opt(a.port);
    let port = a.port.to_string();
    let opts = ["--secret", &secret, "--ca-certs", ca.to_str().unwrap()];
    for (what, json) in [
        (
            "a Host header naming another host",
            r#"{"host":"metadata.google.internal"}"#,
        ),
        (
            "an absolute-form target naming another host",
            r#"{"target":"http://metadata.google.internal/v1?k=$K"}"#,
        ),
        (
            "the placeholder in a body",
            r#"{"body":"{\"key\":\"$K\"}"}"#,
        ),
    ] {
        let (r, _) = s.client(&opts, &["connect", &port, json]);
        assert!(
            !r.stdout.contains("ANSWER HTTP/1.1 200"),
            "{what} passed:\n{r}"
        );
        assert!(
            a.seen.lock().unwrap().is_empty(),
            "{what}: the stub received {:?}",
            a.seen.lock().unwrap()
        );
    }
    // control: the same client, the right host, no body: passes
    let (r, _) = s.client(&opts, &["connect", &port]);
    assert!(r.stdout.contains("ANSWER HTTP/1.1 200"), "{r}");
    assert_eq!(a.seen.lock().unwrap().len(), 1);
}
