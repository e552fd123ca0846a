//! Toolchain discovery: which host paths outside the system directories the allowed programs
//! need, bound read-only into the sandbox, and which credential files inside those binds are
//! hidden. Runs in the supervisor, on the host, before anything else; pure apart from `stat`s,
//! `readlink`s and one bounded read of npm's global config (never of a repo file).
//!
//! # Rules
//!
//! **Where programs are looked up.** Each allowed name is searched in the sandbox's PATH like
//! `execvp`, but only in entries that the code under test cannot have chosen. An entry is
//! skipped when it is empty or relative, when it is inside the repo (lexically or once
//! resolved: `node_modules/.bin` under `npm run`), or when it or any directory above it, taken
//! lexically and resolved, is writable by everybody (the sticky bit is no excuse, as in the
//! gate: `/tmp/x` is whoever made it first). The first executable file found wins.
//!
//! **How links are followed.** From the program found, symlinks are followed one hop at a
//! time. The same trust rule applies to every directory holding a hop: a link that lives in
//! the repo or under a world-writable directory is never followed, and the program is then not
//! bound at all (inside, the repo's link dangles). A program that resolves into the repo needs
//! no bind (the repo is mounted anyway).
//!
//! **What is bound.** For each place the lookup passes through (the program as found, each
//! link and the real file) its *prefix*: the parent of the `bin`, `sbin` or `shims` directory
//! holding it (`~/.nvm/versions/node/v20`, `~/.pyenv/versions/3.12.1`,
//! `~/.rustup/toolchains/stable-x86_64-unknown-linux-gnu`, `/opt/app`); the file itself when
//! it sits in a `versions` directory (a native installer's `versions/1.2.3` binary); else the
//! directory holding it (`~/.local/share/agent/versions/1.2.3`). A place inside an npm
//! package (`.../node_modules/NAME` or `@SCOPE/NAME`, outside the system directories) gives
//! that package instead, and the packages it depends on ([`node_closure`]): a CLI installed
//! with `npm install` in some `~/tools` runs, and the rest of that `node_modules` stays
//! out. Paths in the system
//! directories are already bound. A prefix is then classified ([`classify`]):
//! - **refused**: `/` and top-level directories; a home directory (`$HOME`, the workload's,
//!   root's and every regular user's from `/etc/passwd`) or anything above one; a credential
//!   location of a home ([`SECRETS`]: `~/.ssh`, `~/.aws`, `~/.kube`, `~/.gnupg`, `~/.docker`,
//!   all of `~/.config`, keyrings, `~/.netrc`, `~/.npmrc`, cargo's credentials, …) or anything
//!   inside or above one; an app-data root (`~/.local/share`, `~/.local/state`, …). Refused
//!   paths are logged at debug level and not bound.
//! - **a tool root**: a directory directly in a home (`~/.cargo`, `~/.local`, `~/.pyenv`,
//!   `~/.bun`, …), which mixes a tool with its user's data (cargo's credentials, keyrings,
//!   shell histories). It is never bound whole; only its install parts that exist
//!   ([`TOOL_ROOT_PARTS`]: `bin`, `shims`, `libexec`, `plugins`, `versions`, `toolchains`,
//!   pyenv's `pyenv.d` and `version` file), each classified again. So `~/.cargo/bin`, never
//!   `~/.cargo`; `~/.local/bin`, never `~/.local`.
//! - otherwise bound read-only.
//!
//! A rustup proxy (a program that resolves to a file named `rustup`, or to a hard link of the
//! `rustup` in its own directory, as rustup installs them) also needs rustup's
//! home: `$RUSTUP_HOME` if set and `.rustup` beside the cargo home contribute `toolchains` and
//! `settings.toml`, never the rest (`downloads`, `tmp`, `update-hashes`). All installed
//! toolchains are bound, not only the default: which one runs is chosen by the repo
//! (`rust-toolchain.toml`), and working that out would mean reading repo files on the host.
//! Toolchains hold no credentials.
//!
//! **What is hidden.** Inside every install prefix bound whole the names in [`HIDE`] are
//! covered when they exist, and inside the prefixes of the programs found in the system
//! directories those in [`SYSTEM_HIDE`] (a `CARGO_HOME` of `/usr/local/cargo` comes with
//! `/usr`); the parts of a tool root and of rustup's home are install directories by name and
//! are not searched. Covered: a file by `/dev/null` bound read-only (on a
//! `nodev` mount, so opening it fails with `EACCES`), a directory by an empty tmpfs of mode
//! 0 (the workload has no capabilities, so even uid 0 gets `EACCES`). npm's global and
//! built-in configs (`etc/npmrc`, `npmrc`) are hidden only when they hold credentials
//! ([`npmrc_has_credentials`]; also when unreadable or larger than 64 KiB): they usually carry
//! the registry, proxy and prefix settings that installs need. A hidden name that is a
//! symlink is not followed by the mount: its target is hidden instead when that lies in a
//! bind. Without a mount namespace the hides become landlock carve-outs ([`carve`]).
//!
//! Not covered: a PATH entry reached through a symlinked directory is bound at the path PATH
//! names, so a relative link in it that climbs out with `..` resolves differently inside;
//! programs whose install prefix is refused (a binary directly in `~/tools`) are not bound;
//! put them in `extra_ro`.

