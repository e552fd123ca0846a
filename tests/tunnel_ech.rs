//! A tunnel reaches only the server its ClientHello names in the clear: a ClientHello with
//! Encrypted Client Hello (extension 0xfe0d) names a public outer name, while a shared front
//! end routes on the encrypted inner one. A node client INSIDE a real sandbox opens a CONNECT
//! tunnel and sends a ClientHello built here, with and without ECH, through both kinds of
//! tunnel: a plain one (to a TCP stub on the host's loopback, which records what reaches it)
//! and a terminated one (to a host a secret is listed for). With ECH the proxy answers a TLS
//! alert (access_denied) and prints one line, and the stub receives nothing; the control, the
//! same hello without ECH (GREASE extensions in both, as browsers send them), passes.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The TLS alert the proxy answers a refused tunnel with: fatal, access_denied.
const ACCESS_DENIED: &str = "15030300020231";

/// A TLS 1.3 ClientHello naming `sni`, as a client writes it: suites, supported_versions,
/// supported_groups, signature_algorithms, a key share, GREASE, and `extra` extensions.
fn hello(sni: &str, extra: &[(u16, Vec<u8>)]) -> Vec<u8> {
    fn vec(n: usize, body: &[u8]) -> Vec<u8> {
        let len = body.len().to_be_bytes();
        let mut v = len[8 - n..].to_vec();
        v.extend_from_slice(body);
        v
    }
    fn ext(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut v = kind.to_be_bytes().to_vec();
        v.extend(vec(2, body));
        v
    }
    let mut exts = ext(0x2a2a, &[]);
    let mut entry = vec![0u8];
    entry.extend(vec(2, sni.as_bytes()));
    exts.extend(ext(0, &vec(2, &entry)));
    exts.extend(ext(43, &vec(1, &[3, 4])));
    exts.extend(ext(10, &vec(2, &[0, 0x1d])));
    exts.extend(ext(13, &vec(2, &[4, 3, 8, 4, 8, 7])));
    let mut ks = vec![0, 0x1d];
    ks.extend(vec(2, &[7u8; 32]));
    exts.extend(ext(51, &vec(2, &ks)));
    for (kind, body) in extra {
        exts.extend(ext(*kind, body));
    }
    exts.extend(ext(0xdada, &[0]));
    let mut body = vec![3, 3];
    body.extend([0x42u8; 32]);
    body.extend(vec(1, &[9u8; 32]));
    body.extend(vec(2, &[0x13, 0x01]));
    body.extend(vec(1, &[0]));
    body.extend(vec(2, &exts));
    let mut hs = vec![1u8];
    hs.extend(vec(3, &body));
    let mut rec = vec![0x16, 3, 1];
    rec.extend(vec(2, &hs));
    rec
}

/// An ECH extension as a client sends it (outer type, config id, cipher suite, enc, payload).
fn ech() -> Vec<u8> {
    let mut b = vec![0, 0, 1, 0, 1, 0x42, 0, 32];
    b.extend([5u8; 32]);
    b.extend([0, 64]);
    b.extend([6u8; 64]);
    b
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A TCP stub that records every byte that reaches it, answers `stub-saw-it`, and closes.
fn raw_stub() -> (u16, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let got: Arc<Mutex<Vec<u8>>> = Arc::default();
    let g = got.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let g = g.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_millis(1500)));
                let mut b = [0u8; 4096];
                while let Ok(n) = c.read(&mut b) {
                    if n == 0 {
                        break;
                    }
                    g.lock().unwrap().extend_from_slice(&b[..n]);
                    let _ = c.write_all(b"stub-saw-it");
                }
            });
        }
    });
    (port, got)
}

