//! What a run came to, as the supervisor saw it ([`Finished`]), and the exit code it means
//! (DESIGN.md section 2). Shared by the supervisor that fills it, the report that reads it and
//! the commands that print it.

use crate::layers::cgroup::Usage;
use crate::layers::{Step, StepError};
use nix::sys::signal::Signal;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// What one run came to: filled by the supervisor, read by the report and the commands.
#[derive(Debug, Clone, Default)]
pub struct Finished {
    /// The workload's raw wait status, when it ended by itself.
    pub status: Option<i32>,
    /// The setup step that failed, if one did.
    pub failure: Option<StepError>,
    /// Landlock ABI and status (0 not, 1 partially, 2 fully enforced), when applied.
    pub landlock: Option<(u8, u8)>,
    /// Every layer was in place when the workload exec'd.
    pub ready: bool,
    /// The deadline passed and the sandbox was torn down.
    pub timed_out: bool,
    /// sandbox-run received this signal and tore the sandbox down.
    pub interrupted: Option<i32>,
    /// SIGKILL was needed after the grace period.
    pub killed: bool,
    pub duration: Duration,
    /// What the cgroup counted, when the run had one.
    pub usage: Option<Usage>,
    /// When each setup phase ended, counted from the spawn of stage 2.
    pub timings: Vec<(crate::layers::channel::Phase, Duration)>,
    /// How stage 2 was started.
    pub start: Option<crate::launcher::Start>,
    /// From the spawn of stage 2 to the end of the sandbox.
    pub spawned_to_end: Duration,
    /// How long the supervisor took to make the cgroup leaf after the spawn, beside stage 2's
    /// own setup (cgroup v1 as root).
    pub leaf_made: Option<Duration>,
    pub out: Vec<u8>,
    pub err: Vec<u8>,
    /// What the command got as its fds 1 and 2.
    pub stdio: [crate::layers::pty::Given; 2],
    /// The streams (`stdout`, `stderr`) that passed the output cap.
    pub output_capped: Vec<&'static str>,
    /// sandbox-run's own streams (`stdout`, `stderr`) whose caller stopped reading them: what
    /// it did not take by the end was dropped.
    pub output_dropped: Vec<&'static str>,
    /// `--net filtered`: the proxy's connection log.
    pub connections: Vec<crate::net::proxy::Connection>,
    /// The run's secrets: where each went and how often (the supervisor's `secret_log`).
    pub secrets: Vec<crate::net::secret::SecretUse>,
    /// Placeholders the proxy refused to send where their secret does not go.
    pub secret_misdirected: Vec<crate::net::secret::Misdirected>,
    /// The sandbox's own network (`none`, `filtered`): the names its name service refused.
    pub dns_refused: Vec<crate::net::dns::Refused>,
    /// The run's disk layer, handed over by stage 2 once the sandbox was gone (a kept layer),
    /// for the way back ([`crate::changes`]).
    pub layer: Option<std::sync::Arc<OwnedFd>>,
    /// Stage 2 said the sandbox was gone and the hand-over began.
    pub handing: bool,
    /// The repo's layer was full at some point of the run (writes failed with ENOSPC).
    pub disk_full: bool,
    /// The repo's layer on disk was found at its cap (or past it) by one of the supervisor's
    /// counts: its writes past the budget failed with EFBIG ([`crate::layers::disk::Budget`]).
    pub disk_hit: bool,
    /// No status and no setup failure came back: the sandbox's own processes died first.
    pub lost: Option<Lost>,
    /// The repo's layer on disk went past `[limits] disk` and the sandbox was stopped: what
    /// it held then ([`crate::layers::disk::Budget`]).
    pub disk_stopped: Option<crate::layers::disk::Over>,
    /// System calls the seccomp filter refused, named by the supervisor as they came in (user
    /// notification), deduplicated and counted.
    pub refused_calls: Vec<crate::refusal::Refusal>,
    /// Paths the command looked up (every lookup with `--observe`), as the sandbox saw them.
    pub paths_seen: Vec<crate::refusal::PathSeen>,
    /// Whether the refused calls were named (the filter had a listener): `None` where the
    /// plan had no seccomp filter or the run did not reach it.
    pub refusals_named: Option<bool>,
    /// The kernel refused the filter a listener, with this errno.
    pub refusals_unnamed: Option<i32>,
    /// More refused calls came than the supervisor names (a flood): the count stopped there.
    pub refused_calls_cut: bool,
    /// Path lookups not kept (past the bound of distinct paths, `--observe`).
    pub paths_dropped: u64,
}

