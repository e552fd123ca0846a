//! Stage 2 and pid 1: the part of sandbox-run that runs inside the sandbox, and how the
//! supervisor starts it ([`spawn`]).
//!
//! Stage 2 is a fork of the supervisor: it already holds the plan, so nothing is exec'd or
//! parsed again (the re-exec of the 3.5 MB binary and the plan's round trip through JSON were
//! 1 ms of an 11 ms run). A fork is only safe from a single-threaded process (after
//! a fork the child may not take a lock another thread held), so the supervisor forks only when
//! it has no other thread, which is always the case for a lone run: its threads (the proxy's,
//! the `--stdin` copier) start after stage 2 does. When a thread of an earlier run is still
//! there (a gene's later command), stage 2 is a re-exec of `/proc/self/exe` as before, with the
//! plan as JSON on stdin. Either way stage 2 is single-threaded from its first instruction, so
//! it may unshare a user namespace and fork.
//!
//! Stage 2's fds: 0 a pipe from the supervisor (the plan's length, u64 little-endian, and the
//! plan as JSON when re-exec'd; then one [`JOINED`] byte once the supervisor has moved stage 2
//! into the cgroup leaf, sent at once when the run has no cgroup or when stage 2 was born in
//! the leaf (cgroup v2: `clone3` with `CLONE_INTO_CGROUP`); when stage 2 moves itself (cgroup
//! v1 as root, [`Plan::cgroup_self_join`]) the byte comes once the supervisor has made and
//! limited the leaf, with the leaf's `tasks` files ([`joined_with`]); then `--stdin`'s data),
//! 1 and 2 the command's output (pipes when the supervisor captures, a pseudo-terminal of the
//! supervisor's where the caller's is a terminal: [`crate::layers::pty`]), 3 the record channel.
//! Stage 2 prepares what it can before the byte (seccomp, namespaces), and waits for it before
//! it unshares its cgroup namespace or forks.
//!
//! So on cgroup v1 the supervisor makes the leaf (a directory in each of five hierarchies,
//! the limits, the removal of stale leaves: ~0.3 ms) after the fork, on the other core, while
//! stage 2 sets up its namespaces, instead of before it.

pub mod init;
mod netfds;
pub mod stage2;

use crate::layers::channel;
use crate::plan::Plan;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// argv[1] that selects the re-exec'd stage 2 in `main`.
pub const STAGE2_ARG: &str = "__sandbox-run-stage2";

/// Sent on stage 2's stdin after the plan: stage 2 is now in the cgroup leaf.
pub const JOINED: u8 = b'J';

/// The [`JOINED`] message for a stage 2 that moves itself into its cgroup v1 leaf: the byte,
/// the length of the rest (u32, little-endian), and the leaf's `tasks` files, each ended by a
/// NUL. No file: the run has no cgroup (a best-effort layer this host could not give).
pub fn joined_with(tasks: &[std::path::PathBuf]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut rest = Vec::new();
    for t in tasks {
        rest.extend_from_slice(t.as_os_str().as_bytes());
        rest.push(0);
    }
    let mut m = vec![JOINED];
    m.extend_from_slice(&(rest.len() as u32).to_le_bytes());
    m.extend(rest);
    m
}

/// The largest [`joined_with`] message stage 2 accepts.
pub const JOINED_MAX: u32 = 64 << 10;

/// The largest plan stage 2 accepts (a sanity bound on the length prefix).
pub const PLAN_MAX: u64 = 64 << 20;

/// How stage 2 was started, for `--timings` and the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A fork of the single-threaded supervisor.
    Fork,
    /// The same, born in the cgroup v2 leaf (`clone3` with `CLONE_INTO_CGROUP`).
    ForkIntoCgroup,
    /// A re-exec of /proc/self/exe, the plan sent as JSON.
    Exec,
}

