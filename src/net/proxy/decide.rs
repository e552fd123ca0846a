//! Whether a host and port may be reached, and at which addresses: the allow-list, then one
//! resolution whose every address is checked.

use crate::net::allow::{on_host_network, special, AllowList, Host, HostNet};
use std::net::{SocketAddr, ToSocketAddrs};

/// A refusal: what rule, and how to change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub reason: String,
    pub fix: String,
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
        if crate::net::allow::DEFAULT_PORTS.contains(&port) {
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

pub(super) fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

pub(super) fn system_resolve(name: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok((name, port).to_socket_addrs()?.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
