//! The supervisor's writes to the caller's stdout and stderr, when it passes the command's
//! output through (captured from pipes, or relayed from the command's pty where the caller's
//! stdout or stderr is a terminal; see [`crate::supervisor`]): they never wait for the caller. The loop that
//! writes them also enforces the deadline and relays signals, so a caller that stops reading
//! its pipe must not stop that loop; it only slows the command down.
//!
//! How a write avoids waiting depends on what fd 1 or 2 is (fds 1 and 2 themselves stay as
//! the caller gave them: `O_NONBLOCK` on them would change the caller's own open file, which
//! its other processes share):
//! - a pipe, FIFO or terminal: a second open of the same object through `/proc/self/fd/N`,
//!   with `O_NONBLOCK` (a new open file description, ours alone);
//! - a socket (node's child processes get socket pairs): `send(MSG_DONTWAIT)`;
//! - a regular file, `/dev/null`, a block device: plain writes, which no reader holds up;
//! - a pipe or terminal that cannot be opened again (another user's): written only when
//!   `poll` says it has room, [`libc::PIPE_BUF`] bytes at a time (a pipe then takes them all,
//!   unless another writer of the caller's fills it in between).
//!
//! What the caller does not take yet waits in a buffer of at most [`BUF`] bytes; the
//! supervisor reads the command's pipe only when the buffer has room, so a slow caller slows
//! the command (it blocks in its own write) and loses nothing. At the end the supervisor stops
//! waiting ([`Sink::give_up`]): what is left is dropped, counted, and the fd is pointed at
//! `/dev/null` so that none of sandbox-run's later lines can block either.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes a sink holds for a caller that does not read yet.
pub const BUF: usize = 64 * 1024;

/// fds 1 and 2 given up on by an earlier run of this process (`validate --gene` runs several):
/// they point at /dev/null now, and what later runs would pass there is counted as dropped.
static GAVE_UP: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

enum Way {
    /// Our own open of the caller's pipe, FIFO or terminal, with `O_NONBLOCK`.
    Reopened(OwnedFd),
    /// A socket: `send(MSG_DONTWAIT)` on the fd itself.
    Socket,
    /// Writes that no reader holds up (a regular file, a device that is no terminal).
    Plain,
    /// A pipe or terminal not reopened: written after `poll` says it has room.
    Gated,
}

/// sandbox-run's stdout (fd 1) or stderr (fd 2), as the supervisor writes to it.
pub struct Sink {
    fd: RawFd,
    way: Way,
    buf: VecDeque<u8>,
    /// The caller closed its end (or the fd fails): everything is dropped without a word, as a
    /// write to a closed pipe always was.
    gone: bool,
    /// Given up on at the end: what comes later is dropped and counted.
    gave_up: bool,
    /// Bytes of the command's output dropped because the caller did not take them.
    pub dropped: u64,
}

impl Sink {
    /// The sink for fd 1 or 2.
    pub fn open(fd: RawFd) -> Sink {
        let gave_up = given_up(fd).is_some_and(|g| g.load(Ordering::Relaxed));
        Sink {
            fd,
            way: if gave_up { Way::Plain } else { way_of(fd) },
            buf: VecDeque::new(),
            gone: false,
            gave_up,
            dropped: 0,
        }
    }

