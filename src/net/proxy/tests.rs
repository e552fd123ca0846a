//! The proxy in-process against real sockets.

use super::*;

/// An upstream on the host's loopback that records what it receives; `greeting` is sent
/// first (a server-first protocol) when given.
pub(super) fn upstream(
    greeting: Option<&'static [u8]>,
) -> (u16, std::sync::mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                if let Some(g) = greeting {
                    let _ = s.write_all(g);
                }
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                let _ = tx.send(got);
            });
        }
    });
    (port, rx)
}

fn proxy_for(port: u16) -> (Proxy, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    let allow = AllowList::parse(&[
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ])
    .unwrap();
    let config = Config {
        allow,
        profile: "test".into(),
        warn: false,
        secrets: Default::default(),
        extra_roots: Vec::new(),
        on_denied: None,
    };
    (Proxy::start(l, config).unwrap(), p)
}

pub(super) fn read_some(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    while let Ok(n) = s.read(&mut b) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[..n]);
    }
    out
}

const ALERT: [u8; 7] = [0x15, 3, 3, 0, 2, 2, 49];

/// The proxy in-process against real sockets: the ClientHello is checked however it
/// arrives (in the CONNECT's own packet, byte by byte with pauses), and nothing of a
/// refused one reaches the server.
#[test]
fn tunnels_check_the_server_name_however_it_arrives() {
    let (port, rx) = upstream(None);
    let (proxy, p) = proxy_for(port);
    let connect = format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n");
    let evil = crate::net::sni::tests::client_hello(Some("evil.example"));
    let good = crate::net::sni::tests::client_hello(Some("localhost"));

    // pipelined with the CONNECT, mismatched
    let mut c = TcpStream::connect(("127.0.0.1", p)).unwrap();
    let mut b = connect.clone().into_bytes();
    b.extend_from_slice(&evil);
    c.write_all(&b).unwrap();
    let got = read_some(&mut c);
    assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    assert!(got.ends_with(&ALERT), "{got:?}");
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), b"");

    // byte by byte, mismatched, then matching
    for (hello, allowed) in [(&evil, false), (&good, true)] {
        let mut c = TcpStream::connect(("127.0.0.1", p)).unwrap();
        c.write_all(connect.as_bytes()).unwrap();
        for (i, byte) in hello.iter().enumerate() {
            c.write_all(&[*byte]).unwrap();
            if i % 64 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        c.shutdown(Shutdown::Write).unwrap();
        let got = read_some(&mut c);
        let to_server = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        if allowed {
            assert_eq!(&to_server, hello);
            assert_eq!(got, b"HTTP/1.1 200 Connection established\r\n\r\n");
        } else {
            assert_eq!(to_server, b"");
            assert!(got.ends_with(&ALERT), "{got:?}");
        }
    }
    let log = proxy.stop();
    let denied = log.iter().find(|c| !c.allowed).unwrap();
    assert_eq!((denied.count, denied.port), (2, port));
    assert!(
        denied.reason.contains("\"evil.example\" differs"),
        "{}",
        denied.reason
    );
    let allowed = log.iter().find(|c| c.allowed).unwrap();
    assert_eq!(allowed.bytes_up, good.len() as u64);
}

/// A server that speaks first is another protocol: its tunnel passes unchecked. Plain
/// HTTP is rewritten to origin form, one request per connection.
#[test]
fn server_first_tunnels_and_plain_http() {
    let (port, rx) = upstream(Some(b"SSH-2.0-stub\r\n"));
    let (proxy, p) = proxy_for(port);
    let mut c = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(c, "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    c.write_all(b"SSH-2.0-client\r\n").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let got = read_some(&mut c);
    assert!(got.ends_with(b"SSH-2.0-stub\r\n"), "{got:?}");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        b"SSH-2.0-client\r\n"
    );

    let mut c = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(
        c,
        "GET http://127.0.0.1:{port}/p?q HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Connection: keep-alive\r\n\r\n"
    )
    .unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let _ = read_some(&mut c);
    assert_eq!(
        String::from_utf8(rx.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap(),
        format!("GET /p?q HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
    );
    // off the list: a 403 that names the fix
    let mut c = TcpStream::connect(("127.0.0.1", p)).unwrap();
    c.write_all(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")
        .unwrap();
    let got = String::from_utf8(read_some(&mut c)).unwrap();
    assert!(got.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{got}");
    assert!(got.contains("fix: add --allow-host 127.0.0.1:1,"), "{got}");
    let log = proxy.stop();
    assert_eq!(log.len(), 2, "{log:?}");
}

/// The relay loop moves large streams both ways at once (no stall when both pipes
/// fill), passes a half-close on, and counts every byte.
#[test]
fn tunnels_move_large_streams_both_ways() {
    const N: usize = 24 << 20;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // echo until end-of-file, then a trailer and close
        let (mut s, _) = l.accept().unwrap();
        let mut b = vec![0u8; 100_000];
        loop {
            match s.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => s.write_all(&b[..n]).unwrap(),
            }
        }
        s.write_all(b"bye").unwrap();
    });
    let (proxy, p) = proxy_for(port);
    let mut c = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(c, "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").unwrap();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        for _ in 0..N / chunk.len() {
            w.write_all(&chunk).unwrap();
        }
        w.shutdown(Shutdown::Write).unwrap();
    });
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::with_capacity(N + 3);
    c.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    assert_eq!(got.len(), N + 3);
    assert!(got.ends_with(b"bye"));
    assert!(got[..N]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((i % 65536) % 251) as u8));
    let log = proxy.stop();
    assert_eq!(
        (log[0].bytes_up, log[0].bytes_down),
        (N as u64, N as u64 + 3),
        "{log:?}"
    );
}

