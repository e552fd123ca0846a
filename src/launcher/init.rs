//! pid 1 of the sandbox: builds the filesystem, starts the workload, reaps every orphan,
//! forwards signals to every process of the sandbox, and reports the workload's status.
//! When the workload ends, whatever it left behind is killed: nothing outlives the run.
//!
//! Also the waiting half of stage 2, which relays signals to pid 1.

use super::channel::{self, Record};
use super::stage2::{self, Exec};
use crate::layers::{mounts, seccomp, Step, StepError};
use crate::plan::Plan;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd};

/// Signals relayed from the supervisor to the sandbox, and SIGCHLD.
const FORWARDED: &[Signal] = &[
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGCHLD,
];

extern "C" fn noop(_: libc::c_int) {}

/// Block the forwarded signals (they are taken with sigwait) and give them a handler: pid 1
/// of a pid namespace drops signals whose disposition is the default.
pub fn block_signals() -> Result<SigSet, StepError> {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(*s);
        // SAFETY: installing a handler that does nothing is async-signal-safe.
        unsafe { libc::signal(*s as i32, noop as *const () as libc::sighandler_t) };
    }
    set.thread_block()
        .map_err(|e| StepError::new(Step::Signals, e as i32))?;
    Ok(set)
}

/// A pipe whose write end only stage 2 holds: pid 1 sees end-of-file when stage 2 is gone.
/// Closes the race where stage 2 dies before pid 1 has set its parent-death signal.
pub struct AlivePipe {
    read: OwnedFd,
    write: Option<OwnedFd>,
}

impl AlivePipe {
    pub fn new() -> Result<AlivePipe, StepError> {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| StepError::new(Step::Fork, e as i32))?;
        Ok(AlivePipe {
            read: r,
            write: Some(w),
        })
    }
    pub fn child_side(&self) {
        if let Some(w) = &self.write {
            // SAFETY: closing our copy of the write end; the OwnedFd is not used again here
            // (the child only ever exits or execs).
            unsafe { libc::close(w.as_raw_fd()) };
        }
    }
    fn parent_gone(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own, no timeout.
        unsafe { libc::poll(&mut p, 1, 0) };
        p.revents & (libc::POLLHUP | libc::POLLIN) != 0
    }
}

/// Stage 2's side: wait for pid 1, relaying signals to it; exit with its code.
pub fn wait_forwarding(init: Pid, set: &SigSet) -> i32 {
    loop {
        match set.wait() {
            Ok(Signal::SIGCHLD) => match waitpid(init, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => return code,
                Ok(WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
                _ => {}
            },
            Ok(sig) => {
                let _ = nix::sys::signal::kill(init, sig);
            }
            Err(_) => {}
        }
    }
}

/// pid 1: returns the exit code for pid 1 itself (0; the workload's status goes on the channel).
pub fn run(
    plan: &Plan,
    exec: &Exec,
    filters: Option<&seccomp::Filters>,
    alive: &AlivePipe,
) -> Result<i32, StepError> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(StepError::last(Step::Pdeathsig));
    }
    if alive.parent_gone() {
        return Ok(125);
    }
    mounts::build_root(&plan.mounts, &plan.cwd)?;
    channel::mark(channel::Phase::Mounts);
    // SAFETY: pid 1 is single-threaded.
    let workload =
        match unsafe { nix::unistd::fork() }.map_err(|e| StepError::new(Step::Fork, e as i32))? {
            nix::unistd::ForkResult::Child => {
                let e = stage2::workload(plan, exec, filters);
                channel::send(Record::Failed(e));
                // SAFETY: leave without running destructors or atexit handlers of the parent.
                unsafe { libc::_exit(if e.step == Step::Exec { 127 } else { 125 }) }
            }
            nix::unistd::ForkResult::Parent { child } => child,
        };
    let set = {
        let mut s = SigSet::empty();
        FORWARDED.iter().for_each(|sig| s.add(*sig));
        s
    };
    loop {
        match set.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Some(status) = reap(workload) {
                    // The workload is done: nothing it started may outlive it.
                    // SAFETY: kill(-1) from pid 1 signals every other process of the namespace.
                    unsafe { libc::kill(-1, libc::SIGKILL) };
                    while waitpid(None, None).is_ok() {}
                    channel::send(Record::Exited(status));
                    return Ok(0);
                }
            }
            // Relay to every process of the sandbox, the way a terminal signals a whole job.
            // SAFETY: kill(-1) from pid 1 reaches every other process of the namespace.
            Ok(sig) => unsafe {
                libc::kill(-1, sig as i32);
            },
            Err(_) => {}
        }
    }
}

/// Reap every exited child; the raw status of the workload if it was among them.
fn reap(workload: Pid) -> Option<i32> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG writes the status of an exited child into `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == workload.as_raw() {
            found = Some(status);
        }
    }
}
