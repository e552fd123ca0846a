//! The command's terminal: a pseudo-terminal of sandbox-run's own, never the caller's.
//!
//! A terminal is opened read-write: a command holding the caller's terminal as its stdout
//! could read what the user types during the run (a typed-ahead command, the password for the
//! next program) and change the terminal's modes (echo off) for after the run. So when
//! sandbox-run's stdout or stderr is a terminal, the command gets a new pseudo-terminal in its
//! place: `isatty` is true, colours, line buffering and the window size work as on the
//! caller's terminal, and the supervisor relays what the command writes to the caller's
//! terminal (through [`crate::sink`], never waiting for it). Nothing is ever written to the
//! pty's input, so nothing the user types reaches the command, and the caller's terminal modes
//! are never touched: they are as they were after the run, however it ends.
//!
//! Supervisor side: [`Terminal::choose`] decides what fds 1 and 2 get; without a terminal it
//! costs two `TCGETS` ioctls and nothing else (no pty is made). The pty's output side does no
//! processing (`OPOST` off): the caller's terminal processes the bytes once, as it would have.
//! On `SIGWINCH` the supervisor copies the caller's window size in ([`Pty::copy_size`]); the
//! kernel then signals the pty's foreground process group.
//!
//! Child side: [`take_controlling`], right after the workload's `setsid`, makes the pty its
//! controlling terminal (so `/dev/tty` and `SIGWINCH` work as on a terminal).

use super::{Step, StepError};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// What the command got as its fd 1 or 2 (the report's `sandbox.stdout` and `.stderr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Given {
    /// sandbox-run's own fd, as the caller gave it (a file, a pipe, a socket: never a terminal).
    #[default]
    Inherited,
    /// A pipe of sandbox-run's, relayed or captured by the supervisor.
    Pipe,
    /// A pseudo-terminal of sandbox-run's, relayed to the caller's terminal.
    Pty,
}

impl Given {
    pub fn name(self) -> &'static str {
        match self {
            Given::Inherited => "inherited",
            Given::Pipe => "pipe",
            Given::Pty => "pty",
        }
    }
}

/// A pseudo-terminal made for one run: the supervisor reads `master`; `slave` becomes the
/// command's fd 1 and/or 2 and is dropped by the supervisor once stage 2 holds it (the master
/// then reads EIO once the last process of the sandbox that held it is gone).
pub struct Pty {
    /// Kept for resizing.
    pub master: OwnedFd,
    /// A second fd of the master, for the supervisor's loop to read (and close at its end).
    pub reader: Option<OwnedFd>,
    pub slave: Option<OwnedFd>,
    /// The caller's terminal this pty stands in for (sandbox-run's fd 1 or 2).
    pub caller: RawFd,
}

impl Pty {
    /// A new pty with the window size and modes of the caller's terminal on fd `caller`,
    /// output processing off. Both ends close-on-exec.
    pub fn open_like(caller: RawFd) -> Result<Pty, String> {
        let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
        // SAFETY: posix_openpt/grantpt/unlockpt/ioctl on the fd just opened, owned below.
        let master = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(err("posix_openpt"));
            }
            OwnedFd::from_raw_fd(fd)
        };
        let m = master.as_raw_fd();
        // SAFETY: grantpt and unlockpt on our master; TIOCGPTPEER opens the peer (no path is
        // looked up, so no other devpts instance's pty can be taken for ours).
        let slave = unsafe {
            if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
                return Err(err("unlockpt"));
            }
            let fd = libc::ioctl(
                m,
                libc::TIOCGPTPEER,
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(err("TIOCGPTPEER"));
            }
            OwnedFd::from_raw_fd(fd)
        };
        // SAFETY: tcgetattr/tcsetattr with a termios we own, on the caller's terminal (read
        // only) and our new slave.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(caller, &mut t) == 0 {
                t.c_oflag &= !libc::OPOST;
                libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t);
            }
        }
        let reader = master.try_clone().map_err(|e| format!("dup: {e}"))?;
        let pty = Pty {
            master,
            reader: Some(reader),
            slave: Some(slave),
            caller,
        };
        pty.copy_size();
        Ok(pty)
    }

    /// The caller's window size, copied onto the pty (at the start, and on `SIGWINCH`).
    pub fn copy_size(&self) {
        // SAFETY: TIOCGWINSZ into a winsize we own; TIOCSWINSZ from it onto our master.
        unsafe {
            let mut ws: libc::winsize = std::mem::zeroed();
            if libc::ioctl(self.caller, libc::TIOCGWINSZ, &mut ws) == 0 {
                libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws);
            }
        }
    }
}

/// Is sandbox-run's fd `fd` a terminal?
pub fn is_terminal(fd: RawFd) -> bool {
    // SAFETY: isatty only queries the fd.
    unsafe { libc::isatty(fd) == 1 }
}