use crate::layers::mounts;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Credential locations relative to a home: never bound, nor anything inside or above them.
pub const SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".kube",
    ".gnupg",
    ".docker",
    ".config",
    ".azure",
    ".password-store",
    ".local/share/keyrings",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".vault-token",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
];

/// Names hidden inside every bound directory when they exist.
pub const HIDE: &[&str] = &[
    // cargo (a CARGO_HOME outside a home, such as /usr/local/cargo)
    "credentials",
    "credentials.toml",
    ".npmrc",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".vault-token",
    ".ssh",
    ".aws",
    ".kube",
    ".gnupg",
    ".docker",
    ".azure",
    ".config",
    ".password-store",
    "keyrings",
    ".local/share/keyrings",
];

/// Names hidden in the prefixes of programs found in the system directories.
pub const SYSTEM_HIDE: &[&str] = &["credentials", "credentials.toml"];

/// npm's global config (`PREFIX/etc/npmrc`) and built-in config (`npm/npmrc`): hidden only
/// when they hold credentials.
pub const NPM_CONFIGS: &[&str] = &["etc/npmrc", "npmrc"];

/// What of a tool root (a directory directly in a home) may be bound.
pub const TOOL_ROOT_PARTS: &[&str] = &[
    "bin",
    "sbin",
    "shims",
    "libexec",
    "plugins",
    "versions",
    "toolchains",
    "pyenv.d",
    "version",
];

/// What rustup's home contributes to a rustup proxy.
const RUSTUP_PARTS: &[&str] = &["toolchains", "settings.toml"];

/// Linux gives up after 40 symbolic links; so do we.
const MAX_SYMLINKS: usize = 40;

/// The largest npm config read to look for credentials.
const NPMRC_MAX: u64 = 64 * 1024;

pub struct Input<'a> {
    /// The allowed program names (the gate's `programs` and `wrapped`).
    pub names: &'a [&'a str],
    /// The sandbox's PATH.
    pub path: &'a OsStr,
    pub repo: &'a Path,
    /// The system directories, bound anyway.
    pub system: &'a [PathBuf],
    /// Every home directory whose contents must not be bound wholesale.
    pub homes: &'a [PathBuf],
    /// The caller's `$RUSTUP_HOME`, if set.
    pub rustup_home: Option<&'a Path>,
}

/// A credential path covered in the new root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hide {
    /// Covered by `/dev/null`.
    File(PathBuf),
    /// Covered by an empty tmpfs of mode 0.
    Dir(PathBuf),
}

impl Hide {
    pub fn path(&self) -> &Path {
        match self {
            Hide::File(p) | Hide::Dir(p) => p,
        }
    }

