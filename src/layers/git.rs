//! git's configuration surfaces, read-only by allow-list (DESIGN.md section 3).
//!
//! git runs code that its configuration names (`core.fsmonitor`, hooks, filters, ...), and a
//! plain `git status` on the host reads more than `.git/config`: `config.worktree`,
//! `commondir`, a `.git` file's `gitdir:`, submodules' `modules/*/config` and `hooks/`, and
//! `core.hooksPath`. In the read-write repo modes none of these may be written from the
//! sandbox, and none may appear where it did not exist.
//!
//! So each git dir (the repo's `.git`, a linked worktree's private dir and its common dir,
//! each submodule's dir under `modules/`) is shown to the sandbox as a **view**: a tmpfs whose
//! top level holds
//! - the directories git writes to record work ([`RW_DIRS`]: `objects`, `refs`, `logs`, ...),
//!   bound read-write;
//! - copies of the files git replaces by rename ([`copied`]: `HEAD`, `index`, `packed-refs`,
//!   `*_HEAD`, `COMMIT_EDITMSG`, ...), copied back into the real git dir by stage 2 once the
//!   sandbox is gone ([`copy_back`]);
//! - every other entry bound read-only: `config`, `config.worktree`, `commondir`, `gitdir`,
//!   `hooks/`, `info/`, `modules/`, `worktrees/`, and whatever a later git adds.
//!
//! Whatever the command creates or changes at the top of a view other than the copied files
//! (a new `commondir`, `config.worktree`) dies with the tmpfs. A `.git` file is bound read-only
//! onto itself, a repo without `.git` gets an empty one bound read-only for the run
//! ([`Placeholder`]: a `.git` created there would be the host's next git's), and a hooks path
//! that the host's git config names inside the repo is bound read-only (created empty first
//! when missing).
//!
//! - Parent side: [`discover`], reading the host's files through [`crate::hostfs`] (no link
//!   followed, nothing that blocks, bounded reads).
//! - Child side: [`build_view`] in pid 1 while it builds the new root; every repo path is
//!   opened without following links and mounted by fd. [`copy_back`] in stage 2, after pid 1
//!   (and so every process of the sandbox) is gone.

use crate::hostfs::{lexical, Dir, Kind, Tree};
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directories of a git dir that git writes to record work (gitrepository-layout(5)):
/// objects and packs, refs and reflogs, rerere's cache and git-lfs's objects. Bound
/// read-write into the view when they exist.
pub const RW_DIRS: &[&str] = &["objects", "refs", "logs", "rr-cache", "lfs"];

/// The files at the top of a git dir that git writes (by lock file and rename) to record
/// work; copied into the view and back.
pub const COPIED: &[&str] = &[
    "HEAD",
    "index",
    "packed-refs",
    "shallow",
    "COMMIT_EDITMSG",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_RR",
    "MERGE_AUTOSTASH",
    "SQUASH_MSG",
    "TAG_EDITMSG",
    "NOTES_EDITMSG",
    "BISECT_LOG",
    "BISECT_START",
    "BISECT_TERMS",
    "BISECT_NAMES",
    "BISECT_EXPECTED_REV",
    "BISECT_ANCESTORS_OK",
    "BISECT_FIRST_PARENT",
];

/// Is `name` a file of the top of a git dir that is copied into the view and back: one of
/// [`COPIED`], a `*_HEAD` (`ORIG_HEAD`, `FETCH_HEAD`, `MERGE_HEAD`, `CHERRY_PICK_HEAD`,
/// `AUTO_MERGE` aside), or a split index's `sharedindex.*`.
pub fn copied(name: &OsStr) -> bool {
    let n = name.as_bytes();
    let upper_head = n.ends_with(b"_HEAD")
        && n.len() > 5
        && n.iter().all(|c| c.is_ascii_uppercase() || *c == b'_');
    COPIED.iter().any(|c| c.as_bytes() == n)
        || upper_head
        || n == b"AUTO_MERGE"
        || (n.starts_with(b"sharedindex.") && n[12..].iter().all(u8::is_ascii_hexdigit))
}

/// Never removed from the real git dir, whatever the view holds at the end: without it git
/// no longer sees a repository there and looks for one further up.
const KEEP: &[&str] = &["HEAD"];

