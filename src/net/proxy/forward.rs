//! Listed host ports on loopback, on the sandbox's own loopback: for each allow-list entry
//! that names a loopback host with its port (`127.0.0.1:8787`, `[::1]:5432`,
//! `localhost:11434`), pid 1 binds the same address and port in the sandbox's network
//! namespace and passes the listening socket to the supervisor, which accepts on it here and
//! connects to the host's same address and port from the host's namespace. A client inside
//! that ignores the proxy variables (Node's `fetch`, a database driver, an agent CLI whose
//! `NO_PROXY` names the loopback) reaches the host's service as if it ran beside it. Each
//! connection is in the proxy's connection log, as a proxied one is.
//!
//! Nothing else of the host's loopback appears inside: a port not listed is refused by the
//! sandbox's own kernel (nothing listens there).

use super::{lock, Proxy, Shared, MAX_ACTIVE, STACK};
use crate::net::allow::{AllowList, Host};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One loopback address and port that pid 1 listens on inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopbackPort {
    /// As the allow-list names it (`localhost`, `127.0.0.1`, `[::1]`): the log's host.
    pub host: Host,
    /// The address bound inside and dialled on the host.
    pub ip: IpAddr,
    pub port: u16,
    /// `localhost`'s IPv6 half: skipped when the sandbox has no IPv6 loopback.
    pub optional: bool,
}

/// The loopback ports of an allow-list, in its order (pid 1 binds them and the supervisor
/// serves them by their index here). `localhost:P` is `127.0.0.1:P` and `[::1]:P`, as the
/// sandbox's `/etc/hosts` says.
pub fn loopback_ports(allow: &AllowList) -> Vec<LoopbackPort> {
    let mut out: Vec<LoopbackPort> = Vec::new();
    for r in &allow.rules {
        let Some((ip, port)) = r.loopback_port() else {
            continue;
        };
        let wanted = match ip {
            Some(ip) => vec![(Host::Ip(ip), ip, false)],
            None => {
                let h = Host::Name("localhost".into());
                vec![
                    (h.clone(), IpAddr::V4(Ipv4Addr::LOCALHOST), false),
                    (h, IpAddr::V6(Ipv6Addr::LOCALHOST), true),
                ]
            }
        };
        for (host, ip, optional) in wanted {
            match out.iter_mut().find(|l| l.ip == ip && l.port == port) {
                // Listed twice (`localhost:P` and `127.0.0.1:P`): one listener, required.
                Some(l) => l.optional &= optional,
                None => out.push(LoopbackPort {
                    host,
                    ip,
                    port,
                    optional,
                }),
            }
        }
    }
    out
}

/// Plan time: the loopback ports must not take a port the sandbox's own services use.
pub fn check_loopback_ports(allow: &AllowList) -> Result<(), String> {
    for l in loopback_ports(allow) {
        if l.port == super::PORT {
            return Err(format!(
                "allow-list entry {}:{}: port {} on the sandbox's loopback is its proxy's; the host's service on that port cannot appear inside (move it to another port)",
                l.host,
                l.port,
                super::PORT
            ));
        }
    }
    Ok(())
}

/// How a connection to a loopback port is carried.
#[derive(Clone, Copy)]
enum Carry {
    /// The bytes as they are (the relay).
    Relay,
    /// A secret is listed for this host and port: terminated and injected like a CONNECT to
    /// it ([`super::intercept`]).
    Inject,
}

impl Proxy {
    /// Serve `lp` on `listener` (bound by pid 1 in the sandbox's namespace): each connection
    /// accepted is connected to the host's `lp.ip:lp.port` and relayed, until [`Proxy::stop`].
    pub fn forward(&self, listener: TcpListener, lp: LoopbackPort) -> std::io::Result<()> {
        let l = listener.try_clone()?;
        let s = self.shared.clone();
        let t = std::thread::Builder::new()
            .name("forward".into())
            .stack_size(STACK)
            .spawn(move || forward_loop(&l, &lp, &s))?;
        lock(&self.shared.forwards).push((listener, t));
        Ok(())
    }
}

