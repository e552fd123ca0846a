//! Terminated connections in-process against real sockets: a TLS server on 127.0.0.1 with a
//! test CA (passed as an extra root), clients that trust the run's CA and CONNECT through the
//! proxy.

use super::*;
use crate::net::secret::Secret;
use crate::net::tls::http1;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::mpsc::{channel, Receiver, Sender};

const PH_A: &str = "sk-ant-PLACEHOLDERaaaaaaaaaa";
const VAL_A: &str = "sk-ant-realvalue-0123456789";
const PH_B: &str = "ghp_PLACEHOLDERbbbbbbbbbbbb";
const VAL_B: &str = "ghp_realvalue-bbbb-0123456";
const PH_C: &str = "AIzaPLACEHOLDERcccccccccccc";
const VAL_C: &str = "AIza-realvalue-cccc-012345";

/// A test CA (PEM in a file) and a server configuration for localhost and 127.0.0.1.
fn test_ca(dir: &std::path::Path) -> (std::path::PathBuf, Arc<rustls::ServerConfig>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = p.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(p, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let path = dir.join("test-ca.pem");
    std::fs::write(&path, ca_cert.pem()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
    .unwrap();
    (path, Arc::new(cfg))
}

/// What the test server received: each request's head and body (chunked bodies decoded).
type Got = (String, Vec<u8>);

/// A keep-alive HTTP/1.1 server over TLS: answers `ok` to each request; `/sse` sends one
/// event, waits for the test's go, sends a second and closes; `/big` sends `big` bytes.
fn server(cfg: Arc<rustls::ServerConfig>, go: Receiver<()>, big: usize) -> (u16, Receiver<Got>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = channel();
    let go = Arc::new(Mutex::new(go));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let (cfg, tx, go) = (cfg.clone(), tx.clone(), go.clone());
            std::thread::spawn(move || serve_tls(s, cfg, tx, go, big));
        }
    });
    (port, rx)
}

fn serve_tls(
    s: TcpStream,
    cfg: Arc<rustls::ServerConfig>,
    tx: Sender<Got>,
    go: Arc<Mutex<Receiver<()>>>,
    big: usize,
) {
    // as a real server would (and as the proxy does): without Nagle, or a small write after
    // the handshake waits for a delayed ACK
    let _ = s.set_nodelay(true);
    let conn = rustls::ServerConnection::new(cfg).unwrap();
    let mut t = rustls::StreamOwned::new(conn, s);
    let mut buf = Vec::new();
    let mut b = vec![0u8; 65536];
    loop {
        let head = loop {
            match http1::parse_head(&buf) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(_) => return,
            }
            match t.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        };
        let text = String::from_utf8_lossy(&buf[..head.len]).to_string();
        buf.drain(..head.len);
        let mut body = Vec::new();
        match head.body {
            http1::Body::None => {}
            http1::Body::Length(n) => {
                while buf.len() < n as usize {
                    match t.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&b[..k]),
                    }
                }
                body = buf.drain(..n as usize).collect();
            }
            http1::Body::Chunked => {
                let mut c = http1::Chunked::default();
                loop {
                    let n = c.advance(&buf, &mut |d| body.extend_from_slice(d)).unwrap();
                    buf.drain(..n);
                    if c.is_done() {
                        break;
                    }
                    match t.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&b[..k]),
                    }
                }
            }
        }
        let path = head.target.clone();
        let _ = tx.send((text.clone(), body));
        if path == "/sse" {
            let _ = t.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: one\n\n",
            );
            let _ = t.flush();
            let _ = lock(&go).recv_timeout(Duration::from_secs(10));
            let _ = t.write_all(b"data: two\n\n");
            t.conn.send_close_notify();
            let _ = t.flush();
            return;
        }
        if path == "/ws" {
            // switch protocols, then echo each read in a WebSocket frame, each read reported
            let _ = t.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            );
            let _ = t.flush();
            if !buf.is_empty() {
                let _ = tx.send(("raw".into(), std::mem::take(&mut buf)));
            }
            loop {
                match t.read(&mut b) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let _ = tx.send(("raw".into(), b[..n].to_vec()));
                        let n = n.min(125);
                        let mut frame = vec![0x82, n as u8];
                        frame.extend_from_slice(&b[..n]);
                        if t.write_all(&frame).is_err() {
                            return;
                        }
                        let _ = t.flush();
                    }
                }
            }
        }
        if path == "/echo" {
            // the request head back, in two writes that split the value in the middle
            let _ = t.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let mid = text
                .find(VAL_A)
                .map_or(text.len() / 2, |i| i + VAL_A.len() / 2);
            let _ = t.write_all(&text.as_bytes()[..mid]);
            let _ = t.flush();
            std::thread::sleep(Duration::from_millis(100));
            let _ = t.write_all(&text.as_bytes()[mid..]);
            t.conn.send_close_notify();
            let _ = t.flush();
            return;
        }
        if path == "/big" {
            let _ = write!(t, "HTTP/1.1 200 OK\r\nContent-Length: {big}\r\n\r\n");
            let chunk = vec![b'x'; 65536];
            let mut left = big;
            while left > 0 {
                let n = left.min(chunk.len());
                if t.write_all(&chunk[..n]).is_err() {
                    return;
                }
                left -= n;
            }
            continue;
        }
        if t.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

