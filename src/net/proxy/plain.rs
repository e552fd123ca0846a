//! A plain-HTTP request through the proxy (`GET http://host/...`): exactly one request reaches
//! the server. Its body is framed by its own head (`Content-Length` or chunked) and scanned for
//! placeholders on the way; once it has gone, nothing more the client sends is read, so a
//! second request on the same connection (another `Host`, a placeholder) never reaches a front
//! end that would act on it, whatever it makes of `Connection: close`. The answer comes back
//! as it arrives; from a host a secret is listed for, through the scan of [`super::answer`].

use super::answer::Answers;
use super::{respond, Counters, Shared};
use crate::net::allow::Host;
use crate::net::tls::http1::{self, Body, Chunked, Scan};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const BUF: usize = 64 * 1024;

/// Send `head` (the request as it goes upstream) and its body, which begins with `rest` (what
/// the client sent after its head) and continues on `client`; then move the answer back until
/// the server closes. Any failure ends both connections.
pub(super) fn one_request(
    shared: &Arc<Shared>,
    client: &TcpStream,
    upstream: &TcpStream,
    (host, port): (&Host, u16),
    head: &[u8],
    rest: Vec<u8>,
    counters: &Arc<Counters>,
) {
    let mut method = String::new();
    let body = match http1::parse_head(head) {
        Ok(Some(h)) if h.upgrade => {
            let _ = respond(
                client,
                "400 Bad Request",
                "sandbox-run: network: an Upgrade request goes through CONNECT, not as plain HTTP through the proxy\n",
            );
            return;
        }
        Ok(Some(h)) => {
            method = h.method;
            h.body
        }
        Ok(None) => Body::None,
        Err(e) => {
            let _ = respond(
                client,
                "400 Bad Request",
                &format!("sandbox-run: network: {e}\n"),
            );
            return;
        }
    };
    let mut up = Upstream {
        to: upstream,
        counters,
    };
    if up.send(head).is_err() {
        return;
    }
    let mut body_state = Framing::new(body);
    let mut scan = Scan::default();
    let mut piece = rest;
    let mut buf = vec![0u8; BUF];
    while !body_state.done() {
        if !piece.is_empty() {
            let (take, data) = match body_state.take(&piece) {
                Ok(x) => x,
                Err(e) => {
                    let _ = respond(
                        client,
                        "400 Bad Request",
                        &format!("sandbox-run: network: {e}\n"),
                    );
                    cut(client, upstream);
                    return;
                }
            };
            if let Some(i) = data
                .iter()
                .find_map(|d| scan.feed(&shared.config.secrets, d))
            {
                shared.misdirect(i, host, port);
                cut(client, upstream);
                return;
            }
            if up.send(&piece[..take]).is_err() {
                return;
            }
            piece.clear();
            continue;
        }
        match (&*client).read(&mut buf) {
            Ok(0) | Err(_) => {
                cut(client, upstream);
                return;
            }
            Ok(n) => piece.extend_from_slice(&buf[..n]),
        }
    }
    // The answer, as it comes; the client is not read again. From a host a secret is listed
    // for, through the scan that gives an echoed value back as its placeholder.
    let secrets = &shared.config.secrets;
    let mut answers = secrets.injects(host, port).then(Answers::default);
    if let Some(a) = answers.as_mut() {
        a.asked(&method, false);
    }
    loop {
        let n = match (&*upstream).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let out = match answers.as_mut() {
            None if n == 0 => break,
            None => Ok(buf[..n].to_vec()),
            Some(a) if n == 0 => Ok(a.finish()),
            Some(a) => a.feed(secrets, &buf[..n]),
        };
        let out = match out {
            Ok(out) => out,
            Err(c) => {
                shared.cut_answer(host, port, &c);
                break;
            }
        };
        if (&*client).write_all(&out).is_err() {
            break;
        }
        counters.down.fetch_add(out.len() as u64, Ordering::Relaxed);
        if n == 0 {
            break;
        }
    }
    cut(client, upstream);
}

struct Upstream<'a> {
    to: &'a TcpStream,
    counters: &'a Arc<Counters>,
}

impl Upstream<'_> {
    fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.to.write_all(b)?;
        self.counters
            .up
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Where the request's body ends.
enum Framing {
    Left(u64),
    Chunked(Chunked),
}

impl Framing {
    fn new(body: Body) -> Framing {
        match body {
            Body::None => Framing::Left(0),
            Body::Length(n) => Framing::Left(n),
            Body::Chunked => Framing::Chunked(Chunked::default()),
        }
    }

    fn done(&self) -> bool {
        match self {
            Framing::Left(n) => *n == 0,
            Framing::Chunked(c) => c.is_done(),
        }
    }

    /// How many bytes at the start of `buf` belong to the body, and the data among them (what
    /// the scan reads: chunk data and trailers, or the bytes themselves).
    fn take(&mut self, buf: &[u8]) -> Result<(usize, Vec<Vec<u8>>), String> {
        match self {
            Framing::Left(n) => {
                let k = usize::try_from(*n).unwrap_or(usize::MAX).min(buf.len());
                *n -= k as u64;
                Ok((k, vec![buf[..k].to_vec()]))
            }
            Framing::Chunked(c) => {
                let mut data = Vec::new();
                let k = c.advance(buf, &mut |d| data.push(d.to_vec()))?;
                Ok((k, data))
            }
        }
    }
}

fn cut(client: &TcpStream, upstream: &TcpStream) {
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
}