fn forward_loop(listener: &TcpListener, lp: &LoopbackPort, shared: &Arc<Shared>) {
    let reason = format!("allow-list: {}:{} (loopback port)", lp.host, lp.port);
    let carry = if shared.config.secrets.injects(&lp.host, lp.port) {
        Carry::Inject
    } else {
        Carry::Relay
    };
    loop {
        let conn = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok((client, _)) = conn else {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        };
        let _ = client.set_nodelay(true);
        if shared.active.load(Ordering::SeqCst) >= MAX_ACTIVE {
            // Closed at once: the client sees a reset, as from a full backlog.
            continue;
        }
        let id = shared.next_id();
        shared.active.fetch_add(1, Ordering::SeqCst);
        let (s, lp, reason) = (shared.clone(), lp.clone(), reason.clone());
        let spawned = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || {
                if let Ok(c) = client.try_clone() {
                    lock(&s.live).insert(id, vec![c]);
                }
                let Ok(upstream) = dial(&lp) else {
                    // The host's service is down: the client sees its connection closed, as
                    // it would see a refusal; the log counts the attempt.
                    s.record(&lp.host, lp.port, true, &reason);
                    s.finish(id);
                    return;
                };
                if let Ok(u) = upstream.try_clone() {
                    if let Some(v) = lock(&s.live).get_mut(&id) {
                        v.push(u);
                    }
                }
                match carry {
                    // Terminated, injected and logged like the proxy's own connections.
                    Carry::Inject => {
                        super::intercept::intercepted(
                            &s,
                            &client,
                            &upstream,
                            &lp.host,
                            lp.port,
                            Vec::new(),
                        );
                        let _ = client.shutdown(std::net::Shutdown::Both);
                        let _ = upstream.shutdown(std::net::Shutdown::Both);
                        s.finish(id);
                    }
                    Carry::Relay => {
                        let counters = s.record(&lp.host, lp.port, true, &reason);
                        super::relay::hand_off(&s, id, client, upstream, counters)
                    }
                }
            });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The host's side of a loopback port: the same address and port; for `localhost`, the
/// other loopback address when the first refuses (a service on `127.0.0.1` only, reached
/// inside as `::1`).
fn dial(lp: &LoopbackPort) -> std::io::Result<TcpStream> {
    let first = SocketAddr::new(lp.ip, lp.port);
    let r = TcpStream::connect_timeout(&first, super::CONNECT_TIMEOUT);
    let r = match (&r, &lp.host) {
        (Err(_), Host::Name(_)) => {
            let other: IpAddr = match lp.ip {
                IpAddr::V4(_) => Ipv6Addr::LOCALHOST.into(),
                IpAddr::V6(_) => Ipv4Addr::LOCALHOST.into(),
            };
            TcpStream::connect_timeout(&SocketAddr::new(other, lp.port), super::CONNECT_TIMEOUT)
        }
        _ => r,
    };
    if let Ok(s) = &r {
        let _ = s.set_nodelay(true);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(list: &[&str]) -> Vec<(String, IpAddr, u16, bool)> {
        loopback_ports(&AllowList::parse(list).unwrap())
            .into_iter()
            .map(|l| (l.host.to_string(), l.ip, l.port, l.optional))
            .collect()
    }

    #[test]
    fn loopback_entries_with_a_port_only() {
        let v4: IpAddr = Ipv4Addr::LOCALHOST.into();
        let v6: IpAddr = Ipv6Addr::LOCALHOST.into();
        assert_eq!(
            ports(&[
                "127.0.0.1:8787",
                "[::1]:5432",
                "localhost:11434",
                "127.0.0.1",
                "localhost",
                "example.com:8787",
                "10.0.0.1:80",
            ]),
            vec![
                ("127.0.0.1".into(), v4, 8787, false),
                ("[::1]".into(), v6, 5432, false),
                ("localhost".into(), v4, 11434, false),
                ("localhost".into(), v6, 11434, true),
            ]
        );
        // listed twice: one listener, and the IPv6 half is required once named as such
        assert_eq!(
            ports(&["localhost:9", "[::1]:9", "127.0.0.1:9"]),
            vec![
                ("localhost".into(), v4, 9, false),
                ("localhost".into(), v6, 9, false),
            ]
        );
    }

    #[test]
    fn the_proxy_port_cannot_be_listed() {
        let ok = AllowList::parse(&["127.0.0.1:8787", "example.com:3128"]).unwrap();
        assert!(check_loopback_ports(&ok).is_ok());
        let bad = AllowList::parse(&["localhost:3128"]).unwrap();
        let e = check_loopback_ports(&bad).unwrap_err();
        assert!(e.contains("localhost:3128"), "{e}");
    }
}
