//! Connections that reach a host without going through the proxy (the sandbox's loopback
//! listeners) but must be terminated like the proxy's own: a secret is listed for the host.

use super::{check_tunnel, lock, respond, terminate, Denial, Shared, MAX_ACTIVE, TLS_STACK};
use crate::net::allow::Host;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Connections that reach a host a secret may be listed for without going through the
/// proxy (listeners on the sandbox's loopback that forward to the host's loopback ports):
/// they are terminated and injected like the proxy's own.
#[derive(Clone)]
pub struct Interceptor(pub(super) Arc<Shared>);

impl Interceptor {
    /// Whether connections to `host:port` must go through [`Interceptor::intercept`].
    pub fn wants(&self, host: &Host, port: u16) -> bool {
        self.0.tls.is_some() && self.0.config.secrets.injects(host, port)
    }

    /// Take over a connection to `host:port` (already connected to `upstream`), whose
    /// client sent `first` so far: a TLS ClientHello (its server name must be the host, or
    /// none) is terminated; plain HTTP is injected in plain text only when the host is a
    /// loopback address. Returns at once: a thread of the proxy moves the connection, and
    /// [`Proxy::stop`] ends it. The connection log counts it under `host:port`.
    pub fn intercept(
        &self,
        client: TcpStream,
        upstream: TcpStream,
        host: &Host,
        port: u16,
        first: Vec<u8>,
    ) {
        let shared = &self.0;
        if shared.stop.load(Ordering::SeqCst) || shared.active.load(Ordering::SeqCst) >= MAX_ACTIVE
        {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        let id = INTERCEPT_IDS.fetch_add(1, Ordering::Relaxed);
        if let (Ok(c), Ok(u)) = (client.try_clone(), upstream.try_clone()) {
            lock(&shared.live).insert(id, vec![c, u]);
        }
        shared.active.fetch_add(1, Ordering::SeqCst);
        let s = shared.clone();
        let host = host.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(TLS_STACK)
            .spawn(move || {
                intercepted(&s, &client, &upstream, &host, port, first);
                let _ = client.shutdown(Shutdown::Both);
                let _ = upstream.shutdown(Shutdown::Both);
                s.finish(id);
            });
        if spawned.is_err() {
            shared.finish(id);
        }
    }
}

/// Ids of intercepted connections in [`Shared::live`]: from the top down, apart from the
/// proxy's own.
static INTERCEPT_IDS: AtomicU64 = AtomicU64::new(1 << 63);

pub(super) fn intercepted(
    shared: &Arc<Shared>,
    client: &TcpStream,
    upstream: &TcpStream,
    host: &Host,
    port: u16,
    first: Vec<u8>,
) {
    let mut pending = first;
    let what = "connection to";
    if let Err(d) = check_tunnel(client, upstream, host, &mut pending) {
        shared.deny(what, host, port, &d);
        let _ = (&*client).write_all(&[0x15, 3, 3, 0, 2, 2, 49]);
        return;
    }
    let tls = pending.first() == Some(&0x16);
    let loopback = matches!(host, Host::Ip(ip) if ip.is_loopback());
    if !tls && !loopback {
        let d = Denial {
            reason: "plain HTTP carrying secrets goes only to a loopback address".into(),
            fix: "use https:// for this host".into(),
        };
        shared.deny(what, host, port, &d);
        let _ = respond(client, "403 Forbidden", &shared.body(what, host, port, &d));
        return;
    }
    let counters = shared.record(host, port, true, "a secret is listed for it");
    let mode = if tls {
        terminate::Mode::Tls
    } else {
        terminate::Mode::Plain
    };
    terminate::Session::run(
        shared, client, upstream, host, port, &pending, mode, counters,
    );
}
