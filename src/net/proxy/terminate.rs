//! Connections the proxy terminates: those to a host a secret is listed for. The proxy is the
//! TLS server the sandbox talks to (a certificate of the run's CA for that host) and a TLS
//! client of the real server (checked against the host's roots and `--ca-certs`); between
//! the two it reads each HTTP/1.1 request head, checks that it names the host the connection
//! was allowed for, and puts the secrets' values in place of their placeholders in the
//! request line and headers. Bodies are never changed: they are scanned, and a placeholder
//! in one is refused. Each request asks for an identity-encoded answer; answers pass as they
//! come (server-sent events stream), through the scan of [`super::answer`].
//!
//! One thread per connection drives both TLS connections over non-blocking sockets in one
//! poll loop; every buffer is bounded, so a side that does not read stalls only its own
//! connection.

use super::answer::Answers;
use super::{Counters, Shared};
use crate::net::allow::Host;
use crate::net::tls::ca::RunCa;
use crate::net::tls::http1::{self, Body, Chunked, Scan};
use crate::net::tls::roots;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Plaintext rustls holds per direction before a writer is told to wait.
const TLS_BUFFER: usize = 256 * 1024;
/// One read of plaintext.
const CHUNK: usize = 32 * 1024;
/// One read of a socket.
const READ: usize = 64 * 1024;
/// Plaintext queued before it is written out while more keeps coming.
const FLUSH: usize = 64 * 1024;
/// Plaintext of the client waiting to be framed: a request head, plus one read.
const CLIENT_BUFFER: usize = http1::MAX_HEAD + CHUNK;
/// How long the last bytes of a closing connection may take to leave.
const LINGER_MS: u16 = 5000;
const ALPN: &[u8] = b"http/1.1";

fn flags(read: bool, write: bool) -> PollFlags {
    let mut f = PollFlags::empty();
    if read {
        f |= PollFlags::POLLIN;
    }
    if write {
        f |= PollFlags::POLLOUT;
    }
    f
}

/// What a run with secrets makes once: its CA and both TLS configurations.
pub(super) struct Tls {
    pub(super) ca: RunCa,
    /// Without a certificate: each connection gets a copy with its host's.
    server: ServerConfig,
    client: Arc<ClientConfig>,
}

#[derive(Debug)]
struct NoCert;

impl rustls::server::ResolvesServerCert for NoCert {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }
}

impl Tls {
    pub(super) fn new(extra_roots: &[std::path::PathBuf]) -> Result<Tls, String> {
        let ca = RunCa::new()?;
        let roots = roots::load(extra_roots)?;
        // AES-128-GCM first, as browsers order it: the proxy decrypts and encrypts every
        // byte of a terminated connection once more, and 128 bits cost 10 AES rounds where
        // 256 cost 14 (the server's order is the proxy's own on the sandbox's side)
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites.sort_by_key(|s| {
            use rustls::CipherSuite as C;
            match s.suite() {
                C::TLS13_AES_128_GCM_SHA256 => 0,
                C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 1,
                _ => 2,
            }
        });
        let provider = Arc::new(provider);
        let fail = |e: rustls::Error| format!("setting up TLS: {e}");
        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(fail)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![ALPN.to_vec()];
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(fail)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCert));
        server.alpn_protocols = vec![ALPN.to_vec()];
        server.ignore_client_order = true;
        Ok(Tls {
            ca,
            server,
            client: Arc::new(client),
        })
    }

    fn server_for(&self, host: &Host) -> Result<ServerConnection, String> {
        let name = match host {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        };
        let leaf = self.ca.leaf(&name)?;
        let mut cfg = self.server.clone();
        cfg.cert_resolver = Arc::new(rustls::sign::SingleCertAndKey::from(leaf));
        ServerConnection::new(Arc::new(cfg)).map_err(|e| format!("TLS server for {host}: {e}"))
    }

    fn client_for(&self, host: &Host) -> Result<ClientConnection, String> {
        let name = match host {
            Host::Name(n) => ServerName::try_from(n.clone()).map_err(|e| e.to_string())?,
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        };
        ClientConnection::new(self.client.clone(), name)
            .map_err(|e| format!("TLS client for {host}: {e}"))
    }
}