/// The one relay thread moves many tunnels at once, each to its own end, and a tunnel
/// held open while the others move does not stall them; stop cuts what is still open.
#[test]
fn one_relay_thread_moves_many_tunnels() {
    const N: usize = 16;
    const BYTES: usize = 3 << 20;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // each connection: read its index byte, send BYTES of that value, close
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut k = [0u8; 1];
                s.read_exact(&mut k).unwrap();
                let chunk = vec![k[0]; 64 * 1024];
                // 200: without end, until the proxy cuts the tunnel
                let n = if k[0] == 200 {
                    usize::MAX
                } else {
                    BYTES / chunk.len()
                };
                for _ in 0..n {
                    if s.write_all(&chunk).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (proxy, p) = proxy_for(port);
    let open = |k: u8| {
        let mut c = TcpStream::connect(("127.0.0.1", p)).unwrap();
        write!(c, "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").unwrap();
        let mut head = [0u8; 39];
        c.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200 Connection established\r\n\r\n");
        c.write_all(&[k]).unwrap();
        c
    };
    // One tunnel opened first and never read: its pipe and socket buffers fill.
    let mut stuck = open(200);
    let readers: Vec<_> = (0..N as u8)
        .map(|k| {
            let mut c = open(k);
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut got = Vec::new();
                c.read_to_end(&mut got).unwrap();
                assert_eq!(got.len(), BYTES, "tunnel {k}");
                assert!(got.iter().all(|&b| b == k), "tunnel {k}");
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    let log = proxy.stop();
    assert_eq!(log[0].count, N as u64 + 1, "{log:?}");
    assert!(log[0].bytes_down >= (N * BYTES) as u64, "{log:?}");
    // stop cut the stuck tunnel: its reader sees the end instead of waiting forever.
    stuck
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    if let Err(e) = stuck.read_to_end(&mut rest) {
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the held tunnel was not cut: {e}"
        );
    }
}

/// A command inventing names cannot grow the supervisor's memory: the log and the set of
/// warned hosts stop at [`MAX_LOG`], and the rest is counted in one entry.
#[test]
fn the_log_is_bounded() {
    let shared = Shared {
        config: Config {
            allow: AllowList::default(),
            profile: "test".into(),
            warn: false,
            secrets: Default::default(),
            extra_roots: Vec::new(),
            on_denied: None,
        },
        stop: AtomicBool::new(false),
        active: AtomicUsize::new(0),
        log: Mutex::new(BTreeMap::new()),
        warned: Mutex::new(HashSet::new()),
        live: Mutex::new(HashMap::new()),
        relay: Mutex::new(None),
        nets: Vec::new(),
        ids: AtomicU64::new(0),
        forwards: Mutex::new(Vec::new()),
        tls: None,
        injections: Vec::new(),
        misdirected: Mutex::new(BTreeMap::new()),
    };
    let d = Denial {
        reason: "not on the allow-list".into(),
        fix: "x".into(),
    };
    for i in 0..MAX_LOG + 100 {
        let h = Host::Name(format!("h{i}.example"));
        shared.deny("CONNECT", &h, 443, &d);
        shared.deny("CONNECT", &h, 443, &d);
    }
    let log = lock(&shared.log);
    assert_eq!(log.len(), MAX_LOG + 1);
    assert_eq!(log[&(OVERFLOW.to_string(), 443, false)].count, 200);
    assert_eq!(log[&("h0.example".to_string(), 443, false)].count, 2);
    assert_eq!(lock(&shared.warned).len(), MAX_LOG + 1);
}
