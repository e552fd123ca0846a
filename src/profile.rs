//! Profiles: TOML files that say what may run and how it is confined.
//!
//! A profile file is read into [`ProfileFile`] (every field optional, unknown keys rejected
//! with file, line and key), the `extends` chain is followed and merged child-over-parent,
//! and the result is completed with defaults into one concrete [`Profile`].
//!
//! Lookup for a NAME: `$SANDBOX_RUN_PROFILE_PATH` (colon-separated dirs),
//! `$XDG_CONFIG_HOME/sandbox-run/profiles` (or `~/.config/...`), `/etc/sandbox-run/profiles`,
//! then the profiles built into the binary. A value with a `/` or ending in `.toml` is a path.
//! The schema is documented in `profiles/README.md`.

use crate::units::{Cap, Duration, Size};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

mod list;
pub mod resolved;
pub use list::ListFile;

/// The profiles shipped in `profiles/`, embedded at build time so a bare binary works anywhere.
pub const BUILTIN: &[(&str, &str)] = &[
    ("adapter", include_str!("../profiles/adapter.toml")),
    ("ci", include_str!("../profiles/ci.toml")),
    (
        "github-actions",
        include_str!("../profiles/github-actions.toml"),
    ),
    ("validate", include_str!("../profiles/validate.toml")),
];

/// System paths bound read-only when a profile names none: the system directories and a
/// curated part of /etc (no shadow file, no host keys).
pub const DEFAULT_SYSTEM_RO: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/alternatives",
    "/etc/os-release",
];

/// `[filesystem] protect` when a profile names none.
fn default_protect() -> Vec<String> {
    vec![".git/hooks".into(), ".git/config".into()]
}

/// [`Process::uid_inside`] when a profile names none.
pub const DEFAULT_UID_INSIDE: u32 = 1000;

/// Longest `extends` chain we follow; deeper is almost certainly a mistake.
const MAX_EXTENDS_DEPTH: usize = 16;
/// Profiles are small; refuse to read anything larger.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------------
// The resolved profile
// ---------------------------------------------------------------------------------------------

/// `filesystem.repo`: how the repo is mounted, a type of the filesystem layer below.
pub use crate::layers::mounts::RepoMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetMode {
    /// A fresh network namespace with only `lo`.
    None,
    /// A fresh network namespace with only `lo`, whose only way out is the supervisor's
    /// allow-list proxy ([`crate::net::proxy`]).
    Filtered,
    /// The host's network namespace.
    Host,
}

/// What the sandbox's `$HOME` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HomeMode {
    /// A private tmpfs, gone after the run.
    Tmp,
    /// A directory sandbox-run owns, kept across runs, per user and profile
    /// ([`crate::home`]); never the user's real home.
    Persist,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requirement {
    /// Missing on the host: refuse to run (exit 125).
    Required,
    /// Missing on the host: run without it, warn, and list it under `degraded`.
    BestEffort,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// Name as given (`validate`) or the file path.
    #[serde(skip)]
    pub name: String,
    /// Where each file of the `extends` chain came from, leaf first.
    #[serde(skip)]
    pub sources: Vec<String>,
    /// Layers the caller made best-effort for this run (`--without LAYER`), so that a run
    /// without them says why.
    #[serde(skip)]
    pub without: Vec<String>,
    pub description: String,
    pub gate: Gate,
    pub filesystem: Filesystem,
    pub network: Network,
    pub limits: Limits,
    pub env: Env,
    pub layers: Layers,
    pub process: Process,
    pub report: Report,
    /// `[secrets] NAME = ["host", ...]`: the caller's value of NAME stays outside; inside,
    /// NAME holds a placeholder the proxy replaces in requests to those hosts
    /// ([`crate::secrets`]).
    pub secrets: BTreeMap<String, Vec<String>>,
}

