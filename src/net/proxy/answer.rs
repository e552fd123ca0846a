//! The answers of a host a secret is listed for, on their way back to the sandbox: every path
//! such an answer takes (terminated TLS, a listed loopback port, plain HTTP through the proxy)
//! passes it through one [`Answers`], which undoes the HTTP/1.1 framing before it looks, so a
//! value the server echoes becomes its placeholder however the answer is cut up.
//!
//! What passes, by name; anything else cuts the connection with one line:
//! - a status line and headers (their bytes are scanned too: an echo in a header);
//! - a body framed by `Content-Length`, by `Transfer-Encoding: chunked` alone (chunk-size
//!   lines and extensions are framing; chunk data and trailers are scanned as one stream, so
//!   a chunk boundary inside a value hides nothing), or by the end of the connection; none
//!   after a `HEAD` request, a 1xx, 204 or 304;
//! - `Content-Encoding` absent or `identity` (the proxy asks for identity: a compressed body
//!   would hide the value from the scan);
//! - after a `101 Switching Protocols` to `websocket` without extensions, WebSocket frames
//!   (RFC 6455) unmasked and without reserved bits: frame headers are framing, payloads are
//!   scanned as one stream, so a value split across frames is found too.
//!
//! The scan replaces a value by its placeholder, of the same length: the framing that goes to
//! the client is the server's own, byte for byte, less chunk extensions (not scanned, so they
//! do not pass: a size line goes without its extension). Framing bytes wait in a queue, at the place
//! in the scanned stream where they came, while the scan holds back the start of a possible
//! value ([`Unreflect`]).

use super::reflect::Unreflect;
use crate::net::secret::Secrets;
use crate::net::tls::http1::{Chunked, MAX_HEAD, MAX_HEADERS};
use std::collections::VecDeque;

/// Why an answer cannot go on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Cut {
    /// The answer is in a form the scan does not read (the reason, for the stderr line).
    Unscanned(String),
    /// A value of secret `i` began in bytes that already went (see [`Unreflect`]).
    Value(usize),
}

/// What a request means for its answer's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Head,
    Upgrade,
    Other,
}

/// Where the answer stream stands.
enum State {
    /// In a status line and headers: the bytes so far.
    Head(Vec<u8>),
    Length(u64),
    Chunked(Chunked),
    /// A body that ends with the connection.
    Close,
    /// After `101 Switching Protocols` to WebSocket.
    WebSocket(Frame),
}

/// Where a WebSocket stream stands: in a frame header (its bytes so far), or in a payload
/// (bytes left).
enum Frame {
    Header(Vec<u8>),
    Payload(u64),
}

/// The answers of one connection.
pub(super) struct Answers {
    state: State,
    /// One entry per request sent whose final answer has not begun: a `HEAD` has an answer
    /// without a body whatever its headers say; after an `Upgrade:` request the client's
    /// bytes are no longer read as requests.
    asked: VecDeque<Asked>,
    /// The answer to an `Upgrade:` request was no 101: the requests after it were not read
    /// (see `terminate`), so no answer after this one can be framed.
    last: bool,
    unreflect: Unreflect,
    /// Framing bytes, each run after how many scanned bytes it goes.
    frames: VecDeque<(u64, Vec<u8>)>,
    /// Scanned bytes fed to `unreflect`, and given back by it.
    fed: u64,
    given: u64,
    /// In a chunk extension, which is dropped (it is not scanned, so it does not pass).
    in_ext: bool,
}

impl Default for Answers {
    fn default() -> Answers {
        Answers {
            state: State::Head(Vec::new()),
            asked: VecDeque::new(),
            last: false,
            unreflect: Unreflect::default(),
            frames: VecDeque::new(),
            fed: 0,
            given: 0,
            in_ext: false,
        }
    }
}

impl Answers {
    /// A request went to the server: its answer is the next one (in order, HTTP/1.1).
    pub(super) fn asked(&mut self, method: &str, upgrade: bool) {
        self.asked.push_back(if upgrade {
            Asked::Upgrade
        } else if method.eq_ignore_ascii_case("HEAD") {
            Asked::Head
        } else {
            Asked::Other
        });
    }