/// A secret whose value stays for the test's life.
fn secret(name: &str, host: String, ph: &str, value: &str) -> Secret {
    let v: &'static [u8] = Box::leak(value.as_bytes().to_vec().into_boxed_slice());
    Secret::new(name.into(), vec![host], ph.as_bytes().to_vec(), v).unwrap()
}

struct Fixture {
    proxy: Option<Proxy>,
    proxy_port: u16,
    port: u16,
    plain_port: u16,
    got: Receiver<Got>,
    plain_got: Receiver<Vec<u8>>,
    go: Sender<()>,
    client: Arc<rustls::ClientConfig>,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The proxy allows `localhost:PORT` and `127.0.0.1:PORT` (the TLS server) and
/// `127.0.0.1:PLAIN` (a plain server); secret A is listed for `localhost:PORT`, B for
/// `127.0.0.1:PORT`, C for `127.0.0.1:PLAIN`. `trust` passes the test CA as an extra root.
fn fixture(trust: bool, big: usize) -> Fixture {
    let dir = std::env::temp_dir().join(format!(
        "tls-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca_path, server_cfg) = test_ca(&dir);
    let (go, go_rx) = channel();
    let (port, got) = server(server_cfg, go_rx, big);
    let (plain_port, plain_got) = super::tests::upstream(None);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = l.local_addr().unwrap().port();
    let allow = AllowList::parse(&[
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        format!("127.0.0.1:{plain_port}"),
    ])
    .unwrap();
    let secrets = Secrets {
        list: vec![
            secret("A", format!("localhost:{port}"), PH_A, VAL_A),
            secret("B", format!("127.0.0.1:{port}"), PH_B, VAL_B),
            secret("C", format!("127.0.0.1:{plain_port}"), PH_C, VAL_C),
        ],
    };
    let config = Config {
        allow,
        profile: "test".into(),
        warn: false,
        secrets: Arc::new(secrets),
        extra_roots: if trust { vec![ca_path] } else { Vec::new() },
        on_denied: None,
    };
    let proxy = Proxy::start(l, config).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    let pem = proxy.ca_pem().unwrap();
    roots
        .add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
        .unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    Fixture {
        proxy: Some(proxy),
        proxy_port,
        port,
        plain_port,
        got,
        plain_got,
        go,
        client: Arc::new(client),
        _dir: TempDir(dir),
    }
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

impl Fixture {
    /// CONNECT to `host:port` and the TLS handshake with the proxy's certificate.
    fn connect(&self, host: &str) -> Tls {
        let mut c = TcpStream::connect(("127.0.0.1", self.proxy_port)).unwrap();
        write!(c, "CONNECT {host}:{} HTTP/1.1\r\n\r\n", self.port).unwrap();
        let mut head = [0u8; 39];
        c.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200 Connection established\r\n\r\n");
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let name = ServerName::try_from(host.to_string()).unwrap();
        let conn = rustls::ClientConnection::new(self.client.clone(), name).unwrap();
        rustls::StreamOwned::new(conn, c)
    }

    fn log(&self) -> (Vec<SecretUse>, Vec<Misdirected>) {
        self.proxy.as_ref().unwrap().secret_log()
    }

    fn received(&self) -> Got {
        self.got.recv_timeout(Duration::from_secs(5)).unwrap()
    }

    fn nothing_received(&self) {
        assert!(self.got.recv_timeout(Duration::from_millis(200)).is_err());
    }
}

/// One response: status line and body (Content-Length framed, or to the end).
fn response(t: &mut Tls) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut b = vec![0u8; 64 * 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = r.parse(&buf) {
            let status = format!("{} {}", r.code.unwrap(), r.reason.unwrap_or(""));
            let len = r
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .unwrap()
                        .parse::<usize>()
                        .unwrap()
                });
            let len = if r.code == Some(101) { Some(0) } else { len };
            let mut body = buf[n..].to_vec();
            while len.is_none_or(|l| body.len() < l) {
                match t.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => body.extend_from_slice(&b[..k]),
                }
            }
            return (status, body);
        }
        match t.read(&mut b) {
            Ok(0) | Err(_) => {
                return (
                    format!("(closed) {:?}", String::from_utf8_lossy(&buf)),
                    Vec::new(),
                )
            }
            Ok(k) => buf.extend_from_slice(&b[..k]),
        }
    }
}

