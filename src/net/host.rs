//! The `Host` header of a request must name the host the request was allowed for: otherwise a
//! shared front end on the list (a CDN, a cloud load balancer) routes the request by the
//! header to a host that is not (domain fronting: `GET http://allowed.example/` with
//! `Host: metadata.google.internal`). One rule for plain HTTP through the proxy and for the
//! requests inside a terminated TLS connection. Pure code: never panics, whatever the bytes.

use crate::net::allow::Host;

/// Why a request's `Host` header is refused, and the HTTP status of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRefusal {
    /// 400 when the header is malformed or repeated, 403 when it names another host or port.
    pub status: u16,
    pub reason: String,
}

/// The host and port a `Host` header value names (RFC 9110 section 7.2: `uri-host [":"
/// port]`), or why it is malformed: empty, user information, a path, spaces, a port that is
/// not a number from 1 to 65535, a host that is neither a name nor an IP literal. Optional
/// whitespace around the value is allowed (it is not part of the field value).
pub fn parse_host_value(value: &[u8]) -> Result<(Host, Option<u16>), String> {
    let v = value.trim_ascii();
    let shown = || format!("{:?}", String::from_utf8_lossy(value));
    if v.is_empty() {
        return Err("the Host header is empty".into());
    }
    let Ok(s) = std::str::from_utf8(v) else {
        return Err(format!("the Host header {} is not ASCII", shown()));
    };
    if let Some(b) = s
        .bytes()
        .find(|&b| !b.is_ascii_graphic() || matches!(b, b'@' | b'/' | b'\\' | b'?' | b'#'))
    {
        let what = match b {
            b'@' => "user information",
            b'/' | b'\\' | b'?' | b'#' => "a path",
            b' ' | b'\t' => "spaces",
            _ => "bytes a host name cannot hold",
        };
        return Err(format!("the Host header {} has {what}", shown()));
    }
    let (h, p) = if s.starts_with('[') {
        match s.split_once(']') {
            Some((h, "")) => (&s[..h.len() + 1], None),
            Some((h, t)) => match t.strip_prefix(':') {
                Some(p) => (&s[..h.len() + 1], Some(p)),
                None => return Err(format!("the Host header {} is not HOST[:PORT]", shown())),
            },
            None => return Err(format!("the Host header {} is not HOST[:PORT]", shown())),
        }
    } else {
        match s.split_once(':') {
            // A bare IPv6 address without brackets is not a valid Host.
            Some((_, t)) if t.contains(':') => {
                return Err(format!(
                    "the Host header {} is not HOST[:PORT] (an IPv6 address goes in brackets)",
                    shown()
                ))
            }
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = match p {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => {
                return Err(format!(
                    "the Host header {} has a port that is not a number from 1 to 65535",
                    shown()
                ))
            }
        },
    };
    match Host::parse(h) {
        Some(host) => Ok((host, port)),
        None => Err(format!(
            "the Host header {} names neither a host name nor an IP address",
            shown()
        )),
    }
}

/// One `Host` header value against the host and port the request was allowed for: the same
/// host (names compared without case and without a trailing dot, IP literals as addresses; a
/// loopback address also as `localhost` or another loopback address)
/// and the same port, which may be left out when it is `default_port` (80 for `http`, 443 for
/// `https`). `Err` is the reason, for the body of the refusal and the line on stderr.
pub fn host_header_matches(
    value: &[u8],
    host: &Host,
    port: u16,
    default_port: u16,
) -> Result<(), String> {
    match check_value(value, host, port, default_port) {
        Ok(()) => Ok(()),
        Err(r) => Err(r.reason),
    }
}

fn check_value(value: &[u8], host: &Host, port: u16, default_port: u16) -> Result<(), HostRefusal> {
    let (named, named_port) = parse_host_value(value).map_err(|reason| HostRefusal {
        status: 400,
        reason,
    })?;
    if !same_host(&named, host) {
        return Err(HostRefusal {
            status: 403,
            reason: format!(
                "the Host header names {named}, not the host the request was allowed for ({host})"
            ),
        });
    }
    let named_port = named_port.unwrap_or(default_port);
    if named_port != port {
        return Err(HostRefusal {
            status: 403,
            reason: format!(
                "the Host header names port {named_port}, not the port the request was allowed \
                 for ({host}:{port})"
            ),
        });
    }
    Ok(())
}

/// Whether a `Host` header naming `named` names `host`. A loopback address also goes by
/// `localhost` and its other loopback forms (what a client inside writes for a local server
/// reached through a listed loopback port): no front end shared with other hosts is behind it.
pub fn same_host(named: &Host, host: &Host) -> bool {
    let local = |h: &Host| match h {
        Host::Ip(ip) => ip.is_loopback(),
        Host::Name(n) => n == "localhost",
    };
    named == host || (matches!(host, Host::Ip(ip) if ip.is_loopback()) && local(named))
}

/// Every `Host` header of a request (`values`: in order) against the host and port it was
/// allowed for: at most one (two are refused with 400, RFC 9112 section 3.2: a front end may
/// pick either), and that one as [`host_header_matches`]. None is accepted: the caller sends
/// the target's own.
pub fn check_host_headers<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
    host: &Host,
    port: u16,
    default_port: u16,
) -> Result<(), HostRefusal> {
    // Counted before any is checked: the answer must not depend on their order.
    let mut values = values.into_iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(()),
        (Some(v), None) => check_value(v, host, port, default_port),
        (Some(_), Some(_)) => Err(HostRefusal {
            status: 400,
            reason: "the request has more than one Host header".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> Host {
        Host::parse(n).unwrap()
    }

    #[test]
    fn the_same_host_passes() {
        let ex = name("example.com");
        for v in [
            &b"example.com"[..],
            b"EXAMPLE.com",
            b"example.com.",
            b"example.com:80",
            b" example.com:80\t",
        ] {
            assert_eq!(host_header_matches(v, &ex, 80, 80), Ok(()), "{v:?}");
        }
        assert_eq!(
            host_header_matches(b"example.com:8080", &ex, 8080, 80),
            Ok(())
        );
        let v6 = name("[::1]");
        assert_eq!(host_header_matches(b"[::1]", &v6, 80, 80), Ok(()));
        assert_eq!(host_header_matches(b"[0:0::1]:8443", &v6, 8443, 80), Ok(()));
        let v4 = name("127.0.0.1");
        assert_eq!(
            host_header_matches(b"127.0.0.1:3000", &v4, 3000, 80),
            Ok(())
        );
        // A loopback address by another of its names: nothing shared is behind it.
        for v in [&b"localhost:3000"[..], b"LOCALHOST.:3000", b"[::1]:3000"] {
            assert_eq!(host_header_matches(v, &v4, 3000, 80), Ok(()), "{v:?}");
        }
        assert_eq!(host_header_matches(b"localhost", &v6, 80, 80), Ok(()));
    }

    #[test]
    fn another_host_or_port_is_refused_with_403() {
        let ex = name("example.com");
        let e = check_value(b"metadata.google.internal", &ex, 80, 80).unwrap_err();
        assert_eq!(e.status, 403);
        assert_eq!(
            e.reason,
            "the Host header names metadata.google.internal, not the host the request was \
             allowed for (example.com)"
        );
        for (v, port) in [
            (&b"example.com:8080"[..], 80),
            (b"example.com", 8080),
            (b"example.com:80", 8080),
            (b"example.com.evil", 80),
            (b"sub.example.com", 80),
            (b"93.184.215.14", 80),
        ] {
            assert_eq!(
                check_value(v, &ex, port, 80).unwrap_err().status,
                403,
                "{v:?}"
            );
        }
        let v6 = name("[::1]");
        assert_eq!(check_value(b"[::2]", &v6, 80, 80).unwrap_err().status, 403);
        assert_eq!(
            check_value(b"localhost:81", &v6, 80, 80)
                .unwrap_err()
                .status,
            403
        );
        // A name is not its address, and localhost is no other host's name.
        let v4 = name("127.0.0.1");
        let lh = name("localhost");
        for (v, host) in [
            (&b"ex.com"[..], &v4),
            (b"127.0.0.1", &ex),
            (b"localhost", &ex),
            (b"127.0.0.1", &lh),
            (b"10.0.0.1", &v4),
        ] {
            assert_eq!(
                check_value(v, host, 80, 80).unwrap_err().status,
                403,
                "{v:?}"
            );
        }
    }

    #[test]
    fn malformed_values_are_refused_with_400() {
        let ex = name("example.com");
        for v in [
            &b""[..],
            b"   ",
            b"user@example.com",
            b"example.com@evil.com",
            b"example.com/path",
            b"example.com\\x",
            b"example.com?x",
            b"example.com#x",
            b"example .com",
            b"example.com example.com",
            b"example.com:",
            b"example.com:0",
            b"example.com:65536",
            b"example.com:+80",
            b"example.com:80:80",
            b"example.com\x00",
            b"ex\xc3\xa9.com",
            b"\xff",
            b"::1",
            b"[::1",
            b"[::1]x",
            b"[example.com]",
            b"[]",
            b"exa*mple.com",
            b"127.1",
            b".",
            b":80",
        ] {
            let e = check_value(v, &ex, 80, 80).unwrap_err();
            assert_eq!(
                e.status,
                400,
                "{:?}: {}",
                String::from_utf8_lossy(v),
                e.reason
            );
        }
    }

    #[test]
    fn exactly_one_host_header() {
        let ex = name("example.com");
        let one: [&[u8]; 1] = [b"example.com"];
        assert_eq!(check_host_headers(one, &ex, 80, 80), Ok(()));
        assert_eq!(check_host_headers([], &ex, 80, 80), Ok(()));
        let two: [&[u8]; 2] = [b"example.com", b"example.com"];
        assert_eq!(
            check_host_headers(two, &ex, 80, 80).unwrap_err().status,
            400
        );
        let two: [&[u8]; 2] = [b"example.com", b"metadata.google.internal"];
        assert_eq!(
            check_host_headers(two, &ex, 80, 80).unwrap_err().status,
            400
        );
        // Found by fuzzing: a first value naming another host answered 403 before the second
        // was seen; the answer to two headers must not depend on their order.
        let two: [&[u8]; 2] = [b"exam", b"metadata.googleamp7mrna$"];
        assert_eq!(
            check_host_headers(two, &ex, 80, 80).unwrap_err().status,
            400
        );
    }
}