    /// Bytes the client may have now, of the server's `data` read after what came before.
    pub(super) fn feed(&mut self, secrets: &Secrets, data: &[u8]) -> Result<Vec<u8>, Cut> {
        // The common read, a download's: body bytes only, no framing waiting. Scanned as they
        // are, without a copy (the same bytes the framing below would give the scan).
        if self.frames.is_empty() && self.body_only(data.len()) {
            let out = self.unreflect.feed(secrets, data).map_err(Cut::Value)?;
            self.fed += data.len() as u64;
            self.given += out.len() as u64;
            return Ok(out);
        }
        let mut scanned = Vec::with_capacity(data.len());
        let mut i = 0;
        while i < data.len() {
            i += self.step(&data[i..], &mut scanned)?;
        }
        let out = self.unreflect.feed(secrets, &scanned).map_err(Cut::Value)?;
        self.fed += scanned.len() as u64;
        Ok(self.assemble(out))
    }

    /// Whether the next `n` bytes are all body (a body that ends with the connection, or
    /// `n` or more bytes of a `Content-Length` one), taken as such.
    fn body_only(&mut self, n: usize) -> bool {
        match &mut self.state {
            State::Close => true,
            State::Length(left) if *left >= n as u64 && n > 0 => {
                *left -= n as u64;
                if *left == 0 {
                    self.state = State::Head(Vec::new());
                }
                true
            }
            _ => false,
        }
    }

