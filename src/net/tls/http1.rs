//! HTTP/1.1 request framing inside a terminated connection: where a request head ends, what
//! it names, how long its body is (Content-Length or chunked), and a scan of body bytes for
//! placeholders that no chunk or read boundary hides. Every input here comes from the
//! sandbox: sizes are bounded, nothing panics, anything ambiguous (two lengths, a length
//! beside chunked, a bare LF in chunk framing) is an error rather than a guess that a server
//! behind might make differently (request smuggling).

use crate::net::allow::Host;
use crate::net::host::{host_header_matches, same_host};
use crate::net::secret::Secrets;

/// Largest request head (request line and headers) inside a terminated connection.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most headers in one request head.
pub const MAX_HEADERS: usize = 128;
/// Longest chunk-size line (with extensions), and longest trailer section.
pub const MAX_CHUNK_LINE: usize = 4096;

/// How the body of a request is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Bytes of the head, the blank line included.
    pub len: usize,
    pub method: String,
    pub target: String,
    /// The `Host` header's value.
    pub host: Option<String>,
    pub body: Body,
    /// An `Upgrade:` request (WebSocket and the like): after it the bytes are no longer HTTP.
    pub upgrade: bool,
}

/// The request head at the start of `buf`: `Ok(None)` until it is complete. Errors are the
/// reason of a 400 answer.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD => n,
        Ok(httparse::Status::Complete(_)) => {
            return Err(format!("request head larger than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(format!("request head larger than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed request: {e}")),
    };
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Err("malformed request".into());
    };
    let mut host = None;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut upgrade = false;
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| format!("the {} header is not text", h.name))?
            .trim();
        if h.name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Err("two Host headers".into());
            }
            host = Some(value.to_string());
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = if !value.is_empty()
                && value.len() <= 19
                && value.bytes().all(|b| b.is_ascii_digit())
            {
                value.parse::<u64>().ok()
            } else {
                None
            };
            let Some(n) = n else {
                return Err(format!("Content-Length {value:?} is not a length"));
            };
            if length.is_some_and(|l| l != n) {
                return Err("two different Content-Length headers".into());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Only `chunked`, once, last: anything else has no length this proxy can check.
            if chunked || !value.eq_ignore_ascii_case("chunked") {
                return Err(format!(
                    "Transfer-Encoding {value:?}: only a single \"chunked\" is accepted"
                ));
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("upgrade") {
            upgrade = true;
        }
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err("CONNECT inside a tunnel is refused".into());
    }
    let body = match (length, chunked) {
        (Some(_), true) => return Err("both Content-Length and chunked".into()),
        (Some(0), false) | (None, false) => Body::None,
        (Some(n), false) => Body::Length(n),
        (None, true) => Body::Chunked,
    };
    Ok(Some(Head {
        len,
        method: method.to_string(),
        target: target.to_string(),
        host,
        body,
        upgrade,
    }))
}

/// A request head (complete, as [`parse_head`] accepted it) rebuilt to go to a host that
/// receives a secret: its answer must come back in a form the proxy can scan for the value.
/// So it asks for `Accept-Encoding: identity` in place of whatever the client asked, and
/// drops what would let the server pick another coding: `TE` (a transfer coding such as
/// gzip; `TE: trailers` alone stays) and `Sec-WebSocket-Extensions` (permessage-deflate).
/// Lines end in CRLF. `None` if `head` does not parse.
pub fn ask_identity(head: &[u8]) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(head) else {
        return None;
    };
    let (method, target, version) = (req.method?, req.path?, req.version?);
    let mut out = Vec::with_capacity(head.len() + 32);
    out.extend_from_slice(format!("{method} {target} HTTP/1.{version}\r\n").as_bytes());
    for h in req.headers.iter() {
        let name = h.name;
        let drop = name.eq_ignore_ascii_case("accept-encoding")
            || name.eq_ignore_ascii_case("sec-websocket-extensions")
            || (name.eq_ignore_ascii_case("te")
                && !h.value.trim_ascii().eq_ignore_ascii_case(b"trailers"));
        if drop {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Accept-Encoding: identity\r\n\r\n");
    Some(out)
}

/// `HOST[:PORT]` as a request names it; `None` when it is neither.
pub fn authority(a: &str) -> Option<(Host, Option<u16>)> {
    let (h, p) = match a.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (h.starts_with('[') || !h.contains(':')) => {
            (h, Some(p))
        }
        _ => (a, None),
    };
    let port = match p {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().ok().filter(|&n| n > 0)?)
        }
        Some(_) => return None,
    };
    Some((Host::parse(h)?, port))
}

