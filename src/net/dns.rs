//! The sandbox's name service under `--net none` and `--net filtered`: every lookup gets a
//! refusal, and the names looked up are recorded, so that a command that fails for want of a
//! network is told which host it wanted and how to allow it.
//!
//! Why refuse every name, even allowed ones: the sandbox's only way out is the proxy, which
//! resolves names itself (on the host, once, checked: [`super::proxy`]); an address handed to
//! the sandbox would lead nowhere (it has no route) and would invite DNS as a channel out.
//! Clients that honour the proxy variables never resolve names inside.
//!
//! pid 1 binds UDP `127.0.0.1:53` in the sandbox's network namespace and passes the socket to
//! the supervisor, which answers here, on one thread, from the host side. The sandbox's
//! `/etc/resolv.conf` says `nameserver 127.0.0.1`. Only UDP: resolvers ask over TCP only when
//! an answer was truncated, and a refusal never is.
//!
//! The answer is NXDOMAIN, not REFUSED. Measured here (glibc 2.36, npm 11, pip 24): both are
//! answered at once and both are retried alike by the package managers (npm 70 s per fetch,
//! pip 9 s per package: they retry any failed connection; under `--net none` those retries
//! are turned off, [`crate::layers::env::no_fetch_retries`]), but REFUSED reaches the program
//! as `EAI_AGAIN`, "temporary failure in name resolution", which reads as a network hiccup
//! worth retrying, while NXDOMAIN is `ENOTFOUND` / "Name or service not known": npm says
//! `getaddrinfo ENOTFOUND <host>`, pip `Name or service not known`.

use super::allow::{normalize, AllowList, Host};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The answer's response code (RFC 1035 section 4.1.1): 3, NXDOMAIN (see the module's note).
pub const RCODE: u8 = 3;
/// Distinct names recorded; past that, the rest are counted under [`OVERFLOW`] (a hostile
/// command inventing names cannot grow the supervisor's memory), as the proxy's log does.
pub const MAX_LOG: usize = 1024;
pub const OVERFLOW: &str = "(more names than the log keeps)";
/// Largest query read (a query is one question: at most 12 + 255 + 4 bytes, plus an EDNS
/// record; more is not a query we answer).
const MAX_QUERY: usize = 512;
/// Largest name in wire form (RFC 1035 section 3.1).
const MAX_NAME: usize = 255;

/// One question of a query, as far as the answer needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// The header's flags (opcode and RD are echoed).
    pub flags: u16,
    /// The name asked for: labels joined by dots, ASCII lowercase, no trailing dot (`""` for
    /// the root). Bytes outside printable ASCII are written `\DDD` as in zone files.
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    /// Where the question ends in the query: the answer repeats `query[12..end]`.
    pub end: usize,
}

/// The first question of a DNS query; `None` for anything that is not a well-formed query
/// (a response, no question, a compression pointer in the question, a name past 255 bytes,
/// a truncated packet). Bounded: never reads past `b`, never panics, allocates at most the
/// name.
pub fn parse_query(b: &[u8]) -> Option<Query> {
    if b.len() < 12 || b.len() > MAX_QUERY {
        return None;
    }
    let id = u16::from_be_bytes([b[0], b[1]]);
    let flags = u16::from_be_bytes([b[2], b[3]]);
    let qdcount = u16::from_be_bytes([b[4], b[5]]);
    // QR set: a response, not a query.
    if flags & 0x8000 != 0 || qdcount == 0 {
        return None;
    }
    let mut at = 12usize;
    let mut name = String::new();
    let mut wire = 0usize;
    loop {
        let len = *b.get(at)? as usize;
        at += 1;
        wire += 1 + len;
        if wire > MAX_NAME {
            return None;
        }
        if len == 0 {
            break;
        }
        // 0xC0: a compression pointer, 0x40/0x80: reserved label types; none belongs in a
        // question we answer.
        if len > 63 {
            return None;
        }
        let label = b.get(at..at + len)?;
        at += len;
        if !name.is_empty() {
            name.push('.');
        }
        for &c in label {
            match c {
                b'.' | b'\\' => {
                    name.push('\\');
                    name.push(c as char);
                }
                0x21..=0x7e => name.push(c.to_ascii_lowercase() as char),
                _ => name.push_str(&format!("\\{c:03}")),
            }
        }
    }
    let tail = b.get(at..at + 4)?;
    Some(Query {
        id,
        flags,
        name,
        qtype: u16::from_be_bytes([tail[0], tail[1]]),
        qclass: u16::from_be_bytes([tail[2], tail[3]]),
        end: at + 4,
    })
}