    /// The server's end: whatever was held goes (it was no value), framing included.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        let rest = self.unreflect.flush();
        let mut out = self.assemble(rest);
        for (_, f) in self.frames.drain(..) {
            out.extend_from_slice(&f);
        }
        out
    }

    /// Whether bytes wait for more of the answer.
    pub(super) fn holds(&self) -> bool {
        self.unreflect.holds() || !self.frames.is_empty()
    }

    /// Frame the start of `data`: how many bytes were taken; the scanned ones are appended
    /// to `scanned`, the framing queued.
    fn step(&mut self, data: &[u8], scanned: &mut Vec<u8>) -> Result<usize, Cut> {
        match &mut self.state {
            State::Head(_) if self.last => Err(Cut::Unscanned(
                "it answered after refusing a protocol switch, past which the proxy does not \
                 read requests (only the answer to that request passes)"
                    .into(),
            )),
            State::Head(h) => {
                let before = h.len();
                let take = data.len().min(MAX_HEAD + 1 - before);
                h.extend_from_slice(&data[..take]);
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut resp = httparse::Response::new(&mut headers);
                let (used, complete) = match resp.parse(h) {
                    Ok(httparse::Status::Complete(n)) => (n.saturating_sub(before), true),
                    Ok(httparse::Status::Partial) if h.len() <= MAX_HEAD => (take, false),
                    Ok(httparse::Status::Partial) => {
                        return Err(Cut::Unscanned(format!(
                            "its answer's head is larger than {MAX_HEAD} bytes"
                        )))
                    }
                    Err(e) => {
                        return Err(Cut::Unscanned(format!("its answer is not HTTP/1.1 ({e})")))
                    }
                };
                scanned.extend_from_slice(&data[..used]);
                if complete {
                    // the body, as the head says
                    let next = body_of(&resp, &mut self.asked, &mut self.last)?;
                    self.state = next;
                }
                Ok(used)
            }
            State::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                scanned.extend_from_slice(&data[..n]);
                *left -= n as u64;
                if *left == 0 {
                    self.state = State::Head(Vec::new());
                }
                Ok(n)
            }
            State::Chunked(c) => {
                let base = data.as_ptr() as usize;
                let mut spans = Vec::new();
                let n = c
                    .advance(data, &mut |d| {
                        spans.push((d.as_ptr() as usize - base, d.len()));
                    })
                    .map_err(|e| {
                        Cut::Unscanned(format!("its chunked answer is malformed ({e})"))
                    })?;
                let done = c.is_done();
                let mut at = 0;
                for (start, len) in spans {
                    if start > at {
                        self.chunk_frame(scanned.len(), &data[at..start]);
                    }
                    scanned.extend_from_slice(&data[start..start + len]);
                    at = start + len;
                }
                if n > at {
                    self.chunk_frame(scanned.len(), &data[at..n]);
                }
                if done {
                    self.state = State::Head(Vec::new());
                }
                Ok(n)
            }
            State::Close => {
                scanned.extend_from_slice(data);
                Ok(data.len())
            }
            State::WebSocket(Frame::Payload(left)) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                scanned.extend_from_slice(&data[..n]);
                *left -= n as u64;
                if *left == 0 {
                    self.state = State::WebSocket(Frame::Header(Vec::new()));
                }
                Ok(n)
            }
            State::WebSocket(Frame::Header(h)) => {
                // one byte at a time: a header is 2 to 10 bytes (no mask from a server)
                h.push(data[0]);
                let next = match ws_header(h)? {
                    None => None,
                    Some(0) => Some(Frame::Header(Vec::new())),
                    Some(n) => Some(Frame::Payload(n)),
                };
                if let Some(next) = next {
                    let f = std::mem::take(h);
                    self.state = State::WebSocket(next);
                    self.frame(scanned.len(), &f);
                }
                Ok(1)
            }
        }
    }

    /// Chunk framing after `at` scanned bytes: sizes and line ends pass, extensions (from
    /// `;` or the whitespace before it to the end of the line) are dropped, since the scan
    /// does not read them.
    fn chunk_frame(&mut self, at: usize, bytes: &[u8]) {
        let mut kept = Vec::with_capacity(bytes.len());
        for &b in bytes {
            match b {
                b';' | b' ' | b'\t' => self.in_ext = true,
                b'\r' => {
                    self.in_ext = false;
                    kept.push(b);
                }
                _ if self.in_ext => {}
                _ => kept.push(b),
            }
        }
        self.frame(at, &kept);
    }

    /// Framing bytes after `at` scanned bytes of this read.
    fn frame(&mut self, at: usize, bytes: &[u8]) {
        let pos = self.fed + at as u64;
        match self.frames.back_mut() {
            Some((p, f)) if *p == pos => f.extend_from_slice(bytes),
            _ => self.frames.push_back((pos, bytes.to_vec())),
        }
    }

    /// The bytes for the client: `out` (scanned bytes the scan gave back), with the framing
    /// put back where it came.
    fn assemble(&mut self, out: Vec<u8>) -> Vec<u8> {
        if self.frames.is_empty() {
            self.given += out.len() as u64;
            return out;
        }
        let mut v = Vec::with_capacity(out.len() + 64);
        let mut i = 0;
        loop {
            while let Some((p, _)) = self.frames.front() {
                if *p > self.given {
                    break;
                }
                if let Some((_, f)) = self.frames.pop_front() {
                    v.extend_from_slice(&f);
                }
            }
            if i == out.len() {
                return v;
            }
            let next = self.frames.front().map_or(u64::MAX, |(p, _)| *p);
            let room = usize::try_from(next - self.given).unwrap_or(usize::MAX);
            let n = (out.len() - i).min(room);
            v.extend_from_slice(&out[i..i + n]);
            i += n;
            self.given += n as u64;
        }
    }
}