fn request(t: &mut Tls, req: &str) -> (String, Vec<u8>) {
    t.write_all(req.as_bytes()).unwrap();
    t.flush().unwrap();
    response(t)
}

/// The value goes where the secret is listed, in the request line and the headers; the
/// sandbox never sees it; the log counts it.
#[test]
fn injects_into_the_listed_host_only_in_the_head() {
    let f = fixture(true, 0);
    let p = f.port;
    let mut t = f.connect("localhost");
    let (status, body) = request(
        &mut t,
        &format!(
            "GET /v1?key={PH_A} HTTP/1.1\r\nHost: localhost:{}\r\nx-api-key: {PH_A}\r\n\r\n",
            f.port
        ),
    );
    assert_eq!((status.as_str(), body.as_slice()), ("200 OK", &b"ok"[..]));
    let (head, _) = f.received();
    assert!(
        head.starts_with(&format!("GET /v1?key={VAL_A} HTTP/1.1\r\n")),
        "{head}"
    );
    assert!(head.contains(&format!("x-api-key: {VAL_A}\r\n")), "{head}");
    assert!(!head.contains(PH_A));
    assert_eq!(t.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    // a body with the placeholder: refused, and nothing of it reached the server
    let (status, body) = request(
        &mut t,
        &format!(
            "POST /v1 HTTP/1.1\r\nHost: localhost:{p}\r\nContent-Length: {}\r\n\r\n{PH_A}",
            PH_A.len()
        ),
    );
    assert_eq!(status, "403 Forbidden");
    assert!(String::from_utf8_lossy(&body).contains("placeholder of secret A"));
    f.nothing_received();
    let (uses, mis) = f.log();
    assert_eq!((uses[0].name.as_str(), uses[0].injections), ("A", 2));
    assert_eq!(uses[1].injections, 0);
    assert_eq!(mis.len(), 1);
    assert_eq!(
        (mis[0].secret.as_str(), mis[0].host.as_str()),
        ("A", "localhost")
    );
}

/// A server that echoes the request hands the value back: the sandbox gets the placeholder,
/// even when the server's writes split the value between two reads.
#[test]
fn an_echoed_value_comes_back_as_its_placeholder() {
    let f = fixture(true, 0);
    let mut t = f.connect("localhost");
    let (status, body) = request(
        &mut t,
        &format!(
            "GET /echo HTTP/1.1\r\nHost: localhost:{}\r\nx-api-key: {PH_A}\r\n\r\n",
            f.port
        ),
    );
    assert_eq!(status, "200 OK");
    let body = String::from_utf8(body).unwrap();
    assert!(body.contains(&format!("x-api-key: {PH_A}\r\n")), "{body}");
    assert!(!body.contains("realvalue"), "{body}");
    let (head, _) = f.received();
    assert!(head.contains(&format!("x-api-key: {VAL_A}\r\n")), "{head}");
}

/// Chunked bodies pass as sent; a placeholder split across two chunks is found all the same.
#[test]
fn chunked_bodies_are_scanned_across_chunks() {
    let f = fixture(true, 0);
    let p = f.port;
    let mut t = f.connect("localhost");
    let (status, _) = request(
        &mut t,
        &format!("POST /up HTTP/1.1\r\nHost: localhost:{p}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
    );
    assert_eq!(status, "200 OK");
    let (head, body) = f.received();
    assert!(head.starts_with("POST /up "));
    assert_eq!(body, b"hello world");
    let (a, b) = PH_A.split_at(10);
    let (status, _) = request(
        &mut t,
        &format!(
            "POST /up HTTP/1.1\r\nHost: localhost:{p}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        ),
    );
    assert_eq!(status, "403 Forbidden");
    f.nothing_received();
    assert_eq!(f.log().1[0].count, 1);
}

/// A placeholder where its secret is not listed: another host's terminated TLS (B is
/// listed for 127.0.0.1), and plain HTTP to an allowed host; both 403 and recorded.
#[test]
fn placeholders_to_other_hosts_are_refused() {
    let f = fixture(true, 0);
    let p = f.port;
    let mut t = f.connect("127.0.0.1");
    let (status, _) = request(
        &mut t,
        &format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {PH_B}\r\n\r\n",
            f.port
        ),
    );
    assert_eq!(status, "200 OK");
    assert!(f.received().0.contains(VAL_B));
    let (status, body) = request(
        &mut t,
        &format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nx-api-key: {PH_A}\r\n\r\n"),
    );
    assert_eq!(
        status,
        "403 Forbidden",
        "{}",
        String::from_utf8_lossy(&body)
    );
    f.nothing_received();

    let mut c = TcpStream::connect(("127.0.0.1", f.proxy_port)).unwrap();
    write!(
        c,
        "GET http://127.0.0.1:{}/?k={PH_A} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        f.plain_port, f.plain_port
    )
    .unwrap();
    let got = String::from_utf8(super::tests::read_some(&mut c)).unwrap();
    assert!(got.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{got}");
    assert!(got.contains("placeholder of secret A"), "{got}");
    assert!(f
        .plain_got
        .recv_timeout(Duration::from_millis(300))
        .is_err());
    let mis = f.log().1;
    let mut hosts: Vec<_> = mis
        .iter()
        .map(|m| (m.secret.as_str(), m.host.as_str(), m.port))
        .collect();
    hosts.sort();
    let mut want = vec![("A", "127.0.0.1", f.port), ("A", "127.0.0.1", f.plain_port)];
    want.sort();
    assert_eq!(hosts, want);
}

/// Inside a terminated connection, the Host header and an absolute-form target must name
/// the host the connection was allowed for; a second request on a kept-alive connection is
/// checked like the first.
#[test]
fn requests_must_name_the_connection_host() {
    let f = fixture(true, 0);
    let p = f.port;
    for bad in [
        "GET / HTTP/1.1\r\nHost: metadata.google.internal\r\n\r\n".to_string(),
        format!(
            "GET https://evil.example:{}/ HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n",
            f.port
        ),
    ] {
        let mut t = f.connect("localhost");
        let (status, body) = request(&mut t, &bad);
        assert_eq!(status, "403 Forbidden");
        let body = String::from_utf8_lossy(&body);
        assert!(
            body.contains("was allowed for localhost:") || body.contains("allowed for (localhost)"),
            "{body}"
        );
        f.nothing_received();
    }
    // keep-alive: the first passes, the second carries a placeholder to the wrong secret
    let mut t = f.connect("localhost");
    let ok = format!(
        "GET https://localhost:{}/a HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n",
        f.port
    );
    assert_eq!(request(&mut t, &ok).0, "200 OK");
    assert!(f.received().0.starts_with("GET https://localhost:"));
    assert_eq!(
        request(
            &mut t,
            &format!("GET /b HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n")
        )
        .0,
        "200 OK"
    );
    f.received();
    let bad = format!("GET /c HTTP/1.1\r\nHost: localhost:{p}\r\nx: {PH_B}\r\n\r\n");
    assert_eq!(request(&mut t, &bad).0, "403 Forbidden");
    f.nothing_received();
    assert_eq!(f.log().1[0].secret, "B");
}

/// An `Upgrade:` request has its head injected, then raw bytes pass both ways, still
/// scanned: a placeholder among them cuts the connection before it reaches the server.
#[test]
fn upgraded_connections_stay_scanned() {
    let f = fixture(true, 0);
    let p = f.port;
    let mut t = f.connect("localhost");
    let (status, _) = request(
        &mut t,
        &format!(
            "GET /ws HTTP/1.1\r\nHost: localhost:{p}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nx-api-key: {PH_A}\r\n\r\n"
        ),
    );
    assert_eq!(status, "101 Switching Protocols");
    assert!(f.received().0.contains(&format!("x-api-key: {VAL_A}\r\n")));
    t.write_all(b"hello").unwrap();
    t.flush().unwrap();
    let mut b = [0u8; 7];
    t.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"\x82\x05hello");
    assert_eq!(f.received().1, b"hello");
    let (x, y) = PH_A.split_at(7);
    t.write_all(x.as_bytes()).unwrap();
    t.flush().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    t.write_all(y.as_bytes()).unwrap();
    t.flush().unwrap();
    let mut rest = Vec::new();
    let _ = t.read_to_end(&mut rest);
    // the first part went (it is no placeholder alone), the whole never did
    let mut seen = Vec::new();
    while let Ok((_, raw)) = f.got.recv_timeout(Duration::from_millis(300)) {
        seen.extend_from_slice(&raw);
    }
    assert!(!String::from_utf8_lossy(&seen).contains(PH_A), "{seen:?}");
    assert_eq!(f.log().1[0].secret, "A");
}

/// Hostile input inside: a head past the limit is a 400; plain bytes after a CONNECT to a
/// secret's host are no TLS and reach nothing.
#[test]
fn hostile_input_fails_closed() {
    let f = fixture(true, 0);
    let p = f.port;
    let mut t = f.connect("localhost");
    let mut big = format!("GET / HTTP/1.1\r\nHost: localhost:{p}\r\nx: ");
    big.push_str(&"a".repeat(http1::MAX_HEAD));
    t.write_all(big.as_bytes()).unwrap();
    t.flush().unwrap();
    let (status, body) = response(&mut t);
    assert_eq!(
        status,
        "400 Bad Request",
        "{}",
        String::from_utf8_lossy(&body)
    );
    f.nothing_received();

    let mut c = TcpStream::connect(("127.0.0.1", f.proxy_port)).unwrap();
    let req = format!(
        "CONNECT localhost:{p} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: localhost\r\nx: {PH_A}\r\n\r\n"
    );
    // one write: the proxy cuts the connection as soon as it sees no TLS
    let _ = c.write_all(req.as_bytes());
    let got = super::tests::read_some(&mut c);
    assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    assert!(!String::from_utf8_lossy(&got).contains("200 OK"), "{got:?}");
    f.nothing_received();
    assert_eq!(f.log().0[0].injections, 0);
}

/// Server-sent events reach the client as they are sent: the first event before the server
/// sends the second.
#[test]
fn responses_stream() {
    let f = fixture(true, 0);
    let p = f.port;
    let mut t = f.connect("localhost");
    t.write_all(format!("GET /sse HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1024];
    while !got.ends_with(b"data: one\n\n") {
        let n = t.read(&mut b).unwrap();
        assert!(n > 0, "{:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&b[..n]);
    }
    f.go.send(()).unwrap();
    let mut rest = Vec::new();
    let _ = t.read_to_end(&mut rest);
    assert_eq!(rest, b"data: two\n\n");
}

/// Plain HTTP carries a secret only to a loopback address listed for it (the bytes never
/// leave the host): there the value is put in place.
#[test]
fn plain_http_to_a_listed_loopback_address_is_injected() {
    let f = fixture(true, 0);
    let mut c = TcpStream::connect(("127.0.0.1", f.proxy_port)).unwrap();
    write!(
        c,
        "GET http://127.0.0.1:{}/?k={PH_C} HTTP/1.1\r\nx-key: {PH_C}\r\n\r\n",
        f.plain_port
    )
    .unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let _ = super::tests::read_some(&mut c);
    let got = String::from_utf8(f.plain_got.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert!(
        got.starts_with(&format!("GET /?k={VAL_C} HTTP/1.1\r\n")),
        "{got}"
    );
    assert!(got.contains(&format!("x-key: {VAL_C}\r\n")), "{got}");
    assert_eq!(f.log().0[2].injections, 2);
}

/// Plain HTTP through the proxy carries one request: its body is scanned on the way (a
/// placeholder there cuts both connections before the server has the body), and a request
/// pipelined behind the first, naming another host, is never read.
#[test]
fn plain_http_carries_one_request_with_a_clean_body() {
    let f = fixture(true, 0);
    let p = f.plain_port;
    let body = format!("{{\"key\": \"{PH_C}\"}}");
    let mut c = TcpStream::connect(("127.0.0.1", f.proxy_port)).unwrap();
    write!(
        c,
        "POST http://127.0.0.1:{p}/v1 HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let _ = super::tests::read_some(&mut c);
    let got = String::from_utf8(f.plain_got.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert!(got.starts_with("POST /v1 HTTP/1.1\r\n"), "{got}");
    assert!(!got.contains(PH_C) && !got.contains(VAL_C), "{got}");
    let (_, misdirected) = f.log();
    assert!(
        misdirected.iter().any(|m| m.secret == "C" && m.port == p),
        "{misdirected:?}"
    );

    let mut c = TcpStream::connect(("127.0.0.1", f.proxy_port)).unwrap();
    write!(
        c,
        "GET http://127.0.0.1:{p}/one HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n\
         GET http://127.0.0.1:{p}/two HTTP/1.1\r\nHost: metadata.google.internal\r\n\r\n"
    )
    .unwrap();
    let _ = super::tests::read_some(&mut c);
    let got = String::from_utf8(f.plain_got.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert_eq!(
        got,
        format!("GET /one HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\nAccept-Encoding: identity\r\n\r\n")
    );

    // control: a clean body passes whole
    let mut c = TcpStream::connect(("127.0.0.1", f.proxy_port)).unwrap();
    write!(
        c,
        "POST http://127.0.0.1:{p}/v1 HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nContent-Length: 5\r\n\r\nhello"
    )
    .unwrap();
    let _ = super::tests::read_some(&mut c);
    let got = String::from_utf8(f.plain_got.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert!(got.ends_with("\r\n\r\nhello"), "{got}");
}

/// Connections that did not come through the proxy (the sandbox's loopback listeners):
/// a TLS client is terminated and injected like a CONNECT; plain HTTP to a loopback port
/// is injected in plain text, request by request.
#[test]
fn intercepted_connections_are_injected() {
    let f = fixture(true, 0);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let lp = l.local_addr().unwrap().port();
    let icp = f.proxy.as_ref().unwrap().interceptor();
    let ip = Host::Ip("127.0.0.1".parse().unwrap());
    assert!(icp.wants(&ip, f.port) && icp.wants(&ip, f.plain_port) && !icp.wants(&ip, 1));
    let (tls_port, plain_port) = (f.port, f.plain_port);
    std::thread::spawn(move || {
        for (i, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            let port = if i == 0 { tls_port } else { plain_port };
            let up = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut first = vec![0u8; 3];
            s.read_exact(&mut first).unwrap();
            icp.intercept(s, up, &Host::Ip("127.0.0.1".parse().unwrap()), port, first);
        }
    });
    let c = TcpStream::connect(("127.0.0.1", lp)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn =
        rustls::ClientConnection::new(f.client.clone(), ServerName::try_from("127.0.0.1").unwrap())
            .unwrap();
    let mut t = rustls::StreamOwned::new(conn, c);
    let req = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{tls_port}\r\nx: {PH_B}\r\n\r\n");
    assert_eq!(request(&mut t, &req).0, "200 OK");
    assert!(f.received().0.contains(&format!("x: {VAL_B}\r\n")));
    let bad = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{tls_port}\r\nx: {PH_A}\r\n\r\n");
    assert_eq!(request(&mut t, &bad).0, "403 Forbidden");
    f.nothing_received();

    let mut c = TcpStream::connect(("127.0.0.1", lp)).unwrap();
    write!(
        c,
        "GET /a HTTP/1.1\r\nHost: 127.0.0.1:{plain_port}\r\nx: {PH_C}\r\n\r\n"
    )
    .unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let got = String::from_utf8(f.plain_got.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert_eq!(
        got,
        format!("GET /a HTTP/1.1\r\nHost: 127.0.0.1:{plain_port}\r\nx: {VAL_C}\r\nAccept-Encoding: identity\r\n\r\n")
    );
    let (uses, mis) = f.log();
    assert_eq!((uses[1].injections, uses[2].injections), (1, 1));
    assert_eq!(mis[0].secret, "A");
}

/// An upstream whose certificate the roots do not trust: a 502 over the terminated TLS that
/// names the reason and the fix, and a log entry.
#[test]
fn an_untrusted_upstream_is_refused_with_the_fix() {
    let f = fixture(false, 0);
    let p = f.port;
    let mut t = f.connect("localhost");
    let (status, body) = request(
        &mut t,
        &format!("GET / HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n"),
    );
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, "502 Bad Gateway", "{body}");
    assert!(
        body.contains("UnknownIssuer") && body.contains("--ca-certs"),
        "{body}"
    );
    let log = f.proxy.as_ref().unwrap().log();
    assert!(
        log.iter()
            .any(|c| !c.allowed && c.reason.contains("TLS failed")),
        "{log:?}"
    );
}

/// Several terminated connections at once, each with several requests; then stop() cuts an
/// idle one that is still open.
#[test]
fn many_connections_and_stop() {
    let mut f = fixture(true, 1 << 20);
    let p = f.port;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let mut t = f.connect("localhost");
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let (s, body) = request(
                        &mut t,
                        &format!("GET /big HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n"),
                    );
                    assert_eq!(s, "200 OK");
                    assert_eq!(body.len(), 1 << 20);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut idle = f.connect("localhost");
    assert_eq!(
        request(
            &mut idle,
            &format!("GET / HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n")
        )
        .0,
        "200 OK"
    );
    let log = f.proxy.take().unwrap().stop();
    assert!(log[0].bytes_down >= 24 << 20, "{log:?}");
    let mut b = [0u8; 16];
    let r = idle.read(&mut b);
    assert!(matches!(r, Ok(0)) || r.is_err(), "{r:?}");
}

/// The figures of scripts/bench: one HTTPS request's added latency through an injecting
/// connection against a plain tunnel, and a 100 MiB download, each against direct.
#[test]
#[ignore]
fn bench_injection() {
    let size: usize = std::env::var("BENCH_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
        << 20;
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let f = fixture(true, size);
    let p = f.port;
    let (ca, _) = test_ca_client(&f);
    // direct: TLS to the server itself (trusting the test CA)
    let direct = || {
        let c = TcpStream::connect(("127.0.0.1", f.port)).unwrap();
        c.set_nodelay(true).unwrap();
        let conn =
            rustls::ClientConnection::new(ca.clone(), ServerName::try_from("localhost").unwrap())
                .unwrap();
        rustls::StreamOwned::new(conn, c)
    };
    // a plain tunnel: CONNECT through the proxy to 127.0.0.1 with no secret listed (a proxy
    // of its own without secrets)
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let tp = l.local_addr().unwrap().port();
    let tunnel_proxy = Proxy::start(
        l,
        Config {
            allow: AllowList::parse(&[
                format!("127.0.0.1:{}", f.port),
                format!("localhost:{}", f.port),
                format!("[::1]:{}", f.port),
            ])
            .unwrap(),
            profile: "bench".into(),
            warn: false,
            secrets: Default::default(),
            extra_roots: Vec::new(),
            on_denied: None,
        },
    )
    .unwrap();
    let tunnel = || {
        let mut c = TcpStream::connect(("127.0.0.1", tp)).unwrap();
        c.set_nodelay(true).unwrap();
        write!(c, "CONNECT localhost:{} HTTP/1.1\r\n\r\n", f.port).unwrap();
        let mut head = [0u8; 39];
        c.read_exact(&mut head).unwrap();
        let conn =
            rustls::ClientConnection::new(ca.clone(), ServerName::try_from("localhost").unwrap())
                .unwrap();
        rustls::StreamOwned::new(conn, c)
    };
    let injected = || f.connect("localhost");
    let req = format!("GET / HTTP/1.1\r\nHost: localhost:{p}\r\nx-api-key: {PH_A}\r\n\r\n");
    let plain_req = "GET / HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n";
    let time = |open: &dyn Fn() -> Tls, r: &str| {
        let mut all = Vec::new();
        for _ in 0..rounds {
            let t0 = Instant::now();
            let mut t = open();
            let (s, _) = request(&mut t, r);
            all.push(t0.elapsed());
            assert_eq!(s, "200 OK");
            while f.got.try_recv().is_ok() {}
        }
        all.sort();
        all[all.len() / 2]
    };
    let d = time(&direct, plain_req);
    let tu = time(&tunnel, plain_req);
    let i = time(&injected, &req);
    // on a kept-alive connection: the request alone
    let again = |open: &dyn Fn() -> Tls, r: &str| {
        let mut t = open();
        let mut all = Vec::new();
        for _ in 0..rounds {
            let t0 = Instant::now();
            let (s, _) = request(&mut t, r);
            all.push(t0.elapsed());
            assert_eq!(s, "200 OK");
            while f.got.try_recv().is_ok() {}
        }
        all.sort();
        all[all.len() / 2]
    };
    let kd = again(&direct, plain_req);
    let kt = again(&tunnel, plain_req);
    let ki = again(&injected, &req);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "bench-injection\tnew_connection_ms\t{:.3}\t{:.3}\t{:.3}",
        ms(d),
        ms(tu),
        ms(i)
    );
    println!(
        "bench-injection\tkept_alive_ms\t{:.3}\t{:.3}\t{:.3}",
        ms(kd),
        ms(kt),
        ms(ki)
    );
    let big = &format!("GET /big HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n");
    // interleaved, best of N each: the machine's other load falls on all three alike
    // the body counted, not kept: the client's own memory is no part of the figure
    let once = |open: &dyn Fn() -> Tls| {
        let mut t = open();
        let t0 = Instant::now();
        t.write_all(big.as_bytes()).unwrap();
        let mut b = vec![0u8; 256 * 1024];
        let mut head = Vec::new();
        let mut got: Option<usize> = None;
        while got.is_none_or(|g| g < size) {
            let n = t.read(&mut b).unwrap();
            assert!(n > 0);
            got = match got {
                Some(g) => Some(g + n),
                None => {
                    head.extend_from_slice(&b[..n]);
                    let end = head.windows(4).position(|w| w == b"\r\n\r\n");
                    end.map(|e| head.len() - e - 4)
                }
            };
        }
        assert_eq!(got, Some(size));
        size as f64 / t0.elapsed().as_secs_f64() / (1 << 20) as f64
    };
    let (mut rd, mut rt, mut ri) = (0f64, 0f64, 0f64);
    let bulk: usize = std::env::var("BENCH_BULK_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    for _ in 0..bulk {
        rd = rd.max(once(&direct));
        rt = rt.max(once(&tunnel));
        ri = ri.max(once(&injected));
    }
    println!(
        "bench-injection\tdownload_mibs\t{rd:.1}\t{rt:.1}\t{ri:.1}\t{}",
        size >> 20
    );
    let _ = tunnel_proxy.stop();
}

/// A client configuration that trusts the test CA (for direct connections).
fn test_ca_client(f: &Fixture) -> (Arc<rustls::ClientConfig>, ()) {
    let pem = std::fs::read(f._dir.0.join("test-ca.pem")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&pem).unwrap())
        .unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    (Arc::new(c), ())
}
