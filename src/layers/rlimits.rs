//! Resource limits of the workload. Child side, just before exec. With the repo's layer on
//! disk, `RLIMIT_FSIZE` is the layer's per-call bound: see `crate::layers::disk`. Core dumps are always off
//! (a dump could write memory holding secrets of the run into the repo). A limit can only be
//! lowered: a request above the current hard limit is capped at it.
//!
//! Two limits bound counts the kernel keeps per user, not per process: queued signals
//! (RLIMIT_SIGPENDING) and POSIX message queue bytes (RLIMIT_MSGQUEUE). What the workload
//! queues is charged to its uid, and again to the owner of its user namespace one level up,
//! on the host: the caller when rootless, root when root runs a repo for another user (see
//! `ns::create`), the same uid as that user's own programs. So the workload gets half of the
//! hard limit (the hard limit is normally the host user's own limit too), and that uid keeps
//! the other half whatever the workload does: a hostile run cannot make the host user's own
//! `sigqueue` or `mq_send` fail. (The kernel checks a signal against the receiver's limit;
//! the workload's processes can only signal each other and, with namespaces, pid 1, which
//! queues at most one of each standard signal. Without namespaces they share the host's pid
//! namespace and are charged straight to their uid: a host process of the same uid that
//! blocks a real-time signal could still be filled up by the workload.) The other per-user
//! counts (inotify, fanotify, namespaces) are per-user-namespace sysctls, lowered in
//! `ns::UserLimits`.

use crate::layers::{Step, StepError};
use rlimit::Resource;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub nofile: u64,
    pub fsize: u64,
    /// The repo's layer is on disk: `fsize` starts at its cap and the supervisor lowers it to
    /// the budget left as the layer fills (`crate::layers::disk`); SIGXFSZ is ignored, so a
    /// write past it fails with `EFBIG` instead of killing the writer.
    #[serde(default)]
    pub disk_budget: bool,
}

/// The share of a per-user limit (see the module doc) the workload gets.
fn per_user_share(hard: u64) -> u64 {
    hard / 2
}

pub fn apply(l: Limits) -> Result<(), StepError> {
    let err =
        |e: std::io::Error| StepError::new(Step::Rlimit, e.raw_os_error().unwrap_or(libc::EINVAL));
    for (res, want) in [
        (Resource::CORE, Some(0)),
        (Resource::NOFILE, Some(l.nofile)),
        (Resource::FSIZE, Some(l.fsize)),
        (Resource::SIGPENDING, None),
        (Resource::MSGQUEUE, None),
    ] {
        let (_, hard) = res.get().map_err(err)?;
        let v = want.unwrap_or_else(|| per_user_share(hard)).min(hard);
        // The disk budget's fsize is lowered and raised again by the supervisor: the hard
        // limit stays at the cap (the workload cannot set it: seccomp).
        let hard = if res == Resource::FSIZE && l.disk_budget {
            hard.min(l.fsize)
        } else {
            v
        };
        res.set(v, hard).map_err(err)?;
    }
    Ok(())
}

/// With the disk budget, SIGXFSZ is ignored (a disposition that survives exec): a write past
/// the budget fails with `EFBIG` instead of killing the writer. Called after the signals are
/// reset to their defaults.
pub fn ignore_sigxfsz(l: Limits) -> Result<(), StepError> {
    if l.disk_budget {
        // SAFETY: setting a signal's disposition to SIG_IGN; no handler, nothing allocated.
        if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
            return Err(StepError::last(Step::Rlimit));
        }
    }
    Ok(())
}