/// Whether a request sent on a connection allowed for `host:port` names that host: its
/// `Host` header and an absolute-form target (`GET https://host/...`) must name it and its
/// port (left out: the scheme's default, `default_port` for the header), else a server behind a shared front end would route it to
/// whatever the request names (domain fronting). The error is the reason of a 403.
pub fn check_host(
    target: &str,
    host_header: Option<&str>,
    host: &Host,
    port: u16,
    default_port: u16,
) -> Result<(), String> {
    let same = |what: &str, a: &str, default: u16| -> Result<(), String> {
        match authority(a) {
            Some((h, p)) if same_host(&h, host) && p.unwrap_or(default) == port => Ok(()),
            _ => Err(format!(
                "the request's {what} names {a:?}, but the connection was allowed for {host}:{port}"
            )),
        }
    };
    if let Some(h) = host_header {
        host_header_matches(h.as_bytes(), host, port, default_port)?;
    }
    if target.starts_with('/') || target == "*" {
        return Ok(());
    }
    let lower = target
        .get(..8)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let (rest, default) = if lower.starts_with("http://") {
        (&target[7..], 80)
    } else if lower.starts_with("https://") {
        (&target[8..], 443)
    } else {
        return Err(format!(
            "the request target {target:?} is neither a path nor a URL"
        ));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = &rest[..end];
    if auth.contains('@') {
        return Err("a URL with user information is refused".into());
    }
    same("URL", auth, default)
}

/// The decoder of a chunked body: which bytes of the stream still belong to the body, and
/// which of them are data (handed to a callback, for the scan).
#[derive(Debug, Clone, Default)]
pub struct Chunked {
    state: State,
    /// Bytes of the current size line, or of the trailers.
    line: usize,
    size: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk size.
    #[default]
    Size,
    /// After the digits: spaces, an extension, until CR.
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final blank line).
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
    Done,
}

impl Chunked {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consume the body's bytes at the start of `buf` (up to its end, or to the end of the
    /// body): how many. Chunk data and trailer lines go to `data` (both can carry a
    /// placeholder), each as a slice of `buf` in order (what lies between is framing: the
    /// answers' scan puts it back where it was), a trailer line without its CR.
    pub fn advance(&mut self, buf: &[u8], data: &mut dyn FnMut(&[u8])) -> Result<usize, String> {
        let mut i = 0;
        while i < buf.len() && self.state != State::Done {
            let b = buf[i];
            match self.state {
                State::Data => {
                    let n = (buf.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    data(&buf[i..i + n]);
                    self.size -= n as u64;
                    i += n;
                    if self.size == 0 {
                        self.state = State::DataCr;
                    }
                    continue;
                }
                State::Size => {
                    self.bump()?;
                    match hex(b) {
                        Some(d) => {
                            if self.line > 15 {
                                return Err("chunk size too large".into());
                            }
                            self.size = self.size * 16 + u64::from(d);
                        }
                        None if self.line == 1 => return Err("chunk size missing".into()),
                        None if b == b'\r' => self.state = State::SizeLf,
                        None if b == b';' || b == b' ' || b == b'\t' => self.state = State::Ext,
                        None => return Err("malformed chunk size".into()),
                    }
                }
                State::Ext => {
                    self.bump()?;
                    match b {
                        b'\r' => self.state = State::SizeLf,
                        b'\n' => return Err("bare LF in chunk framing".into()),
                        _ => {}
                    }
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err("CR without LF in chunk framing".into());
                    }
                    self.line = 0;
                    self.state = if self.size == 0 {
                        State::TrailerStart
                    } else {
                        State::Data
                    };
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err("chunk data longer than its size".into());
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err("CR without LF in chunk framing".into());
                    }
                    self.state = State::Size;
                }
                State::TrailerStart => {
                    if b == b'\r' {
                        self.state = State::EndLf;
                    } else {
                        self.trailer(&buf[i..=i], data)?;
                        self.state = State::TrailerLine;
                    }
                }
                State::TrailerLine => {
                    if b == b'\r' {
                        self.state = State::TrailerLf;
                    } else {
                        self.trailer(&buf[i..=i], data)?;
                    }
                }
                State::TrailerLf => {
                    if b != b'\n' {
                        return Err("CR without LF in a trailer".into());
                    }
                    data(&buf[i..=i]);
                    self.state = State::TrailerStart;
                }
                State::EndLf => {
                    if b != b'\n' {
                        return Err("CR without LF after the trailers".into());
                    }
                    self.state = State::Done;
                }
                State::Done => {}
            }
            i += 1;
        }
        Ok(i)
    }

    fn bump(&mut self) -> Result<(), String> {
        self.line += 1;
        if self.line > MAX_CHUNK_LINE {
            return Err(format!(
                "a chunk-size line longer than {MAX_CHUNK_LINE} bytes"
            ));
        }
        Ok(())
    }

    /// One byte of a trailer line (`byte`, a slice of the input).
    fn trailer(&mut self, byte: &[u8], data: &mut dyn FnMut(&[u8])) -> Result<(), String> {
        if byte == b"\n" {
            return Err("bare LF in a trailer".into());
        }
        self.line += 1;
        if self.line > MAX_CHUNK_LINE {
            return Err(format!("trailers longer than {MAX_CHUNK_LINE} bytes"));
        }
        data(byte);
        Ok(())
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A scan of a stream for any secret's placeholder: it keeps the last `longest - 1` bytes of
/// what it saw, so a placeholder split across reads or chunks is found all the same.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    tail: Vec<u8>,
}