    /// The mount operation that covers it.
    pub fn op(&self) -> mounts::Op {
        match self {
            Hide::File(p) => mounts::Op::Bind {
                src: "/dev/null".into(),
                dst: p.clone(),
                ro: true,
                optional: false,
            },
            Hide::Dir(p) => mounts::Op::Tmpfs {
                dst: p.clone(),
                size: 4096,
                mode: 0,
            },
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Toolchains {
    /// Read-only binds (source and target the same path), sorted, none inside another.
    pub binds: Vec<PathBuf>,
    /// Credential paths inside the binds or the system directories, sorted.
    pub hides: Vec<Hide>,
}

impl Toolchains {
    pub fn hide_ops(&self) -> Vec<mounts::Op> {
        self.hides.iter().map(Hide::op).collect()
    }
}

/// How a computed prefix may be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    Bind,
    /// A directory directly in a home: only its [`TOOL_ROOT_PARTS`].
    ToolRoot,
    Refused(String),
}

/// Classify a path (absolute, normalized) against the homes. Pure.
pub fn classify(p: &Path, homes: &[PathBuf]) -> Class {
    let refused = |why: String| Class::Refused(format!("{}: {why}", p.display()));
    if p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
        < 2
    {
        return refused("a top-level directory".into());
    }
    // Paths below a home are compared relative to it (no allocation per secret).
    let mut tool_root = false;
    for h in homes {
        if h.starts_with(p) {
            return refused(format!("the home directory {} or above it", h.display()));
        }
        let Ok(rel) = p.strip_prefix(h) else {
            continue;
        };
        if let Some(s) = SECRETS.iter().find(|s| rel.starts_with(s)) {
            return refused(format!("credentials (~/{s} of {})", h.display()));
        }
        if let Some(s) = SECRETS.iter().find(|s| Path::new(s).starts_with(rel)) {
            if rel.components().count() > 1 {
                return refused(format!("holds credentials (~/{s} of {})", h.display()));
            }
        }
        let mut c = rel.components();
        match (c.next(), c.next(), c.next()) {
            (Some(only), None, _) => tool_root |= only.as_os_str() != "bin",
            (Some(first), Some(second), None)
                if first.as_os_str() == ".local" && second.as_os_str() != "bin" =>
            {
                return refused(format!("an app-data root of ~/.local of {}", h.display()));
            }
            _ => {}
        }
    }
    if tool_root {
        Class::ToolRoot
    } else {
        Class::Bind
    }
}

/// Why a profile's `extra_ro` or `extra_rw` entry may never be bound, or `None`: `/`, a home
/// directory or one above it, a credential location of a home ([`SECRETS`]) or anything
/// inside or above one, an app-data root of `~/.local`. The rule of [`classify`] without its
/// install-prefix shapes (a top-level directory such as `/opt` or `/nix` is fine to name).
/// One source of truth: the plan refuses such an entry, and a filesystem refusal whose fix
/// would be such an entry says `never` instead. Pure.
pub fn never_bound(p: &Path, homes: &[PathBuf]) -> Option<String> {
    if p.parent().is_none() {
        return Some("/, the whole file system".into());
    }
    if let Some(h) = homes.iter().find(|h| h.starts_with(p)) {
        return Some(format!("the home directory {} or above it", h.display()));
    }
    match classify(p, homes) {
        Class::Refused(why) if !why.ends_with("a top-level directory") => Some(why),
        _ => None,
    }
}

/// The install prefix of a place the lookup passed through. Pure.
pub fn prefix(hop: &Path) -> PathBuf {
    let Some(parent) = hop.parent() else {
        return hop.to_path_buf();
    };
    match parent.file_name().and_then(OsStr::to_str) {
        Some("bin" | "sbin" | "shims") => parent.parent().unwrap_or(parent).to_path_buf(),
        Some("versions") => hop.to_path_buf(),
        _ => parent.to_path_buf(),
    }
}

/// Does an npm config hold credentials? `_auth`, `_authToken`, `_password`, `username`,
/// `token`, `certfile`/`keyfile` keys, scoped (`//host/:_authToken`) or not. Pure.
pub fn npmrc_has_credentials(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        if l.starts_with('#') || l.starts_with(';') {
            return false;
        }
        let key = l
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let key = key.rsplit(':').next().unwrap_or("");
        key.starts_with("_auth")
            || key.starts_with("_password")
            || key == "username"
            || key.contains("token")
            || key == "certfile"
            || key == "keyfile"
    })
}

/// Lexically normalized absolute path (`.` and `..` removed), or `None` for a relative one.
fn normalize(p: &Path) -> Option<PathBuf> {
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Some(out)
}

/// The trust rule: every directory in which a name is looked up on the way to a program
/// (PATH entry, link targets, each of their components) is outside the repo and not
/// writable by everybody. Resolution is done here one component at a time, as the kernel
/// does, so a link anywhere on the way is checked where it lives.
struct Trust {
    repo: PathBuf,
    repo_canon: PathBuf,
    /// Physical directory -> trusted.
    dirs: HashMap<PathBuf, bool>,
    /// Path -> its physical form, when every lookup on the way is trusted.
    resolved: HashMap<PathBuf, Option<PathBuf>>,
}

impl Trust {
    fn new(repo: &Path) -> Trust {
        let repo = normalize(repo).unwrap_or_else(|| repo.to_path_buf());
        Trust {
            repo_canon: crate::canon::canonicalize(&repo).unwrap_or_else(|_| repo.clone()),
            repo,
            dirs: HashMap::new(),
            resolved: HashMap::new(),
        }
    }

    fn in_repo(&self, p: &Path) -> bool {
        p.starts_with(&self.repo) || p.starts_with(&self.repo_canon)
    }

