//! Refusals: everything the sandbox refused the command, of every kind, each with the rule that
//! refused it and what would allow it (or why nothing will). One list per command, in the
//! report (`results[].denials`), on stderr at the end of a failed run, and in `-v` as they
//! happen; `sandbox-run learn` turns their [`Patch`]es into a profile.
//!
//! The sources are the gate's verdict, the proxy's and the name service's logs (network), the
//! cgroup's and the supervisor's counts (resource), the seccomp filter's refused calls, which
//! reach the supervisor by user notification (syscall), and for the filesystem, the paths the
//! command looked up ([`PathSeen`]: from its stderr, or every lookup with `--observe`),
//! judged against the plan's view and landlock rules.

use serde::Serialize;
use std::path::{Path, PathBuf};

pub mod fs;
pub mod network;
pub mod resource;
pub mod stderr;

pub mod gate;

/// The kind of a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Filesystem,
    Syscall,
    Resource,
    Gate,
    Network,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Filesystem => "filesystem",
            Kind::Syscall => "syscall",
            Kind::Resource => "resource",
            Kind::Gate => "gate",
            Kind::Network => "network",
        }
    }
}

/// One profile change that would allow a refused thing, structured so that `learn` can apply
/// it. Serialized as `{"set": "extra_ro", "value": "/etc/foo"}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "set", content = "value", rename_all = "snake_case")]
pub enum Patch {
    /// `[filesystem] extra_ro`: a host path bound read-only.
    ExtraRo(PathBuf),
    /// `[filesystem] extra_rw`: a host path bound read-write.
    ExtraRw(PathBuf),
    /// `[gate] programs`: a program the gate allows.
    Program(String),
    /// `[gate] paths`: an exact program path the gate allows.
    ProgramPath(PathBuf),
    /// `[gate] wrapped`: what a wrapper (`npx X`, `env X`) may run.
    Wrapped(String),
    /// `[gate] npm_subcommands`: an npm subcommand.
    NpmSubcommand(String),
    /// `[gate] node_options`: a node option beyond the built-in safe list.
    NodeOption(String),
    /// `[network] allow` (and `mode = "filtered"` where it was `none`): a host name.
    Host(String),
    /// `[network] tcp_bind`: a port the command may bind and listen on.
    TcpBind(u16),
    /// `[network] tcp_connect`: a port the command may connect to.
    TcpConnect(u16),
    /// `[limits] KEY = VALUE` (`memory = "4G"`, `pids = 4096`, `timeout = "10m"`...).
    Limit { key: String, value: String },
    /// `[filesystem] sys`: a path under /sys bound read-only.
    Sys(PathBuf),
    /// `[filesystem] dev_pts = true`: the sandbox's own pseudo-terminals (`/dev/ptmx`).
    DevPts(bool),
    /// `[env] keep`: a caller variable handed to the command.
    EnvKeep(String),
}

/// One refusal, deduplicated: the same `(kind, sub, what)` is counted, not repeated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub kind: Kind,
    /// The sub-kind. filesystem: `hidden` (exists on the host, not in the sandbox's view),
    /// `read_only`, `landlock`; syscall: the call's name; resource: the limit (`memory`,
    /// `pids`, `fsize`, `nofile`, `disk`, `cpu_time`, `output`, `timeout`); gate: the rule;
    /// network: `host`, `dns`, `port`.
    pub sub: String,
    /// What the command tried, in its own terms: `/root/.gitconfig (read)`,
    /// `socket(AF_PACKET)`, `memory 2 GiB`, `evil.example:443`.
    pub what: String,
    /// The rule that refused it, in the profile's words.
    pub rule: String,
    /// What to change, as a user would type it (a flag or a profile line), or, where no
    /// setting may allow it, `never: WHY`.
    pub fix: String,
    /// The change `learn` applies; `None` where nothing may allow it.
    pub patch: Option<Patch>,
    /// How many times it happened (at least 1).
    pub count: u64,
}

impl Refusal {
    /// The one line it gets on stderr and in `-v` (without the `sandbox-run: ` prefix).
    pub fn line(&self) -> String {
        let times = if self.count > 1 {
            format!(" ({}x)", self.count)
        } else {
            String::new()
        };
        format!(
            "refused {} {}: {}{times}: {}; {}",
            self.kind.as_str(),
            self.sub,
            self.what,
            self.rule,
            self.fix
        )
    }
}

/// The refusals of one command, in the order first seen, deduplicated and counted.
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    list: Vec<Refusal>,
}

impl Refusals {
    /// Adds `r` (its `count` times), or counts it onto the same `(kind, sub, what)`. Returns
    /// true when it is new (for `-v`, which says each once, when first seen).
    pub fn add(&mut self, r: Refusal) -> bool {
        match self
            .list
            .iter_mut()
            .find(|o| o.kind == r.kind && o.sub == r.sub && o.what == r.what)
        {
            Some(o) => {
                o.count = o.count.saturating_add(r.count.max(1));
                false
            }
            None => {
                self.list.push(Refusal {
                    count: r.count.max(1),
                    ..r
                });
                true
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn as_slice(&self) -> &[Refusal] {
        &self.list
    }

    pub fn into_vec(self) -> Vec<Refusal> {
        self.list
    }
}

/// What the command did to a path, as far as a refusal depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// open for reading, stat, access, readlink, list a directory
    Read,
    /// open for writing, truncate
    Write,
    /// create, mkdir, mknod, link, symlink, rename into, unlink, rmdir
    Create,
    /// execve
    Exec,
    /// ioctl on a device it opened
    Ioctl,
    /// connect or bind a unix socket at this path
    Socket,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Create => "create",
            Access::Exec => "exec",
            Access::Ioctl => "ioctl",
            Access::Socket => "unix socket",
        }
    }
}