impl Scan {
    /// The index of the first secret whose placeholder ends in `data` (possibly begun in
    /// what came before).
    pub fn feed(&mut self, secrets: &Secrets, data: &[u8]) -> Option<usize> {
        let keep = secrets.longest().saturating_sub(1);
        if keep == 0 && secrets.is_empty() {
            return None;
        }
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(data);
        let found = secrets.find(&window).map(|(i, _)| i);
        let from = window.len().saturating_sub(keep);
        window.drain(..from);
        self.tail = window;
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_for_identity() {
        let h = b"GET /x HTTP/1.1\nHost: a.com\r\nAccept-Encoding: gzip, br\r\naccept-encoding: zstd\r\nTE: gzip\r\nSec-WebSocket-Extensions: permessage-deflate\r\nX-Key: k\r\n\r\n";
        let out = String::from_utf8(ask_identity(h).unwrap()).unwrap();
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: a.com\r\nX-Key: k\r\nAccept-Encoding: identity\r\n\r\n"
        );
        let out = ask_identity(b"POST / HTTP/1.0\r\nte: trailers\r\n\r\n").unwrap();
        assert_eq!(
            out,
            b"POST / HTTP/1.0\r\nte: trailers\r\nAccept-Encoding: identity\r\n\r\n"
        );
        assert!(ask_identity(b"GET / HTTP/1.1\r\n").is_none());
    }