/// What follows a complete answer head (RFC 9112 section 6.3), or why it cannot be scanned.
fn body_of(
    resp: &httparse::Response,
    asked: &mut VecDeque<Asked>,
    last: &mut bool,
) -> Result<State, Cut> {
    let code = resp.code.unwrap_or(0);
    let mut length: Option<u64> = None;
    let mut codings: Vec<String> = Vec::new();
    let mut extensions = false;
    let mut upgrade = String::new();
    for h in resp.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        let name = h.name;
        if name.eq_ignore_ascii_case("content-encoding") {
            for c in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if !c.eq_ignore_ascii_case("identity") {
                    return Err(Cut::Unscanned(format!(
                        "its answer is {c}-encoded (Content-Encoding), which hides a secret's \
                         value from the scan (only identity passes)"
                    )));
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            codings.extend(
                value
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .filter(|c| !c.is_empty()),
            );
        } else if name.eq_ignore_ascii_case("content-length") {
            let v = value.trim();
            let n = (!v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit()))
                .then(|| v.parse::<u64>().ok())
                .flatten();
            match n {
                Some(n) if length.is_none_or(|l| l == n) => length = Some(n),
                _ => {
                    return Err(Cut::Unscanned(format!(
                        "its answer's Content-Length {v:?} is not one length"
                    )))
                }
            }
        } else if name.eq_ignore_ascii_case("sec-websocket-extensions") {
            extensions = true;
        } else if name.eq_ignore_ascii_case("upgrade") {
            upgrade = value.trim().to_string();
        }
    }
    let chunked = match codings.as_slice() {
        [] => false,
        [c] if c == "chunked" => true,
        _ => {
            return Err(Cut::Unscanned(format!(
                "its answer's Transfer-Encoding is {:?} (only chunked passes)",
                codings.join(", ")
            )))
        }
    };
    if chunked && length.is_some() {
        return Err(Cut::Unscanned(
            "its answer has both Content-Length and chunked".into(),
        ));
    }
    if code == 101 {
        if !upgrade.eq_ignore_ascii_case("websocket") {
            return Err(Cut::Unscanned(format!(
                "its answer switches to {upgrade:?}, which the scan does not read (only websocket passes)"
            )));
        }
        if extensions {
            return Err(Cut::Unscanned(
                "its WebSocket answer names an extension (only none passes)".into(),
            ));
        }
        return Ok(State::WebSocket(Frame::Header(Vec::new())));
    }
    if (100..200).contains(&code) {
        // an interim answer: the final one follows, for the same request
        return Ok(State::Head(Vec::new()));
    }
    let request = asked.pop_front().unwrap_or(Asked::Other);
    *last = request == Asked::Upgrade;
    if request == Asked::Head || code == 204 || code == 304 {
        return Ok(State::Head(Vec::new()));
    }
    Ok(match (chunked, length) {
        (true, _) => State::Chunked(Chunked::default()),
        (false, Some(0)) => State::Head(Vec::new()),
        (false, Some(n)) => State::Length(n),
        (false, None) => State::Close,
    })
}

/// What the fuzz target (`fuzz/fuzz_targets/answer.rs`) checks: `data`, as the answers to two
/// GET requests from a host that got a secret, read whole and in the reads that `cuts` (byte
/// offsets) make, never panics the scan; what passes never holds the value (outside WebSocket
/// frames, see below); and the reads
/// change only whether a value's first bytes went alone (a cut), never what passes.
#[doc(hidden)]
pub fn fuzz_scan(data: &[u8], cuts: &[usize]) {
    const VALUE: &[u8] = b"sk-ant-realvalue-0123456789";
    let secrets = Secrets {
        list: vec![crate::net::secret::Secret::new(
            "K".into(),
            vec!["a.com".into()],
            b"sk-ant-PLACEHOLDERxxxxxxxxx".to_vec(),
            VALUE,
        )
        .unwrap_or_else(|e| panic!("{e}"))],
    };
    let run = |cuts: &[usize]| -> Result<Vec<u8>, Cut> {
        let mut a = Answers::default();
        a.asked("GET", false);
        a.asked("GET", false);
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain([data.len()].iter()) {
            let c = c.clamp(at, data.len());
            out.extend(a.feed(&secrets, &data[at..c])?);
            at = c;
        }
        out.extend(a.finish());
        Ok(out)
    };
    let whole = run(&[]);
    let split = run(cuts);
    // (a WebSocket frame header is binary and right beside its payload: a length byte may
    // be a value's first character, and the rest of the value the payload's start. What the
    // scan promises there is the payloads, read as one stream: a value split by a header is
    // found, tested above. Elsewhere framing always holds a CRLF, which no value does.)
    let frames = data.windows(4).any(|w| w == b" 101");
    for out in [&whole, &split].into_iter().flatten().filter(|_| !frames) {
        assert!(
            !out.windows(VALUE.len()).any(|w| w == VALUE),
            "the value passed"
        );
    }
    match (whole, split) {
        (Ok(w), Ok(s)) => assert_eq!(w, s),
        (Err(Cut::Unscanned(w)), Err(Cut::Unscanned(s))) => assert_eq!(w, s),
        (_, Err(Cut::Value(_))) => {}
        (w, s) => panic!("read whole: {w:?}; in reads: {s:?}"),
    }
}

