//! Moving the bytes of open tunnels: one epoll thread with non-blocking `splice(2)` through a
//! pipe per direction, or blocking copies on the connection's own thread where that cannot
//! start.

use super::{lock, Counters, Shared, BUF, STACK};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// An open tunnel: the relay thread moves it from here on, or, where that cannot start, the
/// connection's own thread with blocking copies.
pub(super) fn hand_off(
    shared: &Arc<Shared>,
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    counters: Arc<Counters>,
) {
    let ready = client.set_nonblocking(true).is_ok() && upstream.set_nonblocking(true).is_ok();
    if let (true, Ok(up), Ok(down), Some(r)) = (ready, Pipe::new(), Pipe::new(), Relay::get(shared))
    {
        r.add(Tunnel {
            id,
            client,
            upstream,
            up,
            down,
            counters,
            moved: false,
        });
        return;
    }
    if client.set_nonblocking(false).is_ok() && upstream.set_nonblocking(false).is_ok() {
        relay_threads(&client, &upstream, &counters);
    }
    shared.finish(id);
}

/// The one thread that moves the bytes of every open tunnel: an edge-triggered epoll loop over
/// both sockets of each, each direction through a pipe with non-blocking `splice(2)`.
pub(super) struct Relay {
    epoll: OwnedFd,
    /// An eventfd: new tunnels in `inbox`, or `quit`.
    wake: OwnedFd,
    inbox: Mutex<Vec<Tunnel>>,
    quit: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The epoll key of the relay's eventfd; a tunnel's key is its slot.
const WAKE: u64 = u64::MAX;
/// Rounds of one tunnel per wakeup before the others get their turn.
const ROUNDS: usize = 32;

impl Relay {
    /// The relay thread, started now if it is not running yet; `None` when it cannot start.
    pub(super) fn get(shared: &Arc<Shared>) -> Option<Arc<Relay>> {
        let mut slot = lock(&shared.relay);
        if let Some(r) = slot.as_ref() {
            return Some(r.clone());
        }
        if shared.stop.load(Ordering::SeqCst) {
            return None;
        }
        // SAFETY: plain syscalls creating fds that we own right away.
        let (epoll, wake) = unsafe {
            let e = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            if e < 0 {
                return None;
            }
            let e = OwnedFd::from_raw_fd(e);
            let w = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
            if w < 0 {
                return None;
            }
            (e, OwnedFd::from_raw_fd(w))
        };
        let r = Arc::new(Relay {
            epoll,
            wake,
            inbox: Mutex::new(Vec::new()),
            quit: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        r.watch(r.wake.as_raw_fd(), WAKE, libc::EPOLLIN as u32)
            .ok()?;
        let (r2, s2) = (r.clone(), shared.clone());
        let t = std::thread::Builder::new()
            .name("relay".into())
            .stack_size(STACK)
            .spawn(move || r2.run(&s2))
            .ok()?;
        *lock(&r.thread) = Some(t);
        *slot = Some(r.clone());
        Some(r)
    }

    fn watch(&self, fd: RawFd, key: u64, events: u32) -> std::io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: key };
        // SAFETY: epoll_ctl on fds we own, with a valid event.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn unwatch(&self, fd: RawFd) {
        // SAFETY: as in `watch` (the event is ignored by EPOLL_CTL_DEL).
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    fn poke(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd (it cannot fail short of overflow).
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    fn add(&self, t: Tunnel) {
        lock(&self.inbox).push(t);
        self.poke();
    }

    /// End the thread (its tunnels close) and wait for it.
    pub(super) fn quit(&self) {
        self.quit.store(true, Ordering::SeqCst);
        self.poke();
        let t = lock(&self.thread).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    fn run(&self, shared: &Arc<Shared>) {
        let mut slots: Vec<Option<Tunnel>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        // Tunnels that still had bytes to move when their turn ended.
        let mut again: Vec<usize> = Vec::new();
        let mut work: Vec<usize> = Vec::new();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        loop {
            let timeout = if again.is_empty() { -1 } else { 0 };
            // SAFETY: epoll_wait into an array of the length given.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    timeout,
                )
            };
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            work.clear();
            work.append(&mut again);
            for ev in &events[..n as usize] {
                let key = ev.u64;
                if key != WAKE {
                    work.push(key as usize);
                    continue;
                }
                let mut b = [0u8; 8];
                // SAFETY: an 8-byte read from our eventfd.
                unsafe { libc::read(self.wake.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
                if self.quit.load(Ordering::SeqCst) {
                    break;
                }
                let new = std::mem::take(&mut *lock(&self.inbox));
                for t in new {
                    let slot = free.pop().unwrap_or(slots.len());
                    if slot == slots.len() {
                        slots.push(None);
                    }
                    // Edge-triggered: one wakeup per change, so every turn moves what it can
                    // until splice would block ([`Tunnel::turn`]).
                    let evs =
                        (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
                    let (c, u) = (t.client.as_raw_fd(), t.upstream.as_raw_fd());
                    if self.watch(c, slot as u64, evs).is_err()
                        || self.watch(u, slot as u64, evs).is_err()
                    {
                        self.unwatch(c);
                        free.push(slot);
                        t.cut();
                        shared.finish(t.id);
                        continue;
                    }
                    slots[slot] = Some(t);
                    work.push(slot);
                }
            }
            if self.quit.load(Ordering::SeqCst) {
                break;
            }
            work.sort_unstable();
            work.dedup();
            for &slot in &work {
                let Some(t) = slots.get_mut(slot).and_then(|t| t.as_mut()) else {
                    continue;
                };
                let end = match t.turn() {
                    Turn::Idle => continue,
                    Turn::More => {
                        again.push(slot);
                        continue;
                    }
                    end => end,
                };
                let Some(t) = slots[slot].take() else {
                    continue;
                };
                self.unwatch(t.client.as_raw_fd());
                self.unwatch(t.upstream.as_raw_fd());
                free.push(slot);
                if end == Turn::Refused {
                    // splice refused before any byte moved: blocking copies on a thread.
                    let s = shared.clone();
                    let id = t.id;
                    let spawned = std::thread::Builder::new()
                        .stack_size(STACK)
                        .spawn(move || {
                            if t.client.set_nonblocking(false).is_ok()
                                && t.upstream.set_nonblocking(false).is_ok()
                            {
                                relay_threads(&t.client, &t.upstream, &t.counters);
                            }
                            s.finish(t.id);
                        });
                    if spawned.is_err() {
                        shared.finish(id);
                    }
                    continue;
                }
                if end == Turn::Failed {
                    t.cut();
                }
                shared.finish(t.id);
            }
        }
        for t in slots.into_iter().flatten() {
            t.cut();
            shared.finish(t.id);
        }
        for t in std::mem::take(&mut *lock(&self.inbox)) {
            t.cut();
            shared.finish(t.id);
        }
    }
}

/// Both directions of one tunnel, moved by the relay thread.
struct Tunnel {
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    /// client -> upstream
    up: Pipe,
    /// upstream -> client
    down: Pipe,
    counters: Arc<Counters>,
    /// A byte has moved (a refused splice then is a failure, not a reason to fall back).
    moved: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// Waits for its sockets.
    Idle,
    /// Has more to move: give the others a turn, then come back.
    More,
    /// Both directions ended with end-of-file.
    Done,
    /// A connection failed: cut both.
    Failed,
    /// splice is refused here: fall back to copies.
    Refused,
}

impl Tunnel {
    fn turn(&mut self) -> Turn {
        for _ in 0..ROUNDS {
            let progress = match (
                self.up
                    .step(&self.client, &self.upstream, &self.counters.up),
                self.down
                    .step(&self.upstream, &self.client, &self.counters.down),
            ) {
                (Ok(a), Ok(b)) => a || b,
                (Err(Some(_)), _) | (_, Err(Some(_))) if !self.moved => return Turn::Refused,
                _ => return Turn::Failed,
            };
            self.moved |= progress;
            if self.up.done && self.down.done {
                return Turn::Done;
            }
            if !progress {
                return Turn::Idle;
            }
        }
        Turn::More
    }

    fn cut(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }
}

/// One direction of a tunnel: a pipe between the two sockets.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    /// Bytes in the pipe.
    held: usize,
    cap: usize,
    /// The source reached end-of-file.
    eof: bool,
    /// The destination was half-closed after the last byte.
    done: bool,
}

/// Larger pipes move more per call; the default (64 KiB) when the user's pipe quota says no.
const PIPE: usize = 1 << 20;

impl Pipe {
    fn new() -> nix::Result<Pipe> {
        use nix::fcntl::OFlag;
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // SAFETY: fcntl on a pipe we own.
        let cap = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE as libc::c_int) };
        let cap = if cap > 0 { cap as usize } else { 64 * 1024 };
        Ok(Pipe {
            r,
            w,
            held: 0,
            cap,
            eof: false,
            done: false,
        })
    }

    /// Move what can be moved now, without blocking: `Ok(true)` if anything moved.
    /// `Err(Some(errno))` when splice itself is refused, `Err(None)` when the connection
    /// failed.
    fn step(
        &mut self,
        from: &TcpStream,
        to: &TcpStream,
        count: &AtomicU64,
    ) -> Result<bool, Option<i32>> {
        let mut progress = false;
        if !self.eof && self.held < self.cap {
            match splice(from.as_raw_fd(), self.w.as_raw_fd(), self.cap - self.held)? {
                Some(0) => {
                    self.eof = true;
                    progress = true;
                }
                Some(n) => {
                    self.held += n;
                    progress = true;
                }
                None => {}
            }
        }
        if self.held > 0 {
            if let Some(m) = splice(self.r.as_raw_fd(), to.as_raw_fd(), self.held)? {
                if m == 0 {
                    return Err(None);
                }
                self.held -= m;
                count.fetch_add(m as u64, Ordering::Relaxed);
                progress = true;
            }
        }
        if self.eof && self.held == 0 && !self.done {
            self.done = true;
            let _ = to.shutdown(Shutdown::Write);
        }
        Ok(progress)
    }
}

/// One non-blocking splice: `Ok(None)` when it would block.
fn splice(from: RawFd, to: RawFd, len: usize) -> Result<Option<usize>, Option<i32>> {
    loop {
        // SAFETY: splice between fds we own, no offsets.
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        match std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
        {
            libc::EINTR => continue,
            libc::EAGAIN => return Ok(None),
            e @ (libc::EINVAL | libc::ENOSYS) => return Err(Some(e)),
            _ => return Err(None),
        }
    }
}

/// The blocking copies where splice is refused (see [`hand_off`]): the download direction on a
/// thread of its own, so a full buffer one way never stalls the other.
fn relay_threads(client: &TcpStream, upstream: &TcpStream, counters: &Arc<Counters>) {
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let k = counters.clone();
    let down = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || copy(&u2, &c2, &k.down));
    copy(client, upstream, &counters.up);
    if let Ok(t) = down {
        let _ = t.join();
    }
}

/// One direction of a tunnel, until end-of-file (then half-close the other side) or an error
/// (then cut both).
fn copy(from: &TcpStream, to: &TcpStream, count: &AtomicU64) {
    if read_write_copy(from, to, count) {
        let _ = to.shutdown(Shutdown::Write);
    } else {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    }
}

/// The plain copy, where splice is not available. `true` at end-of-file.
fn read_write_copy(from: &TcpStream, to: &TcpStream, count: &AtomicU64) -> bool {
    let mut buf = vec![0u8; BUF];
    loop {
        match (&*from).read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => {
                if (&*to).write_all(&buf[..n]).is_err() {
                    return false;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}
