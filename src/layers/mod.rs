//! The kernel layers, one module each. Each module says which part runs in the supervisor
//! (preparing, allocating) and which part runs in the sandboxed child (raw syscalls on
//! prepared data). The order in which the child applies them lives in one function:
//! `launcher::stage2`.

pub mod caps;
pub mod cgroup;
pub mod channel;
pub mod container;
pub mod disk;
pub mod env;
pub mod fds;
pub mod fsize;
pub mod git;
pub mod landlock;
pub mod mounts;
pub mod ns;
pub mod overlay;
pub mod pty;
pub mod rlimits;
pub mod seccomp;

use std::fmt;

/// A setup step of the sandbox. Its name is what the user reads: `landlock: restrict_self`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Step {
    Exec = 1,
    UnshareUser,
    Setgroups,
    UidMap,
    GidMap,
    Unshare,
    Hostname,
    LoopbackUp,
    MountPrivate,
    MountRoot,
    MountBind,
    MountRemountRo,
    MountProc,
    MountDev,
    MountTmpfs,
    MountOverlay,
    PivotRoot,
    Chdir,
    Fork,
    Setsid,
    Rlimit,
    Setuid,
    Capabilities,
    NoNewPrivs,
    LandlockAbi,
    LandlockRuleset,
    LandlockRule,
    LandlockRestrict,
    CloseFds,
    Stdin,
    Signals,
    SeccompInstall,
    Pdeathsig,
    Cgroup,
    GitView,
    GitCopyBack,
    UserLimits,
    CopyBack,
    ProxySocket,
    Home,
    NetNs,
    LoopbackPort,
    NameService,
    Terminal,
}

impl Step {
    pub const ALL: &'static [Step] = &[
        Step::Exec,
        Step::UnshareUser,
        Step::Setgroups,
        Step::UidMap,
        Step::GidMap,
        Step::Unshare,
        Step::Hostname,
        Step::LoopbackUp,
        Step::MountPrivate,
        Step::MountRoot,
        Step::MountBind,
        Step::MountRemountRo,
        Step::MountProc,
        Step::MountDev,
        Step::MountTmpfs,
        Step::MountOverlay,
        Step::PivotRoot,
        Step::Chdir,
        Step::Fork,
        Step::Setsid,
        Step::Rlimit,
        Step::Setuid,
        Step::Capabilities,
        Step::NoNewPrivs,
        Step::LandlockAbi,
        Step::LandlockRuleset,
        Step::LandlockRule,
        Step::LandlockRestrict,
        Step::CloseFds,
        Step::Stdin,
        Step::Signals,
        Step::SeccompInstall,
        Step::Pdeathsig,
        Step::Cgroup,
        Step::GitView,
        Step::GitCopyBack,
        Step::UserLimits,
        Step::CopyBack,
        Step::ProxySocket,
        Step::Home,
        Step::NetNs,
        Step::LoopbackPort,
        Step::NameService,
        Step::Terminal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Step::Exec => "exec",
            Step::UnshareUser => "namespaces: unshare user",
            Step::Setgroups => "namespaces: setgroups deny",
            Step::UidMap => "namespaces: uid_map",
            Step::GidMap => "namespaces: gid_map",
            Step::Unshare => "namespaces: unshare",
            Step::Hostname => "namespaces: sethostname",
            Step::LoopbackUp => "namespaces: loopback up",
            Step::MountPrivate => "mounts: make / private",
            Step::MountRoot => "mounts: new root tmpfs",
            Step::MountBind => "mounts: bind",
            Step::MountRemountRo => "mounts: remount read-only",
            Step::MountProc => "mounts: proc",
            Step::MountDev => "mounts: dev",
            Step::MountTmpfs => "mounts: tmpfs",
            Step::MountOverlay => "mounts: overlay",
            Step::PivotRoot => "mounts: pivot_root",
            Step::Chdir => "mounts: chdir",
            Step::Fork => "fork",
            Step::Setsid => "process: setsid",
            Step::Rlimit => "process: setrlimit",
            Step::Setuid => "process: setresuid",
            Step::Capabilities => "capabilities: drop",
            Step::NoNewPrivs => "process: no_new_privs",
            Step::LandlockAbi => "landlock: abi",
            Step::LandlockRuleset => "landlock: create_ruleset",
            Step::LandlockRule => "landlock: add_rule",
            Step::LandlockRestrict => "landlock: restrict_self",
            Step::CloseFds => "fds: close_range",
            Step::Stdin => "fds: stdin /dev/null",
            Step::Signals => "process: reset signals",
            Step::SeccompInstall => "seccomp: install",
            Step::Pdeathsig => "process: pdeathsig",
            Step::Cgroup => "cgroup: join",
            Step::GitView => "mounts: git dir view",
            Step::GitCopyBack => "git: copy back HEAD, index and friends",
            Step::UserLimits => "namespaces: per-user limits",
            Step::CopyBack => "repo: copy back the run's changes",
            Step::ProxySocket => "network: the proxy's socket",
            Step::Home => "home: write $HOME/.gitconfig",
            Step::NetNs => "namespaces: network namespace",
            Step::LoopbackPort => "network: a loopback port of the allow-list",
            Step::NameService => "network: the name service (127.0.0.1:53, /etc/resolv.conf)",
            Step::Terminal => "fds: the pseudo-terminal as controlling terminal",
        }
    }

    pub fn from_u16(v: u16) -> Option<Step> {
        Step::ALL.iter().copied().find(|s| *s as u16 == v)
    }
}

/// A failed step and its errno: small, `Copy`, and sent as 8 bytes on a close-on-exec pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepError {
    pub step: Step,
    pub errno: i32,
    /// 1 + the index of the mount operation that failed, 0 when not a mount.
    pub at: u16,
}

impl StepError {
    pub fn new(step: Step, errno: i32) -> StepError {
        StepError { step, errno, at: 0 }
    }
    /// The same error, pinned to mount operation `index` of the plan.
    pub fn at(self, index: usize) -> StepError {
        StepError {
            at: u16::try_from(index + 1).unwrap_or(0),
            ..self
        }
    }
    /// The errno of the last failed libc call.
    pub fn last(step: Step) -> StepError {
        StepError::new(
            step,
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        )
    }
}

impl fmt::Display for StepError {
    /// `landlock: restrict_self: Operation not permitted`
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let e = std::io::Error::from_raw_os_error(self.errno).to_string();
        let e = e.split(" (os error").next().unwrap_or(&e);
        write!(f, "{}: {e}", self.step.name())
    }
}

impl std::error::Error for StepError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_errors_read_well() {
        for &s in Step::ALL {
            assert_eq!(Step::from_u16(s as u16), Some(s));
        }
        assert_eq!(
            StepError::new(Step::LandlockRestrict, libc::EPERM).to_string(),
            "landlock: restrict_self: Operation not permitted"
        );
        assert_eq!(Step::from_u16(0xffff), None);
    }
}
