//! The egress proxy of `--net filtered`: the sandbox's only way out (parent side only).
//!
//! pid 1 creates the listening socket on the sandbox's own loopback and passes it to the
//! supervisor; the supervisor accepts on it here and dials out from the host's network
//! namespace. One thread accepts; each connection gets one thread, which reads the request
//! and checks it with blocking calls, then hands the open tunnel to the one relay thread and
//! ends. The relay thread moves every tunnel in one epoll loop with non-blocking `splice(2)`
//! (the bytes never enter our memory, and a tunnel held open costs no thread stack, a few
//! hundred bytes of heap: measured in `scripts/bench`, 50 tunnels at once).
//!
//! What it speaks: HTTP CONNECT (a tunnel for any TLS or TCP stream) and absolute-form plain
//! HTTP (`GET http://host/path`), parsed with `httparse`. What it checks, in order:
//! 1. the host and port are on the allow-list ([`super::allow`]);
//! 2. a name is resolved here, once; if any of its addresses is special (loopback, private,
//!    link-local, multicast, ...: [`super::allow::special`]) and not itself on the list as a
//!    literal, the request is refused (DNS rebinding to the host's own services);
//! 3. the connection goes to the addresses just checked, never to a second resolution;
//! 4. in a tunnel, a TLS ClientHello must name the CONNECT host (SNI), or no host at all.
//!
//! A refusal is an HTTP 403 whose body names the rule and the fix (a TLS alert when the
//! tunnel is already open), one line on sandbox-run's stderr per host, and an entry in the
//! connection log of the report.

use super::allow::{host_networks, on_host_network, special, AllowList, Host, HostNet};
use super::sni::{self, Hello};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The port of the proxy on the sandbox's loopback (its own network namespace: always free).
pub const PORT: u16 = 3128;
/// Largest request head read from the sandbox.
const MAX_HEAD: usize = 16 * 1024;
/// How long the sandbox may take to send a request head, or the first bytes of a tunnel.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection to an allowed address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections open at once; more get a 503. Each holds up to eight fds of the supervisor
/// (two sockets, the copies of them that [`Proxy::stop`] shuts down, two splice pipes), which
/// keeps 100 of them well under the usual 1024-fd soft limit.
const MAX_ACTIVE: usize = 100;
/// Distinct host:port entries the log keeps (and hosts the stderr lines name); past that a
/// hostile command inventing names cannot grow the supervisor's memory: the rest are counted
/// under [`OVERFLOW`].
const MAX_LOG: usize = 1024;
const OVERFLOW: &str = "(more hosts than the log keeps)";
const STACK: usize = 128 * 1024;
const BUF: usize = 64 * 1024;

/// What the proxy enforces.
#[derive(Debug, Clone)]
pub struct Config {
    pub allow: AllowList,
    /// The profile's name, for messages.
    pub profile: String,
    /// Print one line per denied host on stderr.
    pub warn: bool,
}

/// One line of the report's connection log: per host, port and verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    pub reason: String,
    pub count: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Default)]
struct Counters {
    up: AtomicU64,
    down: AtomicU64,
}

struct LogEntry {
    reason: String,
    count: u64,
    /// Shared by every connection of the entry.
    bytes: Arc<Counters>,
}

struct Shared {
    config: Config,
    stop: AtomicBool,
    active: AtomicUsize,
    log: Mutex<BTreeMap<(String, u16, bool), LogEntry>>,
    warned: Mutex<HashSet<String>>,
    /// The sockets of open connections, shut down by [`Proxy::stop`].
    live: Mutex<HashMap<u64, Vec<TcpStream>>>,
    /// The relay thread, started with the first tunnel.
    relay: Mutex<Option<Arc<Relay>>>,
    /// The host's own networks, read at start ([`host_networks`]).
    nets: Vec<HostNet>,
}