    #[test]
    fn heads() {
        let h = parse_head(b"POST /v1 HTTP/1.1\r\nHost: a.com\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.len, h.body, h.host.as_deref()),
            (53, Body::Length(5), Some("a.com"))
        );
        let h = parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.body, Body::Chunked);
        let h =
            parse_head(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(h.upgrade && h.body == Body::None);
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a").unwrap(), None);
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"CONNECT a.com:443 HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01",
        ] {
            assert!(
                parse_head(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD + 1, b'a');
        assert!(parse_head(&big).is_err());
    }

    #[test]
    fn hosts() {
        let h = Host::Name("api.a.com".into());
        assert!(check_host("/v1", Some("api.a.com"), &h, 443, 443).is_ok());
        assert!(check_host("/v1", Some("API.a.com:443"), &h, 443, 443).is_ok());
        assert!(check_host("/v1", None, &h, 443, 443).is_ok());
        assert!(check_host("https://api.a.com/v1", None, &h, 443, 443).is_ok());
        assert!(check_host("*", Some("api.a.com"), &h, 443, 443).is_ok());
        for (t, hh) in [
            ("/v1", Some("evil.com")),
            ("/v1", Some("api.a.com:8443")),
            ("/v1", Some("api.a.com.evil.com")),
            ("https://evil.com/v1", Some("api.a.com")),
            ("http://evil.com", None),
            ("https://api.a.com@evil.com/", None),
            ("evil.com:443", None),
            ("/v1", Some("")),
            ("http://api.a.com/v1", None),
        ] {
            let e = check_host(t, hh, &h, 443, 443).unwrap_err();
            assert!(!e.is_empty());
        }
        // a port left out is the default one, which must be the connection's
        let h8 = Host::Name("api.a.com".into());
        assert!(check_host("/", Some("api.a.com"), &h8, 8443, 443).is_err());
        assert!(check_host("https://api.a.com/", None, &h8, 8443, 443).is_err());
        assert!(check_host(
            "https://api.a.com:8443/",
            Some("api.a.com:8443"),
            &h8,
            8443,
            443
        )
        .is_ok());
        let ip = Host::Ip("127.0.0.1".parse().unwrap());
        assert!(check_host("/", Some("127.0.0.1:8787"), &ip, 8787, 80).is_ok());
        assert!(check_host("/", Some("localhost:8787"), &ip, 8787, 80).is_ok());
        assert!(check_host("/", Some("[::1]:8787"), &ip, 8787, 80).is_ok());
        assert!(check_host("/", Some("evil.com:8787"), &ip, 8787, 80).is_err());
        assert!(check_host("/", Some("localhost:8788"), &ip, 8787, 80).is_err());
        let name = Host::Name("localhost".into());
        assert!(check_host("/", Some("127.0.0.1:8787"), &name, 8787, 80).is_err());
    }

    fn dechunk(parts: &[&[u8]]) -> Result<(Vec<u8>, usize, bool), String> {
        let mut c = Chunked::default();
        let mut out = Vec::new();
        let mut used = 0;
        for p in parts {
            used += c.advance(p, &mut |d| out.extend_from_slice(d))?;
        }
        Ok((out, used, c.is_done()))
    }

    #[test]
    fn chunked_bodies() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (data, used, done) = dechunk(&[body]).unwrap();
        assert_eq!(data, b"hello worldX-T: 1\n");
        assert_eq!((used, done), (body.len() - 4, true));
        // byte by byte, the same
        let parts: Vec<&[u8]> = body[..body.len() - 4].chunks(1).collect();
        assert_eq!(dechunk(&parts).unwrap().0, b"hello worldX-T: 1\n");
        assert!(dechunk(&[b"0\r\n\r\n"]).unwrap().2);
        for bad in [
            &b"\r\n"[..],
            b"5\nhello",
            b"5\r\nhelloX\r\n",
            b"fffffffffffffffff\r\n",
            b"g\r\n",
            b"0\r\nX\nY\r\n\r\n",
        ] {
            assert!(
                dechunk(&[bad]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = vec![b'0'; MAX_CHUNK_LINE + 1];
        assert!(dechunk(&[&long]).is_err());
        let mut ext = b"1;".to_vec();
        ext.resize(MAX_CHUNK_LINE + 10, b'x');
        assert!(dechunk(&[&ext]).is_err());
    }

    #[test]
    fn scans_across_boundaries() {
        let s = crate::net::secret::Secret::new(
            "A".into(),
            vec!["a.com".into()],
            b"sk-PLACEHOLDER".to_vec(),
            b"sk-realvalue00",
        )
        .unwrap();
        let secrets = Secrets { list: vec![s] };
        let mut scan = Scan::default();
        assert_eq!(scan.feed(&secrets, b"xxxx sk-PLACE"), None);
        assert_eq!(scan.feed(&secrets, b"HOLDER yy"), Some(0));
        let mut scan = Scan::default();
        for b in b"..sk-PLACEHOLDER".chunks(1).take(15) {
            assert_eq!(scan.feed(&secrets, b), None);
        }
        assert_eq!(scan.feed(&secrets, b"R"), Some(0));
    }

    /// Fuzz-style: random and mutated input never panics the parsers, and what they accept
    /// stays inside the input.
    #[test]
    fn parsers_never_panic() {
        use proptest::prelude::*;
        let cfg = proptest::test_runner::Config {
            cases: 3000,
            ..Default::default()
        };
        let mut runner = proptest::test_runner::TestRunner::new(cfg);
        let seed = b"POST https://a.com/x HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nT: x\r\n\r\n";
        runner
            .run(
                &(
                    proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
                    any::<usize>(),
                ),
                |(flips, cut)| {
                    let mut b = seed.to_vec();
                    for (i, v) in flips {
                        let i = i % b.len();
                        b[i] = v;
                    }
                    let b = &b[..cut % (b.len() + 1)];
                    if let Ok(Some(h)) = parse_head(b) {
                        assert!(h.len <= b.len());
                        let _ = check_host(
                            &h.target,
                            h.host.as_deref(),
                            &Host::Name("a.com".into()),
                            443,
                            443,
                        );
                        let mut c = Chunked::default();
                        if let Ok(n) = c.advance(&b[h.len..], &mut |_| {}) {
                            assert!(n <= b.len() - h.len);
                        }
                    }
                    let mut c = Chunked::default();
                    if let Ok(n) = c.advance(b, &mut |d| assert!(d.len() <= b.len())) {
                        assert!(n <= b.len());
                    }
                    Ok(())
                },
            )
            .unwrap();
    }
}
