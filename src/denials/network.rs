//! Network refusals: the proxy's refused connections (`--net filtered`) and the names the
//! sandbox's name service refused (`none` and `filtered`).

use super::{Kind, Patch, Refusal};
use crate::net::dns::{Refused, OVERFLOW};
use crate::net::proxy::Connection;
use crate::profile::NetMode;

/// The pattern `--allow-host` takes for `host:port`: the port only where it is not one of
/// the default ones (as the proxy's own advice says it).
fn pattern(host: &str, port: u16) -> String {
    if crate::net::allow::DEFAULT_PORTS.contains(&port) {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

/// The proxy's reasons that name a check no allow-list entry changes (a malformed or
/// ECH-fronted ClientHello, plain HTTP carrying secrets, a tunnel it could not check).
fn fixed_by_listing(reason: &str) -> bool {
    reason == "not on the allow-list" || reason.contains(" resolves to ")
}

/// One refusal per refused `host:port` of the proxy's log, then one per refused name.
pub fn refusals(net: NetMode, connections: &[Connection], dns: &[Refused]) -> Vec<Refusal> {
    let mut out = Vec::new();
    for c in connections.iter().filter(|c| !c.allowed) {
        // a name that does not resolve fails the same way outside
        if c.reason.contains("does not resolve") || c.reason.ends_with("has no address") {
            continue;
        }
        let host = crate::visible::text(&c.host);
        let what = format!("{host}:{}", c.port);
        let (fix, patch) = if fixed_by_listing(&c.reason) {
            // an address of a special range is reached only when listed as a literal: the
            // proxy's reason names the address
            let listed = match c.reason.split(" resolves to ").nth(1) {
                Some(rest) => rest.split(',').next().unwrap_or(&host).to_string(),
                None => host.clone(),
            };
            let p = pattern(&listed, c.port);
            (
                format!("--allow-host {p} (or [network] allow = {{ add = [\"{p}\"] }})"),
                Some(Patch::Host(p)),
            )
        } else {
            (format!("never: {}", crate::visible::text(&c.reason)), None)
        };
        out.push(Refusal {
            kind: Kind::Network,
            sub: "host".into(),
            what,
            rule: if c.reason == "not on the allow-list" {
                "not on [network] allow".into()
            } else {
                crate::visible::text(&c.reason)
            },
            fix,
            patch,
            count: c.count.max(1),
        });
    }
    for r in dns.iter().filter(|r| r.name != OVERFLOW) {
        let name = crate::visible::text(&r.name);
        let (rule, fix) = match net {
            NetMode::None => (
                "the network is off ([network] mode = \"none\")".to_string(),
                format!("--net filtered --allow-host {name} (or [network] mode = \"filtered\", allow = {{ add = [\"{name}\"] }})"),
            ),
            _ => (
                "not on [network] allow".to_string(),
                format!("--allow-host {name} (or [network] allow = {{ add = [\"{name}\"] }})"),
            ),
        };
        out.push(Refusal {
            kind: Kind::Network,
            sub: "dns".into(),
            what: name.clone(),
            rule,
            fix,
            patch: Some(Patch::Host(name)),
            count: r.count.max(1),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(host: &str, port: u16, allowed: bool, reason: &str) -> Connection {
        Connection {
            host: host.into(),
            port,
            allowed,
            reason: reason.into(),
            count: 2,
            bytes_up: 0,
            bytes_down: 0,
        }
    }

    #[test]
    fn refused_connections_and_names() {
        let c = [
            conn("ok.example", 443, true, "allowed by ok.example"),
            conn("evil.example", 443, false, "not on the allow-list"),
            conn("evil.example", 8443, false, "not on the allow-list"),
            conn(
                "meta.example",
                80,
                false,
                "meta.example resolves to 169.254.169.254, a link-local address (cloud metadata lives there)",
            ),
            conn("gone.example", 443, false, "gone.example does not resolve: x"),
            conn("ech.example", 443, false, "a malformed TLS ClientHello (x)"),
        ];
        let d = [
            Refused {
                name: "npm.example".into(),
                count: 3,
            },
            Refused {
                name: OVERFLOW.into(),
                count: 9,
            },
        ];
        let r = refusals(NetMode::Filtered, &c, &d);
        let lines: Vec<String> = r.iter().map(Refusal::line).collect();
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert_eq!(
            lines[0],
            "refused network host: evil.example:443 (2x): not on [network] allow; --allow-host evil.example (or [network] allow = { add = [\"evil.example\"] })"
        );
        assert_eq!(r[1].patch, Some(Patch::Host("evil.example:8443".into())));
        assert_eq!(r[2].patch, Some(Patch::Host("169.254.169.254".into())));
        assert!(r[3].fix.starts_with("never: a malformed"), "{}", r[3].fix);
        assert_eq!(r[3].patch, None);
        assert_eq!(r[4].sub, "dns");
        assert_eq!(r[4].count, 3);
        assert!(r[4].fix.starts_with("--allow-host npm.example"));
        let none = refusals(NetMode::None, &[], &d);
        assert!(none[0]
            .fix
            .starts_with("--net filtered --allow-host npm.example"));
    }
}