/// Bounds on what the host side reads.
const SMALL: u64 = 64 * 1024;
const CONFIG_MAX: u64 = 1 << 20;
const MAX_ENTRIES: usize = 100_000;
/// How deep submodule dirs are looked for under `modules/` (names may hold `/`).
const MODULES_DEPTH: usize = 6;

/// What the read-write modes must do about git in this repo.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The git dirs to show as views: host paths, which are also their paths in the new root.
    pub dirs: Vec<PathBuf>,
    /// Repo-relative paths bound read-only onto themselves: a `.git` file, hooks paths.
    pub pins: Vec<PathBuf>,
    /// Repo-relative hooks paths that do not exist yet: created empty, then pinned.
    pub create: Vec<PathBuf>,
    /// The repo has no `.git` (or only the empty one a killed run left): an empty directory
    /// is made there for the run and pinned read-only, so no `.git` can appear; removed after.
    pub placeholder: bool,
}

fn refuse(repo: &Path, what: impl std::fmt::Display) -> String {
    format!("repo {}: {what}", repo.display())
}

/// Has `d` the shape of a git dir: `HEAD`, and `objects/` and `refs/` (or a `commondir`
/// naming where they are)?
fn is_git_dir(d: &Dir) -> bool {
    let k = |n: &str| d.kind(Path::new(n)).ok().flatten();
    k("HEAD") == Some(Kind::File)
        && (k("commondir") == Some(Kind::File)
            || (k("objects") == Some(Kind::Dir) && k("refs") == Some(Kind::Dir)))
}

/// `path` must be reachable without any link: its canonical form is itself.
fn no_links(repo: &Path, path: &Path, what: &str) -> Result<(), String> {
    let canon = std::fs::canonicalize(path)
        .map_err(|e| refuse(repo, format!("{what} {}: {e}", path.display())))?;
    if canon != path {
        return Err(refuse(
            repo,
            format!(
                "{what} {} is reached through a symlink (it resolves to {}); sandbox-run does not follow links the repo controls",
                path.display(),
                canon.display()
            ),
        ));
    }
    Ok(())
}

fn read_text(d: &Dir, rel: &str, repo: &Path) -> Result<String, String> {
    match d.read_small(Path::new(rel), SMALL) {
        Ok(Some(b)) => Ok(String::from_utf8_lossy(&b).trim().to_string()),
        Ok(None) => Err(refuse(
            repo,
            format!("{} is missing", d.path().join(rel).display()),
        )),
        Err(e) => Err(refuse(
            repo,
            format!("{}: {e}", d.path().join(rel).display()),
        )),
    }
}

