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
//! 4. in a tunnel, a TLS ClientHello must name the CONNECT host (SNI), or no host at all, and
//!    carry no extension that routes elsewhere (Encrypted Client Hello: [`sni::passes`]);
//! 5. in plain HTTP, the `Host` header must name the URL's host and port ([`super::host`]): no
//!    domain fronting through a shared front end on the list.
//!
//! A tunnel to a host a secret is listed for is no tunnel: the proxy terminates its TLS and
//! checks and injects each request ([`terminate`]); nothing else is ever decrypted. Plain
//! HTTP carrying a placeholder is refused unless it goes to a loopback address listed for
//! that secret ([`secrets`]).
//!
//! A refusal is an HTTP 403 whose body names the rule and the fix (a TLS alert when the
//! tunnel is already open), one line on sandbox-run's stderr per host, and an entry in the
//! connection log of the report.

mod answer;
mod decide;
mod forward;
mod intercept;
mod plain;
mod reflect;
mod relay;
mod request;
mod secrets;
mod terminate;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_tls;

pub use answer::fuzz_scan;
pub use decide::{decide, Denial};
pub use forward::{check_loopback_ports, loopback_ports, LoopbackPort};
pub use intercept::Interceptor;
pub use request::{parse_request, Request};

use super::allow::{host_networks, AllowList, Host, HostNet};
use super::secret::{Misdirected, SecretUse, Secrets};
use super::sni::{self, Hello};
use decide::{io_text, system_resolve};
use relay::{hand_off, Relay};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
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
/// The stack of a connection thread in a run with secrets: TLS handshakes and certificate
/// checks need more than a tunnel (only the pages touched are resident).
const TLS_STACK: usize = 512 * 1024;
const BUF: usize = 64 * 1024;