/// What sandbox-run gives the command as fds 1 and 2, and the ptys it made for that.
pub struct Terminal {
    pub given: [Given; 2],
    /// One pty per caller's terminal: `[fd 1's, fd 2's]`; both on the first when fds 1 and 2
    /// are the same terminal (the command's stdout and stderr interleave there as they would).
    pub ptys: [Option<Pty>; 2],
}

impl Terminal {
    /// `piped`: the supervisor captures the output (pipes for both, as always). Otherwise each
    /// of fds 1 and 2 that is a terminal gets a pty (a pipe, relayed, if none can be made: the
    /// command never gets the caller's terminal), and the others are inherited.
    pub fn choose(piped: bool) -> Terminal {
        let mut t = Terminal {
            given: [Given::Inherited; 2],
            ptys: [None, None],
        };
        if piped {
            t.given = [Given::Pipe; 2];
            return t;
        }
        let tty = [is_terminal(1), is_terminal(2)];
        if tty == [false, false] {
            return t;
        }
        let same = tty == [true, true] && same_terminal(1, 2);
        for (i, &is_tty) in tty.iter().enumerate() {
            if !is_tty || (i == 1 && same) {
                continue;
            }
            match Pty::open_like(i as RawFd + 1) {
                Ok(p) => {
                    t.given[i] = Given::Pty;
                    t.ptys[i] = Some(p);
                }
                Err(e) => {
                    crate::sink::line(&format!(
                        "sandbox-run: terminal: no pseudo-terminal for the command ({e}); its {} is a pipe",
                        if i == 0 { "stdout" } else { "stderr" }
                    ));
                    t.given[i] = Given::Pipe;
                }
            }
        }
        if same {
            t.given[1] = t.given[0];
        }
        t
    }

    /// The slave's fd for the command's fd `1 + i`, while the supervisor still holds it.
    pub fn slave_for(&self, i: usize) -> Option<RawFd> {
        if self.given[i] != Given::Pty {
            return None;
        }
        let p = self.ptys[i].as_ref().or(self.ptys[0].as_ref())?;
        p.slave.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Whether any pty was made.
    pub fn any(&self) -> bool {
        self.ptys.iter().any(Option::is_some)
    }
}

/// Are fds `a` and `b` the same terminal device?
fn same_terminal(a: RawFd, b: RawFd) -> bool {
    let rdev = |fd| {
        // SAFETY: fstat into a stat we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_rdev)
    };
    matches!((rdev(a), rdev(b)), (Some(x), Some(y)) if x == y)
}

/// Child side, right after the workload's `setsid`: the pty on its fd 1 (or 2) becomes its
/// controlling terminal. Its fds 1 and 2 are a terminal only when they are sandbox-run's pty
/// ([`Terminal::choose`]); otherwise nothing is done. Raw ioctls only (after fork).
pub fn take_controlling() -> Result<(), StepError> {
    for fd in [1, 2] {
        // SAFETY: isatty and TIOCSCTTY (argument 0: never steal a terminal another session
        // holds) on our own fds.
        unsafe {
            if libc::isatty(fd) == 1 {
                if libc::ioctl(fd, libc::TIOCSCTTY, 0) != 0 {
                    return Err(StepError::last(Step::Terminal));
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pty_takes_the_callers_size_and_does_no_output_processing() {
        // The "caller's terminal": a pty of the test's own, with a size.
        let caller = Pty::open_like(-1).expect("a pty");
        let ws = libc::winsize {
            ws_row: 33,
            ws_col: 101,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ from a winsize we own onto our own master.
        assert_eq!(
            unsafe { libc::ioctl(caller.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
            0
        );
        let slave = caller.slave.as_ref().unwrap().as_raw_fd();
        let ours = Pty::open_like(slave).expect("a pty like the caller's");
        let mut got: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ into a winsize we own, tcgetattr into a termios we own.
        unsafe {
            assert_eq!(
                libc::ioctl(
                    ours.slave.as_ref().unwrap().as_raw_fd(),
                    libc::TIOCGWINSZ,
                    &mut got
                ),
                0
            );
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(
                libc::tcgetattr(ours.slave.as_ref().unwrap().as_raw_fd(), &mut t),
                0
            );
            assert_eq!(t.c_oflag & libc::OPOST, 0);
        }
        assert_eq!((got.ws_row, got.ws_col), (33, 101));
    }

    #[test]
    fn without_a_terminal_nothing_is_made() {
        // cargo test's fds 1 and 2 are pipes or files under the harness.
        if is_terminal(1) || is_terminal(2) {
            return;
        }
        let t = Terminal::choose(false);
        assert_eq!(t.given, [Given::Inherited; 2]);
        assert!(!t.any());
        assert_eq!(Terminal::choose(true).given, [Given::Pipe; 2]);
    }
}
