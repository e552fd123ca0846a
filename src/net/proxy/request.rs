//! The request head the sandbox sends the proxy: HTTP CONNECT or absolute-form plain HTTP,
//! parsed with `httparse` and checked before anything is resolved.

use super::MAX_HEAD;
use crate::net::allow::Host;
use crate::net::host::{check_host_headers, HostRefusal};

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
    /// Plain HTTP: why its `Host` header does not name the URL's host and port (or is
    /// malformed, or repeated); the request must be refused ([`crate::net::host`]).
    pub host_refusal: Option<HostRefusal>,
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
            host_refusal: None,
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
    let host_values = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host_refusal = check_host_headers(host_values.map(|h| h.value), &host, port, 80).err();
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
        host_refusal,
    }))
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
    fn the_host_header_of_plain_http_is_checked() {
        let status = |b: &[u8]| ok(b).host_refusal.map(|r| r.status);
        assert_eq!(
            status(b"GET http://a.com/ HTTP/1.1\r\nHost: A.com\r\n\r\n"),
            None
        );
        assert_eq!(status(b"GET http://a.com/ HTTP/1.1\r\n\r\n"), None);
        assert_eq!(
            status(b"GET http://a.com:81/ HTTP/1.1\r\nHost: a.com:81\r\n\r\n"),
            None
        );
        assert_eq!(
            status(b"GET http://[::1]/ HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"),
            None
        );
        let r = ok(b"GET http://a.com/ HTTP/1.1\r\nHost: metadata.google.internal\r\n\r\n");
        let r = r.host_refusal.unwrap();
        assert_eq!(r.status, 403);
        assert!(
            r.reason.contains("metadata.google.internal"),
            "{}",
            r.reason
        );
        for b in [
            &b"GET http://a.com:81/ HTTP/1.1\r\nHost: a.com\r\n\r\n"[..],
            b"GET http://a.com/ HTTP/1.1\r\nHost: a.com:81\r\n\r\n",
            b"GET http://[::1]/ HTTP/1.1\r\nHost: [::2]\r\n\r\n",
        ] {
            assert_eq!(status(b), Some(403), "{}", String::from_utf8_lossy(b));
        }
        for b in [
            &b"GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nhost: b.com\r\n\r\n"[..],
            b"GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nHost: a.com\r\n\r\n",
            b"GET http://a.com/ HTTP/1.1\r\nHost:\r\n\r\n",
            b"GET http://a.com/ HTTP/1.1\r\nHost: u@a.com\r\n\r\n",
        ] {
            assert_eq!(status(b), Some(400), "{}", String::from_utf8_lossy(b));
        }
        // A tunnel's Host header says nothing: the ClientHello is checked instead.
        assert_eq!(
            status(b"CONNECT a.com:443 HTTP/1.1\r\nHost: b.com\r\n\r\n"),
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
}
