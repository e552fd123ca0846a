//! pid 1 of the sandbox: builds the filesystem, starts the workload, reaps every orphan,
//! forwards signals to every process of the sandbox, and reports the workload's status.
//! When the workload ends, whatever it left behind is killed: nothing outlives the run.
//!
//! In a run without namespaces (best-effort, degraded) the same process is a child
//! subreaper instead of pid 1: orphans of the workload's tree are reparented to it, signals go
//! to its children and the workload's process group, and at the end it kills its children
//! one by one until none is left ([`kill_children`]); `kill(-1)` would reach the whole host.
//!
//! Also the waiting half of stage 2, which relays signals to pid 1.

use super::stage2::{self, Exec};
use crate::layers::channel::{self, Record};
use crate::layers::{mounts, ns, seccomp, Step, StepError};
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

/// How often stage 2 looks at the run's layer while it waits for pid 1.
pub const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

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

/// Stage 2's side: wait for pid 1, relaying signals to it; exit with its code. With `watch`,
/// it is called every [`WATCH_EVERY`] meanwhile.
pub fn wait_forwarding(init: Pid, set: &SigSet, mut watch: Option<&mut dyn FnMut()>) -> i32 {
    let every = libc::timespec {
        tv_sec: 0,
        tv_nsec: WATCH_EVERY.as_nanos() as libc::c_long,
    };
    let timeout: *const libc::timespec = match watch {
        Some(_) => &every,
        None => std::ptr::null(),
    };
    loop {
        // SAFETY: sigtimedwait with a signal set we own and a timespec that outlives the call
        // (or none: wait without end); no siginfo wanted.
        let got = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), timeout) };
        if got < 0 {
            if crate::sys::last_errno() == libc::EAGAIN {
                if let Some(w) = watch.as_mut() {
                    w();
                }
            }
            continue;
        }
        match Signal::try_from(got) {
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
    net: Option<ns::NetEntry>,
) -> Result<i32, StepError> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(StepError::last(Step::Pdeathsig));
    }
    if alive.parent_gone() {
        return Ok(125);
    }
    if plan.namespaces {
        mounts::build_root(&plan.mounts, &plan.cwd)?;
    } else {
        // SAFETY: prctl with integer arguments, affecting only this process.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(StepError::last(Step::Fork));
        }
        nix::unistd::chdir(&plan.cwd).map_err(|e| StepError::new(Step::Chdir, e as i32))?;
    }
    if let Some(text) = &plan.gitconfig {
        crate::home::write_gitconfig(&plan.home, text)
            .map_err(|e| StepError::new(Step::Home, e.raw_os_error().unwrap_or(libc::EIO)))?;
    }
    channel::mark(channel::Phase::Mounts);
    // The network namespace stage 2 made while we built the root (see ns::Net); the proxy's
    // socket is made in it.
    let own_net = net.is_some();
    if let Some(net) = net {
        net.enter()?;
    }
    if own_net {
        // The loopback ports and the name service, before the proxy's socket: the supervisor
        // starts serving them all once that last one arrives.
        super::netfds::hand_over(plan)?;
    }
    if plan.net == crate::profile::NetMode::Filtered {
        proxy_listener()?;
        // Secrets: the supervisor adds the run's CA (made after our fork, so its key was never
        // in our memory) to the trust bundle once the proxy runs; the workload must trust it
        // from its first connection.
        if !plan.secrets.is_empty() {
            channel::wait_trusted().map_err(|e| StepError::new(Step::ProxySocket, e))?;
        }
    }
    if own_net {
        channel::mark(channel::Phase::Network);
    }
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
                    if plan.namespaces {
                        // SAFETY: kill(-1) from pid 1 signals every other process of the
                        // namespace.
                        unsafe { libc::kill(-1, libc::SIGKILL) };
                        while waitpid(None, None).is_ok() {}
                    } else {
                        kill_children();
                    }
                    channel::mark(channel::Phase::WorkloadEnded);
                    channel::send(Record::Exited(status));
                    return Ok(0);
                }
            }
            // Relay to every process of the sandbox, the way a terminal signals a whole job.
            // SAFETY: kill(-1) from pid 1 reaches every other process of the namespace.
            Ok(sig) if plan.namespaces => unsafe {
                libc::kill(-1, sig as i32);
            },
            Ok(sig) => {
                // SAFETY: signals to the workload's process group (it called setsid) and to
                // our own children, which cannot be reaped (and their pids reused) meanwhile.
                unsafe { libc::kill(-workload.as_raw(), sig as i32) };
                for child in children() {
                    // SAFETY: as above.
                    unsafe { libc::kill(child, sig as i32) };
                }
            }
            Err(_) => {}
        }
    }
}

/// `--net filtered`: the proxy's listening socket on the sandbox's loopback, handed to the
/// supervisor, which accepts on it from the host side (a socket stays in the network
/// namespace it was created in) and dials out from the host's. Made before the workload
/// exists, so the port is the proxy's; pid 1 keeps no copy.
fn proxy_listener() -> Result<(), StepError> {
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: crate::net::proxy::PORT.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: socket, bind, listen and close on an fd this function creates; bind reads the
    // sockaddr_in on our stack, of the size given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(StepError::last(Step::ProxySocket));
        }
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), len) != 0
            || libc::listen(fd, 1024) != 0
        {
            let e = StepError::last(Step::ProxySocket);
            libc::close(fd);
            return Err(e);
        }
        let sent = channel::send_listener(fd);
        libc::close(fd);
        sent.map_err(|e| StepError::new(Step::ProxySocket, e))
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

/// Our children (zombies included), from `/proc/self/task/TID/children`.
fn children() -> Vec<libc::pid_t> {
    let tid = nix::unistd::gettid();
    std::fs::read_to_string(format!("/proc/self/task/{tid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// SIGKILL every child and reap it, until none is left. Called by a child subreaper (the
/// supervisor, and the reaper of a run without namespaces): the orphans of a killed child are
/// reparented to us before we can reap it, so the next round finds them, and the loop ends
/// with the whole tree gone, double-forked daemons included.
pub fn kill_children() {
    // The common case, a run that ended cleanly: no child at all, one wait4 says so (ECHILD)
    // without reading /proc. Zombies are reaped on the way; a live child takes the loop below.
    loop {
        // SAFETY: waitpid with WNOHANG and no status pointer.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if r > 0 {
            continue;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if r < 0 {
            return;
        }
        break;
    }
    loop {
        let kids = children();
        if kids.is_empty() {
            // Nothing left, unless /proc is unreadable: then wait for whatever remains.
            while waitpid(None, None).is_ok() {}
            return;
        }
        for &k in &kids {
            // SAFETY: our own child, not yet reaped: its pid cannot have been reused.
            unsafe { libc::kill(k, libc::SIGKILL) };
        }
        for k in kids {
            let _ = waitpid(Pid::from_raw(k), None);
        }
    }
}
