//! One D-Bus connection over a unix socket: connect, authenticate (`EXTERNAL`, the caller's
//! uid, as every D-Bus client does on Linux), then send messages and read them back, every
//! step against one deadline.
//!
//! Blocking and single-threaded: each read and write waits at most until the deadline
//! (`SO_RCVTIMEO`/`SO_SNDTIMEO` set to what is left), so a bus or a peer that stops answering
//! costs the caller that long, never more.

use super::wire::{Kind, Message, Value, WireError};
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The longest line of the authentication exchange this client accepts.
const MAX_AUTH_LINE: usize = 512;

/// A failure, naming the step.
#[derive(Debug)]
pub enum Error {
    /// A system call failed.
    Io { step: &'static str, err: io::Error },
    /// The deadline passed.
    Timeout { step: &'static str },
    /// The peer closed the connection.
    Closed { step: &'static str },
    /// The peer refused the authentication (its line).
    Auth(String),
    /// Bytes that are not D-Bus, or a message this client does not accept.
    Protocol(WireError),
    /// The peer answered a call with an error: its name and message.
    Remote { name: String, message: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Error::Io { step, err } => {
                let s = err.to_string();
                write!(f, "{step}: {}", s.split(" (os error").next().unwrap_or(&s))
            }
            Error::Timeout { step } => write!(f, "{step}: no answer in time"),
            Error::Closed { step } => write!(f, "{step}: the connection was closed"),
            Error::Auth(line) => write!(f, "authentication refused: {line}"),
            Error::Protocol(e) => write!(f, "protocol: {e}"),
            Error::Remote { name, message } => write!(f, "{name}: {message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<WireError> for Error {
    fn from(e: WireError) -> Error {
        Error::Protocol(e)
    }
}

/// The socket path of the first `unix:path=` address in a D-Bus address list such as
/// `$DBUS_SESSION_BUS_ADDRESS` (`unix:path=/run/user/1000/bus;...`), its `%XX` escapes
/// decoded. Other transports (abstract sockets, tcp) are not used: a path can be checked for
/// its owner.
pub fn unix_path(addresses: &str) -> Option<PathBuf> {
    for addr in addresses.split(';') {
        let Some(params) = addr.strip_prefix("unix:") else {
            continue;
        };
        for kv in params.split(',') {
            if let Some(v) = kv.strip_prefix("path=") {
                return unescape(v).map(|b| {
                    use std::os::unix::ffi::OsStringExt;
                    PathBuf::from(std::ffi::OsString::from_vec(b))
                });
            }
        }
    }
    None
}

fn unescape(v: &str) -> Option<Vec<u8>> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The `EXTERNAL` mechanism's initial response: the uid in decimal, hex-encoded
/// (uid 1000 is `31303030`).
pub fn external_id(uid: u32) -> String {
    uid.to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An authenticated connection.
pub struct Connection {
    sock: UnixStream,
    deadline: Instant,
    serial: u32,
    /// Bytes read but not yet parsed.
    inbox: Vec<u8>,
}

impl Connection {
    /// Connect to the unix socket at `path` and authenticate as `uid` (the caller's effective
    /// uid: the peer checks it against the socket's credentials). Nothing is sent on the bus
    /// yet: call [`Connection::hello`] on a message bus, nothing on a direct connection.
    pub fn open(path: &Path, uid: u32, deadline: Instant) -> Result<Connection, Error> {
        use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
        let step = "connect";
        let nix_err = |e: nix::errno::Errno| Error::Io {
            step,
            err: io::Error::from_raw_os_error(e as i32),
        };
        let addr = UnixAddr::new(path).map_err(nix_err)?;
        // Non-blocking connect: a listener whose backlog is full answers EAGAIN at once
        // instead of holding us past the deadline.
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(nix_err)?;
        connect(fd.as_raw_fd(), &addr).map_err(nix_err)?;
        let sock = UnixStream::from(fd);
        sock.set_nonblocking(false)
            .map_err(|err| Error::Io { step, err })?;
        let mut c = Connection {
            sock,
            deadline,
            serial: 0,
            inbox: Vec::new(),
        };
        c.auth(uid)?;
        Ok(c)
    }

    fn auth(&mut self, uid: u32) -> Result<(), Error> {
        // The NUL byte first (it carries the credentials on BSDs; Linux reads them from the
        // socket), then the mechanism with the uid.
        let hello = format!("\0AUTH EXTERNAL {}\r\n", external_id(uid));
        self.write_all("auth", hello.as_bytes())?;
        let line = self.read_line("auth")?;
        if !line.starts_with("OK ") {
            return Err(Error::Auth(line));
        }
        self.write_all("auth", b"BEGIN\r\n")
    }

    fn read_line(&mut self, step: &'static str) -> Result<String, Error> {
        loop {
            if let Some(i) = self.inbox.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.inbox.drain(..i + 2).take(i).collect();
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            if self.inbox.len() > MAX_AUTH_LINE {
                return Err(Error::Auth("an answer line too long".into()));
            }
            self.fill(step)?;
        }
    }

    /// What is left of the deadline, or the timeout error.
    fn left(&self, step: &'static str) -> Result<std::time::Duration, Error> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout { step });
        }
        Ok(left)
    }

    fn write_all(&mut self, step: &'static str, mut b: &[u8]) -> Result<(), Error> {
        while !b.is_empty() {
            let left = self.left(step)?;
            self.sock
                .set_write_timeout(Some(left))
                .map_err(|err| Error::Io { step, err })?;
            match self.sock.write(b) {
                Ok(0) => return Err(Error::Closed { step }),
                Ok(n) => b = &b[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(Error::Timeout { step }),
                Err(err) => return Err(Error::Io { step, err }),
            }
        }
        Ok(())
    }

    /// Read what the socket has (at least one byte) into the inbox.
    fn fill(&mut self, step: &'static str) -> Result<(), Error> {
        let mut chunk = [0u8; 4096];
        loop {
            let left = self.left(step)?;
            self.sock
                .set_read_timeout(Some(left))
                .map_err(|err| Error::Io { step, err })?;
            match self.sock.read(&mut chunk) {
                Ok(0) => return Err(Error::Closed { step }),
                Ok(n) => {
                    self.inbox.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(Error::Timeout { step }),
                Err(err) => return Err(Error::Io { step, err }),
            }
        }
    }

    /// Send `m` with the next serial; returns the serial.
    pub fn send(&mut self, m: &Message) -> Result<u32, Error> {
        self.serial = self.serial.checked_add(1).unwrap_or(1);
        let bytes = m.encode(self.serial)?;
        self.write_all("send", &bytes)?;
        Ok(self.serial)
    }

    /// The next message from the peer.
    pub fn receive(&mut self) -> Result<Message, Error> {
        let step = "receive";
        while self.inbox.len() < 16 {
            self.fill(step)?;
        }
        let head: [u8; 16] = self.inbox[..16].try_into().expect("16 bytes");
        let total = Message::total_len(&head)?;
        while self.inbox.len() < total {
            self.fill(step)?;
        }
        let m = Message::decode(&self.inbox[..total]);
        self.inbox.drain(..total);
        Ok(m?)
    }

    /// Send the call `m` and read until its answer: the reply's body, or the error the peer
    /// sent. Every other message read meanwhile (signals) goes to `other`.
    pub fn call(
        &mut self,
        m: &Message,
        other: &mut dyn FnMut(Message),
    ) -> Result<Vec<Value>, Error> {
        let serial = self.send(m)?;
        loop {
            let r = self.receive()?;
            if r.reply_serial != Some(serial) || r.kind == Kind::Signal {
                other(r);
                continue;
            }
            match r.kind {
                Kind::MethodReturn => return Ok(r.body),
                Kind::Error => {
                    return Err(Error::Remote {
                        name: r.error_name.unwrap_or_default(),
                        message: r
                            .body
                            .first()
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    })
                }
                _ => other(r),
            }
        }
    }

    /// On a message bus: the `Hello` every connection must send first. Returns the unique
    /// name the bus gave this connection (`:1.42`).
    pub fn hello(&mut self) -> Result<String, Error> {
        let body = self.call(&bus_call("Hello", vec![]), &mut |_| {})?;
        match body.first().and_then(Value::as_str) {
            Some(name) => Ok(name.to_string()),
            None => Err(Error::Protocol(WireError(
                "Hello answered without a name".into(),
            ))),
        }
    }

    /// On a message bus: have it route the messages that match `rule` to us.
    pub fn add_match(&mut self, rule: &str) -> Result<(), Error> {
        self.call(
            &bus_call("AddMatch", vec![Value::Str(rule.into())]),
            &mut |_| {},
        )
        .map(drop)
    }
}

/// A call of the message bus itself (`org.freedesktop.DBus`).
pub fn bus_call(member: &str, body: Vec<Value>) -> Message {
    Message::call(
        Some("org.freedesktop.DBus"),
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        member,
        body,
    )
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}