    /// May names be looked up in this physical directory?
    fn dir_ok(&mut self, dir: &Path) -> bool {
        if let Some(&ok) = self.dirs.get(dir) {
            return ok;
        }
        let ok = !self.in_repo(dir)
            && std::fs::metadata(dir)
                .is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o002 == 0);
        self.dirs.insert(dir.to_path_buf(), ok);
        ok
    }

    /// The physical form of an absolute path, `None` when a lookup on the way happens in an
    /// untrusted directory, a component is missing, or there are too many links.
    fn resolve(&mut self, p: &Path) -> Option<PathBuf> {
        if let Some(r) = self.resolved.get(p) {
            return r.clone();
        }
        let r = self.walk(p);
        self.resolved.insert(p.to_path_buf(), r.clone());
        r
    }

    fn walk(&mut self, p: &Path) -> Option<PathBuf> {
        if !p.is_absolute() {
            return None;
        }
        let mut todo: Vec<std::ffi::OsString> =
            p.iter().skip(1).map(|c| c.to_os_string()).collect();
        todo.reverse();
        let mut cur = PathBuf::from("/");
        let mut links = 0;
        while let Some(c) = todo.pop() {
            if c == "." || c.is_empty() {
                continue;
            }
            if c == ".." {
                cur.pop();
                continue;
            }
            if !self.dir_ok(&cur) {
                return None;
            }
            let next = cur.join(&c);
            if next.symlink_metadata().ok()?.file_type().is_symlink() {
                links += 1;
                if links > MAX_SYMLINKS {
                    return None;
                }
                let target = std::fs::read_link(&next).ok()?;
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                let mut parts: Vec<std::ffi::OsString> = target
                    .iter()
                    .filter(|c| *c != "/")
                    .map(|c| c.to_os_string())
                    .collect();
                parts.reverse();
                todo.extend(parts);
            } else {
                cur = next;
            }
        }
        Some(cur)
    }
}

/// The trusted PATH entries, in order: (as PATH names it, normalized; physical).
fn path_entries(path: &OsStr, trust: &mut Trust) -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    for raw in path.as_bytes().split(|b| *b == b':') {
        let entry = Path::new(OsStr::from_bytes(raw));
        let Some(dir) = normalize(entry) else {
            if !raw.is_empty() {
                tracing::debug!(
                    "toolchains: PATH entry {} is relative: skipped",
                    entry.display()
                );
            }
            continue;
        };
        let phys = trust.resolve(&dir).filter(|d| trust.dir_ok(d));
        let Some(phys) = phys else {
            tracing::debug!(
                "toolchains: PATH entry {} is missing, in the repo or reached through a directory writable by everybody: skipped",
                dir.display()
            );
            continue;
        };
        if !out.iter().any(|(d, _)| *d == dir) {
            out.push((dir, phys));
        }
    }
    out
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The places the lookup of `name` in a PATH entry passes through: the program as PATH
/// names it, each link target (in its physical directory) and the real file. `None` when
/// a lookup on the way happens in an untrusted directory, or there are too many links.
fn hops(entry: &Path, phys: &Path, name: &str, trust: &mut Trust) -> Option<Vec<PathBuf>> {
    let mut out = vec![entry.join(name)];
    let mut hop = phys.join(name);
    for n in 0..=MAX_SYMLINKS {
        if n > 0 {
            out.push(hop.clone());
        }
        if !hop.symlink_metadata().ok()?.file_type().is_symlink() {
            return Some(out);
        }
        let target = std::fs::read_link(&hop).ok()?;
        let joined = hop.parent()?.join(&target);
        let (Some(dir), Some(file)) = (joined.parent(), joined.file_name()) else {
            return None;
        };
        let Some(dir) = trust.resolve(dir).filter(|d| trust.dir_ok(d)) else {
            tracing::debug!(
                "toolchains: {} leads into the repo or a directory writable by everybody: not followed",
                hop.display()
            );
            return None;
        };
        hop = dir.join(file);
    }
    None
}