/// One side of a terminated connection: a socket, with TLS or (loopback only) without.
struct End {
    sock: TcpStream,
    tls: Option<Connection>,
    /// Bytes read from the socket, `ipos..iend` not yet taken (by rustls, or as plaintext):
    /// one large read instead of rustls's reads of 4 KiB.
    inbuf: Vec<u8>,
    ipos: usize,
    iend: usize,
    /// The socket may have bytes to read (poll said so, and no read since said otherwise).
    ready: bool,
    /// Plaintext queued since the last write to the socket: written in batches while more
    /// keeps coming (fewer, larger writes), at once when nothing else moves.
    unflushed: usize,
    /// Plain ends: bytes to write.
    out: Vec<u8>,
    /// The socket reached end-of-file (or failed).
    eof: bool,
    /// Plaintext end: a TLS close_notify or the socket's end, everything taken.
    closed: bool,
}

impl End {
    fn new(sock: TcpStream, tls: Option<Connection>) -> End {
        let mut e = End {
            sock,
            tls,
            inbuf: Vec::new(),
            ipos: 0,
            iend: 0,
            ready: true,
            unflushed: 0,
            out: Vec::new(),
            eof: false,
            closed: false,
        };
        if let Some(t) = e.tls.as_mut() {
            t.set_buffer_limit(Some(TLS_BUFFER));
        }
        e
    }