/// The client inside: CONNECT to each `port hello-hex` pair in turn, send the hello, print
/// the first bytes of the answer (or the end).
const CLIENT: &str = r#"
const net = require('net');
const jobs = process.argv.slice(2);
function one(i) {
  if (i >= jobs.length) return;
  const [port, hello] = [jobs[i], jobs[i + 1]];
  const p = net.connect(3128, '127.0.0.1', () =>
    p.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`));
  let got = Buffer.alloc(0), open = false, over = false;
  const fin = () => {
    if (over) return; over = true;
    console.log(`JOB ${i / 2} GOT ${got.subarray(0, 7).toString('hex')} ${got.toString('latin1').includes('stub-saw-it') ? 'STUB' : '-'}`);
    p.destroy();
    one(i + 2);
  };
  p.on('data', (d) => {
    if (!open) {
      const s = d.toString('latin1');
      if (!s.startsWith('HTTP/1.1 200')) { console.log(`JOB ${i / 2} CONNECT ${s.split('\r\n')[0]}`); over = true; p.destroy(); one(i + 2); return; }
      open = true;
      p.write(Buffer.from(hello, 'hex'));
      setTimeout(fin, 3000);
      return;
    }
    got = Buffer.concat([got, d]);
    if (got.length >= 7) fin();
  });
  p.on('end', fin);
  p.on('error', fin);
}
one(0);
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

/// One sandbox run: ECH and its control through a plain tunnel and through a terminated one.
#[test]
fn a_client_hello_with_ech_is_refused_on_every_tunnel() {
    let Some(_) = node() else { return };
    let f = Fixture::new("tunnel-ech");
    let repo = f.repo("repo");
    std::fs::write(repo.join("client.js"), CLIENT).unwrap();
    let profile = f.profile(
        &Spec::extends("validate")
            .net("filtered")
            .programs(&["node"]),
    );
    let (plain, got) = raw_stub();
    // the terminated tunnel: a secret is listed for this port (nothing need listen: the
    // proxy answers the ClientHello itself, and the check comes first)
    let (listed, _) = raw_stub();
    let with = hex(&hello("127.0.0.1", &[(0xfe0d, ech())]));
    let without = hex(&hello("127.0.0.1", &[]));
    let report = f.path("report.json");
    let secret = format!("SBX_ECH_KEY=127.0.0.1:{listed}");
    let allow = format!("127.0.0.1:{plain}");
    let (pp, lp) = (plain.to_string(), listed.to_string());
    let opts = [
        "--report",
        report.to_str().unwrap(),
        "--allow-host",
        &allow,
        "--secret",
        &secret,
    ];
    let argv = [
        "node",
        "client.js",
        &pp,
        &with,
        &lp,
        &with,
        &pp,
        &without,
        &lp,
        &without,
    ];
    let mut c = sandbox_command(&profile, &repo, &opts, &argv);
    c.env("SBX_ECH_KEY", "sk-ech-test-value-0123456789");
    let r = run_command(c, LIMIT);
    r.assert_code(0);
    let job = |n: usize| {
        r.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("JOB {n} ")))
            .unwrap_or_else(|| panic!("no JOB {n} line:\n{r}"))
            .to_string()
    };
    // ECH through a plain tunnel and a terminated one: refused with an alert
    assert_eq!(job(0), format!("GOT {ACCESS_DENIED} -"), "{r}");
    assert_eq!(job(1), format!("GOT {ACCESS_DENIED} -"), "{r}");
    // the controls: the same hello without ECH reaches the stub whole, or the proxy's own
    // TLS server (a handshake record back)
    assert!(job(2).ends_with(" STUB"), "{r}");
    let control = job(3);
    assert!(control.starts_with("GOT 160303"), "{control}\n{r}");
    let seen = got.lock().unwrap().clone();
    assert_eq!(
        hex(&seen),
        without,
        "the stub got more or less than the control hello"
    );
    // one line (per host: both tunnels go to 127.0.0.1), naming ECH and what to do; each
    // refusal in the report's connection log
    let line = format!("sandbox-run: network: denied CONNECT 127.0.0.1:{plain} (the TLS ClientHello carries extension 0xfe0d (Encrypted Client Hello)");
    assert_eq!(r.stderr.matches(&line).count(), 1, "{r}");
    assert_eq!(r.stderr.matches("0xfe0d").count(), 1, "{r}");
    assert!(r.stderr.contains("turn Encrypted Client Hello off"), "{r}");
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let conns = rep["sandbox"]["network"]["connections"].as_array().unwrap();
    for port in [plain, listed] {
        assert!(
            conns.iter().any(|c| c["port"] == port
                && c["allowed"] == false
                && c["reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains("Encrypted Client Hello")),
            "no refusal of port {port} in {conns:#?}"
        );
    }
}
