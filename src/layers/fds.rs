//! File descriptors and signals the workload inherits. Child side, just before seccomp.
//!
//! stdin is `/dev/null` (the caller's stdin never reaches the workload); stdout and stderr are
//! what the supervisor gave stage 2 (the caller's own, a pipe, or a pty of sandbox-run's where
//! the caller's is a terminal: [`crate::layers::pty`]); every other fd is marked close-on-exec, so nothing the caller had open (sockets,
//! secrets, pipes) crosses exec. Signal dispositions and the mask survive exec, and Rust
//! ignores SIGPIPE: all are reset to the defaults.

use crate::layers::{Step, StepError};

/// Point fd 0 at /dev/null.
pub fn stdin_null() -> Result<(), StepError> {
    // SAFETY: open/dup2/close on a constant path and fds we own.
    unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(StepError::last(Step::Stdin));
        }
        if fd != 0 {
            if libc::dup2(fd, 0) < 0 {
                return Err(StepError::last(Step::Stdin));
            }
            libc::close(fd);
        }
    }
    Ok(())
}

/// Every fd above 2 closes at exec.
pub fn cloexec_above_stderr() -> Result<(), StepError> {
    crate::sys::cloexec_from(3).map_err(|e| StepError::new(Step::CloseFds, e))
}

/// Default dispositions for every signal and an empty mask.
pub fn reset_signals() -> Result<(), StepError> {
    // SAFETY: sigaction with SIG_DFL and sigprocmask with an empty set only change this
    // process's signal state; SIGKILL/SIGSTOP fail harmlessly.
    unsafe {
        // SIGRTMAX itself too: an ignored disposition of any signal survives exec.
        for sig in 1..=libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
            return Err(StepError::last(Step::Signals));
        }
    }
    Ok(())
}
