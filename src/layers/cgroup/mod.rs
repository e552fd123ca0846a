//! The cgroup layer: memory, CPU and pids caps for one run, whole-tree kill, usage read back.
//!
//! **Supervisor side only.** Nothing here runs in the sandboxed child. The supervisor creates
//! and limits one leaf per run *before* the workload runs any code of its own, moves stage 2
//! in with [`Leaf::add`] while stage 2 is still held (or has it born inside with
//! `clone3(CLONE_INTO_CGROUP)` and [`Leaf::open_v2`]; on cgroup v1 as root stage 2 moves itself
//! with [`join_self`] once the supervisor, which made the leaf meanwhile, says it is ready),
//! and after the run kills whatever is left
//! ([`Leaf::kill`]), reads the usage ([`Leaf::usage`]) and removes the leaf ([`Leaf::remove`]).
//! A [`Leaf`] that is dropped without `remove` kills and removes itself, so no error path
//! leaves a process or a directory behind.
//!
//! cgroupfs files are written directly (no cgroups-rs, see DESIGN.md section 4). Every group
//! this module creates is named with the prefix `sandbox-run`, so leftovers are recognisable:
//!
//! | host | parent of the leaves | leaf |
//! |---|---|---|
//! | cgroup v2, root | `<cgroup2 mount>/sandbox-run` (created; controllers enabled in the mount root's and its own `cgroup.subtree_control`; it never holds a process) | `sandbox-run/run-<pid>-<n>` |
//! | cgroup v2, delegated subtree (rootless: `systemd-run --user --scope -p Delegate=yes`, or the scope sandbox-run asks `systemd --user` for itself; or root in a container whose cgroup namespace root holds processes) | the caller's own cgroup: its processes first move into `<own>/sandbox-run-supervisor` (no internal processes), then the controllers are enabled in `<own>/cgroup.subtree_control` | `<own>/sandbox-run-<pid>-<n>` |
//! | cgroup v1 / hybrid (memory, cpu, pids; cpuacct and freezer when mounted) | `<hierarchy>/<our cgroup in it>` for each hierarchy | `sandbox-run-<pid>-<n>` in each |
//!
//! [`Host::detect`] only looks (it changes nothing, so `doctor` may call it); the parents are
//! prepared (created, controllers enabled) by [`Host::create_leaf`], idempotently.
//!
//! Limits: v2 `memory.max`, `memory.swap.max` = 0 (when the file exists), `cpu.max`
//! (`<round(cpus * 100000)> 100000`, at least 1000), `pids.max`. v1 `memory.limit_in_bytes`,
//! then `memory.memsw.limit_in_bytes` equal to it (no swap; when swap accounting is off,
//! `memory.swappiness` 0 instead), `memory.oom_control` kept at `oom_kill_disable 0`,
//! `cpu.cfs_quota_us` (against the period of every new group, 100000), `pids.max`.

//! Where each part lives: [`paths`] reads /proc's mountinfo and cgroup files; [`detect`] says
//! what the host offers (v2, delegated v2, v1/hybrid) and changes nothing; [`host`] prepares
//! the parents and makes the leaf; [`leaf`] is one run's leaf from limits to removal;
//! [`files`] holds the small cgroupfs reads and writes they share; [`systemd`] asks
//! `systemd --user` over D-Bus for a delegated scope when nothing is delegated to a user
//! ([`Host::detect_or_delegate`]).

mod detect;
mod files;
mod host;
mod leaf;
mod paths;
mod systemd;
#[cfg(test)]
mod systemd_tests;
#[cfg(test)]
mod tests;

use detect::*;
use files::*;
use host::*;
pub use host::{join_self, Host};
pub use leaf::Leaf;
use paths::*;
pub use systemd::{join_delegated_scope, user_manager_answers};

use serde::Serialize;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The prefix of every group this module creates.
pub const PREFIX: &str = "sandbox-run";
/// The `cpu.max` / `cpu.cfs_period_us` period, in microseconds.
pub const CPU_PERIOD_US: u64 = 100_000;
/// The smallest CPU quota the kernel accepts, in microseconds (1 ms).
pub const CPU_QUOTA_MIN_US: u64 = 1_000;
/// The group (cgroup v2, delegated subtree) that holds the caller's own processes, so that
/// the caller's cgroup itself holds none and may enable controllers for its children.
pub const SUPERVISOR_GROUP: &str = "sandbox-run-supervisor";
/// The parent group of the leaves under the cgroup2 mount root (cgroup v2 as root).
pub const ROOT_PARENT: &str = "sandbox-run";