/// Find and classify everything the allowed programs need. See the module documentation.
pub fn discover(i: &Input) -> Toolchains {
    let mut trust = Trust::new(i.repo);
    let mut entries = path_entries(i.path, &mut trust);
    // Two PATH entries that are one physical directory (`/bin` -> `usr/bin`) answer every
    // lookup alike, and the first of them is always the one found: look in each only once.
    let mut seen: Vec<PathBuf> = Vec::new();
    entries.retain(|(_, phys)| {
        let first = !seen.contains(phys);
        seen.push(phys.clone());
        first
    });
    let in_system = |p: &Path| i.system.iter().any(|s| p.starts_with(s));
    let mut wanted: Vec<PathBuf> = Vec::new();
    let mut system_prefixes: Vec<PathBuf> = Vec::new();
    let mut looked_up: Vec<&str> = Vec::new();
    for name in i.names {
        // A name listed twice (`node` in `programs` and in `wrapped`) is found alike twice.
        if name.is_empty() || name.contains('/') || looked_up.contains(name) {
            continue;
        }
        looked_up.push(name);
        let Some((entry, phys)) = entries
            .iter()
            .find(|(_, phys)| is_executable_file(&phys.join(name)))
        else {
            continue;
        };
        let Some(hops) = hops(entry, phys, name, &mut trust) else {
            continue;
        };
        let Some(real) = hops.last().cloned() else {
            continue;
        };
        if trust.in_repo(&real) {
            continue;
        }
        for hop in &hops {
            // A place inside an npm package outside the system directories (a CLI installed
            // under some `node_modules`): the package and the packages it depends on.
            if !in_system(hop) {
                if let Some(pkg) = node_package(hop) {
                    wanted.extend(node_closure(&pkg, &mut trust));
                    continue;
                }
            }
            let pre = prefix(hop);
            if in_system(&pre) || in_system(hop) {
                system_prefixes.push(pre);
            } else {
                wanted.push(pre);
            }
        }
        if is_rustup_proxy(&real) {
            // `$RUSTUP_HOME` when set (the profile may or may not pass it on), and the
            // default beside the cargo home: <cargo home>/bin/rustup -> <cargo home>/../.rustup
            let beside = (|| Some(real.parent()?.parent()?.parent()?.join(".rustup")))();
            let homes = i
                .rustup_home
                .map(Path::to_path_buf)
                .into_iter()
                .chain(beside);
            for home in homes.filter_map(|h| normalize(&h)) {
                for part in RUSTUP_PARTS {
                    let p = home.join(part);
                    if p.symlink_metadata().is_ok() && !in_system(&p) {
                        wanted.push(p);
                    }
                }
            }
        }
    }

    wanted.sort();
    wanted.dedup();
    let mut binds: Vec<PathBuf> = Vec::new();
    // The install prefixes bound whole, which are searched for credentials. The parts of a
    // tool root are install directories by name (`bin`, `versions`, …), and the rustup parts
    // are rustup's own: they are not.
    let mut scan: Vec<PathBuf> = Vec::new();
    for w in wanted {
        for p in expand(&w, i.homes) {
            if p.symlink_metadata().is_err() || binds.contains(&p) {
                continue;
            }
            let whole = p == w && !is_rustup_part(&p);
            if let Class::Refused(why) = crate::canon::canonicalize(&p)
                .map(|c| classify(&c, i.homes))
                .unwrap_or_else(|e| Class::Refused(format!("{}: {e}", p.display())))
            {
                tracing::debug!("toolchains: not bound (once resolved): {why}");
                continue;
            }
            if whole {
                scan.push(p.clone());
            }
            binds.push(p);
        }
    }
    binds.sort();
    binds.dedup();
    let all = binds.clone();
    binds.retain(|b| !all.iter().any(|o| o != b && b.starts_with(o)));

    let mut hides = Vec::new();
    scan.sort();
    scan.dedup();
    // every bound tree, as (path in the new root, the host path it shows); only needed for
    // a credential name that is a link, so worked out then
    let cell = std::cell::OnceCell::new();
    let trees = || {
        cell.get_or_init(|| {
            binds
                .iter()
                .chain(i.system)
                .filter_map(|b| Some((b.clone(), crate::canon::canonicalize(b).ok()?)))
                .collect::<Vec<(PathBuf, PathBuf)>>()
        })
        .as_slice()
    };
    for dir in &scan {
        // one read of the directory instead of a lookup per name
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let present: Vec<std::ffi::OsString> =
            entries.filter_map(|e| Some(e.ok()?.file_name())).collect();
        let here = |name: &str| {
            let first = name.split('/').next().unwrap_or(name);
            present.iter().any(|p| p == first)
        };
        for name in HIDE.iter().filter(|n| here(n)) {
            hide(dir, name, &trees, &mut hides);
        }
        for name in NPM_CONFIGS.iter().filter(|n| here(n)) {
            if npm_config_needs_hiding(&dir.join(name)) {
                hide(dir, name, &trees, &mut hides);
            }
        }
    }
    // In the system directories only what a tool keeps in its own prefix: a CARGO_HOME of
    // /usr/local/cargo, npm's configs (big directories such as /etc/alternatives are not read)
    system_prefixes.sort();
    system_prefixes.dedup();
    for dir in &system_prefixes {
        for name in SYSTEM_HIDE {
            if dir.join(name).symlink_metadata().is_ok() {
                hide(dir, name, &trees, &mut hides);
            }
        }
        for name in NPM_CONFIGS {
            let p = dir.join(name);
            if p.symlink_metadata().is_ok() && npm_config_needs_hiding(&p) {
                hide(dir, name, &trees, &mut hides);
            }
        }
    }
    hides.sort();
    hides.dedup();
    Toolchains { binds, hides }
}