/// The answer to `q` (whose bytes are `query`): the header with QR set, the opcode and RD
/// echoed, [`RCODE`], and the question repeated; no records.
pub fn refusal(q: &Query, query: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(q.end);
    out.extend_from_slice(&q.id.to_be_bytes());
    // QR, opcode and RD from the query; AA, TC, RA, Z cleared.
    let flags = 0x8000 | (q.flags & 0x7900) | u16::from(RCODE);
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(query.get(12..q.end).unwrap_or_default());
    out
}

/// A name the command looked up and was refused, with how many times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    pub name: String,
    pub count: u64,
}

/// What the name service knows of the run.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--net filtered`: names on the allow-list (any port) are answered the same, but not
    /// counted as refusals (the proxy reaches them). Empty under `--net none`.
    pub allow: AllowList,
    /// `-v`: told each refused name as it happens.
    pub on_denied: Option<crate::net::OnDenied>,
}

struct Shared {
    config: Config,
    stop: AtomicBool,
    log: Mutex<BTreeMap<String, u64>>,
}

/// The running name service; [`NameService::stop`] ends it and returns the refused names.
pub struct NameService {
    shared: Arc<Shared>,
    socket: UdpSocket,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NameService {
    /// Answer the sandbox's queries on `socket` (UDP, bound in the sandbox's namespace).
    pub fn start(socket: UdpSocket, config: Config) -> std::io::Result<NameService> {
        let shared = Arc::new(Shared {
            config,
            stop: AtomicBool::new(false),
            log: Mutex::new(BTreeMap::new()),
        });
        let (s, sock) = (shared.clone(), socket.try_clone()?);
        let thread = std::thread::Builder::new()
            .name("names".into())
            .stack_size(64 * 1024)
            .spawn(move || serve(&sock, &s))?;
        Ok(NameService {
            shared,
            socket,
            thread: Some(thread),
        })
    }

    /// Stop answering; the names refused, most looked-up first.
    pub fn stop(mut self) -> Vec<Refused> {
        self.shared.stop.store(true, Ordering::SeqCst);
        // A shutdown wakes a receive on an unconnected UDP socket too (it returns 0 bytes).
        // SAFETY: shutdown(2) on a socket we own.
        unsafe { libc::shutdown(self.socket.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let log = self.shared.log.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Refused> = log
            .iter()
            .map(|(name, count)| Refused {
                name: name.clone(),
                count: *count,
            })
            .collect();
        out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        out
    }
}

fn serve(socket: &UdpSocket, shared: &Shared) {
    let mut buf = [0u8; MAX_QUERY + 1];
    loop {
        let got = socket.recv_from(&mut buf);
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok((n, from)) = got else {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        };
        let Some(q) = parse_query(&buf[..n]) else {
            continue;
        };
        // Noted before the answer: a `-v` line comes before what the command does next.
        shared.note(&q.name);
        let _ = socket.send_to(&refusal(&q, &buf[..n]), from);
    }
}

impl Shared {
    fn note(&self, name: &str) {
        // Names the list allows are reached through the proxy: not refusals. So are lookups
        // that are not host names (the root, reverse lookups of the loopback).
        let Some(n) = normalize(name) else {
            return;
        };
        if n == "localhost" || n.ends_with(".in-addr.arpa") || n.ends_with(".ip6.arpa") {
            return;
        }
        if self.config.allow.names(&Host::Name(n.clone())) {
            return;
        }
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let key = if log.len() >= MAX_LOG && !log.contains_key(&n) {
            OVERFLOW.to_string()
        } else {
            n
        };
        *log.entry(key.clone()).or_insert(0) += 1;
        drop(log);
        // `-v`: told as the report will have it (a name past the bound is not in it).
        if let Some(tell) = self.config.on_denied.as_ref().filter(|_| key != OVERFLOW) {
            (tell.0)(crate::net::Denied::Name(&key));
        }
    }
}

/// The one line at the end of a run whose command failed after refused lookups: the name
/// looked up most, how many others, why they failed and how to allow it. `profile` names the
/// run's profile; `filtered`: the run had an allow-list.
pub fn refusal_line(refused: &[Refused], profile: &str, filtered: bool) -> Option<String> {
    let first = refused.iter().find(|r| r.name != OVERFLOW)?;
    let overflow = refused.iter().any(|r| r.name == OVERFLOW);
    let others = refused.len() - 1 - usize::from(overflow);
    let more = match (others, overflow) {
        (0, false) => String::new(),
        (1, false) => " (and 1 other name)".to_string(),
        (n, false) => format!(" (and {n} other names)"),
        (n, true) => format!(" (and more than {n} other names)"),
    };
    let name = &first.name;
    Some(if filtered {
        format!(
            "sandbox-run: network: the command looked up {name}{more}, which is not on the allow-list of profile {profile}; to allow it: --allow-host {name}"
        )
    } else {
        format!(
            "sandbox-run: network: the command looked up {name}{more}, but the network is off in profile {profile}; to allow it: --net filtered --allow-host {name}:443"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` as glibc sends it (RD set, one question, an A record).
    fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut q = id.to_be_bytes().to_vec();
        q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for l in name.split('.').filter(|l| !l.is_empty()) {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&1u16.to_be_bytes());
        q
    }

    #[test]
    fn parses_a_query_and_answers_it() {
        let b = query(0xbeef, "Registry.Example.", 28);
        let q = parse_query(&b).unwrap();
        assert_eq!(q.id, 0xbeef);
        assert_eq!(q.name, "registry.example");
        assert_eq!((q.qtype, q.qclass, q.end), (28, 1, b.len()));
        let a = refusal(&q, &b);
        assert_eq!(&a[..2], &[0xbe, 0xef]);
        // QR, RD, the rcode; one question, no records; the question as asked
        assert_eq!(u16::from_be_bytes([a[2], a[3]]), 0x8100 | u16::from(RCODE));
        assert_eq!(&a[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&a[12..], &b[12..]);
        // an EDNS record after the question is not repeated
        let mut e = b.clone();
        e[11] = 1;
        e.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        let q = parse_query(&e).unwrap();
        assert_eq!(refusal(&q, &e)[12..], b[12..]);
    }

    #[test]
    fn refuses_what_is_no_query() {
        let good = query(1, "a.example", 1);
        // too short, a response, no question, truncated name, truncated type, a pointer
        assert_eq!(parse_query(&good[..11]), None);
        let mut r = good.clone();
        r[2] |= 0x80;
        assert_eq!(parse_query(&r), None);
        let mut r = good.clone();
        r[5] = 0;
        assert_eq!(parse_query(&r), None);
        assert_eq!(parse_query(&good[..15]), None);
        assert_eq!(parse_query(&good[..good.len() - 1]), None);
        let mut r = good[..12].to_vec();
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        assert_eq!(parse_query(&r), None);
        // a name past 255 bytes
        let long = vec!["a".repeat(63); 5].join(".");
        assert_eq!(parse_query(&query(1, &long, 1)), None);
        let ok = vec!["a".repeat(63); 3].join(".");
        assert!(parse_query(&query(1, &ok, 1)).is_some());
        // odd bytes are escaped, never passed on raw
        let mut r = good[..12].to_vec();
        r.extend_from_slice(&[3, b'a', 0, b'.', 0, 0, 1, 0, 1]);
        assert_eq!(parse_query(&r).unwrap().name, "a\\000\\.");
    }

    #[test]
    fn hostile_bytes_never_panic() {
        use proptest::prelude::*;
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..600), |b| {
                if let Some(q) = parse_query(&b) {
                    prop_assert!(q.end <= b.len());
                    prop_assert!(q.name.len() <= 4 * MAX_NAME);
                    let a = refusal(&q, &b);
                    prop_assert_eq!(a.len(), q.end);
                }
                Ok(())
            })
            .unwrap();
        // mutations of a good query reach deeper than random bytes
        let base = query(7, "registry.example", 1);
        runner
            .run(
                &proptest::collection::vec((0..base.len(), any::<u8>()), 0..8),
                |edits| {
                    let mut b = base.clone();
                    for (i, v) in edits {
                        b[i] = v;
                    }
                    if let Some(q) = parse_query(&b) {
                        prop_assert!(q.end <= b.len());
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn serves_and_records_names() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = server.local_addr().unwrap();
        let allow = AllowList::parse(&["allowed.example:443"]).unwrap();
        let ns = NameService::start(
            server,
            Config {
                allow,
                on_denied: None,
            },
        )
        .unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        for (name, t) in [
            ("registry.example", 1),
            ("registry.example", 28),
            ("allowed.example", 1),
            ("other.example", 1),
        ] {
            c.send_to(&query(9, name, t), at).unwrap();
            let mut buf = [0u8; 600];
            let (n, _) = c.recv_from(&mut buf).unwrap();
            assert_eq!(buf[3] & 0x0f, RCODE, "{name}");
            assert!(n > 12);
        }
        c.send_to(b"garbage", at).unwrap();
        let t = std::time::Instant::now();
        let log = ns.stop();
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(
            log,
            vec![
                Refused {
                    name: "registry.example".into(),
                    count: 2
                },
                Refused {
                    name: "other.example".into(),
                    count: 1
                },
            ]
        );
        let line = refusal_line(&log, "validate", false).unwrap();
        assert_eq!(line, "sandbox-run: network: the command looked up registry.example (and 1 other name), but the network is off in profile validate; to allow it: --net filtered --allow-host registry.example:443");
        assert!(refusal_line(&[], "validate", false).is_none());
    }
}