/// Controllers every host must provide.
const NEEDED: [&str; 3] = ["memory", "cpu", "pids"];
/// How long `kill` and `remove` wait for a leaf to drain.
const DRAIN: Duration = Duration::from_secs(2);
/// One round of `kill`: signal, then wait this long before signalling again.
const ROUND: Duration = Duration::from_millis(100);

const HINT_DELEGATE: &str = "run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...', or have root delegate a cgroup v2 subtree to this user (chown the directory and its cgroup.procs, cgroup.subtree_control and cgroup.threads)";
const HINT_V1_ROOTLESS: &str = "cgroup v1 cannot be delegated safely: run sandbox-run as root, or boot with systemd.unified_cgroup_hierarchy=1 (pure cgroup v2) and run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...'";
const HINT_READ_ONLY: &str = "the cgroup filesystem is read-only here (a container without a writable cgroup mount): give it a private cgroup namespace with a writable, delegated /sys/fs/cgroup, or use a profile with layers.cgroup = \"best-effort\"";
const HINT_USER_CONTROLLERS: &str = "systemd delegates only some controllers to users: add /etc/systemd/system/user@.service.d/delegate.conf with '[Service]' and 'Delegate=cpu memory pids', then log in again";

static COUNTER: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// Limits, usage, version

/// The caps of one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// Memory cap in bytes (swap is forbidden on top of it).
    pub memory_max: u64,
    /// CPU cap in CPUs, fractional (`0.5` is half of one CPU), > 0.
    pub cpus: f64,
    /// Maximum number of processes and threads, >= 1.
    pub pids_max: u64,
}

impl Limits {
    /// The CPU quota per [`CPU_PERIOD_US`]: `round(cpus * period)`, at least [`CPU_QUOTA_MIN_US`].
    pub fn cpu_quota_us(&self) -> u64 {
        let q = (self.cpus * CPU_PERIOD_US as f64).round();
        if q.is_finite() && q > 0.0 {
            // `as` saturates at u64::MAX for huge values.
            (q as u64).max(CPU_QUOTA_MIN_US)
        } else {
            CPU_QUOTA_MIN_US
        }
    }

    /// The cgroup v2 `cpu.max` value: `"<quota> <period>"`, e.g. `"50000 100000"` for 0.5.
    pub fn cpu_max(&self) -> String {
        format!("{} {}", self.cpu_quota_us(), CPU_PERIOD_US)
    }

    fn check(&self) -> Result<(), Error> {
        let bad = |what: &str| {
            Err(Error::detail(
                Op::Limits,
                None,
                format!("invalid limits: {what}"),
            ))
        };
        if !(self.cpus.is_finite() && self.cpus > 0.0) {
            return bad(&format!("cpus must be a number above 0, not {}", self.cpus));
        }
        if self.memory_max == 0 {
            return bad("memory_max must be above 0");
        }
        if self.pids_max == 0 {
            return bad("pids_max must be at least 1");
        }
        Ok(())
    }
}

/// What the run cost, read back from the leaf after it ended (before [`Leaf::remove`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Peak memory in bytes (`memory.peak`, Linux 5.19+; v1 `memory.max_usage_in_bytes`).
    pub peak_memory_bytes: Option<u64>,
    /// CPU time in user mode, microseconds.
    pub cpu_user_usec: Option<u64>,
    /// CPU time in kernel mode, microseconds.
    pub cpu_system_usec: Option<u64>,
    /// Processes killed by the OOM killer inside the leaf.
    pub oom_kills: u64,
    /// Forks that failed because `pids.max` was hit.
    pub pids_max_hits: u64,
}

/// The cgroup version in use. Serializes as the number `1` or `2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "u8")]
pub enum Version {
    /// Legacy per-controller hierarchies (also "hybrid" hosts).
    V1,
    /// The unified hierarchy.
    V2,
}