/// The npm package a path lies in: `.../node_modules/NAME` or `.../node_modules/@SCOPE/NAME`
/// (the innermost), when the path is below it; `None` elsewhere and for `node_modules/.bin`
/// (a directory of links, bound as a prefix).
pub fn node_package(p: &Path) -> Option<PathBuf> {
    let parts: Vec<Component> = p.components().collect();
    let at = parts
        .iter()
        .rposition(|c| c.as_os_str() == "node_modules")?;
    let name = parts.get(at + 1)?.as_os_str().to_str()?;
    let len = if name.starts_with('@') { 3 } else { 2 };
    if name.starts_with('.') || parts.len() <= at + len {
        return None;
    }
    Some(parts[..at + len].iter().collect())
}

/// Bounds on an npm package's dependency closure.
const NODE_MAX_PACKAGES: usize = 4096;
const NODE_PACKAGE_JSON_MAX: u64 = 1 << 20;

/// The npm package `pkg` and every package it needs at run time (`dependencies`,
/// `optionalDependencies`, `peerDependencies`, recursively), each found as Node finds it: in
/// `node_modules` of the package itself, then of each directory above it up to the one that
/// holds the outermost `node_modules`. So a CLI under `~/tools/node_modules` gets its own
/// package and its dependencies (Codex's platform binary is one), never the rest of that
/// `node_modules`. A `package.json` is read bounded and without following a link; a
/// dependency reached through an untrusted directory is left out.
fn node_closure(pkg: &Path, trust: &mut Trust) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut todo = vec![pkg.to_path_buf()];
    while let Some(p) = todo.pop() {
        if out.contains(&p) || out.len() >= NODE_MAX_PACKAGES {
            continue;
        }
        out.push(p.clone());
        let Some(text) = crate::hostfs::Dir::open(&p)
            .and_then(|d| d.read_small(Path::new("package.json"), NODE_PACKAGE_JSON_MAX))
            .ok()
            .flatten()
        else {
            continue;
        };
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(&text) else {
            continue;
        };
        let top = p
            .ancestors()
            .find(|a| a.components().all(|c| c.as_os_str() != "node_modules"))
            .unwrap_or(Path::new("/"))
            .to_path_buf();
        for key in ["dependencies", "optionalDependencies", "peerDependencies"] {
            let Some(deps) = json.get(key).and_then(|d| d.as_object()) else {
                continue;
            };
            for dep in deps.keys() {
                let plain = |s: &str| {
                    !s.is_empty() && !s.starts_with('.') && !s.contains(['/', '\\', '\0'])
                };
                let ok = match dep.split_once('/') {
                    Some((scope, name)) => {
                        scope.starts_with('@') && plain(&scope[1..]) && plain(name)
                    }
                    None => plain(dep),
                };
                if !ok {
                    continue;
                }
                let found = p
                    .ancestors()
                    .take_while(|a| a.starts_with(&top))
                    .filter(|a| a.file_name() != Some(OsStr::new("node_modules")))
                    .map(|a| a.join("node_modules").join(dep))
                    .find(|c| {
                        c.symlink_metadata().is_ok_and(|m| m.is_dir())
                            && c.parent()
                                .and_then(|d| trust.resolve(d))
                                .is_some_and(|d| trust.dir_ok(&d))
                    });
                if let Some(c) = found {
                    todo.push(c);
                }
            }
        }
    }
    out
}

/// Is `real` (a program with every link resolved) rustup, or a proxy of it: a file named
/// `rustup`, or a hard link to the `rustup` beside it (rustup itself makes its proxies
/// `cargo`, `rustc`, … hard links where it can; only some installs use symlinks).
fn is_rustup_proxy(real: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if real.file_name() == Some(OsStr::new("rustup")) {
        return true;
    }
    let (Ok(a), Ok(b)) = (
        real.symlink_metadata(),
        real.with_file_name("rustup").symlink_metadata(),
    ) else {
        return false;
    };
    a.is_file() && b.is_file() && a.nlink() > 1 && (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// `RUSTUP_HOME/toolchains` or `RUSTUP_HOME/settings.toml`, added for a rustup proxy.
fn is_rustup_part(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| RUSTUP_PARTS.iter().any(|r| n == *r))
        && p.parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == ".rustup")
}

/// A prefix as bound: itself, its tool-root parts, or nothing.
fn expand(p: &Path, homes: &[PathBuf]) -> Vec<PathBuf> {
    match classify(p, homes) {
        Class::Bind => vec![p.to_path_buf()],
        Class::ToolRoot => TOOL_ROOT_PARTS
            .iter()
            .map(|part| p.join(part))
            .filter(|q| match classify(q, homes) {
                Class::Bind => true,
                other => {
                    tracing::debug!("toolchains: not bound: {other:?}");
                    false
                }
            })
            .collect(),
        Class::Refused(why) => {
            tracing::debug!("toolchains: not bound: {why}");
            Vec::new()
        }
    }
}