    fn handshaking(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.is_handshaking())
    }

    fn buffered(&self) -> usize {
        self.iend - self.ipos
    }

    /// Whether the socket should be read now.
    fn wants_read(&self) -> bool {
        !self.eof
            && match &self.tls {
                Some(t) => t.wants_read() && self.buffered() == 0,
                None => self.buffered() < CHUNK,
            }
    }

    fn wants_write(&self) -> bool {
        match &self.tls {
            Some(t) => t.wants_write(),
            None => !self.out.is_empty(),
        }
    }

    /// Bytes that arrived before the proxy took over (the ClientHello it checked).
    fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.inbuf.truncate(self.iend);
        self.inbuf.extend_from_slice(bytes);
        self.iend = self.inbuf.len();
        self.fill().map(|_| ())
    }

    /// Read what the socket has, without blocking, and hand it to rustls as far as it
    /// takes it. A TLS error is returned (its alert is queued for the peer).
    fn fill(&mut self) -> Result<bool, String> {
        let mut progress = false;
        loop {
            if let Some(t) = self.tls.as_mut() {
                while self.ipos < self.iend && t.wants_read() {
                    let mut rest = &self.inbuf[self.ipos..self.iend];
                    let n = t.read_tls(&mut rest).map_err(|e| {
                        self.eof = true;
                        e.to_string()
                    })?;
                    self.ipos += n;
                    progress = true;
                    if let Err(e) = t.process_new_packets() {
                        self.eof = true;
                        return Err(e.to_string());
                    }
                }
            }
            if self.ipos == self.iend {
                self.ipos = 0;
                self.iend = 0;
            }
            if !self.wants_read() || !self.ready {
                return Ok(progress);
            }
            if self.inbuf.len() < READ {
                self.inbuf.resize(READ, 0);
            }
            if self.iend == self.inbuf.len() {
                self.inbuf.copy_within(self.ipos..self.iend, 0);
                self.iend -= self.ipos;
                self.ipos = 0;
            }
            if self.iend == self.inbuf.len() {
                // full (not reached: a read is asked for only with room); never a 0-byte
                // read, which would look like the end
                return Ok(progress);
            }
            let r = (&self.sock).read(&mut self.inbuf[self.iend..]);
            if let Ok(n) = r {
                self.iend += n;
            }
            match r {
                Ok(0) => {}
                Ok(_) => {
                    progress = true;
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.ready = false;
                    return Ok(progress);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {}
            }
            // the end of the socket (or its failure): rustls learns it from an empty read
            self.eof = true;
            progress = true;
            if let Some(t) = self.tls.as_mut() {
                let _ = t.read_tls(&mut &[][..]);
                if let Err(e) = t.process_new_packets() {
                    return Err(e.to_string());
                }
                if t.is_handshaking() {
                    return Err("the connection ended during the TLS handshake".into());
                }
            }
            return Ok(progress);
        }
    }

    /// Plaintext received: `0` means nothing now (see `closed` for the end).
    fn take(&mut self, buf: &mut [u8]) -> usize {
        if self.closed {
            return 0;
        }
        match self.tls.as_mut() {
            Some(t) => match t.reader().read(buf) {
                Ok(0) => {
                    self.closed = true;
                    0
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                // the socket ended without close_notify: an end all the same
                Err(_) => {
                    self.closed = true;
                    0
                }
            },
            None => {
                let n = self.buffered().min(buf.len());
                buf[..n].copy_from_slice(&self.inbuf[self.ipos..self.ipos + n]);
                if n == self.buffered() {
                    self.ipos = 0;
                    self.iend = 0;
                    return n;
                }
                self.ipos += n;
                if n == 0 && self.eof {
                    self.closed = true;
                }
                n
            }
        }
    }

    /// Queue plaintext to send: how much was taken (less than all when the buffer is full).
    fn give(&mut self, data: &[u8]) -> usize {
        let n = match self.tls.as_mut() {
            Some(t) => t.writer().write(data).unwrap_or(0),
            None => {
                let n = data.len().min(TLS_BUFFER.saturating_sub(self.out.len()));
                self.out.extend_from_slice(&data[..n]);
                n
            }
        };
        self.unflushed += n;
        n
    }

    /// Whether to write to the socket now: a batch is full, a handshake waits for it, or
    /// (`idle`) nothing else moves.
    fn should_flush(&self, idle: bool) -> bool {
        self.wants_write() && (idle || self.unflushed >= FLUSH || self.handshaking())
    }

    /// Queue all of `data` whatever the buffer holds (a short answer of the proxy's own).
    fn give_all(&mut self, data: &[u8]) {
        match self.tls.as_mut() {
            Some(t) => {
                t.set_buffer_limit(None);
                let _ = t.writer().write_all(data);
            }
            None => self.out.extend_from_slice(data),
        }
    }

    /// Write what is queued, without blocking. `Err` when the socket failed.
    fn flush(&mut self) -> Result<bool, ()> {
        self.unflushed = 0;
        let mut progress = false;
        while self.wants_write() {
            let r = match self.tls.as_mut() {
                Some(t) => t.write_tls(&mut self.sock),
                None => (&self.sock).write(&self.out).inspect(|&n| {
                    self.out.drain(..n);
                }),
            };
            match r {
                Ok(0) => return Err(()),
                Ok(_) => progress = true,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
        Ok(progress)
    }

    /// No more plaintext from us: close_notify, then the socket's write side once flushed.
    fn close(&mut self) {
        if let Some(t) = self.tls.as_mut() {
            t.send_close_notify();
        }
    }
}

/// Where the client→upstream stream stands.
enum Phase {
    Head,
    Length(u64),
    Chunked(Chunked),
    /// After an `Upgrade:` request: raw bytes, still scanned.
    Raw,
}

/// What ends a connection.
enum Stop {
    /// Both sides ended: nothing to say.
    Done,
    /// Answer the client with this status and body, then close both.
    Refuse(&'static str, String),
    /// Cut both at once (a refusal that cannot be an answer any more).
    Cut,
}

/// A terminated connection to `host:port`: both ends, and what stands between them.
pub(super) struct Session<'a> {
    shared: &'a Arc<Shared>,
    host: &'a Host,
    port: u16,
    counters: Arc<Counters>,
    client: End,
    upstream: End,
    /// Client plaintext not framed yet.
    cbuf: Vec<u8>,
    /// Bytes for the upstream its writer has not taken yet.
    up_pending: Vec<u8>,
    /// Bytes for the client its writer has not taken yet.
    down_pending: Vec<u8>,
    phase: Phase,
    scan: Scan,
    /// Some byte of the current request's body went upstream.
    body_sent: bool,
    /// The upstream's TLS failed (its certificate, most often): the client gets a 502.
    upstream_error: Option<String>,
    /// The client ended: so did the stream to the upstream.
    up_shut: bool,
    /// `up_pending` holds a secret's value (zeroed once sent).
    holds_value: bool,
    /// The answers, on their way back: framing undone, values the server echoes become
    /// placeholders.
    answers: Answers,
    tmp: Vec<u8>,
}

/// How a connection to terminate reaches us.
pub(super) enum Mode {
    /// Both sides TLS.
    Tls,
    /// Plain HTTP both ways: only to a loopback address (the bytes never leave the host).
    Plain,
}

impl<'a> Session<'a> {
    /// Set up both ends. `first` holds the client's bytes read so far (a checked
    /// ClientHello, or the start of a plain request).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        shared: &'a Arc<Shared>,
        client: &TcpStream,
        upstream: &TcpStream,
        host: &'a Host,
        port: u16,
        first: &[u8],
        mode: Mode,
        counters: Arc<Counters>,
    ) {
        let (Ok(c), Ok(u)) = (client.try_clone(), upstream.try_clone()) else {
            return;
        };
        let (ctls, utls) = match mode {
            Mode::Plain => (None, None),
            Mode::Tls => {
                let Some(tls) = shared.tls.as_ref() else {
                    return;
                };
                match (tls.server_for(host), tls.client_for(host)) {
                    (Ok(s), Ok(c)) => (Some(Connection::Server(s)), Some(Connection::Client(c))),
                    (Err(e), _) | (_, Err(e)) => {
                        shared.note(&format!("sandbox-run: network: {e}"));
                        return;
                    }
                }
            }
        };
        let _ = c.set_nodelay(true);
        let _ = u.set_nodelay(true);
        if c.set_nonblocking(true).is_err() || u.set_nonblocking(true).is_err() {
            return;
        }
        let mut s = Session {
            shared,
            host,
            port,
            counters,
            client: End::new(c, ctls),
            upstream: End::new(u, utls),
            cbuf: Vec::new(),
            up_pending: Vec::new(),
            down_pending: Vec::new(),
            phase: Phase::Head,
            scan: Scan::default(),
            body_sent: false,
            upstream_error: None,
            up_shut: false,
            holds_value: false,
            answers: Answers::default(),
            tmp: vec![0; CHUNK],
        };
        let stop = match s.client.feed(first) {
            Ok(()) => s.relay(),
            Err(_) => Stop::Cut,
        };
        s.end(stop);
    }

    fn relay(&mut self) -> Stop {
        let mut hup = [false; 2];
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                return Stop::Cut;
            }
            // Move what can be moved, until nothing moves.
            loop {
                let mut progress = false;
                match self.client.fill() {
                    Ok(p) => progress |= p,
                    // a client that fails its TLS (it does not trust the run's CA, most
                    // often) gets the alert rustls queued
                    Err(_) => return Stop::Done,
                }
                match self.upstream.fill() {
                    Ok(p) => progress |= p,
                    Err(e) if self.upstream_error.is_none() => {
                        self.upstream_error = Some(e);
                        progress = true;
                    }
                    Err(_) => {}
                }
                if let Some(e) = self.upstream_error.take() {
                    if self.client.handshaking() {
                        self.upstream_error = Some(e);
                        if self.client.eof {
                            return Stop::Cut;
                        }
                    } else {
                        return self.upstream_failed(&e);
                    }
                }
                match self.pump_up() {
                    Ok(p) => progress |= p,
                    Err(stop) => return stop,
                }
                match self.pump_down() {
                    Ok(p) => progress |= p,
                    Err(stop) => return stop,
                }
                let idle = !progress;
                for end in [&mut self.client, &mut self.upstream] {
                    if end.should_flush(idle) {
                        match end.flush() {
                            Ok(p) => progress |= p,
                            Err(()) => return Stop::Cut,
                        }
                    }
                }
                // (a failed upstream waits for the client's handshake, to answer it)
                let failed = self.upstream_error.is_some();
                if self.client.closed && self.upstream.closed && !failed {
                    return Stop::Done;
                }
                if self.upstream.closed && self.answers.holds() {
                    // the answer ended: what was held as a possible value was none
                    let rest = self.answers.finish();
                    self.down_pending.extend_from_slice(&rest);
                    progress = true;
                }
                if self.upstream.closed && self.down_pending.is_empty() && !failed {
                    // the server ended: what it sent reaches the client, then the end
                    return Stop::Done;
                }
                if !progress {
                    break;
                }
            }
            let ci = self.client.wants_read() && self.cbuf.len() < CLIENT_BUFFER;
            let ui = self.upstream.wants_read() && self.down_pending.is_empty();
            let want = [
                flags(ci, self.client.wants_write()),
                flags(ui, self.upstream.wants_write()),
            ];
            // A socket that hung up is left out while nothing is asked of it: poll would
            // report it again and again.
            let mut fds = Vec::with_capacity(2);
            let mut which = Vec::with_capacity(2);
            for (i, sock) in [&self.client.sock, &self.upstream.sock]
                .into_iter()
                .enumerate()
            {
                if !want[i].is_empty() || !hup[i] {
                    fds.push(PollFd::new(sock.as_fd(), want[i]));
                    which.push(i);
                }
            }
            if fds.is_empty() {
                return Stop::Cut;
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return Stop::Cut,
            }
            let mut readable = [false; 2];
            for (fd, &i) in fds.iter().zip(&which) {
                let r = fd.revents().unwrap_or(PollFlags::empty());
                hup[i] |= r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR);
                readable[i] =
                    r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR);
            }
            drop(fds);
            self.client.ready |= readable[0];
            self.upstream.ready |= readable[1];
        }
    }

    /// Client → upstream: frame, check and inject each request; scan bodies.
    fn pump_up(&mut self) -> Result<bool, Stop> {
        let mut progress = false;
        loop {
            if !self.up_pending.is_empty() {
                let n = self.upstream.give(&self.up_pending);
                self.up_pending.drain(..n);
                self.counters.up.fetch_add(n as u64, Ordering::Relaxed);
                progress |= n > 0;
                if !self.up_pending.is_empty() {
                    return Ok(progress);
                }
                if std::mem::take(&mut self.holds_value) {
                    // A head that held a value: its bytes do not stay in the heap (rustls
                    // keeps only the encrypted record).
                    let cap = self.up_pending.capacity();
                    self.up_pending.resize(cap, 0);
                    self.up_pending.clear();
                }
            }
            if self.cbuf.len() < CLIENT_BUFFER {
                let room = (CLIENT_BUFFER - self.cbuf.len()).min(CHUNK);
                let n = self.client.take(&mut self.tmp[..room]);
                self.cbuf.extend_from_slice(&self.tmp[..n]);
                progress |= n > 0;
            }
            // Nothing goes upstream before its certificate was checked.
            if self.cbuf.is_empty() || self.upstream.handshaking() {
                break;
            }
            if !self.frame()? {
                break;
            }
            progress = true;
        }
        if self.client.closed && self.cbuf.is_empty() && self.up_pending.is_empty() {
            if matches!(self.phase, Phase::Head | Phase::Raw) && !self.up_shut {
                // The client is done: so is the request stream (a half-close passes on).
                self.up_shut = true;
                self.upstream.close();
                let _ = self.upstream.flush();
                if !self.upstream.wants_write() {
                    let _ = self.upstream.sock.shutdown(Shutdown::Write);
                }
            }
            if !matches!(self.phase, Phase::Head | Phase::Raw) {
                // the client ended in the middle of a body
                return Err(Stop::Cut);
            }
        }
        Ok(progress)
    }

    /// One step of framing `cbuf`: `Ok(false)` when it needs more bytes.
    fn frame(&mut self) -> Result<bool, Stop> {
        match &mut self.phase {
            Phase::Head => {
                let head = match http1::parse_head(&self.cbuf) {
                    Ok(None) => return Ok(false),
                    Ok(Some(h)) => h,
                    Err(e) => return Err(Stop::Refuse("400 Bad Request", e)),
                };
                // a port left out of the Host header is the scheme's own
                let default_port = if self.client.tls.is_some() { 443 } else { 80 };
                if let Err(e) = http1::check_host(
                    &head.target,
                    head.host.as_deref(),
                    self.host,
                    self.port,
                    default_port,
                ) {
                    return Err(Stop::Refuse("403 Forbidden", e));
                }
                // the answer must come back in a form the scan reads
                let Some(asked) = http1::ask_identity(&self.cbuf[..head.len]) else {
                    return Err(Stop::Refuse("400 Bad Request", "malformed request".into()));
                };
                self.answers.asked(&head.method, head.upgrade);
                let secrets = &self.shared.config.secrets;
                let injected = match secrets.inject(self.host, self.port, &asked) {
                    Ok((out, counts)) => {
                        self.shared.injected(&counts);
                        self.holds_value = !counts.is_empty();
                        out
                    }
                    Err(i) => return Err(self.misdirected(i)),
                };
                self.cbuf.drain(..head.len);
                self.up_pending = injected;
                self.scan = Scan::default();
                self.body_sent = false;
                self.phase = match (head.upgrade, head.body) {
                    (true, _) => Phase::Raw,
                    (false, Body::None) => Phase::Head,
                    (false, Body::Length(n)) => Phase::Length(n),
                    (false, Body::Chunked) => Phase::Chunked(Chunked::default()),
                };
            }
            Phase::Length(left) => {
                let n = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(self.cbuf.len());
                *left -= n as u64;
                if *left == 0 {
                    self.phase = Phase::Head;
                }
                self.body(n, None)?;
            }
            Phase::Chunked(c) => {
                let secrets = &self.shared.config.secrets;
                let scan = &mut self.scan;
                let mut found = None;
                let n = match c.advance(&self.cbuf, &mut |d| {
                    if found.is_none() {
                        found = scan.feed(secrets, d);
                    }
                }) {
                    Ok(n) => n,
                    Err(e) if self.body_sent => {
                        let _ = e;
                        return Err(Stop::Cut);
                    }
                    Err(e) => return Err(Stop::Refuse("400 Bad Request", e)),
                };
                if c.is_done() {
                    self.phase = Phase::Head;
                }
                if n == 0 {
                    return Ok(false);
                }
                self.body(n, Some(found))?;
            }
            Phase::Raw => {
                let n = self.cbuf.len();
                self.body(n, None)?;
            }
        }
        Ok(true)
    }

    /// The next `n` bytes of `cbuf` are body (or raw) bytes: scanned (unless `scanned`
    /// gives the chunked decoder's verdict), then sent.
    fn body(&mut self, n: usize, scanned: Option<Option<usize>>) -> Result<(), Stop> {
        let found = match scanned {
            Some(f) => f,
            None => self.scan.feed(&self.shared.config.secrets, &self.cbuf[..n]),
        };
        if let Some(i) = found {
            let stop = self.misdirected(i);
            return Err(if self.body_sent { Stop::Cut } else { stop });
        }
        self.up_pending.extend_from_slice(&self.cbuf[..n]);
        self.cbuf.drain(..n);
        self.body_sent |= n > 0;
        Ok(())
    }

    /// Upstream → client, as it comes.
    fn pump_down(&mut self) -> Result<bool, Stop> {
        let mut progress = false;
        loop {
            if !self.down_pending.is_empty() {
                let n = self.client.give(&self.down_pending);
                self.down_pending.drain(..n);
                self.counters.down.fetch_add(n as u64, Ordering::Relaxed);
                progress |= n > 0;
                if !self.down_pending.is_empty() {
                    return Ok(progress);
                }
            }
            let n = self.upstream.take(&mut self.tmp);
            if n == 0 {
                return Ok(progress);
            }
            progress = true;
            // a value the server echoes goes back as its placeholder (`answer`)
            let out = match self
                .answers
                .feed(&self.shared.config.secrets, &self.tmp[..n])
            {
                Ok(out) => out,
                Err(cut) => {
                    self.shared.cut_answer(self.host, self.port, &cut);
                    return Err(Stop::Cut);
                }
            };
            let m = self.client.give(&out);
            self.counters.down.fetch_add(m as u64, Ordering::Relaxed);
            self.down_pending.extend_from_slice(&out[m..]);
        }
    }

    /// A placeholder of secret `i` where it does not go: recorded, and a 403.
    fn misdirected(&mut self, i: usize) -> Stop {
        let name = self.shared.misdirect(i, self.host, self.port);
        Stop::Refuse(
            "403 Forbidden",
            format!(
                "the request carries the placeholder of secret {name}, which goes only to \
                 its listed hosts, in its request line or headers (never in a body)"
            ),
        )
    }

    /// The upstream's TLS failed before any request went: a 502 over the client's TLS.
    fn upstream_failed(&mut self, e: &str) -> Stop {
        let (host, port) = (self.host, self.port);
        let reason = format!("the server's TLS failed: {e}");
        self.shared.record(host, port, false, &reason);
        // once per host and port, like a denial
        let first = {
            let mut warned = super::lock(&self.shared.warned);
            warned.len() < super::MAX_LOG && warned.insert(format!("tls {host}:{port}"))
        };
        if first {
            self.shared.note(&format!(
                "sandbox-run: network: {host}:{port}: {reason}; its certificate is checked \
                 against the host's CA bundle and --ca-certs (add the CA that signed it with \
                 --ca-certs FILE)"
            ));
        }
        Stop::Refuse(
            "502 Bad Gateway",
            format!(
                "{reason}\nfix: the proxy checks the server's certificate against the host's \
                 CA bundle and --ca-certs: if the server uses a private CA or the host is \
                 behind a TLS-intercepting proxy, add its CA with --ca-certs FILE"
            ),
        )
    }

    fn end(&mut self, stop: Stop) {
        match stop {
            Stop::Cut => {}
            Stop::Done => {
                self.client
                    .give_all(&std::mem::take(&mut self.down_pending));
                self.client.close();
                self.linger();
            }
            Stop::Refuse(status, reason) => {
                let body = format!(
                    "sandbox-run: network: refused a request to {}:{}\nrule: {reason}\n",
                    self.host, self.port
                );
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                self.client.give_all(head.as_bytes());
                self.client.give_all(body.as_bytes());
                self.client.close();
                self.linger();
            }
        }
        let _ = self.client.sock.shutdown(Shutdown::Both);
        let _ = self.upstream.sock.shutdown(Shutdown::Both);
    }

    /// Write what is queued for the client, for a bounded time.
    fn linger(&mut self) {
        let until = std::time::Instant::now() + std::time::Duration::from_millis(LINGER_MS.into());
        while self.client.wants_write() && std::time::Instant::now() < until {
            if self.client.flush().is_err() || self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            if !self.client.wants_write() {
                break;
            }
            let mut fds = [PollFd::new(self.client.sock.as_fd(), PollFlags::POLLOUT)];
            if poll(&mut fds, PollTimeout::from(LINGER_MS)).is_err() {
                return;
            }
        }
        let _ = self.client.sock.shutdown(Shutdown::Write);
    }
}