/// What ended a sandbox that sent back neither the workload's status nor a failed step:
/// read from stage 2's own wait status (stage 2 exits with 128+N when pid 1 dies of signal N).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// pid 1 of the sandbox (its init) died of this signal.
    Init(i32),
    /// Stage 2 itself died of this signal.
    Stage2(i32),
    /// Stage 2 exited with this code and said nothing.
    Exited(i32),
}

impl Lost {
    pub(crate) fn from_stage2(status: std::process::ExitStatus) -> Lost {
        use std::os::unix::process::ExitStatusExt;
        match (status.signal(), status.code()) {
            (Some(sig), _) => Lost::Stage2(sig),
            (None, Some(code)) if code > 128 && code <= 128 + 64 => Lost::Init(code - 128),
            (_, code) => Lost::Exited(code.unwrap_or(-1)),
        }
    }

    /// One line for stderr and the report's `error`.
    pub fn line(self) -> String {
        match self {
            Lost::Init(sig) => format!(
                "the sandbox's init (pid 1) died of signal {sig} ({}) before the command's status came back",
                signal_name(sig)
            ),
            Lost::Stage2(sig) => format!(
                "the sandbox's stage 2 died of signal {sig} ({}) before the command's status came back",
                signal_name(sig)
            ),
            Lost::Exited(code) => format!(
                "the sandbox's stage 2 exited with code {code} before the command's status came back"
            ),
        }
    }
}

/// `SIGKILL` for 9: the name of a signal, for messages.
pub fn signal_name(sig: i32) -> String {
    Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// Did the OOM killer act inside the run's cgroup (whichever process it chose)?
pub fn oom_hit(f: &Finished) -> bool {
    f.usage.as_ref().is_some_and(|u| u.oom_kills > 0)
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
    if f.timed_out {
        return 124;
    }
    if let Some(sig) = f.interrupted {
        return 128 + sig;
    }
    if f.disk_stopped.is_some_and(|o| o.stopped) {
        return 128 + libc::SIGKILL;
    }
    let oom = oom_hit(f);
    match f.status {
        // The memory cap was hit, by a helper the workload shrugged off: the run is `oom`,
        // and an OOM kill is 137 (the workload's own failure code is kept).
        Some(s) if libc::WIFEXITED(s) && oom && libc::WEXITSTATUS(s) == 0 => 128 + libc::SIGKILL,
        Some(s) if libc::WIFEXITED(s) => libc::WEXITSTATUS(s),
        Some(s) if libc::WIFSIGNALED(s) => 128 + libc::WTERMSIG(s),
        // The OOM killer took the sandbox's own init or stage 2.
        None if oom => 128 + libc::SIGKILL,
        _ => 125,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_contract() {
        let f = |status: Option<i32>| Finished {
            status,
            ..Finished::default()
        };
        assert_eq!(exit_code(&f(Some(0))), 0);
        assert_eq!(exit_code(&f(Some(3 << 8))), 3);
        assert_eq!(exit_code(&f(Some(libc::SIGKILL))), 137);
        assert_eq!(
            exit_code(&Finished {
                timed_out: true,
                ..f(Some(libc::SIGTERM))
            }),
            124
        );
        assert_eq!(
            exit_code(&Finished {
                interrupted: Some(libc::SIGINT),
                ..f(None)
            }),
            130
        );
        let fail = |step, errno| Finished {
            failure: Some(StepError::new(step, errno)),
            ..f(None)
        };
        assert_eq!(exit_code(&fail(Step::Exec, libc::ENOENT)), 127);
        assert_eq!(exit_code(&fail(Step::Exec, libc::EACCES)), 126);
        assert_eq!(exit_code(&fail(Step::LandlockRestrict, libc::EPERM)), 125);
        assert_eq!(exit_code(&f(None)), 125);
        // OOM kills in the cgroup: whichever process the kernel chose, an OOM exit is 137
        let oom = |status| Finished {
            usage: Some(Usage {
                oom_kills: 1,
                ..Usage::default()
            }),
            ..f(status)
        };
        assert_eq!(exit_code(&oom(None)), 137);
        assert_eq!(exit_code(&oom(Some(0))), 137);
        assert_eq!(exit_code(&oom(Some(3 << 8))), 3);
    }

    #[test]
    fn a_lost_sandbox_says_which_process_died() {
        use std::os::unix::process::ExitStatusExt;
        let st = std::process::ExitStatus::from_raw;
        assert_eq!(Lost::from_stage2(st(137 << 8)), Lost::Init(9));
        assert_eq!(Lost::from_stage2(st(libc::SIGKILL)), Lost::Stage2(9));
        assert_eq!(Lost::from_stage2(st(125 << 8)), Lost::Exited(125));
        let line = Lost::Init(9).line();
        assert!(
            line.contains("init (pid 1) died of signal 9 (SIGKILL)"),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }
}
