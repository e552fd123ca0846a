//! The allow-list of the egress proxy, and the classes of addresses it refuses.
//!
//! Syntax (DESIGN.md section 2): `api.example.com` (ports 443 and 80), `*.example.org`
//! (subdomains only, not `example.org` itself), `example.net:8443` (that port only),
//! `127.0.0.1:8787` or `[::1]:8787` (an IP literal, allowed only as written). A name never
//! matches an IP literal and an IP literal never matches a name.
//!
//! Pure code, parent side only.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The ports a pattern without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// An exact host name (lowercase, no trailing dot).
    Name(String),
    /// `*.suffix`: any name ending in `.suffix`.
    Subdomains(String),
    Ip(IpAddr),
}

/// One pattern of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// As written (for messages and the report).
    pub text: String,
    target: Target,
    /// `None`: [`DEFAULT_PORTS`].
    port: Option<u16>,
}

impl Rule {
    pub fn parse(pattern: &str) -> Result<Rule, String> {
        let bad = |why: &str| Err(format!("allow-list entry {pattern:?}: {why}"));
        let p = pattern.trim();
        if p.is_empty() {
            return bad("empty");
        }
        // `[v6]:port`, `[v6]`, a bare v6 literal, `host:port`, `host`.
        let (host, port) = if let Some(rest) = p.strip_prefix('[') {
            let Some((h, tail)) = rest.split_once(']') else {
                return bad("unclosed `[`");
            };
            match tail {
                "" => (h, None),
                t => match t.strip_prefix(':') {
                    Some(port) => (h, Some(port)),
                    None => return bad("expected `:PORT` after `]`"),
                },
            }
        } else if p.matches(':').count() > 1 {
            (p, None)
        } else {
            match p.split_once(':') {
                Some((h, port)) => (h, Some(port)),
                None => (p, None),
            }
        };
        let port = match port {
            None => None,
            Some(s) => match s.parse::<u16>() {
                Ok(n) if n > 0 && s.bytes().all(|b| b.is_ascii_digit()) => Some(n),
                _ => return bad("the port must be a number from 1 to 65535"),
            },
        };
        let target = if let Ok(ip) = host.parse::<IpAddr>() {
            Target::Ip(ip)
        } else if p.starts_with('[') {
            return bad("not an IPv6 address between `[` and `]`");
        } else if let Some(suffix) = host.strip_prefix("*.") {
            match normalize(suffix) {
                Some(s) if s.contains('.') || s == "localhost" => Target::Subdomains(s),
                Some(_) => return bad("`*.` needs a domain with at least two labels"),
                None => return bad("not a host name"),
            }
        } else if host.contains('*') {
            return bad("`*` is allowed only as a whole first label (`*.example.com`)");
        } else {
            match normalize(host) {
                Some(n) => Target::Name(n),
                None => return bad("not a host name, `*.domain` or IP literal"),
            }
        };
        Ok(Rule {
            text: pattern.to_string(),
            target,
            port,
        })
    }

    /// A loopback host with an explicit port (`127.0.0.1:P`, `[::1]:P`, `localhost:P`): the
    /// address (`None` for `localhost`, which is both) and the port.
    pub fn loopback_port(&self) -> Option<(Option<IpAddr>, u16)> {
        let port = self.port?;
        match &self.target {
            Target::Ip(ip) if ip.is_loopback() => Some((Some(*ip), port)),
            Target::Name(n) if n == "localhost" => Some((None, port)),
            _ => None,
        }
    }

