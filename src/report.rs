//! The report (DESIGN.md section 5): a superset of the seed's `ValidationReport`, so its
//! consumers keep working, with the status taxonomy, timings, resource usage and the layers
//! that were really in force.

use crate::outcome::Finished;
use crate::plan::Plan;
use crate::policy::Verdict;
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

pub const SCHEMA: &str = "sandbox-run/report/v1";

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub schema: &'static str,
    pub id: String,
    pub gene_id: Option<String>,
    pub profile: String,
    /// `--allow-program`: programs the gate allowed for this command beside the profile's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_programs: Vec<String>,
    pub repo: String,
    pub commands: Vec<String>,
    pub ok: bool,
    pub results: Vec<CommandResult>,
    pub sandbox: Option<Sandbox>,
    pub env_fingerprint: Fingerprint,
    pub started_at: String,
    pub finished_at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Failed,
    Signaled,
    Timeout,
    Oom,
    Denied,
    NotFound,
    SandboxError,
    /// A gene's command that did not run: an earlier one failed.
    Skipped,
}

#[derive(Debug, Clone, Serialize)]
pub struct Denial {
    pub rule: String,
    pub word: Option<String>,
    pub program: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CommandResult {
    pub cmd: String,
    pub argv: Vec<String>,
    pub ok: bool,
    pub status: Status,
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub cpu_user_ms: Option<u64>,
    pub cpu_system_ms: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    pub denied: Option<Denial>,
    pub error: Option<String>,
    /// Limits the command ran into: `memory` (OOM kills), `pids` (forks refused), `output`
    /// (stdout or stderr passed `[limits] output`, the rest dropped).
    pub limits_hit: Vec<&'static str>,
    /// Everything the sandbox refused the command, of every kind ([`crate::denials`]).
    pub denials: Vec<crate::denials::Refusal>,
    /// A read-write repo's layer: what the command changed, each entry accepted or refused,
    /// and what became of it (applied, kept, discarded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_changes: Option<crate::changes::back::RepoChanges>,
    /// GitHub Actions' file commands: entries appended to the runner's files, and refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_commands: Option<crate::changes::actions::Report>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub err: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Filesystem {
    pub repo: crate::profile::RepoMode,
    pub landlock_abi: Option<u8>,
    /// `fully_enforced`, `partially_enforced`, `not_enforced`.
    pub landlock: &'static str,
    /// What the profile asked of landlock that the kernel's ABI cannot do (`tcp` below ABI 4,
    /// `signal and abstract unix socket scoping` below 6...): enforced partially, and why.
    pub landlock_missing: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Seccomp {
    pub mode: &'static str,
    pub arch: &'static str,
    /// The refused calls were named (the filter's listener reached the supervisor); false
    /// where the kernel refused a listener: the calls were still refused, unnamed.
    pub refusals_named: bool,
    /// More refused calls came than the supervisor names (a flood): counting stopped.
    pub refusals_cut: bool,
}

/// The cgroup limits in force for a run.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupInForce {
    pub version: u8,
    pub memory_max: u64,
    pub cpu_max: String,
    pub pids_max: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sandbox {
    pub namespaces: Vec<&'static str>,
    pub filesystem: Filesystem,
    pub cgroup: Option<CgroupInForce>,
    pub seccomp: Seccomp,
    pub no_new_privs: bool,
    pub capabilities: Vec<String>,
    pub stdin: &'static str,
    /// What the command got as its stdout and stderr: `inherited` (sandbox-run's own stdout,
    /// never a terminal; stderr is always at least a pipe, read for refusals), `pipe` (sandbox-run's, relayed or captured) or `pty` (a pseudo-terminal of
    /// sandbox-run's, relayed to the caller's terminal).
    pub stdout: &'static str,
    pub stderr: &'static str,
    pub fds_closed: bool,
    pub uid: u32,
    pub env_removed: Vec<String>,
    /// Every caller variable that did not reach the command, by name, with why: `secret`
    /// (secret-looking), `loads_code` (code-loading), `not_kept` (not on the keep list).
    pub env_dropped: Vec<crate::layers::env::Dropped>,
    /// The names passed by `--pass-env` and `[env] pass` (never their values).
    pub env_passed: Vec<String>,
    /// The run's secrets (`--secret`, `[secrets]`): by name, the hosts each goes to and how
    /// many placeholders the proxy replaced by the value; never a value.
    pub secrets: Vec<crate::net::secret::SecretUse>,
    /// Placeholders sent where their secret does not go, refused (per secret and host).
    pub secret_misdirected: Vec<crate::net::secret::Misdirected>,
    /// What the sandbox's trust bundle holds beside the system roots: each file and why
    /// (`--ca-certs`, a caller's variable such as `SSL_CERT_FILE`), and the run's own CA
    /// (`from: "run"`, no path) when it has secrets.
    pub ca_certs: Vec<CaCert>,
    pub network: Network,
    pub degraded: Vec<String>,
}

/// One entry of `sandbox.ca_certs`.
#[derive(Debug, Clone, Serialize)]
pub struct CaCert {
    pub path: Option<std::path::PathBuf>,
    pub from: String,
}

/// The network the command had: the mode, the port rules, and with `filtered` the proxy's
/// allow-list and connection log.
#[derive(Debug, Clone, Serialize)]
pub struct Network {
    /// `none` (its own network namespace, loopback only), `filtered` (the same, with the
    /// allow-list proxy as the only way out) or `host`.
    pub mode: crate::profile::NetMode,
    /// The TCP ports the command may connect to (landlock); `null` where no port rule applies
    /// (no rule in the profile, or landlock without TCP support in force).
    pub tcp_connect: Option<Vec<u16>>,
    /// The TCP ports the command may bind, as above.
    pub tcp_bind: Option<Vec<u16>>,
    /// `listen` is allowed (refused by seccomp on the host's network when no port may be
    /// bound: a listen on an unbound socket would autobind past landlock).
    pub listen: bool,
    /// `filtered`: the patterns the proxy lets through.
    pub allow: Vec<String>,
    /// `filtered`: one entry per host:port the command asked the proxy for, or connected to
    /// on a loopback port of the list.
    pub connections: Vec<crate::net::proxy::Connection>,
    /// `none` and `filtered`: the names the command looked up that the sandbox's name service
    /// refused, most looked-up first (under `filtered`, names on the allow-list are answered
    /// the same but not listed: the proxy reaches them).
    pub dns_refused: Vec<crate::net::dns::Refused>,
}

impl Network {
    /// What `plan` puts in force, where the kernel's landlock ABI is `abi` (TCP rules: 4+).
    pub fn of(plan: &Plan, abi: Option<u8>) -> Network {
        let tcp = abi.is_some_and(|a| a >= 4);
        let rules = plan.landlock.as_ref().filter(|_| tcp);
        Network {
            mode: plan.net,
            tcp_connect: rules.and_then(|l| l.tcp_connect.clone()),
            tcp_bind: rules.and_then(|l| l.tcp_bind.clone()),
            listen: !(plan.seccomp && plan.seccomp_options.deny_listen),
            allow: plan.network_allow.clone(),
            connections: Vec::new(),
            dns_refused: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Fingerprint {
    pub platform: &'static str,
    pub arch: &'static str,
    pub kernel: String,
    pub landlock_abi: u8,
    pub cgroup: &'static str,
    /// Always null: a version would mean running `node` on the host (see [`Fingerprint::probe`]).
    pub node_version: Option<String>,
}

impl Fingerprint {
    pub fn probe() -> Fingerprint {
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        Fingerprint {
            platform: "linux",
            arch: std::env::consts::ARCH,
            kernel,
            landlock_abi: crate::layers::landlock::kernel_abi(),
            cgroup: cgroup_kind(),
            // sandbox-run executes nothing on the host (DESIGN.md section 3): running the
            // caller's `node --version` ran whatever PATH found first, a repo's
            // `node_modules/.bin/node` included, unsandboxed. Kept for the seed's consumers.
            node_version: None,
        }
    }
}

/// `v2`, `hybrid` (v1 controllers beside a cgroup2 mount), `v1`, or `none`.
fn cgroup_kind() -> &'static str {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let v2 = mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"));
    let v1 = mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup"));
    match (v1, v2) {
        (true, true) => "hybrid",
        (false, true) => "v2",
        (true, false) => "v1",
        (false, false) => "none",
    }
}

/// `vr_<ms since epoch>_<pid>`: unique per run on one host.
pub fn new_id(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    format!("vr_{ms}_{}", std::process::id())
}

/// The result of a command the gate denied or could not find.
pub fn gated(cmd: &str, v: &Verdict) -> CommandResult {
    let (status, code) = match v.outcome {
        crate::policy::Outcome::NotFound => (Status::NotFound, 127),
        _ => (Status::Denied, 126),
    };
    CommandResult {
        cmd: cmd.to_string(),
        argv: v.argv.clone(),
        ok: false,
        status,
        exit_code: code,
        signal: None,
        duration_ms: 0,
        cpu_user_ms: None,
        cpu_system_ms: None,
        peak_memory_bytes: None,
        denied: Some(Denial {
            rule: v.rule.clone(),
            word: v.word.clone(),
            program: v.program.as_ref().map(|p| p.display().to_string()),
            reason: v.reason.clone(),
        }),
        error: None,
        limits_hit: Vec::new(),
        denials: crate::denials::gate::refusal(v).into_iter().collect(),
        repo_changes: None,
        file_commands: None,
        out: None,
        err: None,
    }
}

/// A gene's command that did not run because an earlier one failed.
pub fn skipped(cmd: &str, argv: &[String]) -> CommandResult {
    CommandResult {
        status: Status::Skipped,
        exit_code: 0,
        error: None,
        ..sandbox_failed(cmd, argv, "")
    }
}

/// The result of a command whose sandbox sandbox-run could not set up (`error` says why).
pub fn sandbox_failed(cmd: &str, argv: &[String], error: &str) -> CommandResult {
    CommandResult {
        cmd: cmd.to_string(),
        argv: argv.to_vec(),
        ok: false,
        status: Status::SandboxError,
        exit_code: crate::exit::EXIT_SANDBOX_ERROR,
        signal: None,
        duration_ms: 0,
        cpu_user_ms: None,
        cpu_system_ms: None,
        peak_memory_bytes: None,
        denied: None,
        error: Some(error.to_string()),
        limits_hit: Vec::new(),
        denials: Vec::new(),
        repo_changes: None,
        file_commands: None,
        out: None,
        err: None,
    }
}

/// The result of a command that ran (or whose sandbox failed to start). `limits`: the
/// cgroup's and the supervisor's, for the resource refusals.
pub fn ran(
    cmd: &str,
    plan: &Plan,
    f: &Finished,
    capture: bool,
    error: Option<String>,
    limits: crate::denials::resource::Limits,
) -> CommandResult {
    let code = crate::outcome::exit_code(f);
    let signal = f
        .status
        .filter(|s| libc::WIFSIGNALED(*s))
        .map(|s| libc::WTERMSIG(s));
    let usage = f.usage.clone().unwrap_or_default();
    let oom = usage.oom_kills > 0;
    let mut limits_hit = Vec::new();
    if oom {
        limits_hit.push("memory");
    }
    if usage.pids_max_hits > 0 {
        limits_hit.push("pids");
    }
    if !f.output_capped.is_empty() || !f.output_dropped.is_empty() {
        limits_hit.push("output");
    }
    if f.disk_full {
        limits_hit.push("disk");
    }
    let status = status_of(f, code, signal);
    let text = |b: &[u8]| capture.then(|| String::from_utf8_lossy(b).into_owned());
    CommandResult {
        cmd: cmd.to_string(),
        argv: plan.argv.clone(),
        ok: status == Status::Ok,
        status,
        exit_code: code,
        signal: signal
            .or(f.interrupted)
            .or(f.disk_stopped.filter(|o| o.stopped).map(|_| libc::SIGKILL)),
        duration_ms: f.duration.as_millis() as u64,
        cpu_user_ms: usage.cpu_user_usec.map(|u| u / 1000),
        cpu_system_ms: usage.cpu_system_usec.map(|u| u / 1000),
        peak_memory_bytes: usage.peak_memory_bytes,
        denied: None,
        error,
        limits_hit,
        denials: denials_of(plan, f, limits),
        repo_changes: None,
        file_commands: None,
        out: text(&f.out),
        err: text(&f.err),
    }
}

/// Everything the sandbox refused a command that ran, from the plan and what the run came to
/// (the host is looked at here, after the run, for the filesystem's).
fn denials_of(
    plan: &Plan,
    f: &Finished,
    limits: crate::denials::resource::Limits,
) -> Vec<crate::denials::Refusal> {
    let homes = crate::denials::homes(plan);
    let sources = crate::denials::Sources {
        refused_calls: &f.refused_calls,
        paths_seen: &f.paths_seen,
        connections: &f.connections,
        dns_refused: &f.dns_refused,
        ran: crate::denials::resource::Ran {
            usage: f.usage.as_ref(),
            status: f.status,
            timed_out: f.timed_out,
            output_capped: &f.output_capped,
            disk_hit: f.disk_full || f.disk_hit || f.disk_stopped.is_some(),
        },
        limits,
    };
    crate::denials::collect(plan, &sources, &homes, &crate::denials::fs::host_entry)
}

/// The status of a run that started: `code` from [`crate::outcome::exit_code`], `signal`
/// the workload's own.
fn status_of(f: &Finished, code: i32, signal: Option<i32>) -> Status {
    if f.failure.is_some() {
        match code {
            127 => Status::NotFound,
            _ => Status::SandboxError,
        }
    } else if f.timed_out {
        Status::Timeout
    } else if crate::outcome::oom_hit(f) {
        // The cgroup's own OOM count decides, whichever process the kernel chose: the
        // workload, a helper it shrugged off, or the sandbox's init or stage 2.
        Status::Oom
    } else if f.lost.is_some() {
        Status::SandboxError
    } else if signal.is_some()
        || f.interrupted.is_some()
        || f.disk_stopped.is_some_and(|o| o.stopped)
    {
        Status::Signaled
    } else if code == 0 {
        Status::Ok
    } else {
        Status::Failed
    }
}

/// The namespaces a plan makes, in the report's words (also `-v`'s first line).
pub fn namespaces_of(plan: &Plan) -> Vec<&'static str> {
    let mut namespaces = Vec::new();
    if plan.namespaces {
        namespaces.extend(["user", "mount", "pid", "ipc", "uts"]);
        if plan.net != crate::profile::NetMode::Host {
            namespaces.push("net");
        }
        namespaces.push("cgroup");
    }
    namespaces
}

/// What was in force for a run, from the plan and what the sandbox reported back.
pub fn sandbox(plan: &Plan, f: &Finished, cgroup: Option<CgroupInForce>) -> Sandbox {
    let namespaces = namespaces_of(plan);
    let (abi, landlock) = match f.landlock {
        Some((abi, 2)) => (Some(abi), "fully_enforced"),
        Some((abi, _)) => (Some(abi), "partially_enforced"),
        None => (None, "not_enforced"),
    };
    Sandbox {
        namespaces,
        filesystem: Filesystem {
            repo: plan.repo_mode,
            landlock_abi: abi,
            landlock,
            landlock_missing: match (abi, &plan.landlock) {
                (Some(abi), Some(spec)) => crate::layers::landlock::missing_at(abi, spec),
                _ => Vec::new(),
            },
        },
        cgroup,
        seccomp: Seccomp {
            mode: if plan.seccomp && f.ready {
                "allowlist"
            } else {
                "none"
            },
            arch: crate::layers::seccomp::arch_name(),
            refusals_named: f.refusals_named == Some(true),
            refusals_cut: f.refused_calls_cut,
        },
        no_new_privs: f.ready,
        capabilities: Vec::new(),
        stdin: if plan.stdin_pipe { "pipe" } else { "null" },
        stdout: f.stdio[0].name(),
        stderr: f.stdio[1].name(),
        fds_closed: f.ready,
        uid: plan.ids.uid,
        env_removed: plan.env_removed.clone(),
        env_dropped: plan.env_dropped.clone(),
        env_passed: plan.env_passed.clone(),
        secrets: f.secrets.clone(),
        secret_misdirected: f.secret_misdirected.clone(),
        ca_certs: plan
            .ca_certs
            .iter()
            .map(|s| CaCert {
                path: Some(s.path.clone()),
                from: s.from.clone(),
            })
            .chain((!plan.secrets.is_empty()).then(|| CaCert {
                path: None,
                from: "run".into(),
            }))
            .collect(),
        network: Network {
            connections: f.connections.clone(),
            dns_refused: f.dns_refused.clone(),
            ..Network::of(plan, abi)
        },
        degraded: plan.degraded.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_count_decides_whichever_process_died() {
        use crate::layers::cgroup::Usage;
        use crate::outcome::{exit_code, Lost};
        let with = |status: Option<i32>, lost: Option<Lost>, oom_kills: u64| Finished {
            status,
            lost,
            usage: Some(Usage {
                oom_kills,
                ..Usage::default()
            }),
            ..Finished::default()
        };
        let st = |f: &Finished| {
            let sig = f
                .status
                .filter(|s| libc::WIFSIGNALED(*s))
                .map(|s| libc::WTERMSIG(s));
            status_of(f, exit_code(f), sig)
        };
        // the workload killed, a helper killed (workload exits 0 or 1), init or stage 2 killed
        assert_eq!(st(&with(Some(libc::SIGKILL), None, 1)), Status::Oom);
        assert_eq!(st(&with(Some(0), None, 1)), Status::Oom);
        assert_eq!(st(&with(Some(1 << 8), None, 1)), Status::Oom);
        assert_eq!(st(&with(None, Some(Lost::Init(9)), 1)), Status::Oom);
        assert_eq!(st(&with(None, Some(Lost::Stage2(9)), 2)), Status::Oom);
        // no OOM count: a lost sandbox is a sandbox error, a SIGKILL is a signal
        assert_eq!(
            st(&with(None, Some(Lost::Init(9)), 0)),
            Status::SandboxError
        );
        assert_eq!(st(&with(Some(libc::SIGKILL), None, 0)), Status::Signaled);
        assert_eq!(st(&with(Some(0), None, 0)), Status::Ok);
        // a timeout stays a timeout
        let t = Finished {
            timed_out: true,
            ..with(Some(libc::SIGTERM), None, 1)
        };
        assert_eq!(st(&t), Status::Timeout);
    }
}
