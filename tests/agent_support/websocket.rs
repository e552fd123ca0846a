//! The OpenAI Responses API over a WebSocket, as Codex opens it first to its built-in
//! provider (`GET /v1/responses` with `Upgrade: websocket`, the key in its `Authorization`):
//! the handshake (RFC 6455, with the SHA-1 and base64 it needs, small enough to write here),
//! then one streamed reply per `response.create` message, each event a text frame, with the
//! stub's hook between the first part and the rest.

use super::{events, Api, Hook, Request};
use serde_json::Value;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;

type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

pub(super) fn serve(
    r: &mut BufReader<Tls>,
    req: Request,
    seen: &Mutex<Vec<Request>>,
    hook: &Mutex<Option<Hook>>,
) -> std::io::Result<()> {
    let key = req.header("sec-websocket-key").unwrap_or("").to_string();
    let accept = base64(&sha1(format!("{key}{GUID}").as_bytes()));
    let w = r.get_mut();
    write!(
        w,
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {accept}\r\n\r\n"
    )?;
    w.flush()?;
    loop {
        let (op, payload) = read_message(r)?;
        match op {
            0x8 => {
                send(r.get_mut(), 0x8, &payload)?;
                return Ok(());
            }
            0x9 => send(r.get_mut(), 0xA, &payload)?,
            0x1 | 0x2 => {
                let text = String::from_utf8_lossy(&payload).into_owned();
                let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if body["type"] != "response.create" {
                    continue;
                }
                let mut q = req.clone();
                q.body = text;
                q.streamed = true;
                seen.lock().unwrap().push(q.clone());
                let (first, rest) = events(Api::OpenAi, &body);
                for (_, e) in &first {
                    send(r.get_mut(), 0x1, e.to_string().as_bytes())?;
                }
                if let Some(h) = hook.lock().unwrap().as_mut() {
                    h(&q);
                }
                for (_, e) in &rest {
                    send(r.get_mut(), 0x1, e.to_string().as_bytes())?;
                }
            }
            _ => {}
        }
    }
}

/// One message from the client: its opcode and its payload, unmasked, continuation frames
/// joined.
fn read_message(r: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut payload = Vec::new();
    let mut opcode = None;
    loop {
        let mut h = [0u8; 2];
        r.read_exact(&mut h)?;
        let (fin, op) = (h[0] & 0x80 != 0, h[0] & 0x0f);
        let mut len = u64::from(h[1] & 0x7f);
        if len == 126 {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)?;
            len = u64::from(u16::from_be_bytes(b));
        } else if len == 127 {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            len = u64::from_be_bytes(b);
        }
        let mut mask = [0u8; 4];
        if h[1] & 0x80 != 0 {
            r.read_exact(&mut mask)?;
        }
        if len > 64 << 20 {
            return Err(std::io::Error::other("a frame over 64 MiB"));
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data)?;
        for (i, b) in data.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        if op >= 0x8 {
            // a control frame, possibly between the frames of a message
            if opcode.is_none() {
                return Ok((op, data));
            }
            continue;
        }
        opcode.get_or_insert(op);
        payload.extend_from_slice(&data);
        if fin {
            return Ok((opcode.unwrap(), payload));
        }
    }
}

/// One unmasked frame from the server, flushed.
fn send(w: &mut impl Write, op: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut f = vec![0x80 | op];
    match payload.len() {
        n if n < 126 => f.push(n as u8),
        n if n <= 0xffff => {
            f.push(126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(payload);
    w.write_all(&f)?;
    w.flush()
}

fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut m = data.to_vec();
    m.push(0x80);
    while m.len() % 64 != 56 {
        m.push(0);
    }
    m.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in m.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// RFC 6455's own example of a handshake.
#[test]
fn the_accept_of_rfc_6455() {
    assert_eq!(
        base64(&sha1(format!("dGhlIHNhbXBsZSBub25jZQ=={GUID}").as_bytes())),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
}