    /// `stdout` or `stderr`: sandbox-run's stream, for messages.
    pub fn name(&self) -> &'static str {
        if self.fd == 1 {
            "stdout"
        } else {
            "stderr"
        }
    }

    /// Bytes the supervisor may read from the command for this sink now (whatever comes of them
    /// when the sink is gone or given up: they are dropped).
    pub fn room(&self) -> usize {
        if self.gone || self.gave_up {
            usize::MAX
        } else {
            BUF - self.buf.len()
        }
    }

    /// The fd to poll for `POLLOUT`, while something waits for the caller.
    pub fn waiting(&self) -> Option<BorrowedFd<'_>> {
        if self.buf.is_empty() || self.gone || self.gave_up {
            return None;
        }
        Some(match &self.way {
            Way::Reopened(fd) => fd.as_fd(),
            // SAFETY: fd 1 or 2, open for the whole life of the process (std opens /dev/null
            // on a closed one at startup), borrowed for one poll.
            _ => unsafe { BorrowedFd::borrow_raw(self.fd) },
        })
    }

    /// Pass `data` on: written now as far as the caller takes it, the rest kept; what does not
    /// fit in [`BUF`] (only at the end, or with a caller that stopped reading) is dropped and
    /// counted.
    pub fn push(&mut self, data: &[u8]) {
        if self.gone {
            return;
        }
        if self.gave_up {
            self.dropped += data.len() as u64;
            return;
        }
        let mut data = data;
        if self.buf.is_empty() {
            let n = self.write_now(data);
            data = &data[n..];
        }
        if self.gone {
            return;
        }
        let keep = data.len().min(BUF - self.buf.len());
        self.buf.extend(&data[..keep]);
        self.dropped += (data.len() - keep) as u64;
    }

    /// One line of sandbox-run's own, in order with the data; dropped when there is no room.
    /// Whether it was taken (written or kept to write).
    pub fn say(&mut self, line: &str) -> bool {
        let fits = !self.gone && !self.gave_up && line.len() <= BUF - self.buf.len();
        if fits {
            self.push(line.as_bytes());
        }
        fits && !self.gone
    }

    /// Write what waits, as far as the caller takes it; whether anything went.
    pub fn flush(&mut self) -> bool {
        let mut moved = false;
        while !self.buf.is_empty() && !self.gone {
            let (front, _) = self.buf.as_slices();
            let n = match write(&self.way, self.fd, front) {
                Some(n) => n,
                None => {
                    self.gone = true;
                    0
                }
            };
            if n == 0 {
                break;
            }
            self.buf.drain(..n);
            moved = true;
        }
        if self.gone {
            self.buf.clear();
        }
        moved
    }

    /// Stop waiting for the caller: drop what waits, and everything after it, and point the fd
    /// at `/dev/null` so that sandbox-run's later lines to it cannot block (the caller's end
    /// stays as it is). No-op when nothing waits.
    pub fn give_up(&mut self) {
        if self.buf.is_empty() || self.gone || self.gave_up {
            return;
        }
        self.dropped += self.buf.len() as u64;
        self.buf = VecDeque::new();
        self.gave_up = true;
        self.way = Way::Plain;
        if let Some(g) = given_up(self.fd) {
            g.store(true, Ordering::Relaxed);
        }
        // SAFETY: open a constant path; dup2 onto our own fd 1 or 2 (atomic: the fd is never
        // closed in between); close the spare fd we own.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if null >= 0 {
                libc::dup2(null, self.fd);
                libc::close(null);
            }
        }
    }

    /// [`write`], noting a caller that is gone.
    fn write_now(&mut self, data: &[u8]) -> usize {
        write(&self.way, self.fd, data).unwrap_or_else(|| {
            self.gone = true;
            0
        })
    }
}

/// One line of sandbox-run's own on its stderr, from any thread (the proxy's), never waiting
/// for the caller: dropped when the caller does not take it now, or after sandbox-run gave up on
/// its stderr. (`eprintln!` would block in a full pipe while holding std's stderr lock, and
/// every later line of sandbox-run's would then wait for that lock.)
pub fn line(text: &str) -> bool {
    let mut s = Sink::open(2);
    let taken = s.say(&format!("{text}\n"));
    s.flush();
    // what is left when this sink goes is lost
    taken && s.buf.is_empty()
}

/// One write to `fd` (1 or 2) that does not wait for the caller: the bytes taken, 0 when there is
/// no room, `None` when the fd fails (EPIPE: the caller closed its end).
fn write(way: &Way, fd: RawFd, data: &[u8]) -> Option<usize> {
    if data.is_empty() {
        return Some(0);
    }
    loop {
        // SAFETY: writes from a buffer valid for its length to an fd we own or to fd 1/2.
        let r = unsafe {
            match way {
                Way::Reopened(own) => {
                    libc::write(own.as_raw_fd(), data.as_ptr().cast(), data.len())
                }
                Way::Socket => libc::send(
                    fd,
                    data.as_ptr().cast(),
                    data.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                ),
                Way::Plain => libc::write(fd, data.as_ptr().cast(), data.len()),
                Way::Gated => {
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    if libc::poll(&mut p, 1, 0) == 0 {
                        return Some(0);
                    }
                    let n = data.len().min(libc::PIPE_BUF);
                    libc::write(fd, data.as_ptr().cast(), n)
                }
            }
        };
        if r >= 0 {
            return Some(r as usize);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Some(0),
            _ => return None,
        }
    }
}