/// A server's WebSocket frame header so far: `None` while incomplete, else its payload length.
/// A masked frame (a server never masks) or one with reserved bits (an extension, such as
/// compression) cannot be scanned.
fn ws_header(h: &[u8]) -> Result<Option<u64>, Cut> {
    if h.len() < 2 {
        return Ok(None);
    }
    if h[0] & 0x70 != 0 {
        return Err(Cut::Unscanned(
            "its WebSocket frame sets reserved bits (an extension, such as compression)".into(),
        ));
    }
    if h[1] & 0x80 != 0 {
        return Err(Cut::Unscanned("its WebSocket frame is masked".into()));
    }
    let (need, len) = match h[1] & 0x7f {
        126 => (4, None),
        127 => (10, None),
        n => (2, Some(u64::from(n))),
    };
    if h.len() < need {
        return Ok(None);
    }
    Ok(Some(len.unwrap_or_else(|| {
        h[2..need].iter().fold(0u64, |a, &b| a << 8 | u64::from(b))
    })))
}

#[cfg(test)]
mod tests {
    use super::super::reflect::tests::{secrets, PH, VALUE};
    use super::*;

    /// The client's bytes for `answer` read in `parts` (split at `cuts`), or the cut.
    fn through(methods: &[&str], answer: &[u8], cuts: &[usize]) -> Result<Vec<u8>, Cut> {
        let s = secrets();
        let mut a = Answers::default();
        for m in methods {
            a.asked(m, *m == "UPGRADE");
        }
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain([answer.len()].iter()) {
            out.extend(a.feed(&s, &answer[at..c])?);
            at = c;
        }
        out.extend(a.finish());
        Ok(out)
    }

    /// A chunked answer whose chunk boundary falls inside the value, at every place.
    #[test]
    fn a_value_split_by_chunk_framing_is_replaced() {
        for split in 1..VALUE.len() {
            let (x, y) = VALUE.split_at(split);
            let body = format!(
                "{:x};ext=1\r\nkey {x}\r\n{:x}\r\n{y} bad\r\n0\r\nT: {VALUE}\r\n\r\n",
                x.len() + 4,
                y.len() + 4
            );
            let answer = format!(
                "HTTP/1.1 401 No\r\nTransfer-Encoding: chunked\r\nX-Echo: {VALUE}\r\n\r\n{body}"
            );
            let want = answer
                .replace(VALUE, PH)
                .replace(x, &PH[..split])
                .replace(y, &PH[split..])
                .replace(";ext=1", "");
            // read whole, and cut at every byte
            let got = through(&["GET"], answer.as_bytes(), &[]).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), want, "split {split}");
            for cut in [10, answer.len() / 2, answer.len() - 3] {
                match through(&["GET"], answer.as_bytes(), &[cut]) {
                    Ok(got) => assert_eq!(String::from_utf8(got).unwrap(), want),
                    Err(Cut::Value(0)) => {} // 1-3 bytes of it went alone: cut, never whole
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
    }

    #[test]
    fn answers_follow_each_other_and_keep_their_framing() {
        let a = format!(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n\
             HTTP/1.1 204 No\r\n\r\n\
             HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n\
             HTTP/1.1 200 OK\r\n\r\nuntil the end {VALUE}",
            &VALUE[..3],
            VALUE.len() - 3,
            &VALUE[3..]
        );
        let want = a
            .replace(VALUE, PH)
            .replace(
                &format!("\r\n{}\r\n", &VALUE[3..]),
                &format!("\r\n{}\r\n", &PH[3..]),
            )
            .replace(
                &format!("\r\n{}\r\n", &VALUE[..3]),
                &format!("\r\n{}\r\n", &PH[..3]),
            );
        let got = through(&["POST", "HEAD", "GET", "GET", "GET"], a.as_bytes(), &[]).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want);
        // byte by byte: the same bytes, or a cut (never the value)
        let cuts: Vec<usize> = (1..a.len()).collect();
        if let Ok(got) = through(&["POST", "HEAD", "GET", "GET", "GET"], a.as_bytes(), &cuts) {
            assert!(!String::from_utf8(got).unwrap().contains(VALUE));
        }
        // a HEAD answer has no body, whatever its length says
        let h = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nsk-a\r\n";
        let got = through(&["HEAD", "GET"], h, &[]).unwrap();
        assert_eq!(got, h);
    }