/// Add a hide for `dir/rel` if it exists. The mount must not pass through a symlink (in the
/// new root it would resolve elsewhere): when `rel` has one, the resolved path is hidden
/// instead, named by the bound tree that shows it (and not at all when none does).
fn hide<'t>(
    dir: &Path,
    rel: &str,
    trees: &dyn Fn() -> &'t [(PathBuf, PathBuf)],
    out: &mut Vec<Hide>,
) {
    let p = dir.join(rel);
    if p.symlink_metadata().is_err() {
        return;
    }
    let (Ok(real), Ok(real_dir)) = (
        crate::canon::canonicalize(&p),
        crate::canon::canonicalize(dir),
    ) else {
        return;
    };
    let target = if real == real_dir.join(rel) {
        p
    } else {
        let shown = trees()
            .iter()
            .find_map(|(dst, src)| real.strip_prefix(src).ok().map(|rest| dst.join(rest)));
        match shown {
            Some(t) => t,
            None => return,
        }
    };
    match real.symlink_metadata() {
        Ok(m) if m.is_dir() => out.push(Hide::Dir(target)),
        Ok(m) if m.is_file() => out.push(Hide::File(target)),
        _ => {}
    }
}

/// Read an npm config (bounded, no blocking on a FIFO) and decide; unreadable: hide.
fn npm_config_needs_hiding(p: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p);
    let Ok(f) = f else { return true };
    match f.metadata() {
        Ok(m) if m.is_file() && m.len() <= NPMRC_MAX => {}
        _ => return true,
    }
    let mut text = String::new();
    if f.take(NPMRC_MAX).read_to_string(&mut text).is_err() {
        return true;
    }
    npmrc_has_credentials(&text)
}

/// Without a mount namespace hides cannot be mounted: grant read/execute on each
/// `read_exec` entry minus the hidden paths (landlock only grants, so the siblings on the
/// way to a hidden path are granted one by one). Directories on the way get no rule of their
/// own: listing is granted everywhere, reading them is not needed to reach their children.
pub fn carve(read_exec: &[PathBuf], hides: &[Hide]) -> Vec<PathBuf> {
    let hidden: Vec<PathBuf> = hides.iter().map(|h| h.path().to_path_buf()).collect();
    let mut out = Vec::new();
    let mut parents = Vec::new();
    for p in read_exec {
        crate::layers::landlock::carve(p, &hidden, &mut out, &mut parents);
    }
    out
}