fn given_up(fd: RawFd) -> Option<&'static AtomicBool> {
    GAVE_UP.get(usize::try_from(fd - 1).ok()?)
}

/// How to write to fd 1 or 2 without waiting for its reader (see the module's doc).
fn way_of(fd: RawFd) -> Way {
    // SAFETY: fstat into a stat we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Way::Plain;
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => return Way::Socket,
        libc::S_IFIFO => {}
        // SAFETY: isatty on an fd of ours.
        libc::S_IFCHR if unsafe { libc::isatty(fd) } == 1 => {}
        _ => return Way::Plain,
    }
    match reopen(fd, &st) {
        Some(own) => Way::Reopened(own),
        None => Way::Gated,
    }
}

/// The object fd `fd` refers to, opened again, write-only and non-blocking; `None` when it
/// cannot be (no /proc, another user's pipe, a FIFO without a reader) or is not the same one.
fn reopen(fd: RawFd, st: &libc::stat) -> Option<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    // SAFETY: open a C string we own; the new fd is ours alone.
    let new = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if new < 0 {
        return None;
    }
    // SAFETY: a fresh fd from open, owned by nobody else.
    let own = unsafe { OwnedFd::from_raw_fd(new) };
    // SAFETY: fstat into a stat we own.
    let mut again: libc::stat = unsafe { std::mem::zeroed() };
    let same = unsafe { libc::fstat(own.as_raw_fd(), &mut again) } == 0
        && again.st_dev == st.st_dev
        && again.st_ino == st.st_ino;
    same.then_some(own)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe as fd `fd` would be: the sink writes to `w` the way it would to fd 1 or 2.
    fn sink_on_pipe() -> (Sink, OwnedFd, OwnedFd) {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let st = {
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstat into a stat we own.
            assert_eq!(unsafe { libc::fstat(w.as_raw_fd(), &mut st) }, 0);
            st
        };
        let own = reopen(w.as_raw_fd(), &st).expect("a pipe reopens through /proc");
        let sink = Sink {
            fd: w.as_raw_fd(),
            way: Way::Reopened(own),
            buf: VecDeque::new(),
            gone: false,
            gave_up: false,
            dropped: 0,
        };
        (sink, r, w)
    }

    fn flags(fd: RawFd) -> i32 {
        // SAFETY: F_GETFL on an fd we own.
        unsafe { libc::fcntl(fd, libc::F_GETFL) }
    }

    #[test]
    fn a_full_pipe_keeps_what_fits_and_the_callers_fd_stays_blocking() {
        let (mut s, r, w) = sink_on_pipe();
        let chunk = vec![7u8; 16384];
        // never blocks: the pipe (64 KiB) fills, then the buffer, then the rest is dropped
        for _ in 0..16 {
            s.push(&chunk);
        }
        assert_eq!(s.buf.len(), BUF);
        assert!(s.dropped > 0);
        assert!(s.waiting().is_some());
        assert_eq!(flags(w.as_raw_fd()) & libc::O_NONBLOCK, 0, "fd untouched");
        // the reader takes some: flush moves more
        let mut b = vec![0u8; 65536];
        nix::unistd::read(&r, &mut b).unwrap();
        assert!(s.flush());
        assert_eq!(s.room(), BUF - s.buf.len());
        drop(r);
        // the reader is gone: everything is dropped quietly
        s.push(&chunk);
        s.flush();
        assert!(s.gone && s.buf.is_empty() && s.waiting().is_none());
    }

    /// A pipe that could not be opened again: written only when poll says it has room, so a
    /// full one does not block either.
    #[test]
    fn a_gated_pipe_never_blocks() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut s = Sink {
            fd: w.as_raw_fd(),
            way: Way::Gated,
            buf: VecDeque::new(),
            gone: false,
            gave_up: false,
            dropped: 0,
        };
        for _ in 0..16 {
            s.push(&[1u8; 16384]);
            s.flush();
        }
        assert_eq!(s.buf.len(), BUF);
        assert!(s.dropped > 0);
        drop(r);
    }

    #[test]
    fn a_regular_file_is_written_plainly() {
        let f = tempfile_in_target();
        assert!(matches!(way_of(f.as_raw_fd()), Way::Plain));
    }

    fn tempfile_in_target() -> std::fs::File {
        let p = std::env::temp_dir().join(format!("sink-test-{}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }
}