/// A running proxy; [`Proxy::stop`] ends it and returns the connection log.
pub struct Proxy {
    shared: Arc<Shared>,
    listener: TcpListener,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Serve the sandbox on `listener` (a listening socket of the sandbox's namespace).
    pub fn start(listener: TcpListener, config: Config) -> std::io::Result<Proxy> {
        // Fails closed: without them, a name resolving into the host's LAN would pass.
        let nets = host_networks().map_err(|e| {
            std::io::Error::new(e.kind(), format!("reading the host's interfaces: {e}"))
        })?;
        // Connection threads allocate little: one malloc arena for all of them, instead of
        // glibc's one per thread up to 8 per CPU, each a few pages of the supervisor's RSS
        // (measured in `scripts/bench`, 50 tunnels at once).
        #[cfg(target_env = "gnu")]
        // SAFETY: mallopt only sets an allocator parameter; it is thread-safe.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
        let shared = Arc::new(Shared {
            config,
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            log: Mutex::new(BTreeMap::new()),
            warned: Mutex::new(HashSet::new()),
            live: Mutex::new(HashMap::new()),
            relay: Mutex::new(None),
            nets,
        });
        let l = listener.try_clone()?;
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("proxy".into())
            .stack_size(STACK)
            .spawn(move || accept_loop(&l, &s))?;
        Ok(Proxy {
            shared,
            listener,
            accept: Some(accept),
        })
    }

    /// Stop accepting, cut every open connection, and return the log.
    pub fn stop(mut self) -> Vec<Connection> {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept thread (accept fails with EINVAL on a shut-down listener).
        // SAFETY: shutdown(2) on a socket we own.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for streams in lock(&self.shared.live).values() {
            for s in streams {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let until = Instant::now() + Duration::from_secs(2);
        while self.shared.active.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let relay = lock(&self.shared.relay).take();
        if let Some(r) = relay {
            r.quit();
        }
        self.log()
    }

    /// The connection log so far.
    pub fn log(&self) -> Vec<Connection> {
        lock(&self.shared.log)
            .iter()
            .map(|((host, port, allowed), e)| Connection {
                host: host.clone(),
                port: *port,
                allowed: *allowed,
                reason: e.reason.clone(),
                count: e.count,
                bytes_up: e.bytes.up.load(Ordering::Relaxed),
                bytes_down: e.bytes.down.load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// A poisoned lock only means a connection thread panicked; its data is still good.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    loop {
        let conn = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok((stream, _)) = conn else {
            // EMFILE and the like: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        // Both sides without Nagle: a relay must not hold back a small segment until the
        // previous one is acknowledged (with the peer's delayed ACK, 40 ms on every TLS
        // handshake through the tunnel: measured in scripts/bench).
        let _ = stream.set_nodelay(true);
        if shared.active.load(Ordering::SeqCst) >= MAX_ACTIVE {
            let _ = respond(
                &stream,
                "503 Service Unavailable",
                "sandbox-run: network: too many connections through the proxy at once\n",
            );
            continue;
        }
        next_id += 1;
        let id = next_id;
        shared.active.fetch_add(1, Ordering::SeqCst);
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || {
                if let Ok(c) = stream.try_clone() {
                    lock(&s.live).insert(id, vec![c]);
                }
                match serve(&stream, id, &s) {
                    Some((upstream, counters)) => hand_off(&s, id, stream, upstream, counters),
                    None => s.finish(id),
                }
            });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A refusal: what rule, and how to change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub reason: String,
    pub fix: String,
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `CONNECT`, `GET`, ...
    pub method: String,
    pub host: Host,
    pub port: u16,
    /// Plain HTTP: the head to send upstream (origin-form, `Connection: close`).
    pub forward: Option<Vec<u8>>,
    /// Bytes of the head as read.
    pub head_len: usize,
}

/// The request head at the start of `buf`: `Ok(None)` until it is complete. Errors are the
/// body of a 400 answer. Never panics, whatever the bytes.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(format!("request head larger than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed request: {e}")),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err("malformed request".into());
    };
    let authority = |a: &str, default: Option<u16>| -> Result<(Host, u16), String> {
        let bad = || format!("{a:?} is not HOST:PORT");
        let (h, p) = match a.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && (h.starts_with('[') || !h.contains(':')) => {
                (h, Some(p))
            }
            _ => (a, None),
        };
        let port = match (p, default) {
            (Some(p), _) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u16>().ok().filter(|&n| n > 0).ok_or_else(bad)?
            }
            (None, Some(d)) => d,
            _ => return Err(bad()),
        };
        Ok((Host::parse(h).ok_or_else(bad)?, port))
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(target, None)?;
        return Ok(Some(Request {
            method: "CONNECT".into(),
            host,
            port,
            forward: None,
            head_len,
        }));
    }
    let lower = target.get(..8).map(str::to_ascii_lowercase);
    let rest = match lower.as_deref() {
        Some(s) if s.starts_with("http://") => &target[7..],
        Some("https://") => {
            return Err("an https:// URL must go through CONNECT (set HTTPS_PROXY)".into())
        }
        _ => {
            return Err(format!(
                "{target:?} is not an absolute http:// URL: this is a proxy (set HTTP_PROXY)"
            ))
        }
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, path) = rest.split_at(end);
    if auth.contains('@') {
        return Err("a URL with user information is refused".into());
    }
    let (host, port) = authority(auth, Some(80))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('/') => p.to_string(),
        p => format!("/{p}"),
    };
    let path = path.split('#').next().unwrap_or("/");
    let mut head = format!("{method} {path} HTTP/1.{version}\r\n").into_bytes();
    let hop = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
    ];
    let mut has_host = false;
    for h in req.headers.iter() {
        if hop.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        has_host |= h.name.eq_ignore_ascii_case("host");
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    if !has_host {
        head.extend_from_slice(format!("Host: {auth}\r\n").as_bytes());
    }
    // One request per connection: a second one on the same connection could name another host.
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Some(Request {
        method: method.to_string(),
        host,
        port,
        forward: Some(head),
        head_len,
    }))
}