    fn port_ok(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

/// A host name as compared: ASCII lowercase, one trailing dot removed; `None` when it is not a
/// plausible DNS name (letters, digits, `-`, `_`, dots between non-empty labels of at most 63
/// bytes, 253 in all). IP literals are not names.
pub fn normalize(host: &str) -> Option<String> {
    let h = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let ok = !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        && h.parse::<IpAddr>().is_err()
        // A numeric last label (`2130706433`, `127.1`, `0x7f.1`) makes the whole an IPv4
        // literal to inet_aton and URL parsers; no top-level domain is numeric.
        && !h.rsplit('.').next().is_some_and(numeric);
    ok.then_some(h)
}

fn numeric(label: &str) -> bool {
    let hex = label
        .strip_prefix("0x")
        .is_some_and(|r| r.bytes().all(|b| b.is_ascii_hexdigit()));
    hex || label.bytes().all(|b| b.is_ascii_digit())
}

/// What a request names: a host name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// A request's host (`[v6]` brackets allowed); `None` when it is neither a name nor an IP.
    pub fn parse(s: &str) -> Option<Host> {
        let inner = s.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        if let Some(ip) = inner.and_then(|i| i.parse::<Ipv6Addr>().ok()) {
            return Some(Host::Ip(IpAddr::V6(ip)));
        }
        if inner.is_none() {
            if let Ok(ip) = s.parse::<Ipv4Addr>() {
                return Some(Host::Ip(IpAddr::V4(ip)));
            }
        }
        normalize(s).map(Host::Name)
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    pub rules: Vec<Rule>,
}

impl AllowList {
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<AllowList, String> {
        let rules = patterns
            .iter()
            .map(|p| Rule::parse(p.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(AllowList { rules })
    }

    /// The rule that allows `host:port`, if one does.
    pub fn find(&self, host: &Host, port: u16) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            r.port_ok(port)
                && match (&r.target, host) {
                    (Target::Name(n), Host::Name(h)) => n == h,
                    (Target::Subdomains(s), Host::Name(h)) => h
                        .strip_suffix(s.as_str())
                        .is_some_and(|pre| pre.len() > 1 && pre.ends_with('.')),
                    (Target::Ip(a), Host::Ip(b)) => same_ip(*a, *b),
                    _ => false,
                }
        })
    }

    /// Whether a rule names `host`, on any port.
    pub fn names(&self, host: &Host) -> bool {
        self.rules.iter().any(|r| {
            let p = r.port.unwrap_or(DEFAULT_PORTS[0]);
            AllowList {
                rules: vec![r.clone()],
            }
            .find(host, p)
            .is_some()
        })
    }

    /// Whether `ip:port` is on the list as a literal: the only way a special address is
    /// reached.
    pub fn literal(&self, ip: IpAddr, port: u16) -> Option<&Rule> {
        self.find(&Host::Ip(ip), port)
    }
}

/// Equal addresses; an IPv4-mapped IPv6 address is never equal to its IPv4 address here (the
/// list names exactly what may be reached).
fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a == b
}

/// A network the host is attached to: one of its interfaces' addresses with its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNet {
    pub ip: IpAddr,
    pub prefix: u8,
    pub iface: String,
}

impl std::fmt::Display for HostNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} on {}", self.ip, self.prefix, self.iface)
    }
}

/// The networks of the host's own interfaces (loopback aside: [`special`] names it). The host
/// itself and its LAN are behind them whatever their range: a public /24 on the office
/// network, a documentation range on a test network (this project's VM has 192.0.2.2/24).
pub fn host_networks() -> std::io::Result<Vec<HostNet>> {
    let mut nets = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)? {
        let (Some(addr), Some(mask)) = (ifa.address, ifa.netmask) else {
            continue;
        };
        let (ip, prefix) =
            if let (Some(a), Some(m)) = (addr.as_sockaddr_in(), mask.as_sockaddr_in()) {
                (IpAddr::V4(a.ip()), u32::from(m.ip()).count_ones())
            } else if let (Some(a), Some(m)) = (addr.as_sockaddr_in6(), mask.as_sockaddr_in6()) {
                (IpAddr::V6(a.ip()), u128::from(m.ip()).count_ones())
            } else {
                continue;
            };
        if ip.is_loopback() {
            continue;
        }
        nets.push(HostNet {
            ip,
            prefix: prefix as u8,
            iface: ifa.interface_name,
        });
    }
    Ok(nets)
}

/// The host network `ip` is on, if any: the host's own address or a neighbour on its LAN.
pub fn on_host_network(ip: IpAddr, nets: &[HostNet]) -> Option<&HostNet> {
    nets.iter().find(|n| match (n.ip, ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(n.prefix.min(32)))
                .unwrap_or(0);
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(n.prefix.min(128)))
                .unwrap_or(0);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    })
}

