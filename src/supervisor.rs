//! The supervisor: starts stage 2 with the plan, relays signals, waits, and turns what came
//! back on the record channel into an outcome.
//!
//! Waiting uses a pidfd and a signalfd in one poll: no polling loop, no SIGALRM.

use crate::launcher::channel::{self, Record};
use crate::launcher::STAGE2_ARG;
use crate::layers::{Step, StepError};
use crate::plan::Plan;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Signals sandbox-run relays to the sandbox.
const RELAYED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

#[derive(Debug, Clone)]
pub struct Finished {
    /// The workload's raw wait status, when it ran.
    pub status: Option<i32>,
    /// The setup step that failed, if one did.
    pub failure: Option<StepError>,
    /// Landlock ABI and status (0 not, 1 partially, 2 fully enforced), when applied.
    pub landlock: Option<(u8, u8)>,
    /// Every layer was in place when the workload exec'd.
    pub ready: bool,
    pub duration: Duration,
}

pub fn run(plan: &Plan) -> Result<Finished, String> {
    let started = Instant::now();
    let json = serde_json::to_vec(plan).map_err(|e| format!("plan: {e}"))?;
    let (rec_r, rec_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;

    let mut relayed = SigSet::empty();
    RELAYED.iter().for_each(|s| relayed.add(*s));
    relayed
        .thread_block()
        .map_err(|e| format!("sigprocmask: {e}"))?;
    let sfd = SignalFd::with_flags(&relayed, SfdFlags::SFD_CLOEXEC)
        .map_err(|e| format!("signalfd: {e}"))?;

    let w = rec_w.as_raw_fd();
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("sandbox-run")
        .arg(STAGE2_ARG)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: runs between fork and exec of the child: dup2 and sigprocmask are
    // async-signal-safe and touch only the child's own fd table and mask.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(w, channel::FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting stage 2 (/proc/self/exe): {e}"))?;
    drop(rec_w);
    if let Some(mut stdin) = child.stdin.take() {
        // A failure here shows up as stage 2's own error record.
        let _ = stdin.write_all(&json);
    }
    let pid = child.id() as i32;
    let pidfd = crate::sys::pidfd_open(pid)
        .map_err(|e| format!("pidfd_open: {}", std::io::Error::from_raw_os_error(e)))?;

    loop {
        let mut fds = [
            nix::poll::PollFd::new(pidfd.as_fd(), nix::poll::PollFlags::POLLIN),
            nix::poll::PollFd::new(sfd.as_fd(), nix::poll::PollFlags::POLLIN),
        ];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll: {e}")),
            Ok(_) => {}
        }
        let exited = fds[0].any().unwrap_or(false);
        let signalled = fds[1].any().unwrap_or(false);
        if signalled {
            if let Ok(Some(info)) = sfd.read_signal() {
                // SAFETY: kill with a pid we own (stage 2, not yet reaped) and a valid signal.
                unsafe { libc::kill(pid, info.ssi_signo as i32) };
            }
        }
        if exited {
            break;
        }
    }
    let _ = child.wait();
    let records = channel::read_all(rec_r.as_raw_fd());
    let mut f = Finished {
        status: None,
        failure: None,
        landlock: None,
        ready: false,
        duration: started.elapsed(),
    };
    for r in records {
        match r {
            Record::Failed(e) if f.failure.is_none() => f.failure = Some(e),
            Record::Failed(_) => {}
            Record::Exited(s) => f.status = Some(s),
            Record::Landlock { abi, status } => f.landlock = Some((abi, status)),
            Record::Ready => f.ready = true,
        }
    }
    if f.status.is_none() && f.failure.is_none() {
        f.failure = Some(StepError::new(Step::Fork, libc::ECHILD));
    }
    Ok(f)
}

/// The exit code for a finished run (DESIGN.md section 2).
pub fn exit_code(f: &Finished) -> i32 {
    if let Some(e) = f.failure {
        return match (e.step, e.errno) {
            (Step::Exec, libc::ENOENT) => 127,
            (Step::Exec, libc::EACCES | libc::ENOEXEC | libc::EPERM) => 126,
            _ => 125,
        };
    }
    match f.status {
        Some(s) if libc::WIFEXITED(s) => libc::WEXITSTATUS(s),
        Some(s) if libc::WIFSIGNALED(s) => 128 + libc::WTERMSIG(s),
        _ => 125,
    }
}

/// One line explaining a setup failure, with a fix where we know one.
pub fn failure_line(e: &StepError, plan: &Plan) -> String {
    let hint = match (e.step, e.errno) {
        (Step::UnshareUser, libc::EPERM | libc::ENOSPC | libc::EACCES) | (Step::UidMap | Step::GidMap | Step::Setgroups, libc::EPERM | libc::EACCES) => {
            " (user namespaces are not available to this user: check 'sysctl user.max_user_namespaces' (must be > 0), 'kernel.unprivileged_userns_clone=1' on Debian-patched kernels, and 'kernel.apparmor_restrict_unprivileged_userns=0' on Ubuntu 23.10+; inside a container, allow unshare in its seccomp/AppArmor profile)"
        }
        (Step::MountProc, libc::EPERM) => " (a fresh /proc cannot be mounted here: the host's /proc is partly covered, as in many containers)",
        (Step::MountOverlay, _) => " (overlayfs in a user namespace needs Linux 5.11+; use repo = \"ro\" or \"rw\")",
        (Step::Exec, libc::ENOENT) => " (not found inside the sandbox: is its directory mounted?)",
        _ => "",
    };
    let errno = std::io::Error::from_raw_os_error(e.errno).to_string();
    let errno = errno
        .split(" (os error")
        .next()
        .unwrap_or(&errno)
        .to_string();
    let mount = (e.at as usize)
        .checked_sub(1)
        .and_then(|i| plan.mounts.get(i));
    let what = match (e.step, mount) {
        (Step::Exec, _) => format!("exec {}", plan.program.display()),
        (_, Some(op)) => format!("{} {}", e.step.name(), op.dst().display()),
        _ => e.step.name().to_string(),
    };
    format!("{what}: {errno}{hint}")
}