/// What the proxy enforces.
#[derive(Debug, Clone)]
pub struct Config {
    pub allow: AllowList,
    /// The profile's name, for messages.
    pub profile: String,
    /// Print one line per denied host on stderr.
    pub warn: bool,
    /// The run's secrets (`--secret`): connections to their hosts are terminated and the
    /// placeholders replaced. None: no TLS is terminated and no CA is made.
    pub secrets: Arc<Secrets>,
    /// PEM bundles trusted for the upstream's certificate of a terminated connection, beside
    /// the host's own roots: `--ca-certs` and the caller's bundle.
    pub extra_roots: Vec<std::path::PathBuf>,
    /// `-v`: told each refusal as it happens.
    pub on_denied: Option<crate::net::OnDenied>,
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
    /// The last connection's id.
    ids: AtomicU64,
    /// The listeners of the loopback ports ([`Proxy::forward`]) and their accept threads.
    forwards: Mutex<Vec<(TcpListener, std::thread::JoinHandle<()>)>>,
    /// The CA and TLS configurations of a run with secrets; `None` without.
    tls: Option<terminate::Tls>,
    /// Placeholders replaced, per secret (by index).
    injections: Vec<AtomicU64>,
    /// Placeholders refused, per secret name, host and port (bounded by [`MAX_LOG`]).
    misdirected: Mutex<BTreeMap<(String, String, u16), u64>>,
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
        // Only a run with secrets makes a CA and reads the roots: the others start as fast as
        // before. The supervisor starts the proxy after forking the sandbox's processes, so
        // the CA's key is in no memory but its own.
        let tls = if config.secrets.is_empty() {
            None
        } else {
            Some(terminate::Tls::new(&config.extra_roots).map_err(std::io::Error::other)?)
        };
        let injections = config
            .secrets
            .list
            .iter()
            .map(|_| AtomicU64::new(0))
            .collect();
        let shared = Arc::new(Shared {
            config,
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            log: Mutex::new(BTreeMap::new()),
            warned: Mutex::new(HashSet::new()),
            live: Mutex::new(HashMap::new()),
            relay: Mutex::new(None),
            nets,
            ids: AtomicU64::new(0),
            forwards: Mutex::new(Vec::new()),
            tls,
            injections,
            misdirected: Mutex::new(BTreeMap::new()),
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
        for (l, t) in std::mem::take(&mut *lock(&self.shared.forwards)) {
            // SAFETY: as above.
            unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
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

    /// The run's CA certificate (PEM) for the sandbox's trust bundle; `None` without secrets.
    pub fn ca_pem(&self) -> Option<String> {
        self.shared.tls.as_ref().map(|t| t.ca.pem().to_string())
    }

    /// Every secret with the placeholders replaced by its value so far, and the refused
    /// placeholders (names and hosts, never values).
    pub fn secret_log(&self) -> (Vec<SecretUse>, Vec<Misdirected>) {
        let uses = self
            .shared
            .config
            .secrets
            .list
            .iter()
            .zip(&self.shared.injections)
            .map(|(s, n)| SecretUse {
                name: s.name.clone(),
                hosts: s.host_text.clone(),
                injections: n.load(Ordering::Relaxed),
            })
            .collect();
        let mis = lock(&self.shared.misdirected)
            .iter()
            .map(|((secret, host, port), count)| Misdirected {
                secret: secret.clone(),
                host: host.clone(),
                port: *port,
                count: *count,
            })
            .collect();
        (uses, mis)
    }

    /// A handle for connections that reach a host without going through the proxy (the
    /// sandbox's loopback listeners): see [`Interceptor::intercept`].
    pub fn interceptor(&self) -> Interceptor {
        Interceptor(self.shared.clone())
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
        let id = shared.next_id();
        shared.active.fetch_add(1, Ordering::SeqCst);
        let s = shared.clone();
        let stack = if shared.tls.is_some() {
            TLS_STACK
        } else {
            STACK
        };
        let spawned = std::thread::Builder::new()
            .stack_size(stack)
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

fn respond(mut s: &TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())
}

impl Shared {
    /// A fresh connection id (the key of [`Shared::live`]).
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::SeqCst) + 1
    }

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
        let host = key.0.clone();
        let e = log.entry(key).or_insert_with(|| LogEntry {
            reason: reason.to_string(),
            count: 0,
            bytes: Arc::new(Counters::default()),
        });
        e.count += 1;
        let bytes = e.bytes.clone();
        // `-v`: the entry's own reason (the first one), as the report will have it; a host past
        // the log's bound is not in the report under its name, so not told either.
        let tell = self
            .config
            .on_denied
            .as_ref()
            .filter(|_| !allowed && host != OVERFLOW);
        if let Some(tell) = tell {
            let reason = e.reason.clone();
            drop(log);
            (tell.0)(crate::net::Denied::Host {
                host: &host,
                port,
                reason: &reason,
            });
        }
        bytes
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
    if let Some(r) = &req.host_refusal {
        // A shared front end routes by the header: it must not name a host off the list.
        let authority = match port {
            80 => host.to_string(),
            p => format!("{host}:{p}"),
        };
        let d = Denial {
            reason: r.reason.clone(),
            fix: format!("send `Host: {authority}`, or ask for another host by its own URL"),
        };
        shared.deny(what, host, port, &d);
        let status = match r.status {
            400 => "400 Bad Request",
            _ => "403 Forbidden",
        };
        let body = format!(
            "sandbox-run: network: denied {what} {host}:{port}\n\
             rule: {} (a request through the proxy reaches only the host its URL names)\n\
             fix: {}\n",
            d.reason, d.fix
        );
        let _ = respond(client, status, &body);
        return None;
    }
    let mut forward = req.forward.clone();
    if let Some(head) = forward.as_mut() {
        if cfg.secrets.injects(host, port) {
            // a host that receives a secret answers in a form the scan reads (`answer`)
            if let Some(asked) = crate::net::tls::http1::ask_identity(head) {
                *head = asked;
            }
        }
        match secrets::plain_secrets(shared, host, port, head) {
            Ok(()) => {}
            Err(body) => {
                let _ = respond(client, "403 Forbidden", &body);
                return None;
            }
        }
    }
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
    match &forward {
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
            if shared.tls.is_some() && cfg.secrets.injects(host, port) {
                let _ = client.set_read_timeout(None);
                let counters = shared.record(host, port, true, &format!("allow-list: {rule}"));
                terminate::Session::run(
                    shared,
                    client,
                    &upstream,
                    host,
                    port,
                    &pending,
                    terminate::Mode::Tls,
                    counters,
                );
                return None;
            }
        }
        Some(head) => {
            // One request, its body scanned, then only the answer (see `plain`).
            let counters = shared.record(host, port, true, &format!("allow-list: {rule}"));
            plain::one_request(
                shared,
                client,
                &upstream,
                (host, port),
                head,
                pending,
                &counters,
            );
            return None;
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
            Hello::Unlisted(kind) => {
                return Err(Denial {
                    reason: format!(
                        "the TLS ClientHello carries extension {kind:#06x} ({}), with which the \
                         connection can reach another server than the name the proxy checks",
                        sni::refused_name(kind)
                    ),
                    fix: "turn Encrypted Client Hello off in the client (the proxy lets a \
                          tunnel reach only the server its ClientHello names in the clear)"
                        .into(),
                })
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