/// Look at the repo's git layout on the host for the read-write modes: which git dirs get a
/// view, what is pinned read-only. `protect` are the profile's repo-relative read-only paths;
/// `configs` the host's git config files whose `core.hooksPath` counts (system, global; the
/// repo's own are added here). A layout that sandbox-run cannot make safe is an error (exit
/// 125): no `.git`, a `.git` that is a link or a special file, a `gitdir:` or `commondir`
/// that leads through a link or to something that is not a git dir.
pub fn discover(repo: &Path, protect: &[String], configs: &[PathBuf]) -> Result<Found, String> {
    let r = Dir::open(repo).map_err(|e| refuse(repo, e))?;
    let mut found = Found::default();
    let mut repo_configs: Vec<PathBuf> = Vec::new();
    match r.kind(Path::new(".git")).map_err(|e| refuse(repo, format!(".git: {e}")))? {
        None => {
            // A .git the command created would be the host's next git's: keep an empty,
            // read-only one there for the run.
            found.placeholder = true;
            found.pins.push(PathBuf::from(".git"));
        }
        Some(Kind::Dir)
            if r
                .entries(Path::new(".git"), 1)
                .is_ok_and(|e| e.is_empty()) =>
        {
            // the placeholder of a run that was killed before it could remove it
            found.placeholder = true;
            found.pins.push(PathBuf::from(".git"));
        }
        Some(Kind::Dir) => {
            let g = r.subdir(Path::new(".git")).map_err(|e| refuse(repo, e))?;
            if !is_git_dir(&g) {
                return Err(refuse(
                    repo,
                    ".git is not a git directory (no HEAD, objects/ and refs/)",
                ));
            }
            found.dirs.push(repo.join(".git"));
            repo_configs.push(repo.join(".git/config"));
            repo_configs.push(repo.join(".git/config.worktree"));
            submodules(&g, Path::new(""), 0, &mut found.dirs)?;
        }
        Some(Kind::File) => {
            let text = read_text(&r, ".git", repo)?;
            let target = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("gitdir:"))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| refuse(repo, ".git is a file without a `gitdir:` line"))?;
            let w_path = lexical(repo, Path::new(target));
            no_links(repo, &w_path, "the .git file's gitdir")?;
            let w = Dir::open(&w_path).map_err(|e| refuse(repo, format!("gitdir {}: {e}", w_path.display())))?;
            if !is_git_dir(&w) {
                return Err(refuse(
                    repo,
                    format!(
                        "the .git file names {}, which is not a git directory (no HEAD, objects/ and refs/)",
                        w_path.display()
                    ),
                ));
            }
            if w.kind(Path::new("commondir")).ok().flatten() == Some(Kind::File) {
                // A linked worktree: its private dir is <common>/worktrees/<name>, and git's
                // own back link (`gitdir`) names this repo's .git file.
                let common = read_text(&w, "commondir", repo)?;
                let c_path = lexical(&w_path, Path::new(&common));
                no_links(repo, &c_path, "the worktree's commondir")?;
                let c = Dir::open(&c_path).map_err(|e| refuse(repo, e))?;
                if !is_git_dir(&c) || w_path.parent() != Some(&c_path.join("worktrees")) {
                    return Err(refuse(
                        repo,
                        format!(
                            "the worktree dir {} does not lie in the worktrees/ of a git directory",
                            w_path.display()
                        ),
                    ));
                }
                let back = read_text(&w, "gitdir", repo)?;
                if lexical(&w_path, Path::new(&back)) != repo.join(".git") {
                    return Err(refuse(
                        repo,
                        format!(
                            "the worktree dir {} belongs to {back}, not to this repo",
                            w_path.display()
                        ),
                    ));
                }
                found.dirs.push(c_path.clone());
                submodules(&c, Path::new(""), 0, &mut found.dirs)?;
                repo_configs.push(c_path.join("config"));
            } else {
                repo_configs.push(w_path.join("config"));
            }
            found.dirs.push(w_path.clone());
            submodules(&w, Path::new(""), 0, &mut found.dirs)?;
            repo_configs.push(w_path.join("config.worktree"));
            found.pins.push(PathBuf::from(".git"));
        }
        Some(Kind::Symlink) => {
            return Err(refuse(
                repo,
                ".git is a symlink: sandbox-run does not follow links the repo controls (replace it with the directory, or a `gitdir:` file)",
            ))
        }
        Some(Kind::Other) => {
            return Err(refuse(
                repo,
                ".git is a FIFO, socket or device node, not a git directory: remove it",
            ))
        }
    }
    // Hooks paths named by the repo's own config and by the host's.
    let mut hooks: Vec<PathBuf> = Vec::new();
    for cfg in repo_configs.iter().chain(configs) {
        for value in hooks_paths(&read_config(cfg)) {
            hooks.push(value);
        }
    }
    let mut pin = |rel: PathBuf, why: &str, create_ok: bool| -> Result<(), String> {
        match r.kind(&rel) {
            Ok(Some(Kind::Dir | Kind::File)) => {
                if !found.pins.contains(&rel) {
                    found.pins.push(rel);
                }
                Ok(())
            }
            Ok(None) if create_ok => {
                if !found.create.contains(&rel) {
                    found.create.push(rel);
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Ok(Some(_)) | Err(_) => Err(refuse(
                repo,
                format!(
                    "{why} {} is a symlink, special file or lies under one: sandbox-run cannot keep it read-only (make it a plain directory or file)",
                    rel.display()
                ),
            )),
        }
    };
    for h in hooks {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let abs = match (h.strip_prefix("~"), &home) {
            (Ok(rest), Some(home)) => home.join(rest),
            _ => lexical(repo, &h),
        };
        if let Ok(rel) = abs.strip_prefix(repo) {
            if rel.as_os_str().is_empty() {
                return Err(refuse(
                    repo,
                    "core.hooksPath names the repo root itself: sandbox-run cannot make it read-only in a read-write mode",
                ));
            }
            if rel.starts_with(".git") {
                continue; // inside a view already
            }
            pin(rel.to_path_buf(), "core.hooksPath", true)?;
        }
    }
    for p in protect {
        let rel = Path::new(p);
        if rel.starts_with(".git") || rel.is_absolute() {
            continue; // the git dir is a view; absolute entries are not repo paths
        }
        pin(rel.to_path_buf(), "the protected path", false)?;
    }
    Ok(found)
}

/// Git dirs of submodules under `modules/` of the git dir `g` (at `rel` below it), recursively
/// (a submodule's own `modules/`), depth-bounded.
fn submodules(g: &Dir, rel: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if depth > MODULES_DEPTH {
        return Ok(());
    }
    let modules = rel.join("modules");
    let Ok(entries) = g.entries(&modules, MAX_ENTRIES) else {
        return Ok(());
    };
    for (name, kind) in entries {
        if kind != Kind::Dir {
            continue;
        }
        let sub = modules.join(&name);
        let Ok(d) = g.subdir(&sub) else { continue };
        if is_git_dir(&d) {
            out.push(g.path().join(&sub));
            submodules(g, &sub, depth + 1, out)?;
        } else {
            // a submodule name with a `/`: modules/lib/a
            let mut inner = Vec::new();
            submodules_below(g, &sub, depth + 1, &mut inner);
            out.extend(inner);
        }
    }
    Ok(())
}

/// Git dirs at any depth below `rel` (no `modules/` step), for submodule names holding `/`.
fn submodules_below(g: &Dir, rel: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > MODULES_DEPTH {
        return;
    }
    let Ok(entries) = g.entries(rel, MAX_ENTRIES) else {
        return;
    };
    for (name, kind) in entries {
        if kind != Kind::Dir {
            continue;
        }
        let sub = rel.join(&name);
        let Ok(d) = g.subdir(&sub) else { continue };
        if is_git_dir(&d) {
            out.push(g.path().join(&sub));
            let _ = submodules(g, &sub, depth + 1, out);
        } else {
            submodules_below(g, &sub, depth + 1, out);
        }
    }
}

/// A git config file's text, bounded, without following a link at its last component; empty
/// when it cannot be read.
fn read_config(path: &Path) -> String {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return String::new();
    };
    Dir::open(dir)
        .and_then(|d| d.read_small(Path::new(name), CONFIG_MAX))
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Every `core.hooksPath` value of a git config text (a minimal reader: `[core]` sections,
/// `hooksPath = value`, names case-insensitive, values optionally quoted). Includes are not
/// followed.
pub fn hooks_paths(text: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut in_core = false;
    for line in text.lines() {
        let mut l = line.trim();
        if let Some(rest) = l.strip_prefix('[') {
            let name = rest.split([']', ' ', '"']).next().unwrap_or("");
            in_core = name.eq_ignore_ascii_case("core") && !rest.contains('"');
            // `[core] hooksPath = x` on one line
            l = rest.split_once(']').map(|(_, r)| r.trim()).unwrap_or("");
            if l.is_empty() {
                continue;
            }
        }
        if !in_core {
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        if !k.trim().eq_ignore_ascii_case("hookspath") {
            continue;
        }
        let v = v.split([';', '#']).next().unwrap_or("").trim();
        let v = v.trim_matches('"');
        if !v.is_empty() {
            out.push(PathBuf::from(v));
        }
    }
    out
}

/// How long [`Placeholder::make`] waits for a lock on the placeholder that someone else holds
/// exclusively: a run that is removing it holds that lock for an `rmdir`. A command in a
/// sandbox cannot hold it longer (the placeholder is visible there, but its own run's shared
/// lock keeps it from taking an exclusive one), so a longer hold is a process on the host.
const PLACEHOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The empty `.git` of a read-write repo that had none ([`Found::placeholder`]), for one run:
/// made (or joined, when a concurrent run on the same repo made it) with a shared `flock`
/// held until dropped; the last run to drop its lock removes it.
///
/// It is mode 0700 and owned by the user the command runs as (root making it gives it to
/// that user): a lock needs an open fd, and nobody else can open it, so no other local user
/// can hold it (a shared lock kept it in the repo for good, an exclusive one refused every
/// later run). An existing one (left by a killed run, or by an older sandbox-run at 0755) is
/// given the same owner and mode when the caller may.
///
/// The count is what keeps it there: removing the directory detaches every mount on it, in
/// every mount namespace, so a run that removed it while another was still running would
/// take that run's read-only pin away, and the command still running there could make a
/// `.git` of its own in the host's repo (and the host's next git would run what it names).
#[derive(Debug)]
pub struct Placeholder {
    repo: Dir,
    lock: OwnedFd,
}

impl Placeholder {
    /// `owner`: the user the command runs as (`plan.ids`).
    pub fn make(repo: &Path, owner: crate::layers::ns::Ids) -> Result<Placeholder, String> {
        let r = Dir::open(repo).map_err(|e| refuse(repo, e))?;
        let failed = |e: std::io::Error| refuse(repo, format!("placeholder .git: {e}"));
        let dot_git = Path::new(".git");
        let deadline = std::time::Instant::now() + PLACEHOLDER_WAIT;
        loop {
            // 0700 from the start (the umask only takes bits away): nobody else can open it
            // between the mkdir and the chown.
            // SAFETY: mkdirat in the repo's fd, a plain name.
            let rc = unsafe { libc::mkdirat(r.fd().as_raw_fd(), c".git".as_ptr(), 0o700) };
            if rc != 0 && crate::sys::last_errno() != libc::EEXIST {
                return Err(failed(std::io::Error::last_os_error()));
            }
            match r.open_at(dot_git, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(fd) => match crate::hostfs::flock(&fd, libc::LOCK_SH | libc::LOCK_NB) {
                    // Still the one at .git (not removed, by a run that held it exclusively,
                    // between the mkdir and the lock)? Else it is made again.
                    Ok(()) if r.is_at(dot_git, &fd) => {
                        private_to(&fd, owner).map_err(failed)?;
                        return Ok(Placeholder { repo: r, lock: fd });
                    }
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() != Some(libc::EWOULDBLOCK) => return Err(failed(e)),
                    Err(_) => {}
                },
                // removed by a run that ended in between: made again
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(failed(e)),
            }
            if std::time::Instant::now() >= deadline {
                return Err(refuse(
                    repo,
                    format!(
                        "the placeholder .git that sandbox-run keeps in a repo without one was held or removed by another process for {} s: find it with `fuser -v {}`, or give the repo a .git (git init)",
                        PLACEHOLDER_WAIT.as_secs(),
                        repo.join(".git").display()
                    ),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// Give the placeholder (open as `fd`) to `owner`, mode 0700, where the caller may: root
/// always, another user only a directory of their own (one someone else made stays as it is:
/// a user who may write the repo can do more to it than lock its `.git`).
fn private_to(fd: &OwnedFd, owner: crate::layers::ns::Ids) -> std::io::Result<()> {
    // SAFETY: all-zero is a valid stat; fstat fills it for an fd we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let me = nix::unistd::geteuid().as_raw();
    if me == 0 && (st.st_uid, st.st_gid) != (owner.uid, owner.gid) {
        // SAFETY: fchown of a directory fd we own.
        if unsafe { libc::fchown(fd.as_raw_fd(), owner.uid, owner.gid) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    } else if me != 0 && st.st_uid != me {
        return Ok(());
    }
    if st.st_mode & 0o7777 != 0o700 {
        // SAFETY: fchmod of a directory fd we own.
        if unsafe { libc::fchmod(fd.as_raw_fd(), 0o700) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Drop for Placeholder {
    /// Removed only by the last run that holds it (an exclusive lock is had only then), and
    /// only if it is still the directory locked and still empty (`AT_REMOVEDIR` never
    /// follows a link, and fails on a non-empty directory).
    fn drop(&mut self) {
        let dot_git = Path::new(".git");
        if crate::hostfs::flock(&self.lock, libc::LOCK_EX | libc::LOCK_NB).is_ok()
            && self.repo.is_at(dot_git, &self.lock)
        {
            // SAFETY: unlinkat in the repo's fd, a plain name.
            unsafe {
                libc::unlinkat(
                    self.repo.fd().as_raw_fd(),
                    c".git".as_ptr(),
                    libc::AT_REMOVEDIR,
                )
            };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Child side

/// Build the view of the git dir `real` (its path as pid 1 sees the host's tree) in the
/// scratch directory `view` (a fresh empty directory on a private tmpfs, not yet visible to
/// anything): copies of the [`copied`] files, read-write binds of the [`RW_DIRS`], read-only
/// binds of everything else. Every entry is opened from the git dir's fd without following a
/// link, and bound by fd. Returns the errno of the first failure.
pub fn build_view(real: &Path, view: &Path, cap: u64) -> Result<(), i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let g = Dir::open_no_links(real).map_err(errno)?;
    for (name, kind) in g.entries(Path::new(""), MAX_ENTRIES).map_err(errno)? {
        let at = view.join(&name);
        let rel = Path::new(&name);
        match kind {
            Kind::File if copied(&name) => copy_file(&g, rel, &at, cap)?,
            Kind::Dir => {
                std::fs::create_dir(&at).map_err(errno)?;
                let rw = RW_DIRS.iter().any(|d| OsStr::new(d) == name);
                bind_at(&g, rel, &at, !rw)?;
            }
            Kind::File => {
                std::fs::File::create(&at).map_err(errno)?;
                bind_at(&g, rel, &at, true)?;
            }
            Kind::Symlink => {
                // The link itself: it resolves inside the sandbox, where it leads nowhere new.
                let fd = g
                    .open_at(rel, libc::O_PATH | libc::O_NOFOLLOW, 0)
                    .map_err(errno)?;
                // (readlink of /proc/self/fd/N would name the link, not its target)
                let target = readlink_fd(&fd).map_err(errno)?;
                std::os::unix::fs::symlink(target, &at).map_err(errno)?;
            }
            Kind::Other => {}
        }
    }
    // The view's top looks like the real one (git checks nothing, but tools print modes).
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", g.fd().as_raw_fd()));
    if let Ok(m) = meta {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let _ = std::fs::set_permissions(view, std::fs::Permissions::from_mode(m.mode() & 0o777));
    }
    Ok(())
}

fn readlink_fd(fd: &OwnedFd) -> std::io::Result<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat of the O_PATH fd of a link with an empty path writes at most
    // buf.len() bytes into buf.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}

/// Copy the regular file `rel` of `g` to `to` (mode without set-ID bits), at most `cap` bytes.
fn copy_file(g: &Dir, rel: &Path, to: &Path, cap: u64) -> Result<(), i32> {
    use std::os::unix::fs::OpenOptionsExt;
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let src = g
        .open_at(
            rel,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )
        .map_err(errno)?;
    let mut src = std::fs::File::from(src);
    let meta = src.metadata().map_err(errno)?;
    if !meta.is_file() {
        return Err(libc::EINVAL);
    }
    if meta.len() > cap {
        return Err(libc::EFBIG);
    }
    use std::os::unix::fs::PermissionsExt;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(meta.permissions().mode() & 0o777)
        .open(to)
        .map_err(errno)?;
    std::io::copy(&mut std::io::Read::take(&mut src, cap), &mut dst).map_err(errno)?;
    Ok(())
}

/// Bind `rel` of `g` (opened without following a link) onto `at`, read-only or not, never
/// set-ID or devices, by fd.
fn bind_at(g: &Dir, rel: &Path, at: &Path, ro: bool) -> Result<(), i32> {
    let src = g
        .open_at(rel, libc::O_PATH | libc::O_NOFOLLOW, 0)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let target = Dir::open_no_links(at.parent().unwrap_or(Path::new("/")))
        .and_then(|d| {
            d.open_at(
                Path::new(at.file_name().unwrap_or_default()),
                libc::O_PATH | libc::O_NOFOLLOW,
                0,
            )
        })
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    bind_fd(&src, &target, ro)
}

/// Bind the object `src` (an `O_PATH` fd) onto the object `target` (an `O_PATH` fd), with
/// every mount below it, read-only when asked, never set-ID or devices. Nothing is resolved
/// by name.
pub fn bind_fd(src: &OwnedFd, target: &OwnedFd, ro: bool) -> Result<(), i32> {
    use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
    let tree = crate::sys::open_tree_clone(src.as_raw_fd())?;
    let mut attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if ro {
        attr |= MOUNT_ATTR_RDONLY;
    }
    crate::sys::mount_setattr_fd(tree.as_raw_fd(), attr)?;
    crate::sys::move_mount_fd(tree.as_raw_fd(), target.as_raw_fd())
}

/// The real git dirs of the views, opened (read-write, by fd) by stage 2 before pid 1 exists:
/// once the sandbox is gone, their [`copied`] files are brought back from the views.
pub struct Real {
    pub dirs: Vec<(PathBuf, Tree)>,
}

impl Real {
    /// Open each git dir (host paths, checked link-free by [`discover`]) without following a
    /// link.
    pub fn open(dirs: &[PathBuf]) -> Result<Real, i32> {
        let mut out = Vec::new();
        for d in dirs {
            let tree = Tree::open(d).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            out.push((d.clone(), tree));
        }
        Ok(Real { dirs: out })
    }

    /// The raw fds, for pid 1 to close before anything else (the workload must never hold
    /// a writable fd of a real git dir).
    pub fn raw_fds(&self) -> Vec<i32> {
        self.dirs.iter().map(|(_, t)| t.raw_fd()).collect()
    }
}

/// After the sandbox: for each git dir, bring the [`copied`] files of its view (at the same
/// path, in the new root that stage 2 now shares) back into the real dir: a changed regular
/// file replaces the real one (written beside it, then renamed), a removed one is removed
/// (never [`KEEP`]); links, special files and every other name are ignored. Returns the
/// errno of the first failure, after trying every dir.
pub fn copy_back(real: &Real, cap: u64) -> Result<(), i32> {
    let mut first = Ok(());
    for (path, tree) in &real.dirs {
        if let Err(e) = copy_back_one(path, tree, cap) {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

fn copy_back_one(view_path: &Path, real: &Tree, cap: u64) -> Result<(), i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let view = Dir::open_no_links(view_path).map_err(errno)?;
    let top = top_changes(&view, real, cap)?;
    for (name, data, _) in &top.changed {
        // The contents git would write, as the way back requires of a layer's (changes::scan).
        let valid = match name.as_bytes() {
            b"HEAD" => crate::refname::head(data),
            b"packed-refs" => crate::refname::packed_refs(data),
            _ => true,
        };
        if !valid {
            eprintln!(
                "sandbox-run: repo: refused {} (not what git writes there)",
                view_path.join(name).display()
            );
            continue;
        }
        real.put_bytes(name, data, 0o644).map_err(errno)?;
    }
    for name in &top.gone {
        real.remove(name).map_err(errno)?;
    }
    Ok(())
}

/// What git changed at the top of a view against the real git dir: the [`copied`] regular
/// files whose bytes differ (name, bytes, mode), and the real dir's copied files that the view
/// no longer has (never [`KEEP`], never a directory: a tree is never removed this way).
struct TopChanges {
    changed: Vec<(std::ffi::OsString, Vec<u8>, u32)>,
    gone: Vec<std::ffi::OsString>,
}

fn top_changes(view: &Dir, real: &Tree, cap: u64) -> Result<TopChanges, i32> {
    use std::os::unix::fs::PermissionsExt;
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let in_view: Vec<_> = view
        .entries(Path::new(""), MAX_ENTRIES)
        .map_err(errno)?
        .into_iter()
        .filter(|(n, _)| copied(n))
        .collect();
    let mut top = TopChanges {
        changed: Vec::new(),
        gone: Vec::new(),
    };
    for (name, kind) in &in_view {
        if *kind != Kind::File {
            continue;
        }
        let data = match view.read_small(Path::new(name), cap) {
            Ok(Some(d)) => d,
            _ => continue,
        };
        if real.read_small(name, cap).as_deref() == Some(&data[..]) {
            continue;
        }
        let fd = view
            .open_at(Path::new(name), libc::O_PATH | libc::O_NOFOLLOW, 0)
            .map_err(errno)?;
        let mode = std::fs::File::from(fd)
            .metadata()
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0o644);
        top.changed.push((name.clone(), data, mode));
    }
    for name in real.names().map_err(errno)? {
        if !copied(&name) || KEEP.iter().any(|k| OsStr::new(k) == name) {
            continue;
        }
        let dir =
            matches!(real.stat(&name), Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFDIR);
        if !dir && !in_view.iter().any(|(n, _)| *n == name) {
            top.gone.push(name);
        }
    }
    Ok(top)
}

/// After the sandbox, with a kept layer ([`crate::layers::overlay`]): the [`copied`] files of
/// each view (`dir` in the new root stage 2 now shares, root `root` of the layer, at `rel`
/// below it) that differ from the real git dir's go into that root's upper dir on the disk
/// layer, and a whiteout marks each one the view no longer has (never [`KEEP`]); links,
/// special files and every other name are left out. The way back then reads git's whole record
/// of the run from one layer and judges it with the rest. Nothing is written to the host.
pub fn into_layer(
    real: &Real,
    views: &[(PathBuf, usize, PathBuf)],
    disk: &Tree,
    cap: u64,
) -> Result<(), i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    for (dir, root, rel) in views {
        let Some((_, host)) = real.dirs.iter().find(|(d, _)| d == dir) else {
            continue;
        };
        let view = Dir::open_no_links(dir).map_err(errno)?;
        let base = dir
            .ancestors()
            .nth(rel.components().count())
            .unwrap_or(Path::new("/"));
        let mut upper = disk
            .child(OsStr::new(&crate::layers::mounts::upper_name(*root)))
            .map_err(errno)?;
        let mut at = base.to_path_buf();
        for c in rel.components() {
            at.push(c);
            if upper.stat(c.as_os_str()).map_err(errno)?.is_none() {
                // As the directory looks in the sandbox (the layer's view of the host's).
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::symlink_metadata(&at)
                    .map(|m| m.permissions().mode() & 0o1777)
                    .unwrap_or(0o755);
                upper.make_dir(c.as_os_str(), mode).map_err(errno)?;
            }
            upper = upper.child(c.as_os_str()).map_err(errno)?;
        }
        let top = top_changes(&view, host, cap)?;
        for (name, data, mode) in &top.changed {
            upper.put_bytes(name, data, *mode).map_err(errno)?;
        }
        for name in &top.gone {
            if upper.stat(name).map_err(errno)?.is_none() {
                upper.put_whiteout(name).map_err(errno)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copied_names_are_an_allow_list() {
        for n in [
            "HEAD",
            "ORIG_HEAD",
            "FETCH_HEAD",
            "MERGE_HEAD",
            "CHERRY_PICK_HEAD",
            "index",
            "packed-refs",
            "COMMIT_EDITMSG",
            "AUTO_MERGE",
            "sharedindex.0123abcd",
        ] {
            assert!(copied(OsStr::new(n)), "{n}");
        }
        for n in [
            "config",
            "config.worktree",
            "commondir",
            "gitdir",
            "hooks",
            "info",
            "modules",
            "worktrees",
            "description",
            "_HEAD",
            "x_HEAD",
            "index.lock",
            "sharedindex.zz",
            "fsmonitor--daemon",
        ] {
            assert!(!copied(OsStr::new(n)), "{n}");
        }
    }

    #[test]
    fn hooks_paths_are_read_from_core_sections() {
        let text = "[user]\n\thooksPath = nope\n[core]\n\tbare = false\n\thooksPath = .husky/_\n[core \"x\"]\nhookspath=no\n[CORE]\n  HooksPath = \"/abs/h\" ; comment\n";
        assert_eq!(
            hooks_paths(text),
            vec![PathBuf::from(".husky/_"), PathBuf::from("/abs/h")]
        );
        assert_eq!(
            hooks_paths("[core] hooksPath = one\n"),
            vec![PathBuf::from("one")]
        );
    }
}