    /// After an `Upgrade:` request that got no 101, the client's bytes are not read as
    /// requests: a `HEAD` among them would misframe what follows, so nothing more passes.
    #[test]
    fn nothing_passes_after_a_refused_upgrade() {
        let first = "HTTP/1.1 400 No\r\nContent-Length: 2\r\n\r\nno";
        assert_eq!(
            through(&["UPGRADE"], first.as_bytes(), &[]).unwrap(),
            first.as_bytes()
        );
        let more = format!("{first}HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n");
        assert!(matches!(
            through(&["UPGRADE"], more.as_bytes(), &[]),
            Err(Cut::Unscanned(_))
        ));
        // answered with 101: frames follow
        let ok = "HTTP/1.1 101 S\r\nUpgrade: websocket\r\n\r\n\x01\x02ok";
        assert_eq!(
            through(&["UPGRADE"], ok.as_bytes(), &[]).unwrap(),
            ok.as_bytes()
        );
    }

    /// A chunk extension is not scanned: it does not pass (the size line goes without it).
    #[test]
    fn chunk_extensions_are_dropped() {
        let a = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 ;k={VALUE}\r\nok\r\n0;{VALUE}\r\n\r\n");
        let want = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
        assert_eq!(
            String::from_utf8(through(&["GET"], a.as_bytes(), &[]).unwrap()).unwrap(),
            want
        );
        let cuts: Vec<usize> = (1..a.len()).collect();
        assert_eq!(
            String::from_utf8(through(&["GET"], a.as_bytes(), &cuts).unwrap()).unwrap(),
            want
        );
    }

    /// A value split across two WebSocket frames (one of them 126-length-coded).
    #[test]
    fn a_value_split_across_websocket_frames_is_replaced() {
        let (x, y) = VALUE.split_at(9);
        let mut a = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".to_vec();
        a.extend([0x01, x.len() as u8]);
        a.extend(x.as_bytes());
        let tail = format!("{y}{}", "z".repeat(200));
        a.extend([0x80, 126, 0, tail.len() as u8]);
        a.extend(tail.as_bytes());
        a.extend([0x89, 0]); // a ping, empty
        let mut want = a.clone();
        let at = a.windows(x.len()).position(|w| w == x.as_bytes()).unwrap();
        want[at..at + x.len()].copy_from_slice(&PH.as_bytes()[..9]);
        let at = a.windows(y.len()).position(|w| w == y.as_bytes()).unwrap();
        want[at..at + y.len()].copy_from_slice(&PH.as_bytes()[9..]);
        assert_eq!(through(&["GET"], &a, &[]).unwrap(), want);
        assert_eq!(through(&["GET"], &a, &[70, 75]).unwrap(), want);
        // without the frames undone, the value would not be there to find
        assert!(!a.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()));
    }

    /// Fuzz-style: mutated answers cut at random places never panic the scan, and what it
    /// gives back never holds the value.
    #[test]
    fn hostile_answers_never_panic() {
        use proptest::prelude::*;
        let seed = format!(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
             5;x\r\nsk-an\r\n16\r\nt-realvalue-0123456789\r\n0\r\nT: {VALUE}\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n{VALUE}\
             HTTP/1.1 101 S\r\nUpgrade: websocket\r\n\r\n\x01\x05sk-an\x00\x7e"
        );
        let cfg = proptest::test_runner::Config {
            cases: 3000,
            ..Default::default()
        };
        let mut runner = proptest::test_runner::TestRunner::new(cfg);
        runner
            .run(
                &(
                    proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
                    proptest::collection::vec(any::<usize>(), 0..4),
                ),
                |(flips, cuts)| {
                    let mut b = seed.as_bytes().to_vec();
                    for (i, v) in flips {
                        let i = i % b.len();
                        b[i] = v;
                    }
                    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % b.len()).collect();
                    cuts.sort();
                    fuzz_scan(&b, &cuts);
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn only_identity_and_chunked_pass() {
        for head in [
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Encoding: identity, br\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-encoding: ZSTD\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Encoding: x-custom\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: deflate\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "HTTP/1.1 101 Up\r\nUpgrade: websocket\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
            "HTTP/1.1 101 Up\r\nUpgrade: h2c\r\n\r\n",
            "HTTP/1.1 101 Up\r\nUpgrade: websocket\r\n\r\n\x41\x02ab",
            "SSH-2.0-OpenSSH\r\n\r\n",
        ] {
            let r = through(&["GET"], head.as_bytes(), &[]);
            assert!(matches!(r, Err(Cut::Unscanned(_))), "{head:?}: {r:?}");
        }
        // a masked frame from the server
        let masked = b"HTTP/1.1 101 Up\r\nUpgrade: websocket\r\n\r\n\x01\x82abcdxy";
        assert!(matches!(
            through(&["GET"], masked, &[]),
            Err(Cut::Unscanned(_))
        ));
        let fine = "HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(
            through(&["GET"], fine.as_bytes(), &[]).unwrap(),
            fine.as_bytes()
        );
        let mut big = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        big.resize(MAX_HEAD + 10, b'a');
        assert!(through(&["GET"], &big, &[]).is_err());
    }
}