/// Check `host:port` against the list and resolve it: the addresses to connect to and the
/// rule that allowed them.
pub fn decide(
    allow: &AllowList,
    nets: &[HostNet],
    host: &Host,
    port: u16,
    resolve: impl Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>,
) -> Result<(Vec<SocketAddr>, String), Denial> {
    let profile_fix = |what: String| Denial {
        reason: "not on the allow-list".into(),
        fix: format!("add --allow-host {what}"),
    };
    let pattern = |h: &Host| {
        if super::allow::DEFAULT_PORTS.contains(&port) {
            h.to_string()
        } else {
            format!("{h}:{port}")
        }
    };
    let Some(rule) = allow.find(host, port) else {
        return Err(profile_fix(pattern(host)));
    };
    let rule = rule.text.clone();
    let name = match host {
        Host::Ip(ip) => return Ok((vec![SocketAddr::new(*ip, port)], rule)),
        Host::Name(n) => n,
    };
    let addrs = resolve(name, port).map_err(|e| Denial {
        reason: format!("{name} does not resolve: {}", io_text(&e)),
        fix: "check the name".into(),
    })?;
    if addrs.is_empty() {
        return Err(Denial {
            reason: format!("{name} has no address"),
            fix: "check the name".into(),
        });
    }
    for a in &addrs {
        let class = special(a.ip()).map(str::to_string).or_else(|| {
            on_host_network(a.ip(), nets)
                .map(|n| format!("an address of the host's own network ({n})"))
        });
        if let Some(class) = class {
            if allow.literal(a.ip(), port).is_none() {
                return Err(Denial {
                    reason: format!("{name} resolves to {}, {class}", a.ip()),
                    fix: format!(
                        "such addresses are reached only when listed as literals: add --allow-host {}",
                        pattern(&Host::Ip(a.ip()))
                    ),
                });
            }
        }
    }
    Ok((addrs, rule))
}

fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

fn system_resolve(name: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok((name, port).to_socket_addrs()?.collect())
}

fn respond(mut s: &TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())
}

impl Shared {
    /// A connection ended: it no longer counts against [`MAX_ACTIVE`].
    fn finish(&self, id: u64) {
        lock(&self.live).remove(&id);
        self.active.fetch_sub(1, Ordering::SeqCst);
    }

    fn record(&self, host: &Host, port: u16, allowed: bool, reason: &str) -> Arc<Counters> {
        let mut log = lock(&self.log);
        let mut key = (host.to_string(), port, allowed);
        if log.len() >= MAX_LOG && !log.contains_key(&key) {
            key.0 = OVERFLOW.to_string();
        }
        let e = log.entry(key).or_insert_with(|| LogEntry {
            reason: reason.to_string(),
            count: 0,
            bytes: Arc::new(Counters::default()),
        });
        e.count += 1;
        e.bytes.clone()
    }

    fn deny(&self, what: &str, host: &Host, port: u16, d: &Denial) {
        self.record(host, port, false, &d.reason);
        let first = {
            let mut warned = lock(&self.warned);
            let h = host.to_string();
            if warned.contains(&h) {
                false
            } else if warned.len() < MAX_LOG {
                warned.insert(h)
            } else {
                if warned.insert(OVERFLOW.to_string()) && self.config.warn {
                    crate::sink::line(&format!("sandbox-run: network: {MAX_LOG} hosts denied; further denials are not printed (the report counts them)"));
                }
                false
            }
        };
        if first && self.config.warn {
            let reason = if d.reason == "not on the allow-list" {
                format!("not on the allow-list of profile {}", self.config.profile)
            } else {
                d.reason.clone()
            };
            // never waiting for a caller that does not read stderr (see `crate::sink::line`)
            crate::sink::line(&format!(
                "sandbox-run: network: denied {what} {host}:{port} ({reason}; {})",
                d.fix
            ));
        }
    }

    fn body(&self, what: &str, host: &Host, port: u16, d: &Denial) -> String {
        format!(
            "sandbox-run: network: denied {what} {host}:{port}\n\
             rule: {} (profile {}: the sandbox's only way out is this proxy, which allows only \
             the hosts on its list)\n\
             fix: {}, or add it to [network] allow in the profile\n",
            d.reason, self.config.profile, d.fix
        )
    }
}