/// The `[gate]` section is exactly the policy gate's rules.
pub type Gate = crate::policy::Rules;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Filesystem {
    pub repo: RepoMode,
    pub system_ro: Vec<PathBuf>,
    pub extra_ro: Vec<PathBuf>,
    pub extra_rw: Vec<PathBuf>,
    pub protect: Vec<String>,
    pub toolchains: bool,
    pub sys: Vec<PathBuf>,
    pub tmp_size: Size,
    pub dev_pts: bool,
    pub home: HomeMode,
    /// GitHub Actions' file commands (`$GITHUB_ENV`, `$GITHUB_PATH`, ...): private copies in
    /// the sandbox, handed to the runner only as the workflow lists, the rest kept for the
    /// job's later sandboxed steps; what `$RUNNER_TEMP` held before the step is
    /// read-only in it ([`crate::changes::actions`]).
    pub file_commands: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    pub mode: NetMode,
    /// The proxy's allow-list (`--net filtered`), as written ([`crate::net::allow`]).
    pub allow: Vec<String>,
    pub tcp_connect: Vec<u16>,
    pub tcp_bind: Vec<u16>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limits {
    pub timeout: Duration,
    pub kill_grace: Duration,
    pub memory: Size,
    pub cpus: f64,
    pub pids: u64,
    pub nofile: u64,
    pub fsize: Size,
    /// Bytes of each of the command's stdout and stderr the supervisor passes through when it
    /// pipes them (capture, `--report -`); the rest is dropped.
    pub output: Size,
    /// Read-write repo: the bytes (and files, one per 4 KiB) the command may add, held in a
    /// copy-on-write layer and copied back after the run (`off`: the repo is bound as is).
    /// Copy-on-write repo: the size of its layer.
    pub disk: Cap,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Env {
    pub keep: Vec<String>,
    /// Names `keep` would pass that are held back after all (an entry ending in `*`: every
    /// name it begins).
    pub drop: Vec<String>,
    /// Names whose caller's value passes even when they look like secrets (never code-loading
    /// ones): API keys given by name, never on a command line.
    pub pass: Vec<String>,
    pub set: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layers {
    pub namespaces: Requirement,
    pub filesystem: Requirement,
    pub cgroup: Requirement,
    pub landlock: Requirement,
    pub seccomp: Requirement,
    pub landlock_min_abi: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Process {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    pub hostname: String,
    /// The uid (and gid) a workload that is root on the host has inside its user namespace:
    /// not 0 by default, so programs that refuse to run as root run; 0 keeps root inside.
    /// The host uid is the same either way.
    pub uid_inside: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub capture: bool,
}

// ---------------------------------------------------------------------------------------------
// One file as written: every field optional, unknown keys are errors.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    description: Option<String>,
    extends: Option<String>,
    #[serde(default)]
    gate: GateFile,
    #[serde(default)]
    filesystem: FilesystemFile,
    #[serde(default)]
    network: NetworkFile,
    #[serde(default)]
    limits: LimitsFile,
    #[serde(default)]
    env: EnvFile,
    #[serde(default)]
    layers: LayersFile,
    #[serde(default)]
    process: ProcessFile,
    #[serde(default)]
    report: ReportFile,
    secrets: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GateFile {
    programs: Option<ListFile<String>>,
    wrapped: Option<ListFile<String>>,
    paths: Option<ListFile<PathBuf>>,
    repo_scripts: Option<bool>,
    npm_subcommands: Option<ListFile<String>>,
    node_options: Option<ListFile<String>>,
    free_text: Option<ListFile<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilesystemFile {
    repo: Option<RepoMode>,
    system_ro: Option<ListFile<PathBuf>>,
    extra_ro: Option<ListFile<PathBuf>>,
    extra_rw: Option<ListFile<PathBuf>>,
    protect: Option<ListFile<String>>,
    toolchains: Option<bool>,
    sys: Option<ListFile<PathBuf>>,
    tmp_size: Option<Size>,
    dev_pts: Option<bool>,
    home: Option<HomeMode>,
    file_commands: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkFile {
    mode: Option<NetMode>,
    allow: Option<ListFile<String>>,
    tcp_connect: Option<ListFile<u16>>,
    tcp_bind: Option<ListFile<u16>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    timeout: Option<Duration>,
    kill_grace: Option<Duration>,
    memory: Option<Size>,
    cpus: Option<f64>,
    pids: Option<u64>,
    nofile: Option<u64>,
    fsize: Option<Size>,
    output: Option<Size>,
    disk: Option<Cap>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvFile {
    keep: Option<ListFile<String>>,
    drop: Option<ListFile<String>>,
    pass: Option<ListFile<String>>,
    set: Option<BTreeMap<String, String>>,
    path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayersFile {
    namespaces: Option<Requirement>,
    filesystem: Option<Requirement>,
    cgroup: Option<Requirement>,
    landlock: Option<Requirement>,
    seccomp: Option<Requirement>,
    landlock_min_abi: Option<u8>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessFile {
    uid: Option<u32>,
    gid: Option<u32>,
    hostname: Option<String>,
    uid_inside: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportFile {
    capture: Option<bool>,
}

/// `child.field.or(parent.field)` for every field of a section.
macro_rules! merge_fields {
    ($child:expr, $parent:expr, $($f:ident),+) => {
        $( if $child.$f.is_none() { $child.$f = $parent.$f.take(); } )+
    };
}

/// For every list of a section: the child's array replaces the parent's, its `{ add = [...] }`
/// joins it ([`ListFile::over`]).
macro_rules! merge_lists {
    ($child:expr, $parent:expr, $($f:ident),+) => {
        $( $child.$f = match $child.$f.take() {
            Some(own) => Some(own.over($parent.$f.take())),
            None => $parent.$f.take(),
        }; )+
    };
}

impl ProfileFile {
    /// Fill every field the child leaves unset from its parent.
    fn inherit(&mut self, mut parent: ProfileFile) {
        merge_fields!(self, parent, description, secrets);
        let (c, p) = (&mut self.gate, &mut parent.gate);
        merge_fields!(c, p, repo_scripts);
        merge_lists!(
            c,
            p,
            programs,
            wrapped,
            paths,
            npm_subcommands,
            node_options,
            free_text
        );
        let (c, p) = (&mut self.filesystem, &mut parent.filesystem);
        merge_fields!(
            c,
            p,
            repo,
            toolchains,
            tmp_size,
            dev_pts,
            home,
            file_commands
        );
        merge_lists!(c, p, system_ro, extra_ro, extra_rw, protect, sys);
        let (c, p) = (&mut self.network, &mut parent.network);
        merge_fields!(c, p, mode);
        merge_lists!(c, p, allow, tcp_connect, tcp_bind);
        let (c, p) = (&mut self.limits, &mut parent.limits);
        merge_fields!(c, p, timeout, kill_grace, memory, cpus, pids, nofile, fsize, output, disk);
        let (c, p) = (&mut self.env, &mut parent.env);
        merge_fields!(c, p, set, path);
        merge_lists!(c, p, keep, drop, pass);
        let (c, p) = (&mut self.layers, &mut parent.layers);
        merge_fields!(
            c,
            p,
            namespaces,
            filesystem,
            cgroup,
            landlock,
            seccomp,
            landlock_min_abi
        );
        let (c, p) = (&mut self.process, &mut parent.process);
        merge_fields!(c, p, uid, gid, hostname, uid_inside);
        let (c, p) = (&mut self.report, &mut parent.report);
        merge_fields!(c, p, capture);
    }

    /// Complete with defaults. The defaults are the strict ones: nothing allowed, no network,
    /// every layer required. A profile loosens them explicitly.
    fn resolve(self, name: String, sources: Vec<String>) -> Profile {
        let secs = |s| Duration(std::time::Duration::from_secs(s));
        let paths = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        let g = self.gate;
        let f = self.filesystem;
        let n = self.network;
        let l = self.limits;
        let e = self.env;
        let y = self.layers;
        let p = self.process;
        let required = Requirement::Required;
        Profile {
            name,
            sources,
            without: Vec::new(),
            description: self.description.unwrap_or_default(),
            gate: Gate {
                programs: ListFile::resolve(g.programs, Vec::new),
                wrapped: ListFile::resolve(g.wrapped, Vec::new),
                paths: ListFile::resolve(g.paths, Vec::new),
                repo_scripts: g.repo_scripts.unwrap_or(false),
                npm_subcommands: ListFile::resolve(g.npm_subcommands, Vec::new),
                node_options: ListFile::resolve(g.node_options, Vec::new),
                free_text: ListFile::resolve(g.free_text, Vec::new),
            },
            filesystem: Filesystem {
                repo: f.repo.unwrap_or(RepoMode::Ro),
                system_ro: ListFile::resolve(f.system_ro, || paths(DEFAULT_SYSTEM_RO)),
                extra_ro: ListFile::resolve(f.extra_ro, Vec::new),
                extra_rw: ListFile::resolve(f.extra_rw, Vec::new),
                protect: ListFile::resolve(f.protect, default_protect),
                toolchains: f.toolchains.unwrap_or(true),
                sys: ListFile::resolve(f.sys, Vec::new),
                tmp_size: f.tmp_size.unwrap_or(Size(512 << 20)),
                dev_pts: f.dev_pts.unwrap_or(false),
                home: f.home.unwrap_or(HomeMode::Tmp),
                file_commands: f.file_commands.unwrap_or(false),
            },
            network: Network {
                mode: n.mode.unwrap_or(NetMode::None),
                allow: ListFile::resolve(n.allow, Vec::new),
                tcp_connect: ListFile::resolve(n.tcp_connect, Vec::new),
                tcp_bind: ListFile::resolve(n.tcp_bind, Vec::new),
            },
            limits: Limits {
                timeout: l.timeout.unwrap_or(secs(180)),
                kill_grace: l.kill_grace.unwrap_or(secs(5)),
                memory: l.memory.unwrap_or(Size(2 << 30)),
                cpus: l.cpus.unwrap_or(1.0),
                pids: l.pids.unwrap_or(256),
                nofile: l.nofile.unwrap_or(1024),
                fsize: l.fsize.unwrap_or(Size(1 << 30)),
                output: l.output.unwrap_or(Size(64 << 20)),
                disk: l.disk.unwrap_or(Cap(Some(2 << 30))),
            },
            env: Env {
                keep: ListFile::resolve(e.keep, Vec::new),
                drop: ListFile::resolve(e.drop, Vec::new),
                pass: ListFile::resolve(e.pass, Vec::new),
                set: e.set.unwrap_or_default(),
                path: e.path,
            },
            layers: Layers {
                namespaces: y.namespaces.unwrap_or(required),
                filesystem: y.filesystem.unwrap_or(required),
                cgroup: y.cgroup.unwrap_or(required),
                landlock: y.landlock.unwrap_or(required),
                seccomp: y.seccomp.unwrap_or(required),
                landlock_min_abi: y.landlock_min_abi.unwrap_or(1),
            },
            process: Process {
                uid: p.uid,
                gid: p.gid,
                hostname: p.hostname.unwrap_or_else(|| "sandbox".into()),
                uid_inside: p.uid_inside.unwrap_or(DEFAULT_UID_INSIDE),
            },
            report: Report {
                capture: self.report.capture.unwrap_or(false),
            },
            secrets: self.secrets.unwrap_or_default(),
        }
    }
}

impl Profile {
    /// Checks that need the whole resolved profile; each error names the key.
    fn check(&self) -> Result<(), String> {
        let bad = |key: &str, why: &str| Err(format!("{key} {why}"));
        let l = &self.limits;
        if !(l.cpus.is_finite() && l.cpus > 0.0 && l.cpus <= 1024.0) {
            return bad(
                "limits.cpus",
                "must be a number above 0 (fractions allowed)",
            );
        }
        if l.pids == 0 {
            return bad("limits.pids", "must be at least 1");
        }
        if l.memory.0 < (4 << 20) {
            return bad("limits.memory", "must be at least 4M");
        }
        if l.timeout.0.is_zero() {
            return bad("limits.timeout", "must be above 0");
        }
        if l.nofile < 16 {
            return bad("limits.nofile", "must be at least 16");
        }
        if !(1..=7).contains(&self.layers.landlock_min_abi) {
            return bad("layers.landlock_min_abi", "must be between 1 and 7");
        }
        if let Err(e) = crate::net::allow::AllowList::parse(&self.network.allow) {
            return bad("network.allow", &e);
        }
        for (name, hosts) in &self.secrets {
            crate::secrets::check_entry(name, hosts, "secrets:")?;
        }
        for p in &self.gate.programs {
            if p.is_empty() || p.contains('/') {
                return bad(
                    "gate.programs",
                    &format!("entry {p:?} must be a bare program name (use gate.paths for paths)"),
                );
            }
        }
        for (key, list) in [
            ("gate.paths", &self.gate.paths),
            ("filesystem.system_ro", &self.filesystem.system_ro),
            ("filesystem.extra_ro", &self.filesystem.extra_ro),
            ("filesystem.extra_rw", &self.filesystem.extra_rw),
            ("filesystem.sys", &self.filesystem.sys),
        ] {
            // extra_ro and extra_rw may also name a caller's variable (`$RUNNER_TEMP`).
            let var =
                |p: &PathBuf| key.starts_with("filesystem.extra_") && env_path_name(p).is_some();
            if let Some(p) = list.iter().find(|p| !p.is_absolute() && !var(p)) {
                return bad(
                    key,
                    &format!(
                        "entry {:?} must be an absolute path{}",
                        p.display(),
                        if key.starts_with("filesystem.extra_") {
                            " or $NAME"
                        } else {
                            ""
                        }
                    ),
                );
            }
        }
        for p in &self.filesystem.protect {
            if p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == "..") {
                return bad(
                    "filesystem.protect",
                    &format!("entry {p:?} must be a path relative to the repo, without '..'"),
                );
            }
        }
        let h = &self.process.hostname;
        if h.is_empty()
            || h.len() > 64
            || !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return bad(
                "process.hostname",
                "must be 1-64 characters of letters, digits, '-' and '.'",
            );
        }
        for k in self
            .env
            .keep
            .iter()
            .chain(&self.env.drop)
            .chain(&self.env.pass)
            .chain(self.env.set.keys())
        {
            if k.is_empty() || k.contains('=') || k.bytes().any(|b| b.is_ascii_control()) {
                return bad("env", &format!("variable name {k:?} is not valid"));
            }
        }
        for k in &self.env.pass {
            if crate::layers::env::refusal(k) == Some(crate::layers::env::Refusal::Injection) {
                return bad(
                    "env.pass",
                    &format!("entry {k:?} changes what code the command loads: it never passes"),
                );
            }
        }
        for p in &self.gate.free_text {
            if let Err(why) = crate::policy::free_text_entry(p) {
                return bad("gate.free_text", &format!("entry {p:?} {why}"));
            }
        }
        Ok(())
    }

    /// `--without LAYER`: the caller accepts running without `layer` (`cgroup`, `landlock`,
    /// `seccomp`, `namespaces`) where this host cannot give it; where it can, nothing
    /// changes. Without namespaces there is no new root either, so `namespaces` waives
    /// `filesystem` too.
    pub fn accept_without(&mut self, layer: &str) {
        let names: &[&'static str] = match layer {
            "cgroup" => &["cgroup"],
            "landlock" => &["landlock"],
            "seccomp" => &["seccomp"],
            "namespaces" => &["namespaces", "filesystem"],
            _ => &[],
        };
        for &name in names {
            let l = &mut self.layers;
            let req = match name {
                "cgroup" => &mut l.cgroup,
                "landlock" => &mut l.landlock,
                "seccomp" => &mut l.seccomp,
                "namespaces" => &mut l.namespaces,
                _ => &mut l.filesystem,
            };
            if *req == Requirement::Required {
                *req = Requirement::BestEffort;
                self.without.push(name.to_string());
            }
        }
    }

    /// The profile as TOML, for `profiles show`.
    pub fn to_toml(&self) -> String {
        let mut out = format!(
            "# profile {}\n# from {}\n",
            self.name,
            self.sources.join(" <- ")
        );
        // Serialization of this plain struct tree cannot fail; fall back to a note if it ever did.
        match toml::to_string(self) {
            Ok(body) => out.push_str(&body),
            Err(e) => out.push_str(&format!("# (could not serialize: {e})\n")),
        }
        out
    }
}

/// The variable an `extra_ro`/`extra_rw` entry names: `$NAME`, the whole entry.
pub fn env_path_name(p: &Path) -> Option<&str> {
    let n = p.to_str()?.strip_prefix('$')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')).then_some(n)
}

// ---------------------------------------------------------------------------------------------
// Lookup and loading
// ---------------------------------------------------------------------------------------------

/// One clear line: which profile file, which line, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError(pub String);

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ProfileError {}

/// Where a profile's text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Builtin(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Builtin(n) => write!(f, "built-in:{n}"),
        }
    }
}

/// The directories searched for `--profile NAME`, in order.
#[derive(Debug, Clone)]
pub struct Loader {
    pub dirs: Vec<PathBuf>,
}

impl Loader {
    /// The standard search path, from the environment.
    pub fn from_env() -> Loader {
        let mut dirs = Vec::new();
        if let Some(p) = std::env::var_os("SANDBOX_RUN_PROFILE_PATH") {
            dirs.extend(std::env::split_paths(&p).filter(|d| d.is_absolute()));
        }
        dirs.extend(Loader::user_dir());
        dirs.push(PathBuf::from("/etc/sandbox-run/profiles"));
        Loader { dirs }
    }

    /// The caller's own profile directory: `$XDG_CONFIG_HOME/sandbox-run/profiles`, else
    /// `~/.config/sandbox-run/profiles`.
    pub fn user_dir() -> Option<PathBuf> {
        std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
            .map(|c| c.join("sandbox-run/profiles"))
    }

    /// Every place a NAME could come from, in lookup order.
    fn candidates(&self, name: &str) -> Vec<Source> {
        let mut out: Vec<Source> = self
            .dirs
            .iter()
            .map(|d| d.join(format!("{name}.toml")))
            .filter(|p| p.is_file())
            .map(|p| Source::File(absolute(&p)))
            .collect();
        if let Some((n, _)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            out.push(Source::Builtin(n));
        }
        out
    }

    /// Names of all profiles reachable by name, each with the source that wins.
    pub fn list(&self) -> Vec<(String, Source)> {
        let mut names: Vec<String> = BUILTIN.iter().map(|(n, _)| n.to_string()).collect();
        for d in &self.dirs {
            let Ok(rd) = std::fs::read_dir(d) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "toml") {
                    if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                        names.push(stem.to_string());
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| {
                let src = self.candidates(&n).into_iter().next()?;
                Some((n, src))
            })
            .collect()
    }

    /// `--profile NAME|PATH` to a resolved, checked profile.
    pub fn load(&self, spec: &str) -> Result<Profile, ProfileError> {
        self.load_chain(spec).map(|(p, _)| p)
    }

    /// [`Loader::load`], with each file of the chain and its text, leaf first (for
    /// `profiles show --resolved`, which names where each entry came from).
    pub fn load_chain(&self, spec: &str) -> Result<(Profile, Vec<(Source, String)>), ProfileError> {
        if spec.is_empty() {
            return Err(ProfileError("profile: empty profile name".into()));
        }
        let first = self.locate(spec, None, Path::new("."))?;
        let mut chain: Vec<Source> = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        let mut merged: Option<ProfileFile> = None;
        let mut next = Some(first);
        while let Some(src) = next.take() {
            if chain.contains(&src) {
                let names: Vec<String> =
                    chain.iter().chain([&src]).map(|s| s.to_string()).collect();
                return Err(ProfileError(format!(
                    "profile {}: extends cycle: {}",
                    chain[0],
                    names.join(" -> ")
                )));
            }
            if chain.len() >= MAX_EXTENDS_DEPTH {
                return Err(ProfileError(format!(
                    "profile {}: extends chain longer than {MAX_EXTENDS_DEPTH}",
                    chain[0]
                )));
            }
            let text = source_text(&src)?;
            let mut file = parse_text(&text, &src.to_string())?;
            texts.push(text);
            if let Some(parent) = file.extends.take() {
                let base = match &src {
                    Source::File(p) => p.parent().unwrap_or(Path::new(".")).to_path_buf(),
                    Source::Builtin(_) => PathBuf::from("."),
                };
                next = Some(self.locate(&parent, Some(&src), &base).map_err(|e| {
                    ProfileError(format!("profile {src}: extends {parent:?}: {}", e.0))
                })?);
            }
            merged = Some(match merged {
                None => file,
                Some(mut child) => {
                    child.inherit(file);
                    child
                }
            });
            chain.push(src);
        }
        let name = spec.to_string();
        let sources = chain.iter().map(|s| s.to_string()).collect();
        let profile = merged.unwrap_or_default().resolve(name, sources);
        profile
            .check()
            .map_err(|e| ProfileError(format!("profile {}: {e}", chain[0])))?;
        Ok((profile, chain.into_iter().zip(texts).collect()))
    }

    /// Find the source for NAME or PATH. `from` is the profile doing the `extends`: a profile
    /// that extends its own name continues the lookup after itself (so
    /// `~/.config/.../validate.toml` can say `extends = "validate"` to refine the built-in one).
    fn locate(
        &self,
        spec: &str,
        from: Option<&Source>,
        base: &Path,
    ) -> Result<Source, ProfileError> {
        if spec.contains('/') || spec.ends_with(".toml") {
            // As written (made absolute), not resolved: the links on the way are checked
            // when the file is opened (`strict_modes`).
            let p = absolute(&base.join(spec));
            if let Err(e) = std::fs::metadata(&p) {
                return Err(ProfileError(format!(
                    "profile {}: {}",
                    p.display(),
                    errno_text(&e)
                )));
            }
            return Ok(Source::File(p));
        }
        if !spec
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(ProfileError(format!(
                "profile {spec:?}: not a valid profile name"
            )));
        }
        let all = self.candidates(spec);
        let start = match from {
            Some(f) => all.iter().position(|s| s == f).map_or(0, |i| i + 1),
            None => 0,
        };
        all.into_iter().nth(start).ok_or_else(|| {
            let mut where_ = self
                .dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>();
            where_.push("built-in".into());
            ProfileError(format!(
                "profile {spec:?} not found (looked in {}; see 'sandbox-run profiles list')",
                where_.join(", ")
            ))
        })
    }
}

/// Places a sandboxed step can write, each with the words that name it (`$RUNNER_TEMP`).
pub type Places = Vec<(PathBuf, String)>;

/// Under GitHub Actions (`GITHUB_ACTIONS=true`) sandbox-run cannot tell whether
/// `SANDBOX_RUN_PROFILE_PATH` or a profile path came from the workflow or from something a
/// step left, so a profile directory of the loader, a profile file of the chain (`--profile
/// PATH`, `extends`) or a directory above one of them that lies where a sandboxed step can
/// write (`places`, and the profile's own `extra_rw`) is refused: one line saying why.
/// Compared as written and resolved.
pub fn refuse_writable_places(
    loader: &Loader,
    profile: &Profile,
    places: &Places,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(), ProfileError> {
    let mut places = places.clone();
    for p in &profile.filesystem.extra_rw {
        let path = match env_path_name(p) {
            Some(n) => match env(n).filter(|v| v.starts_with('/')) {
                Some(v) => PathBuf::from(v),
                None => continue,
            },
            None => p.clone(),
        };
        places.push((path, "the profile's filesystem.extra_rw".into()));
    }
    let real = |p: &Path| std::fs::canonicalize(p).ok();
    let mut resolved = places.clone();
    for (p, words) in &places {
        if let Some(r) = real(p) {
            resolved.push((r, words.clone()));
        }
    }
    let lies_in = |p: &Path| -> Option<(PathBuf, String)> {
        let mut forms = vec![p.to_path_buf()];
        // the nearest existing ancestor, resolved: a directory made later lies where it does
        if let Some(r) = p.ancestors().find_map(|a| {
            let r = real(a)?;
            Some(r.join(p.strip_prefix(a).ok()?))
        }) {
            forms.push(r);
        }
        resolved
            .iter()
            .find(|(w, _)| forms.iter().any(|f| f.starts_with(w)))
            .cloned()
    };
    let refuse = |what: String, (w, words): (PathBuf, String)| {
        ProfileError(format!(
            "profile: {what} lies in {words} ({}), which a sandboxed step can write; under GitHub Actions (GITHUB_ACTIONS=true) profiles are read only from places no step can change: move it (to /etc/sandbox-run/profiles, or a directory of the runner user's outside the job's files)",
            w.display()
        ))
    };
    for d in &loader.dirs {
        if let Some(hit) = lies_in(d) {
            return Err(refuse(
                format!("the profile directory {}", d.display()),
                hit,
            ));
        }
    }
    for src in profile.sources.iter().filter(|s| s.starts_with('/')) {
        if let Some(hit) = lies_in(Path::new(src)) {
            return Err(refuse(format!("the profile file {src}"), hit));
        }
    }
    Ok(())
}

/// `No such file or directory (os error 2)`: the message and the errno, on one line.
fn errno_text(e: &std::io::Error) -> String {
    e.to_string()
}

fn source_text(src: &Source) -> Result<String, ProfileError> {
    Ok(match src {
        Source::Builtin(name) => BUILTIN
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.to_string())
            .unwrap_or_default(),
        Source::File(p) => {
            read_small(p).map_err(|e| ProfileError(format!("profile {src}: {e}")))?
        }
    })
}

/// `p` made absolute against the current directory, `.` and `..` taken lexically (as a
/// shell's `cd` does), without resolving links.
fn absolute(p: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    crate::hostfs::lexical(&cwd, p)
}

/// The profile file's text, read only where no one but the caller or root can change it
/// ([`crate::strict_modes`]).
fn read_small(p: &Path) -> Result<String, String> {
    use std::io::Read;
    let f = crate::strict_modes::open(p).map_err(|e| {
        // the line names the file itself; here only the reason follows it
        let prefix = format!("profile {}: ", p.display());
        e.strip_prefix(&prefix).map(str::to_string).unwrap_or(e)
    })?;
    let mut buf = Vec::new();
    f.take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| errno_text(&e))?;
    if buf.len() as u64 > MAX_PROFILE_BYTES {
        return Err(format!("larger than {} bytes", MAX_PROFILE_BYTES));
    }
    String::from_utf8(buf).map_err(|_| "not valid UTF-8".to_string())
}

/// Parse one profile's text; errors say `profile FILE:LINE: message`.
pub fn parse_text(text: &str, origin: &str) -> Result<ProfileFile, ProfileError> {
    toml::from_str::<ProfileFile>(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().replace('\n', " ");
        let msg = msg.trim_end_matches('.');
        match line {
            Some(l) => {
                let key = e.span().and_then(|s| key_at(text, s.start));
                match key {
                    Some(k) if !msg.contains(&k) => {
                        ProfileError(format!("profile {origin}:{l}: key `{k}`: {msg}"))
                    }
                    _ => ProfileError(format!("profile {origin}:{l}: {msg}")),
                }
            }
            None => ProfileError(format!("profile {origin}: {msg}")),
        }
    })
}

/// The key on the line where an error points, so wrong-type errors name it.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('#')).then(|| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_check() {
        let loader = Loader { dirs: vec![] };
        for (name, _) in BUILTIN {
            let p = loader.load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!p.gate.programs.is_empty(), "{name} allows nothing");
            // what `profiles show` prints must itself be a valid profile equal to the original
            let again = parse_text(&p.to_toml(), "show")
                .unwrap()
                .resolve(p.name.clone(), p.sources.clone());
            assert_eq!(
                again, p,
                "{name} does not round-trip through `profiles show`"
            );
        }
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let e = parse_text(
            "description = \"x\"\n\n[gate]\nprogramz = [\"node\"]\n",
            "f.toml",
        )
        .unwrap_err();
        assert!(e.0.starts_with("profile f.toml:4:"), "{e}");
        assert!(e.0.contains("programz"), "{e}");
    }

    #[test]
    fn wrong_type_names_file_line_and_key() {
        let e = parse_text("[limits]\npids = \"many\"\n", "f.toml").unwrap_err();
        assert!(e.0.starts_with("profile f.toml:2:"), "{e}");
        assert!(e.0.contains("pids"), "{e}");
        let e = parse_text("[limits]\n\ntimeout = \"5 fortnights\"\n", "f.toml").unwrap_err();
        assert!(
            e.0.starts_with("profile f.toml:3:") && e.0.contains("timeout"),
            "{e}"
        );
        let e = parse_text("[filesystem]\nrepo = \"rwx\"\n", "f.toml").unwrap_err();
        assert!(
            e.0.starts_with("profile f.toml:2:") && e.0.contains("overlay"),
            "{e}"
        );
    }

    #[test]
    fn under_actions_profiles_where_a_step_writes_are_refused() {
        let base = crate::testdir::base()
            .join(format!("sandbox-run-profile-places-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (temp, etc) = (base.join("_temp"), base.join("etc"));
        std::fs::create_dir_all(&temp).unwrap();
        std::fs::create_dir_all(&etc).unwrap();
        std::os::unix::fs::symlink(&temp, etc.join("to-temp")).unwrap();
        let places: Places = vec![(temp.clone(), "$RUNNER_TEMP".into())];
        let p = Loader { dirs: vec![] }.load("github-actions").unwrap();
        let env = |k: &str| (k == "RUNNER_TEMP").then(|| temp.display().to_string());
        let check = |dirs: Vec<PathBuf>| refuse_writable_places(&Loader { dirs }, &p, &places, env);
        assert!(check(vec![
            etc.clone(),
            PathBuf::from("/etc/sandbox-run/profiles")
        ])
        .is_ok());
        // in it, not made yet, or reached through a link: refused, on one line
        for d in [temp.join("x"), temp.join("not/yet"), etc.join("to-temp/x")] {
            let e = check(vec![d.clone()]).unwrap_err();
            assert!(
                e.0.contains("lies in $RUNNER_TEMP") && !e.0.contains('\n'),
                "{d:?}: {e}"
            );
        }
        // the profile's own extra_rw ($RUNNER_TEMP here) counts even when not in `places`
        let e = refuse_writable_places(
            &Loader {
                dirs: vec![temp.join("y")],
            },
            &p,
            &Vec::new(),
            env,
        )
        .unwrap_err();
        assert!(e.0.contains("filesystem.extra_rw"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn errors_are_one_line() {
        for text in [
            "[gate\n",
            "x = \n",
            "[gate]\nprograms = [1]\n",
            "a = 1\na = 2\n",
        ] {
            let e = parse_text(text, "f.toml").unwrap_err();
            assert!(!e.0.contains('\n'), "{e:?}");
        }
    }
}