/// Why an address is special (not a public unicast address), or `None` when it is public.
/// Every range of the IANA special-purpose registries that is not globally reachable, plus the
/// IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo): their
/// embedded address is what the kernel or a gateway would reach.
///
/// The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32,
/// 3fff::/20) are the one exception: they are assigned to no network, and test networks, this
/// project's own included, serve public names from them (its package registry's name resolves
/// into 203.0.113.0/24, so refusing them would refuse the registry). What such a network does
/// hide there, the host and its LAN (192.0.2.0/24 on this project's VM), is refused by where it
/// is rather than by its range: [`on_host_network`].
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "an unspecified (\"this network\", 0.0.0.0/8) address",
        (127, _, _) => "a loopback address",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "a private address",
        (100, 64..=127, _) => "a shared (carrier-grade NAT, 100.64.0.0/10) address",
        (169, 254, _) => "a link-local address (cloud metadata lives there)",
        (192, 0, 0) => "an IETF protocol assignment (192.0.0.0/24)",
        (192, 88, 99) => "a 6to4 relay anycast address",
        (198, 18..=19, _) => "a benchmarking address (198.18.0.0/15)",
        (224..=239, _, _) => "a multicast address",
        (240..=255, _, _) => "a reserved or broadcast address (240.0.0.0/4)",
        _ => return None,
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated): whatever the embedded
    // address is, the list must name it in its IPv4 form.
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return Some("an IPv4-mapped or IPv4-compatible IPv6 address");
    }
    let embedded = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    // NAT64 (64:ff9b::/96 well-known, 64:ff9b:1::/48 local use): the gateway reaches the
    // embedded IPv4 address.
    if s[0] == 0x64 && s[1] == 0xff9b {
        if s[2] == 1 {
            return Some("a local-use NAT64 address (64:ff9b:1::/48)");
        }
        return special_v4(embedded(s[6], s[7]))
            .map(|_| "a NAT64 address of a special IPv4 address");
    }
    // 6to4: 2002:AABB:CCDD::/48 is the IPv4 address AA.BB.CC.DD.
    if s[0] == 0x2002 {
        return special_v4(embedded(s[1], s[2]))
            .map(|_| "a 6to4 address of a special IPv4 address");
    }
    Some(match s[0] {
        0x2001 if s[1] == 0 => "a Teredo address (2001::/32)",
        0x2001 if s[1] < 0x200 => "an IETF protocol assignment (2001::/23)",
        0x100 if s[1..4] == [0, 0, 0] => "a discard-only address (100::/64)",
        x if x & 0xfe00 == 0xfc00 => "a unique local address (fc00::/7, private)",
        x if x & 0xffc0 == 0xfe80 => "a link-local address",
        x if x & 0xffc0 == 0xfec0 => "a site-local address (fec0::/10, deprecated)",
        x if x & 0xff00 == 0xff00 => "a multicast address",
        // Everything outside 2000::/3 is unassigned or special.
        x if x & 0xe000 != 0x2000 => "an address outside the global unicast range (2000::/3)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> AllowList {
        AllowList::parse(p).unwrap()
    }
    fn allows(l: &AllowList, host: &str, port: u16) -> bool {
        l.find(&Host::parse(host).unwrap(), port).is_some()
    }

    #[test]
    fn bare_names_mean_443_and_80() {
        let l = list(&["api.example.com"]);
        assert!(allows(&l, "api.example.com", 443));
        assert!(allows(&l, "api.example.com", 80));
        assert!(allows(&l, "API.Example.COM.", 443));
        assert!(!allows(&l, "api.example.com", 8443));
        assert!(!allows(&l, "x.api.example.com", 443));
        assert!(!allows(&l, "example.com", 443));
        assert!(!allows(&l, "api.example.com.evil.net", 443));
        assert!(!allows(&l, "evilapi.example.com", 443));
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let l = list(&["*.example.org"]);
        assert!(allows(&l, "a.example.org", 443));
        assert!(allows(&l, "a.b.example.org", 80));
        assert!(!allows(&l, "example.org", 443));
        assert_eq!(Host::parse(".example.org"), None);
        assert_eq!(Host::parse(".example.org"), None);
        assert!(!allows(&l, "a.example.org", 22));
        let l = list(&["*.example.org:8443"]);
        assert!(allows(&l, "a.example.org", 8443));
        assert!(!allows(&l, "a.example.org", 443));
    }

    #[test]
    fn ports_and_literals() {
        let l = list(&[
            "example.net:8443",
            "127.0.0.1:8787",
            "[::1]:9000",
            "10.0.0.1",
        ]);
        assert!(allows(&l, "example.net", 8443));
        assert!(!allows(&l, "example.net", 443));
        assert!(allows(&l, "127.0.0.1", 8787));
        assert!(!allows(&l, "127.0.0.1", 8788));
        assert!(!allows(&l, "127.0.0.2", 8787));
        assert!(allows(&l, "[::1]", 9000));
        assert!(!allows(&l, "[::ffff:127.0.0.1]", 8787));
        assert!(allows(&l, "10.0.0.1", 443));
        assert!(!allows(&l, "10.0.0.1", 22));
        // a name is not its address and an address is not a name
        assert!(!allows(&list(&["localhost"]), "127.0.0.1", 443));
        assert!(!allows(&list(&["127.0.0.1"]), "localhost", 443));
        assert!(l
            .literal("127.0.0.1".parse().unwrap(), 8787)
            .is_some_and(|r| r.text == "127.0.0.1:8787"));
        assert!(l.literal("127.0.0.1".parse().unwrap(), 443).is_none());
    }

    #[test]
    fn bad_patterns_are_refused() {
        for p in [
            "",
            "*",
            "*.com",
            "a.*.com",
            "ex*ample.com",
            "example.com:0",
            "example.com:65536",
            "example.com:+1",
            "example.com:",
            "exa mple.com",
            "http://example.com",
            "example.com/path",
            "[::1",
            "[example.com]:443",
            "-a.example.com",
            "a..b",
            "2130706433",
            "127.1",
            "0x7f.1",
        ] {
            assert!(Rule::parse(p).is_err(), "{p:?} should be refused");
        }
    }

    #[test]
    fn request_hosts() {
        assert_eq!(
            Host::parse("127.0.0.1"),
            Some(Host::Ip("127.0.0.1".parse().unwrap()))
        );
        assert_eq!(Host::parse("[::1]"), Some(Host::Ip("::1".parse().unwrap())));
        assert_eq!(Host::parse("::1"), None);
        assert_eq!(Host::parse("Ex.COM"), Some(Host::Name("ex.com".into())));
        for h in [
            "",
            "a b",
            "a/b",
            "a@b",
            "a%00",
            "127.1",
            "[127.0.0.1]",
            "a:b",
        ] {
            assert_eq!(Host::parse(h), None, "{h:?}");
        }
    }

    #[test]
    fn host_networks_are_matched_by_prefix() {
        let nets = vec![
            HostNet {
                ip: "192.0.2.2".parse().unwrap(),
                prefix: 24,
                iface: "eth0".into(),
            },
            HostNet {
                ip: "2001:db8:5::2".parse().unwrap(),
                prefix: 64,
                iface: "eth0".into(),
            },
            HostNet {
                ip: "203.0.113.7".parse().unwrap(),
                prefix: 32,
                iface: "tun0".into(),
            },
        ];
        for (a, on) in [
            ("192.0.2.2", true),
            ("192.0.2.1", true),
            ("192.0.2.255", true),
            ("192.0.3.1", false),
            ("203.0.113.7", true),
            ("203.0.113.80", false),
            ("2001:db8:5::1", true),
            ("2001:db8:5:0:ffff::9", true),
            ("2001:db8:6::1", false),
            ("::ffff:192.0.2.1", false), // mapped: refused by its own class
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(on_host_network(ip, &nets).is_some(), on, "{a}");
        }
        let zero = [HostNet {
            ip: "0.0.0.0".parse().unwrap(),
            prefix: 0,
            iface: "x".into(),
        }];
        assert!(on_host_network("8.8.8.8".parse().unwrap(), &zero).is_some());
        // The host this runs on: every non-loopback address is on a network of its own.
        for n in host_networks().unwrap() {
            assert!(!n.ip.is_loopback());
            assert_eq!(on_host_network(n.ip, std::slice::from_ref(&n)), Some(&n));
        }
    }

    #[test]
    fn address_classes() {
        for a in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.254",
            "169.254.169.254",
            "192.0.0.8",
            "198.18.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001::1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "100::1",
            "4000::1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(special(ip).is_some(), "{a} should be special");
        }
        for a in [
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.1.1",
            "192.169.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2a00:1450::1",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "2001:db8::1",
            "3fff::1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(special(ip), None, "{a} should be public");
        }
    }
}