/// Read, check and answer the request; for an allowed one, the open connection upstream and
/// its byte counters, for the relay to move.
fn serve(client: &TcpStream, id: u64, shared: &Arc<Shared>) -> Option<(TcpStream, Arc<Counters>)> {
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    let mut buf = Vec::with_capacity(4096);
    let req = loop {
        match parse_request(&buf) {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                let _ = respond(
                    client,
                    "400 Bad Request",
                    &format!("sandbox-run: network: {e}\n"),
                );
                return None;
            }
        }
        match read_more(client, &mut buf, MAX_HEAD + 1) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    };
    let (host, port, what) = (&req.host, req.port, req.method.as_str());
    let cfg = &shared.config;
    let (addrs, rule) = match decide(&cfg.allow, &shared.nets, host, port, system_resolve) {
        Ok(x) => x,
        Err(d) => {
            shared.deny(what, host, port, &d);
            let _ = respond(client, "403 Forbidden", &shared.body(what, host, port, &d));
            return None;
        }
    };
    let upstream = match connect(&addrs) {
        Ok(u) => u,
        Err(e) => {
            shared.record(host, port, true, &format!("allow-list: {rule}"));
            let _ = respond(
                client,
                "502 Bad Gateway",
                &format!(
                    "sandbox-run: network: {what} {host}:{port} is allowed, but connecting failed: {}\n",
                    io_text(&e)
                ),
            );
            return None;
        }
    };
    if let Ok(u) = upstream.try_clone() {
        if let Some(v) = lock(&shared.live).get_mut(&id) {
            v.push(u);
        }
    }
    let mut pending = buf.split_off(req.head_len);
    match &req.forward {
        None => {
            if (&*client)
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .is_err()
            {
                return None;
            }
            if let Err(d) = check_tunnel(client, &upstream, host, &mut pending) {
                shared.deny(what, host, port, &d);
                // A fatal TLS alert, access_denied: the client is past HTTP already.
                let _ = (&*client).write_all(&[0x15, 3, 3, 0, 2, 2, 49]);
                return None;
            }
        }
        Some(head) => {
            let mut h = head.clone();
            h.extend_from_slice(&pending);
            pending = h;
        }
    }
    let _ = client.set_read_timeout(None);
    let counters = shared.record(host, port, true, &format!("allow-list: {rule}"));
    if (&upstream).write_all(&pending).is_err() {
        return None;
    }
    counters
        .up
        .fetch_add(pending.len() as u64, Ordering::Relaxed);
    Some((upstream, counters))
}

/// Read at most 4 KiB more into `buf`, never past `limit` bytes in all (0 when full): straight
/// into the vector, no buffer on the connection thread's stack (each thread's stack is
/// resident memory of the supervisor).
fn read_more(s: &TcpStream, buf: &mut Vec<u8>, limit: usize) -> std::io::Result<usize> {
    let old = buf.len();
    let room = limit.saturating_sub(old).min(4096);
    if room == 0 {
        return Ok(0);
    }
    buf.resize(old + room, 0);
    let r = (&*s).read(&mut buf[old..]);
    buf.truncate(old + *r.as_ref().unwrap_or(&0));
    r
}