impl Version {
    /// `1` or `2`.
    pub fn number(self) -> u8 {
        match self {
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }
}

impl From<Version> for u8 {
    fn from(v: Version) -> u8 {
        v.number()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// The step of the cgroup layer that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Finding a place where this caller may create groups.
    Detect,
    /// Checking the requested limits.
    Limits,
    /// Creating a group.
    Mkdir,
    /// Reading a control file.
    Read,
    /// Writing a control file.
    Write,
    /// Opening a group directory.
    Open,
    /// Killing the processes of a leaf.
    Kill,
    /// Removing a group.
    Rmdir,
}

impl Op {
    /// The word the user reads: `write`, `mkdir`...
    pub fn name(self) -> &'static str {
        match self {
            Op::Detect => "detect",
            Op::Limits => "limits",
            Op::Mkdir => "mkdir",
            Op::Read => "read",
            Op::Write => "write",
            Op::Open => "open",
            Op::Kill => "kill",
            Op::Rmdir => "rmdir",
        }
    }
}

/// A cgroup layer failure. Its `Display` is one line: the step, the path, the errno or what
/// is wrong, and how to fix it where there is a fix, e.g.
/// `cgroup: write /sys/fs/cgroup/x/memory.max: Permission denied; to fix: run under ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The step that failed.
    pub op: Op,
    /// The file or directory it failed on.
    pub path: Option<PathBuf>,
    /// The errno, when a system call failed.
    pub errno: Option<i32>,
    /// What is wrong, when it is more than an errno.
    pub detail: Option<String>,
    /// How to fix it, when there is a known fix.
    pub hint: Option<String>,
}

impl Error {
    fn detail(op: Op, path: Option<&Path>, detail: String) -> Error {
        Error {
            op,
            path: path.map(Path::to_path_buf),
            errno: None,
            detail: Some(detail),
            hint: None,
        }
    }

    fn io(op: Op, path: &Path, e: &io::Error) -> Error {
        let errno = e.raw_os_error();
        let hint = match errno {
            Some(libc::EROFS) => Some(HINT_READ_ONLY.to_string()),
            Some(libc::EACCES | libc::EPERM) if euid() != 0 => Some(HINT_DELEGATE.to_string()),
            Some(libc::EINVAL) if path.ends_with("cgroup.subtree_control") => Some(
                "the cpu controller cannot be enabled while realtime processes run outside the root cgroup (cgroup v2): move them to the root cgroup or stop them".to_string(),
            ),
            Some(libc::EBUSY) if path.ends_with("cgroup.subtree_control") => Some(format!(
                "{} holds processes, and a cgroup v2 group with processes cannot enable controllers for its children (no internal processes rule)",
                path.parent().unwrap_or(path).display()
            )),
            _ => None,
        };
        Error {
            op,
            path: Some(path.to_path_buf()),
            errno,
            detail: if errno.is_none() {
                Some(e.to_string())
            } else {
                None
            },
            hint,
        }
    }

    fn with_hint(mut self, hint: impl Into<String>) -> Error {
        self.hint = Some(hint.into());
        self
    }

    /// Which kind of fix this failure calls for (`crate::advice` turns it into the steps that
    /// work on the host at hand).
    pub fn remedy(&self) -> Remedy {
        match self.hint.as_deref() {
            Some(HINT_DELEGATE) => Remedy::DelegateV2,
            Some(HINT_USER_CONTROLLERS) => Remedy::UserControllers,
            Some(HINT_V1_ROOTLESS) => Remedy::V1Rootless,
            Some(HINT_READ_ONLY) => Remedy::ReadOnly,
            _ => Remedy::Other,
        }
    }

    /// The same failure without its fix (for callers that give their own).
    pub fn without_hint(&self) -> Error {
        Error {
            hint: None,
            ..self.clone()
        }
    }
}

/// What kind of fix a cgroup failure calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remedy {
    /// cgroup v2 has the controllers, but no subtree is delegated to this uid.
    DelegateV2,
    /// A delegated cgroup v2 subtree lacks controllers (systemd delegates only some).
    UserControllers,
    /// Not root, and the controllers are on cgroup v1 (v1 or hybrid host): v1 cannot be
    /// delegated safely.
    V1Rootless,
    /// The cgroup filesystem is mounted read-only.
    ReadOnly,
    /// Anything else (see the error's own hint, if any).
    Other,
}

/// `Permission denied`, without std's ` (os error 13)`.
fn strerror(errno: i32) -> String {
    let s = io::Error::from_raw_os_error(errno).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "cgroup: {}", self.op.name())?;
        if let Some(p) = &self.path {
            write!(f, " {}", p.display())?;
        }
        if let Some(e) = self.errno {
            write!(f, ": {}", strerror(e))?;
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; to fix: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

// ---------------------------------------------------------------------------------------------
// /proc/self/mountinfo and /proc/self/cgroup