/// The homes whose contents are never bound whole: the given ones (the caller's `$HOME`, the
/// workload's home) and, from `/etc/passwd`, root's and every regular user's (uid >= 1000).
pub fn homes(given: &[&Path]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: &Path| {
        if let Some(n) = normalize(p).filter(|n| n != Path::new("/")) {
            if !out.contains(&n) {
                out.push(n.clone());
            }
            // a home reached through a link is protected under both names
            if let Ok(c) = crate::canon::canonicalize(&n) {
                if c != Path::new("/") && !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    };
    for g in given {
        add(g);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for l in passwd.lines() {
        let f: Vec<&str> = l.split(':').collect();
        let Some(uid) = f.get(2).and_then(|u| u.parse::<u32>().ok()) else {
            continue;
        };
        if f.len() >= 6 && (uid == 0 || (1000..65534).contains(&uid)) {
            add(Path::new(f[5]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn homes() -> Vec<PathBuf> {
        vec![PathBuf::from("/home/u"), PathBuf::from("/root")]
    }

    fn class(p: &str) -> Class {
        classify(Path::new(p), &homes())
    }

    #[test]
    fn extra_binds_never_name_a_home_or_credentials() {
        let homes = [PathBuf::from("/home/u"), PathBuf::from("/root")];
        for p in [
            "/",
            "/home",
            "/home/u",
            "/home/u/.ssh",
            "/home/u/.ssh/id_ed25519",
            "/home/u/.aws/credentials",
            "/home/u/.npmrc",
            "/home/u/.config",
            "/home/u/.config/gh/hosts.yml",
            "/root/.docker",
            "/home/u/.local/share",
        ] {
            assert!(never_bound(Path::new(p), &homes).is_some(), "{p}");
        }
        for p in [
            "/opt",
            "/nix",
            "/opt/tools",
            "/etc/fstab",
            "/home/u/src/lib",
            "/home/u/.gitconfig",
            "/home/u/.cargo/bin",
            "/srv/data",
        ] {
            assert_eq!(never_bound(Path::new(p), &homes), None, "{p}");
        }
    }

    #[test]
    fn homes_their_parents_and_credentials_are_refused() {
        for p in [
            "/",
            "/home",
            "/opt",
            "/home/u",
            "/root",
            "/home/u/.ssh",
            "/home/u/.ssh/keys",
            "/home/u/.aws",
            "/home/u/.kube",
            "/home/u/.config",
            "/home/u/.config/gcloud",
            "/home/u/.config/anything/bin",
            "/home/u/.gnupg",
            "/home/u/.docker",
            "/home/u/.local/share",
            "/home/u/.local/state",
            "/home/u/.local/share/keyrings",
            "/home/u/.cargo/credentials.toml",
            "/root/.netrc",
        ] {
            assert!(matches!(class(p), Class::Refused(_)), "{p}: {:?}", class(p));
        }
    }

    #[test]
    fn tool_roots_are_split_into_parts() {
        for p in [
            "/home/u/.cargo",
            "/home/u/.local",
            "/home/u/.pyenv",
            "/root/.rustup",
        ] {
            assert_eq!(class(p), Class::ToolRoot, "{p}");
        }
        for p in [
            "/home/u/bin",
            "/home/u/.cargo/bin",
            "/home/u/.local/bin",
            "/home/u/.rustup/toolchains",
            "/home/u/.rustup/settings.toml",
            "/home/u/.nvm/versions/node/v20",
            "/home/u/.local/share/agent/versions/1.2.3",
            "/home/u/.pyenv/versions",
            "/opt/app",
            "/srv/app",
        ] {
            assert_eq!(class(p), Class::Bind, "{p}");
        }
        let parts = expand(Path::new("/home/u/.cargo"), &homes());
        assert!(parts.contains(&PathBuf::from("/home/u/.cargo/bin")));
        assert!(!parts.iter().any(|p| p == Path::new("/home/u/.cargo")));
    }

    #[test]
    fn npm_packages_of_paths() {
        let pkg = |p: &str| node_package(Path::new(p)).map(|p| p.display().to_string());
        assert_eq!(
            pkg("/h/t/node_modules/@openai/codex/bin/codex.js").as_deref(),
            Some("/h/t/node_modules/@openai/codex")
        );
        assert_eq!(
            pkg("/h/t/node_modules/a/node_modules/b/dist/x.js").as_deref(),
            Some("/h/t/node_modules/a/node_modules/b")
        );
        assert_eq!(pkg("/h/t/node_modules/.bin/claude"), None);
        assert_eq!(pkg("/h/t/node_modules/@s"), None);
        assert_eq!(pkg("/h/t/node_modules/a").as_deref(), None);
        assert_eq!(pkg("/usr/bin/node"), None);
    }

    #[test]
    fn prefixes_of_common_layouts() {
        let cases = [
            ("/home/u/.cargo/bin/cargo", "/home/u/.cargo"),
            (
                "/home/u/.nvm/versions/node/v20/bin/node",
                "/home/u/.nvm/versions/node/v20",
            ),
            ("/home/u/.pyenv/shims/python3", "/home/u/.pyenv"),
            (
                "/home/u/.local/share/agent/versions/1.2.3/agent",
                "/home/u/.local/share/agent/versions/1.2.3",
            ),
            (
                "/home/u/.local/share/claude/versions/1.0.3",
                "/home/u/.local/share/claude/versions/1.0.3",
            ),
            ("/opt/app/tool", "/opt/app"),
        ];
        for (hop, want) in cases {
            assert_eq!(prefix(Path::new(hop)), Path::new(want), "{hop}");
        }
    }

    #[test]
    fn npm_configs_with_credentials() {
        for t in [
            "//npm.example.invalid/:_authToken=abc\n",
            "_auth = dXNlcjpwYXNz\n",
            "//h.invalid/:_password=cGFzcw==\nusername=me\n",
            "always-auth=true\n//h.invalid/:_authToken=${NPM_TOKEN}\n",
        ] {
            assert!(npmrc_has_credentials(t), "{t}");
        }
        for t in [
            "registry=https://npm.example.invalid/\nfund=false\n",
            "; _authToken=old\n# _auth=x\nprefix=/opt/node\n",
            "",
        ] {
            assert!(!npmrc_has_credentials(t), "{t}");
        }
    }

    #[test]
    fn normalize_removes_dots_and_refuses_relative() {
        assert_eq!(
            normalize(Path::new("/a/./b/../c")),
            Some(PathBuf::from("/a/c"))
        );
        assert_eq!(normalize(Path::new("node_modules/.bin")), None);
        assert_eq!(normalize(Path::new("")), None);
    }

    #[test]
    fn hides_become_dev_null_binds_and_mode_0_tmpfs() {
        assert_eq!(
            Hide::File("/x/credentials.toml".into()).op(),
            mounts::Op::Bind {
                src: "/dev/null".into(),
                dst: "/x/credentials.toml".into(),
                ro: true,
                optional: false
            }
        );
        assert!(matches!(
            Hide::Dir("/x/.ssh".into()).op(),
            mounts::Op::Tmpfs { mode: 0, .. }
        ));
    }
}