/// The scan's own cost on a large download (`cargo test --lib bench_answers -- --ignored
/// --nocapture`): 100 MiB of one Content-Length answer and of a chunked one, in reads of
/// 32 KiB (a terminated connection's), through the framing and the scan, against the scan
/// alone on the same bytes.
#[cfg(test)]
#[test]
#[ignore]
fn bench_answers() {
    use crate::net::secret::Secret;
    use std::time::Instant;
    let secrets = Secrets {
        list: vec![Secret::new(
            "K".into(),
            vec!["a.com".into()],
            b"sk-ant-PLACEHOLDERxxxxxxxxx".to_vec(),
            b"sk-ant-realvalue-0123456789",
        )
        .unwrap()],
    };
    let size = 100usize << 20;
    let read = 32 * 1024;
    let body: Vec<u8> = (0..read).map(|i| b"abcdefghij\n"[i % 11]).collect();
    let mib = |t: std::time::Duration| size as f64 / t.as_secs_f64() / (1 << 20) as f64;
    let best = |f: &mut dyn FnMut()| {
        (0..5)
            .map(|_| {
                let t0 = Instant::now();
                f();
                t0.elapsed()
            })
            .min()
            .unwrap()
    };
    let alone = best(&mut || {
        let mut u = Unreflect::default();
        for _ in 0..size / read {
            std::hint::black_box(u.feed(&secrets, &body).unwrap());
        }
    });
    let length = best(&mut || {
        let mut a = Answers::default();
        a.asked("GET", false);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n");
        std::hint::black_box(a.feed(&secrets, head.as_bytes()).unwrap());
        for _ in 0..size / read {
            std::hint::black_box(a.feed(&secrets, &body).unwrap());
        }
    });
    // chunks of 16 KiB: two chunk-size lines in every read
    let mut chunked = Vec::new();
    for part in body.chunks(16 * 1024 - 8) {
        chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    let reads = chunked.chunks(read).collect::<Vec<_>>();
    let framed = best(&mut || {
        let mut a = Answers::default();
        a.asked("GET", false);
        std::hint::black_box(
            a.feed(
                &secrets,
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            )
            .unwrap(),
        );
        for _ in 0..size / chunked.len() {
            for r in &reads {
                std::hint::black_box(a.feed(&secrets, r).unwrap());
            }
        }
    });
    println!(
        "bench-answers\tmibs\tscan_alone\t{:.0}\tcontent_length\t{:.0}\tchunked\t{:.0}",
        mib(alone),
        mib(length),
        mib(framed)
    );
}