/// A path the command looked up, as the sandbox sees it (absolute, in its mount namespace),
/// with what it meant to do, and the errno it got where that is known (from its stderr).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathSeen {
    pub path: PathBuf,
    pub access: Access,
    pub errno: Option<i32>,
    pub count: u64,
}

/// Where a command's refusals come from, beside its plan (the outcome's fields: this module
/// may not name the outcome, which holds refusals).
pub struct Sources<'a> {
    /// The seccomp filter's refused calls, already named.
    pub refused_calls: &'a [Refusal],
    /// Paths the command looked up (`--observe`) or failed on (its stderr).
    pub paths_seen: &'a [PathSeen],
    pub connections: &'a [crate::net::proxy::Connection],
    pub dns_refused: &'a [crate::net::dns::Refused],
    pub ran: resource::Ran<'a>,
    pub limits: resource::Limits,
}

/// Every refusal of one command, deduplicated: the syscall ones, the filesystem ones (each
/// path judged by [`fs::classify`], the host looked at through `host`), network, resource.
pub fn collect(
    plan: &crate::plan::Plan,
    s: &Sources,
    homes: &[PathBuf],
    host: &dyn Fn(&Path) -> Option<fs::HostEntry>,
) -> Vec<Refusal> {
    let mut all = Refusals::default();
    for r in s.refused_calls {
        all.add(r.clone());
    }
    let view = fs::View {
        namespaces: plan.namespaces,
        mounts: &plan.mounts,
        landlock: plan.landlock.as_ref(),
        homes,
    };
    // What the command's own stderr named first (it failed on it), then what `--observe`
    // saw looked up (a probe the command may have coped with): the first lines on stderr are
    // the likeliest causes.
    let named = s.paths_seen.iter().filter(|p| p.errno.is_some());
    let looked_up = s.paths_seen.iter().filter(|p| p.errno.is_none());
    for p in named.chain(looked_up) {
        if let Some(r) = fs::classify(&view, p, host) {
            all.add(r);
        }
    }
    for r in network::refusals(plan.net, s.connections, s.dns_refused) {
        all.add(r);
    }
    let disk = crate::layers::overlay::disk_size(&plan.mounts);
    for r in resource::refusals(&s.ran, &s.limits, &plan.rlimits, disk, s.paths_seen) {
        all.add(r);
    }
    all.into_vec()
}

/// The lines said on stderr for `list`: each [`Refusal::line`] with the `sandbox-run: `
/// prefix, at most `max` of them, then one line for the rest.
pub fn stderr_lines(list: &[Refusal], max: usize) -> Vec<String> {
    let mut out: Vec<String> = list
        .iter()
        .take(max)
        .map(|r| format!("sandbox-run: {}", r.line()))
        .collect();
    if list.len() > max {
        out.push(format!(
            "sandbox-run: ... and {} more refusals (see the report)",
            list.len() - max
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(what: &str) -> Refusal {
        Refusal {
            kind: Kind::Filesystem,
            sub: "hidden".into(),
            what: what.into(),
            rule: "not in the sandbox's view".into(),
            fix: "[filesystem] extra_ro = [\"/x\"]".into(),
            patch: Some(Patch::ExtraRo("/x".into())),
            count: 1,
        }
    }

    #[test]
    fn the_same_refusal_is_counted_not_repeated() {
        let mut all = Refusals::default();
        assert!(all.add(r("/x (read)")));
        assert!(!all.add(r("/x (read)")));
        assert!(all.add(r("/y (read)")));
        assert_eq!(all.as_slice().len(), 2);
        assert_eq!(all.as_slice()[0].count, 2);
        assert_eq!(
            all.as_slice()[0].line(),
            "refused filesystem hidden: /x (read) (2x): not in the sandbox's view; [filesystem] extra_ro = [\"/x\"]"
        );
    }

    #[test]
    fn ten_lines_then_the_rest_counted() {
        let list: Vec<Refusal> = (0..13).map(|i| r(&format!("/p{i} (read)"))).collect();
        let lines = stderr_lines(&list, 10);
        assert_eq!(lines.len(), 11);
        assert!(lines[0].starts_with("sandbox-run: refused filesystem hidden: /p0 (read)"));
        assert_eq!(
            lines[10],
            "sandbox-run: ... and 3 more refusals (see the report)"
        );
        assert_eq!(stderr_lines(&list[..2], 10).len(), 2);
    }

    #[test]
    fn a_patch_serializes_as_set_and_value() {
        let j = serde_json::to_string(&Patch::ExtraRo("/etc/foo".into())).unwrap();
        assert_eq!(j, r#"{"set":"extra_ro","value":"/etc/foo"}"#);
        let j = serde_json::to_string(&Patch::Limit {
            key: "memory".into(),
            value: "4G".into(),
        })
        .unwrap();
        assert_eq!(
            j,
            r#"{"set":"limit","value":{"key":"memory","value":"4G"}}"#
        );
    }
}
