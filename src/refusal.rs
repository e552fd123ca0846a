//! What a refusal is: its kind, what the command tried, the rule, the fix and the profile
//! change (`Patch`) that `learn` applies; and a path the command looked up. Plain data, shared
//! by the layers that see refusals (the seccomp notification) and [`crate::denials`], which
//! judges and assembles them.

use serde::Serialize;
use std::path::PathBuf;

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
    /// open for writing
    Write,
    /// truncate (`truncate(2)`, `ftruncate`): its own landlock right since ABI 3
    Truncate,
    /// create, mkdir, mknod, link, symlink, rename into, unlink, rmdir
    Create,
    /// execve
    Exec,
    /// ioctl on a device it opened
    Ioctl,
    /// connect or bind a unix socket at this path
    Socket,
    /// bind a unix socket at this path (creates its file: landlock's MAKE_SOCK)
    Bind,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Truncate => "truncate",
            Access::Create => "create",
            Access::Exec => "exec",
            Access::Ioctl => "ioctl",
            Access::Socket => "unix socket",
            Access::Bind => "unix socket bind",
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