fn connect(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::from_raw_os_error(libc::EHOSTUNREACH);
    for a in addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The first bytes of a tunnel: when the client speaks first and it is TLS, its ClientHello
/// must name the CONNECT host (or no host). A server that speaks first (SSH, SMTP) is some
/// other protocol, and passes. No timeout: a client that waits before its ClientHello is
/// still checked ([`Proxy::stop`] ends the wait).
fn check_tunnel(
    client: &TcpStream,
    upstream: &TcpStream,
    host: &Host,
    pending: &mut Vec<u8>,
) -> Result<(), Denial> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        match sni::parse(pending) {
            Hello::Partial if pending.len() < sni::MAX_HELLO + 5 => {}
            Hello::Partial => {
                return Err(Denial {
                    reason: "the ClientHello is too large".into(),
                    fix: "nothing to add: this is not a TLS client the proxy can check".into(),
                })
            }
            Hello::NotTls | Hello::Sni(None) => return Ok(()),
            Hello::Sni(Some(name)) => {
                return match Host::parse(&name) {
                    Some(h) if &h == host => Ok(()),
                    _ => Err(Denial {
                        reason: format!(
                            "the TLS server name {name:?} differs from the CONNECT host"
                        ),
                        fix: format!(
                            "a tunnel reaches only the host it names: CONNECT {} instead",
                            name.to_ascii_lowercase()
                        ),
                    }),
                }
            }
            Hello::Malformed(why) => {
                return Err(Denial {
                    reason: format!("a malformed TLS ClientHello ({why})"),
                    fix: "nothing to add: the proxy checks the server name of every TLS tunnel"
                        .into(),
                })
            }
        }
        // Once the client has begun, only the client (a hangup of the server would wake us
        // again and again): the server's bytes wait in its socket.
        let mut fds = vec![PollFd::new(client.as_fd(), PollFlags::POLLIN)];
        if pending.is_empty() {
            fds.push(PollFd::new(upstream.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                return Err(Denial {
                    reason: format!("the tunnel could not be checked (poll: {})", e.desc()),
                    fix: "try again".into(),
                })
            }
        }
        let server_first = fds.get(1).is_some_and(|f| f.any().unwrap_or(false));
        if server_first {
            return Ok(());
        }
        if fds[0].any().unwrap_or(false) {
            match read_more(client, pending, sni::MAX_HELLO + 5) {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
    }
}

/// An open tunnel: the relay thread moves it from here on, or, where that cannot start, the
/// connection's own thread with blocking copies.
fn hand_off(
    shared: &Arc<Shared>,
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    counters: Arc<Counters>,
) {
    let ready = client.set_nonblocking(true).is_ok() && upstream.set_nonblocking(true).is_ok();
    if let (true, Ok(up), Ok(down), Some(r)) = (ready, Pipe::new(), Pipe::new(), Relay::get(shared))
    {
        r.add(Tunnel {
            id,
            client,
            upstream,
            up,
            down,
            counters,
            moved: false,
        });
        return;
    }
    if client.set_nonblocking(false).is_ok() && upstream.set_nonblocking(false).is_ok() {
        relay_threads(&client, &upstream, &counters);
    }
    shared.finish(id);
}

/// The one thread that moves the bytes of every open tunnel: an edge-triggered epoll loop over
/// both sockets of each, each direction through a pipe with non-blocking `splice(2)`.
struct Relay {
    epoll: OwnedFd,
    /// An eventfd: new tunnels in `inbox`, or `quit`.
    wake: OwnedFd,
    inbox: Mutex<Vec<Tunnel>>,
    quit: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The epoll key of the relay's eventfd; a tunnel's key is its slot.
const WAKE: u64 = u64::MAX;
/// Rounds of one tunnel per wakeup before the others get their turn.
const ROUNDS: usize = 32;

impl Relay {
    /// The relay thread, started now if it is not running yet; `None` when it cannot start.
    fn get(shared: &Arc<Shared>) -> Option<Arc<Relay>> {
        let mut slot = lock(&shared.relay);
        if let Some(r) = slot.as_ref() {
            return Some(r.clone());
        }
        if shared.stop.load(Ordering::SeqCst) {
            return None;
        }
        // SAFETY: plain syscalls creating fds that we own right away.
        let (epoll, wake) = unsafe {
            let e = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            if e < 0 {
                return None;
            }
            let e = OwnedFd::from_raw_fd(e);
            let w = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
            if w < 0 {
                return None;
            }
            (e, OwnedFd::from_raw_fd(w))
        };
        let r = Arc::new(Relay {
            epoll,
            wake,
            inbox: Mutex::new(Vec::new()),
            quit: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        r.watch(r.wake.as_raw_fd(), WAKE, libc::EPOLLIN as u32)
            .ok()?;
        let (r2, s2) = (r.clone(), shared.clone());
        let t = std::thread::Builder::new()
            .name("relay".into())
            .stack_size(STACK)
            .spawn(move || r2.run(&s2))
            .ok()?;
        *lock(&r.thread) = Some(t);
        *slot = Some(r.clone());
        Some(r)
    }

    fn watch(&self, fd: RawFd, key: u64, events: u32) -> std::io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: key };
        // SAFETY: epoll_ctl on fds we own, with a valid event.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn unwatch(&self, fd: RawFd) {
        // SAFETY: as in `watch` (the event is ignored by EPOLL_CTL_DEL).
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    fn poke(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd (it cannot fail short of overflow).
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    fn add(&self, t: Tunnel) {
        lock(&self.inbox).push(t);
        self.poke();
    }

    /// End the thread (its tunnels close) and wait for it.
    fn quit(&self) {
        self.quit.store(true, Ordering::SeqCst);
        self.poke();
        let t = lock(&self.thread).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    fn run(&self, shared: &Arc<Shared>) {
        let mut slots: Vec<Option<Tunnel>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        // Tunnels that still had bytes to move when their turn ended.
        let mut again: Vec<usize> = Vec::new();
        let mut work: Vec<usize> = Vec::new();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        loop {
            let timeout = if again.is_empty() { -1 } else { 0 };
            // SAFETY: epoll_wait into an array of the length given.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    timeout,
                )
            };
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            work.clear();
            work.append(&mut again);
            for ev in &events[..n as usize] {
                let key = ev.u64;
                if key != WAKE {
                    work.push(key as usize);
                    continue;
                }
                let mut b = [0u8; 8];
                // SAFETY: an 8-byte read from our eventfd.
                unsafe { libc::read(self.wake.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
                if self.quit.load(Ordering::SeqCst) {
                    break;
                }
                let new = std::mem::take(&mut *lock(&self.inbox));
                for t in new {
                    let slot = free.pop().unwrap_or(slots.len());
                    if slot == slots.len() {
                        slots.push(None);
                    }
                    // Edge-triggered: one wakeup per change, so every turn moves what it can
                    // until splice would block ([`Tunnel::turn`]).
                    let evs =
                        (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
                    let (c, u) = (t.client.as_raw_fd(), t.upstream.as_raw_fd());
                    if self.watch(c, slot as u64, evs).is_err()
                        || self.watch(u, slot as u64, evs).is_err()
                    {
                        self.unwatch(c);
                        free.push(slot);
                        t.cut();
                        shared.finish(t.id);
                        continue;
                    }
                    slots[slot] = Some(t);
                    work.push(slot);
                }
            }
            if self.quit.load(Ordering::SeqCst) {
                break;
            }
            work.sort_unstable();
            work.dedup();
            for &slot in &work {
                let Some(t) = slots.get_mut(slot).and_then(|t| t.as_mut()) else {
                    continue;
                };
                let end = match t.turn() {
                    Turn::Idle => continue,
                    Turn::More => {
                        again.push(slot);
                        continue;
                    }
                    end => end,
                };
                let Some(t) = slots[slot].take() else {
                    continue;
                };
                self.unwatch(t.client.as_raw_fd());
                self.unwatch(t.upstream.as_raw_fd());
                free.push(slot);
                if end == Turn::Refused {
                    // splice refused before any byte moved: blocking copies on a thread.
                    let s = shared.clone();
                    let id = t.id;
                    let spawned = std::thread::Builder::new()
                        .stack_size(STACK)
                        .spawn(move || {
                            if t.client.set_nonblocking(false).is_ok()
                                && t.upstream.set_nonblocking(false).is_ok()
                            {
                                relay_threads(&t.client, &t.upstream, &t.counters);
                            }
                            s.finish(t.id);
                        });
                    if spawned.is_err() {
                        shared.finish(id);
                    }
                    continue;
                }
                if end == Turn::Failed {
                    t.cut();
                }
                shared.finish(t.id);
            }
        }
        for t in slots.into_iter().flatten() {
            t.cut();
            shared.finish(t.id);
        }
        for t in std::mem::take(&mut *lock(&self.inbox)) {
            t.cut();
            shared.finish(t.id);
        }
    }
}

/// Both directions of one tunnel, moved by the relay thread.
struct Tunnel {
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    /// client -> upstream
    up: Pipe,
    /// upstream -> client
    down: Pipe,
    counters: Arc<Counters>,
    /// A byte has moved (a refused splice then is a failure, not a reason to fall back).
    moved: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// Waits for its sockets.
    Idle,
    /// Has more to move: give the others a turn, then come back.
    More,
    /// Both directions ended with end-of-file.
    Done,
    /// A connection failed: cut both.
    Failed,
    /// splice is refused here: fall back to copies.
    Refused,
}

impl Tunnel {
    fn turn(&mut self) -> Turn {
        for _ in 0..ROUNDS {
            let progress = match (
                self.up
                    .step(&self.client, &self.upstream, &self.counters.up),
                self.down
                    .step(&self.upstream, &self.client, &self.counters.down),
            ) {
                (Ok(a), Ok(b)) => a || b,
                (Err(Some(_)), _) | (_, Err(Some(_))) if !self.moved => return Turn::Refused,
                _ => return Turn::Failed,
            };
            self.moved |= progress;
            if self.up.done && self.down.done {
                return Turn::Done;
            }
            if !progress {
                return Turn::Idle;
            }
        }
        Turn::More
    }

    fn cut(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }
}

/// One direction of a tunnel: a pipe between the two sockets.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    /// Bytes in the pipe.
    held: usize,
    cap: usize,
    /// The source reached end-of-file.
    eof: bool,
    /// The destination was half-closed after the last byte.
    done: bool,
}

/// Larger pipes move more per call; the default (64 KiB) when the user's pipe quota says no.
const PIPE: usize = 1 << 20;

impl Pipe {
    fn new() -> nix::Result<Pipe> {
        use nix::fcntl::OFlag;
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // SAFETY: fcntl on a pipe we own.
        let cap = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE as libc::c_int) };
        let cap = if cap > 0 { cap as usize } else { 64 * 1024 };
        Ok(Pipe {
            r,
            w,
            held: 0,
            cap,
            eof: false,
            done: false,
        })
    }

    /// Move what can be moved now, without blocking: `Ok(true)` if anything moved.
    /// `Err(Some(errno))` when splice itself is refused, `Err(None)` when the connection
    /// failed.
    fn step(
        &mut self,
        from: &TcpStream,
        to: &TcpStream,
        count: &AtomicU64,
    ) -> Result<bool, Option<i32>> {
        let mut progress = false;
        if !self.eof && self.held < self.cap {
            match splice(from.as_raw_fd(), self.w.as_raw_fd(), self.cap - self.held)? {
                Some(0) => {
                    self.eof = true;
                    progress = true;
                }
                Some(n) => {
                    self.held += n;
                    progress = true;
                }
                None => {}
            }
        }
        if self.held > 0 {
            if let Some(m) = splice(self.r.as_raw_fd(), to.as_raw_fd(), self.held)? {
                if m == 0 {
                    return Err(None);
                }
                self.held -= m;
                count.fetch_add(m as u64, Ordering::Relaxed);
                progress = true;
            }
        }
        if self.eof && self.held == 0 && !self.done {
            self.done = true;
            let _ = to.shutdown(Shutdown::Write);
        }
        Ok(progress)
    }
}

/// One non-blocking splice: `Ok(None)` when it would block.
fn splice(from: RawFd, to: RawFd, len: usize) -> Result<Option<usize>, Option<i32>> {
    loop {
        // SAFETY: splice between fds we own, no offsets.
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        match std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
        {
            libc::EINTR => continue,
            libc::EAGAIN => return Ok(None),
            e @ (libc::EINVAL | libc::ENOSYS) => return Err(Some(e)),
            _ => return Err(None),
        }
    }
}

/// The blocking copies where splice is refused (see [`hand_off`]): the download direction on a
/// thread of its own, so a full buffer one way never stalls the other.
fn relay_threads(client: &TcpStream, upstream: &TcpStream, counters: &Arc<Counters>) {
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let k = counters.clone();
    let down = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || copy(&u2, &c2, &k.down));
    copy(client, upstream, &counters.up);
    if let Ok(t) = down {
        let _ = t.join();
    }
}

/// One direction of a tunnel, until end-of-file (then half-close the other side) or an error
/// (then cut both).
fn copy(from: &TcpStream, to: &TcpStream, count: &AtomicU64) {
    if read_write_copy(from, to, count) {
        let _ = to.shutdown(Shutdown::Write);
    } else {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    }
}

/// The plain copy, where splice is not available. `true` at end-of-file.
fn read_write_copy(from: &TcpStream, to: &TcpStream, count: &AtomicU64) -> bool {
    let mut buf = vec![0u8; BUF];
    loop {
        match (&*from).read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => {
                if (&*to).write_all(&buf[..n]).is_err() {
                    return false;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(b: &[u8]) -> Request {
        parse_request(b).unwrap().unwrap()
    }

    #[test]
    fn connect_and_absolute_form() {
        let r = ok(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\nxx");
        assert_eq!(r.method, "CONNECT");
        assert_eq!(r.host, Host::Name("api.example.com".into()));
        assert_eq!(r.port, 443);
        assert_eq!(r.head_len, 67);
        let r = ok(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n");
        assert_eq!(r.host, Host::Ip("::1".parse().unwrap()));
        let r = ok(b"GET http://Ex.com:8080/a?b=1#frag HTTP/1.1\r\nHost: ex.com:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n");
        assert_eq!((r.host.to_string(), r.port), ("ex.com".into(), 8080));
        let fwd = String::from_utf8(r.forward.unwrap()).unwrap();
        assert_eq!(
            fwd,
            "GET /a?b=1 HTTP/1.1\r\nHost: ex.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = ok(b"POST http://ex.com HTTP/1.0\r\n\r\n");
        assert_eq!(r.port, 80);
        assert!(String::from_utf8(r.forward.unwrap())
            .unwrap()
            .starts_with("POST / HTTP/1.0\r\nHost: ex.com\r\n"));
        assert_eq!(
            parse_request(b"CONNECT a.com:443 HTTP/1.1\r\n").unwrap(),
            None
        );
    }

    #[test]
    fn bad_requests() {
        for b in [
            &b"CONNECT a.com HTTP/1.1\r\n\r\n"[..],
            b"CONNECT a.com:0 HTTP/1.1\r\n\r\n",
            b"CONNECT a.com:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT a.com:+443 HTTP/1.1\r\n\r\n",
            b"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a@b.com:443 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a.com\r\n\r\n",
            b"GET https://a.com/ HTTP/1.1\r\n\r\n",
            b"GET http://user@a.com/ HTTP/1.1\r\n\r\n",
            b"GET http:///x HTTP/1.1\r\n\r\n",
            b"GET http://127.1/ HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01\x00\x05hello",
        ] {
            assert!(
                parse_request(b).is_err(),
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
        let big = vec![b'a'; MAX_HEAD + 10];
        assert!(parse_request(&big).is_err());
    }

    fn resolver(
        table: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>> {
        move |n, port| {
            Ok(table
                .iter()
                .filter(|(k, _)| *k == n)
                .map(|(_, ip)| SocketAddr::new(ip.parse().unwrap(), port))
                .collect())
        }
    }

    #[test]
    fn decisions() {
        let l = AllowList::parse(&[
            "good.example",
            "rebind.example",
            "local.example",
            "127.0.0.1:8787",
            "local.example:8787",
            "mixed.example",
        ])
        .unwrap();
        let r = resolver(&[
            ("good.example", "93.184.216.34"),
            ("rebind.example", "127.0.0.1"),
            ("local.example", "127.0.0.1"),
            ("mixed.example", "93.184.216.34"),
            ("mixed.example", "169.254.169.254"),
        ]);
        let name = |n: &str| Host::Name(n.into());
        let (a, rule) = decide(&l, &[], &name("good.example"), 443, &r).unwrap();
        assert_eq!(a, vec!["93.184.216.34:443".parse().unwrap()]);
        assert_eq!(rule, "good.example");
        let d = decide(&l, &[], &name("other.example"), 443, &r).unwrap_err();
        assert_eq!(d.reason, "not on the allow-list");
        assert_eq!(d.fix, "add --allow-host other.example");
        let d = decide(&l, &[], &name("other.example"), 8443, &r).unwrap_err();
        assert_eq!(d.fix, "add --allow-host other.example:8443");
        let d = decide(&l, &[], &name("rebind.example"), 443, &r).unwrap_err();
        assert_eq!(
            d.reason,
            "rebind.example resolves to 127.0.0.1, a loopback address"
        );
        assert!(d.fix.ends_with("add --allow-host 127.0.0.1"), "{}", d.fix);
        let d = decide(&l, &[], &name("mixed.example"), 443, &r).unwrap_err();
        assert!(
            d.reason.contains("169.254.169.254, a link-local"),
            "{}",
            d.reason
        );
        // the literal makes the loopback address reachable, on its port only
        assert!(decide(&l, &[], &name("local.example"), 8787, &r).is_ok());
        assert!(decide(&l, &[], &name("local.example"), 443, &r).is_err());
        assert!(decide(&l, &[], &Host::Ip("127.0.0.1".parse().unwrap()), 8787, &r).is_ok());
        assert!(decide(&l, &[], &Host::Ip("127.0.0.1".parse().unwrap()), 8788, &r).is_err());
        // resolved once, by the resolver given: what is checked is what is returned
        let d = decide(&l, &[], &name("good.example"), 443, |_: &str, _| {
            Err(std::io::Error::from_raw_os_error(libc::ENOENT))
        })
        .unwrap_err();
        assert!(d.reason.starts_with("good.example does not resolve"));

        // The host's own networks: the host and its LAN, whatever the range, refused unless
        // the address is listed; a documentation range elsewhere is not the host's.
        let nets = [crate::net::allow::HostNet {
            ip: "192.0.2.2".parse().unwrap(),
            prefix: 24,
            iface: "eth0".into(),
        }];
        let l = AllowList::parse(&["lan.example", "far.example", "192.0.2.1:443"]).unwrap();
        let r = resolver(&[
            ("lan.example", "192.0.2.9"),
            ("far.example", "203.0.113.80"),
        ]);
        let d = decide(&l, &nets, &name("lan.example"), 443, &r).unwrap_err();
        assert_eq!(
            d.reason,
            "lan.example resolves to 192.0.2.9, an address of the host's own network \
             (192.0.2.2/24 on eth0)"
        );
        assert!(d.fix.ends_with("add --allow-host 192.0.2.9"), "{}", d.fix);
        assert!(decide(&l, &[], &name("lan.example"), 443, &r).is_ok());
        assert!(decide(&l, &nets, &name("far.example"), 443, &r).is_ok());
        let r = resolver(&[("lan.example", "192.0.2.1")]);
        assert!(decide(&l, &nets, &name("lan.example"), 443, &r).is_ok());
    }

    /// Fuzz-style: random and mutated request heads never panic the parser, and whatever it
    /// accepts names a host that [`Host::parse`] accepts, with a port above 0.
    #[test]
    fn request_parser_never_panics() {
        use proptest::prelude::*;
        let seeds: Vec<&[u8]> = vec![
            b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n",
            b"GET http://ex.com:8080/a?b HTTP/1.1\r\nHost: ex.com\r\nProxy-Connection: x\r\n\r\n",
            b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n",
        ];
        let cfg = proptest::test_runner::Config {
            cases: 4000,
            ..Default::default()
        };
        let mut runner = proptest::test_runner::TestRunner::new(cfg);
        let check = |b: &[u8]| {
            if let Ok(Some(r)) = parse_request(b) {
                assert!(r.port > 0);
                assert!(Host::parse(&r.host.to_string()).is_some());
                assert!(r.head_len <= b.len());
            }
        };
        runner
            .run(
                &(
                    0..seeds.len(),
                    proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
                    any::<usize>(),
                ),
                |(s, flips, cut)| {
                    let mut b = seeds[s].to_vec();
                    for (i, v) in flips {
                        let i = i % b.len();
                        b[i] = v;
                    }
                    let cut = cut % (b.len() + 1);
                    check(&b[..cut]);
                    check(&b);
                    Ok(())
                },
            )
            .unwrap();
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..300), |b| {
                check(&b);
                let mut v = b"CONNECT ".to_vec();
                v.extend_from_slice(&b);
                v.extend_from_slice(b" HTTP/1.1\r\n\r\n");
                check(&v);
                let mut v = b"GET http://".to_vec();
                v.extend_from_slice(&b);
                v.extend_from_slice(b" HTTP/1.1\r\n\r\n");
                check(&v);
                Ok(())
            })
            .unwrap();
    }

    /// The static binary's resolver reads /etc/hosts (and DNS) on the host.
    #[test]
    fn the_host_resolver_works_statically_linked() {
        let a = system_resolve("localhost", 443).unwrap();
        assert!(
            a.iter().all(|a| a.ip().is_loopback() && a.port() == 443),
            "{a:?}"
        );
        if let Ok(name) = std::env::var("SANDBOX_RUN_TEST_RESOLVE") {
            eprintln!("{name}: {:?}", system_resolve(&name, 443));
        }
    }

    /// An upstream on the host's loopback that records what it receives; `greeting` is sent
    /// first (a server-first protocol) when given.
    fn upstream(greeting: Option<&'static [u8]>) -> (u16, std::sync::mpsc::Receiver<Vec<u8>>) {
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
        };
        (Proxy::start(l, config).unwrap(), p)
    }

    fn read_some(s: &mut TcpStream) -> Vec<u8> {
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
            },
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            log: Mutex::new(BTreeMap::new()),
            warned: Mutex::new(HashSet::new()),
            live: Mutex::new(HashMap::new()),
            relay: Mutex::new(None),
            nets: Vec::new(),
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
}