/// The supervisor's handle on stage 2.
pub struct Stage2 {
    pub pid: i32,
    pub start: Start,
    /// Stage 2's stdin: the JOINED byte, then `--stdin`'s data.
    pub stdin: Option<std::fs::File>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl Stage2 {
    /// SIGKILL to our own child, not yet reaped.
    pub fn kill(&self) {
        // SAFETY: kill(2) on the pid of our unreaped child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    /// Reap stage 2: its wait status.
    pub fn wait(&self) -> std::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status of our own child into `status`.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                return Ok(std::process::ExitStatus::from_raw(status));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

/// What stage 2 (and so the command) gets as its fd 1 or 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// sandbox-run's own fd, as the caller gave it.
    Inherit,
    /// A new pipe; its read end is [`Stage2::stdout`] or [`Stage2::stderr`].
    Pipe,
    /// This fd of the supervisor's (a pseudo-terminal's slave, see [`crate::layers::pty`]).
    Give(RawFd),
}

/// Start stage 2 for `plan`, with the record channel's write end `rec_w` as its fd 3 and its
/// stdout and stderr as `outs` says. A fork when this process has no other thread, else
/// a re-exec (see the module's doc); the fork is born in the cgroup v2 directory `cgroup` when
/// one is given and the kernel can (Linux 5.7+), and then [`Stage2::start`] says so: the
/// caller moves it into the leaf otherwise. Sends the plan when it is a re-exec.
pub fn spawn(
    plan: &Plan,
    rec_w: OwnedFd,
    outs: [Out; 2],
    cgroup: Option<&OwnedFd>,
) -> Result<Stage2, String> {
    // A process whose heap may hold a secret's value (its proxy injected them for an
    // earlier command) must not be forked into a sandbox.
    let fork_ok = !crate::net::vault::is_spilled();
    let mut s = if crate::sys::single_threaded() && !exec_forced() && fork_ok {
        fork(plan, &rec_w, outs, cgroup)?
    } else {
        reexec(&rec_w, outs)?
    };
    drop(rec_w);
    if s.start == Start::Exec {
        let json = serde_json::to_vec(plan).map_err(|e| format!("plan: {e}"))?;
        if let Some(stdin) = s.stdin.as_mut() {
            use std::io::Write;
            // A failed write shows up as stage 2's own error record.
            let _ = stdin
                .write_all(&(json.len() as u64).to_le_bytes())
                .and_then(|()| stdin.write_all(&json));
        }
    }
    Ok(s)
}

/// `SANDBOX_RUN_STAGE2=exec` in sandbox-run's environment: always re-exec (the tests run the
/// fallback this way; it only costs the caller time).
fn exec_forced() -> bool {
    std::env::var_os("SANDBOX_RUN_STAGE2").is_some_and(|v| v == "exec")
}

/// A pipe, both ends close-on-exec (the child's copies are dup2'ed into place).
fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {}", e.desc()))
}

fn fork(
    plan: &Plan,
    rec_w: &OwnedFd,
    outs: [Out; 2],
    cgroup: Option<&OwnedFd>,
) -> Result<Stage2, String> {
    let (in_r, in_w) = pipe()?;
    let piped = |o: Out| -> Result<_, String> {
        Ok(match o {
            Out::Pipe => Some(pipe()?),
            _ => None,
        })
    };
    let (out, err) = (piped(outs[0])?, piped(outs[1])?);
    // The fd the child puts in place as its 1 or 2, -1 to keep its own.
    let source = |o: Out, p: &Option<(OwnedFd, OwnedFd)>| match (o, p) {
        (Out::Give(fd), _) => fd,
        (_, Some((_, w))) => w.as_raw_fd(),
        _ => -1,
    };
    let out_w = source(outs[0], &out);
    let err_w = source(outs[1], &err);
    let (rec, input) = (rec_w.as_raw_fd(), in_r.as_raw_fd());
    // Buffered output would be written twice: by us and by the child at its exit.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // SAFETY: this process has no other thread (checked by the caller), so the child inherits
    // no lock held by someone else; it sets up its fds with raw syscalls, runs stage 2, and
    // leaves by _exit (stage2::enter never returns), never unwinding into our frames. Stage 2
    // starts no thread (clone3's condition).
    let (pid, start) =
        match cgroup.map(|fd| unsafe { crate::sys::clone3_into_cgroup(fd.as_raw_fd()) }) {
            Some(Ok(pid)) => (pid, Start::ForkIntoCgroup),
            // Before Linux 5.7, or clone3 refused (a container's seccomp profile): a plain fork,
            // which the supervisor then moves.
            _ => (unsafe { libc::fork() }, Start::Fork),
        };
    match pid {
        -1 => Err(format!(
            "starting stage 2 (fork): {}",
            std::io::Error::last_os_error()
        )),
        0 => {
            // SAFETY: dup2/fcntl/sigprocmask on our own fd table and mask. Every source is >= 3
            // (std opens /dev/null on a closed 0-2 at startup, so our pipes and ptys are above), and
            // fd 3 is set last, after the sources that could have been 3 were copied.
            let ok = unsafe {
                libc::dup2(input, 0) >= 0
                    && (out_w < 0 || libc::dup2(out_w, 1) >= 0)
                    && (err_w < 0 || libc::dup2(err_w, 2) >= 0)
                    && if rec == channel::FD {
                        libc::fcntl(rec, libc::F_SETFD, 0) >= 0
                    } else {
                        libc::dup2(rec, channel::FD) >= 0
                    }
            };
            if !ok {
                // SAFETY: leave at once; the supervisor sees no record and says so.
                unsafe { libc::_exit(125) };
            }
            // SAFETY: as above; an empty mask (the supervisor blocks the signals it relays).
            unsafe {
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            }
            // A panic (debug builds unwind) must never unwind into the supervisor's frames
            // that this copy still has on its stack: their destructors would act twice.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stage2::enter(plan)));
            // SAFETY: leave without running the supervisor's destructors or exit handlers.
            unsafe { libc::_exit(125) }
        }
        pid => Ok(Stage2 {
            pid,
            start,
            stdin: Some(std::fs::File::from(in_w)),
            stdout: out.map(|(r, _)| r),
            stderr: err.map(|(r, _)| r),
        }),
    }
}

fn reexec(rec_w: &OwnedFd, outs: [Out; 2]) -> Result<Stage2, String> {
    let w = rec_w.as_raw_fd();
    let mut cmd = Command::new("/proc/self/exe");
    let out = |o: Out| -> Result<Stdio, String> {
        Ok(match o {
            Out::Inherit => Stdio::inherit(),
            Out::Pipe => Stdio::piped(),
            Out::Give(fd) => {
                // SAFETY: an fd the caller holds open for the duration of this call.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                Stdio::from(
                    fd.try_clone_to_owned()
                        .map_err(|e| format!("starting stage 2 (dup): {e}"))?,
                )
            }
        })
    };
    cmd.arg0("sandbox-run")
        .arg(STAGE2_ARG)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(out(outs[0])?)
        .stderr(out(outs[1])?);
    // SAFETY: runs between fork and exec of the child: setsid, dup2, fcntl, close_range and
    // sigprocmask are async-signal-safe and touch only the child's own session, fd table and
    // mask.
    unsafe {
        cmd.pre_exec(move || {
            // A session of its own: stage 2 must never hold the caller's controlling
            // terminal (see stage2::detach, which checks again).
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if w == channel::FD {
                // dup2 onto itself would keep close-on-exec set.
                if libc::fcntl(w, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(w, channel::FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Nothing the caller leaked to us (fds without close-on-exec) reaches stage 2.
            // Close-on-exec rather than close: std's own error pipe must stay open until exec.
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            libc::syscall(
                libc::SYS_close_range,
                channel::FD as libc::c_uint + 1,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            );
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting stage 2 (/proc/self/exe): {e}"))?;
    // The pid is reaped with waitpid (Stage2::wait); dropping the Child neither waits nor kills.
    Ok(Stage2 {
        pid: child.id() as i32,
        start: Start::Exec,
        stdin: child
            .stdin
            .take()
            .map(|s| std::fs::File::from(OwnedFd::from(s))),
        stdout: child.stdout.take().map(OwnedFd::from),
        stderr: child.stderr.take().map(OwnedFd::from),
    })
}
