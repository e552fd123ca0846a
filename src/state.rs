//! sandbox-run's own state directories on the host: `STATE/sandbox-run/...`, where STATE is
//! `$XDG_STATE_HOME` (when absolute) or `~/.local/state` of the user the sandbox runs as.
//! Kept homes (`home/`, [`crate::home`]) and the private directories of a run that must
//! live on the host (`runs/`, [`RunDir`]: a gene's carried workspace) are made here.
//!
//! **Whose.** The user the workload runs as: when root runs a repo owned by someone else, the
//! workload runs as that user ([`crate::plan`]), so the directory is under that user's passwd
//! home and owned by them (root's `$XDG_STATE_HOME` does not count then), where stage 2 (which
//! has become that user) can reach it and nobody else can list it. Not `$TMPDIR`: the
//! caller's may be 0700 (the user cannot reach it), and what a killed run left there stays.
//!
//! **How** ([`ensure`]): from the (canonical) base, one component at a time, each opened with
//! `O_NOFOLLOW` (a symlink anywhere on the way is refused, never followed), each missing one
//! made 0700 and, when root makes it for another user, given to that user. The components
//! sandbox-run owns (the last `owned` of them) must be directories owned by the user; the last
//! is set to 0700.
//!
//! **Runs** ([`RunDir`]): `STATE/sandbox-run/runs/<prefix>-<random>`, 0700, owned by the user
//! (root running the repo of a user without a usable home: `/var/lib/sandbox-run/runs/`, root's
//! and 0711, with the run dir the user's and 0700 under its random name), holding a `lock` file that the run keeps locked (`flock`) for its life. It is removed when
//! the run ends; one whose run was killed (SIGKILL: nothing of it ran at the end) is removed
//! by the next [`RunDir::make`], which finds its lock free. Removal never follows a link.

use crate::hostfs::Tree;
use crate::layers::ns::Ids;
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the state of user `uid` lives: the base directory and the components below it up to
/// and including `sandbox-run` (`[".local", "state", "sandbox-run"]` or `["sandbox-run"]`).
/// `caller_uid`, `env_var`: the caller's; `passwd_home`: the user's home from the passwd file.
/// `what` names the purpose in errors ("home", "gene layer dir").
pub fn location(
    uid: u32,
    caller_uid: u32,
    env_var: impl Fn(&str) -> Option<String>,
    passwd_home: Option<PathBuf>,
    what: &str,
) -> Result<(PathBuf, Vec<String>), String> {
    let mut below = vec!["sandbox-run".to_string()];
    let own = uid == caller_uid;
    let xdg = env_var("XDG_STATE_HOME").filter(|x| own && x.starts_with('/'));
    let base = match xdg {
        Some(x) => PathBuf::from(x),
        None => {
            let home = if own {
                env_var("HOME").filter(|h| h.starts_with('/') && h != "/")
            } else {
                None
            }
            .map(PathBuf::from)
            .or(passwd_home.filter(|h| h.is_absolute() && h != Path::new("/")))
            .ok_or_else(|| {
                format!(
                    "{what}: user {uid} has no home directory to keep sandbox-run's state under (set XDG_STATE_HOME)"
                )
            })?;
            below.splice(0..0, [".local".to_string(), "state".into()]);
            home
        }
    };
    Ok((base, below))
}

/// The passwd home of `uid` (read from /etc/passwd: no NSS in a static binary).
pub fn passwd_home(uid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2].parse() == Ok(uid)).then(|| PathBuf::from(f[5]))
    })
}

/// The state directory `STATE/sandbox-run/<sub...>` of the user `ids` (the user the sandbox
/// runs as), made as [`ensure`] says; `what` names the purpose in errors. With the caller's
/// environment (`$XDG_STATE_HOME`, `$HOME`) when the caller is that user.
pub fn dir(ids: Ids, sub: &[&str], what: &str) -> Result<PathBuf, String> {
    let me = nix::unistd::geteuid().as_raw();
    let (base, mut below) = location(
        ids.uid,
        me,
        |k| std::env::var(k).ok(),
        passwd_home(ids.uid),
        what,
    )?;
    below.extend(sub.iter().map(|s| s.to_string()));
    ensure(&base, &below, sub.len() + 1, ids, what)
}

/// Make (or check) `base/below...` for `ids` without following any link, and return its
/// path. The last `owned` components are sandbox-run's own: each must be a directory owned by
/// `ids.uid`; the last is made 0700. `what` names the purpose in errors.
pub fn ensure(
    base: &Path,
    below: &[String],
    owned: usize,
    ids: Ids,
    what: &str,
) -> Result<PathBuf, String> {
    let Ids { uid, gid } = ids;
    let fail = |p: &Path, why: String| format!("{what} {}: {why}", p.display());
    let me = nix::unistd::geteuid().as_raw();
    // The caller's own `$XDG_STATE_HOME` is made when missing, as any program of the caller
    // would; another user's home must exist.
    if me == uid && std::fs::symlink_metadata(base).is_err() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(base)
            .map_err(|e| fail(base, e.to_string()))?;
    }
    let base = std::fs::canonicalize(base).map_err(|e| fail(base, e.to_string()))?;
    let mut tree = Tree::open(&base).map_err(|e| fail(&base, e.to_string()))?;
    let mut path = base.clone();
    let owned_from = below.len().saturating_sub(owned);
    for (i, name) in below.iter().enumerate() {
        path.push(name);
        let n = OsStr::new(name);
        let st = tree.stat(n).map_err(|e| fail(&path, e.to_string()))?;
        let made = match st {
            None => {
                let c = CString::new(name.as_bytes()).map_err(|_| fail(&path, "bad name".into()))?;
                // SAFETY: mkdirat on our dir fd with a plain NUL-terminated name.
                let r = unsafe { libc::mkdirat(tree.raw_fd(), c.as_ptr(), 0o700) };
                if r != 0 && crate::sys::last_errno() != libc::EEXIST {
                    return Err(fail(&path, std::io::Error::last_os_error().to_string()));
                }
                r == 0
            }
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                return Err(fail(
                    &path,
                    "is a symlink: sandbox-run does not follow links in its state directories (remove it)"
                        .into(),
                ))
            }
            Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
                return Err(fail(&path, "is not a directory".into()))
            }
            Some(_) => false,
        };
        let next = tree
            .child(n)
            .map_err(|e| fail(&path, format!("opening without following links: {e}")))?;
        let fd = next.raw_fd();
        if made && me != uid {
            // SAFETY: fchown of a directory fd we own.
            if unsafe { libc::fchown(fd, uid, gid) } != 0 {
                return Err(fail(&path, std::io::Error::last_os_error().to_string()));
            }
        }
        if i >= owned_from {
            let st = fstat_fd(fd).map_err(|e| fail(&path, e.to_string()))?;
            if st.st_uid != uid {
                return Err(fail(
                    &path,
                    format!(
                        "is owned by uid {}, not by uid {uid} who runs the command: refused",
                        st.st_uid
                    ),
                ));
            }
            if i + 1 == below.len() {
                // SAFETY: fchmod of a directory fd we own.
                if unsafe { libc::fchmod(fd, 0o700) } != 0 {
                    return Err(fail(&path, std::io::Error::last_os_error().to_string()));
                }
            }
        }
        tree = next;
    }
    Ok(path)
}

fn fstat_fd(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: all-zero is a valid stat; fstat fills it for an fd we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// A run dir not yet renamed into place is left alone this long (its run may be making it).
const FRESH_SECS: i64 = 600;

/// The lock file in each run dir.
const LOCK: &str = "lock";

/// A private directory of one run, `STATE/sandbox-run/runs/<prefix>-<random>`, 0700 and
/// owned by the user the sandbox runs as, locked for the run's life, removed when dropped
/// (and by a later run when this one was killed).
#[derive(Debug)]
pub struct RunDir {
    runs: Tree,
    name: OsString,
    path: PathBuf,
    ids: Ids,
    /// Held `flock(LOCK_EX)` on `lock`: a later run sees the run alive.
    _lock: OwnedFd,
}

impl RunDir {
    /// Make a fresh run dir for `ids` (`prefix`: what it is for, e.g. `gene`), after removing
    /// the stale ones of killed runs. `what` names the purpose in errors.
    pub fn make(ids: Ids, prefix: &str, what: &str) -> Result<RunDir, String> {
        let me = nix::unistd::geteuid().as_raw();
        let runs_path = match dir(ids, &["runs"], what) {
            Ok(p) => p,
            // Root running the repo of a user with no usable home (a uid without a passwd
            // entry, as a checkout's owner in a container often is): root's own place.
            Err(e) if me == 0 && ids.uid != 0 => {
                shared_runs(what).map_err(|e2| format!("{e}; {e2}"))?
            }
            Err(e) => return Err(e),
        };
        let fail = |p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
        let runs = Tree::open(&runs_path).map_err(|e| fail(&runs_path, e))?;
        sweep(&runs);
        let rand = random_hex().map_err(|e| fail(&runs_path, e))?;
        let name = format!("{prefix}-{rand}");
        // Made under a dot name, locked, then renamed into place: a later run's sweep never
        // sees a run dir whose lock is not held yet.
        let tmp = format!(".new-{name}");
        let tmp_path = runs_path.join(&tmp);
        let made = (|| {
            runs.make_dir(OsStr::new(&tmp), 0o700)?;
            let d = runs.child(OsStr::new(&tmp))?;
            if me != ids.uid {
                // SAFETY: fchown of a directory fd we own.
                check(unsafe { libc::fchown(d.raw_fd(), ids.uid, ids.gid) })?;
            }
            let lock = create_lock(&d)?;
            crate::hostfs::flock(&lock, libc::LOCK_EX | libc::LOCK_NB)?;
            let (a, b) = (c_name(&tmp)?, c_name(&name)?);
            // SAFETY: renameat within our dir fd, plain NUL-terminated names.
            check(unsafe { libc::renameat(runs.raw_fd(), a.as_ptr(), runs.raw_fd(), b.as_ptr()) })?;
            Ok::<OwnedFd, std::io::Error>(lock)
        })();
        match made {
            Ok(lock) => Ok(RunDir {
                runs,
                name: name.clone().into(),
                path: runs_path.join(&name),
                ids,
                _lock: lock,
            }),
            Err(e) => {
                remove_entry(&runs, OsStr::new(&tmp));
                Err(fail(&tmp_path, e))
            }
        }
    }

    /// The run dir's path (canonical, no link in it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Make the subdirectory `name` (0700, owned by the run's user) and return its path.
    pub fn subdir(&self, name: &str) -> Result<PathBuf, String> {
        let at = self.path.join(name);
        let made = (|| {
            let d = self.runs.child(&self.name)?;
            d.make_dir(OsStr::new(name), 0o700)?;
            let sub = d.child(OsStr::new(name))?;
            if nix::unistd::geteuid().as_raw() != self.ids.uid {
                // SAFETY: fchown of a directory fd we own.
                check(unsafe { libc::fchown(sub.raw_fd(), self.ids.uid, self.ids.gid) })?;
            }
            Ok::<(), std::io::Error>(())
        })();
        made.map_err(|e| format!("{} {}: {e}", self.name.to_string_lossy(), at.display()))?;
        Ok(at)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        remove_entry(&self.runs, &self.name);
    }
}

/// A run's private layer directory on the host ([`RunDir`] `layer-<random>`,
/// holding `disk`); removed when dropped.
pub struct LayerDir {
    /// `disk`: where stage 2 mounts the overlays' upper and work dirs from.
    pub disk: PathBuf,
    /// The layer is on the repo's filesystem: the way back moves files by rename.
    pub same_fs: bool,
    _run: RunDir,
}

fn io(what: &Path, e: impl std::fmt::Display) -> String {
    format!("repo layer dir {}: {e}", what.display())
}

impl LayerDir {
    /// Make a run's layer directory for the user `ids` runs as (see [`crate::layers::disk`]), with
    /// `upper` and `work` in its `disk`. `repo`: to tell whether it is on the repo's
    /// filesystem.
    pub fn make(ids: Ids, repo: &Path) -> Result<LayerDir, String> {
        let me = nix::unistd::geteuid().as_raw();
        let run = RunDir::make(ids, "layer", "repo layer dir")?;
        let path = run.subdir("disk")?;
        let made = (|| -> std::io::Result<bool> {
            let disk = Tree::open(&path)?;
            for d in ["upper", "work"] {
                let n = OsStr::new(d);
                disk.make_dir(n, 0o700)?;
                if me != ids.uid {
                    crate::fsops::chown_at(disk.raw_fd(), n, ids.uid, ids.gid)?;
                }
            }
            // whether this filesystem can hold an upper: `holds_an_upper`, by the caller
            Ok(
                match (crate::fsops::fstat(disk.raw_fd()), std::fs::metadata(repo)) {
                    (Ok(a), Ok(b)) => a.st_dev == std::os::unix::fs::MetadataExt::dev(&b),
                    _ => false,
                },
            )
        })();
        match made {
            Ok(same_fs) => Ok(LayerDir {
                disk: path,
                same_fs,
                _run: run,
            }),
            Err(e) => Err(io(&path, e)),
        }
    }
}

/// Where root keeps the run dirs of users without a usable home: [`SHARED_RUNS`], root's,
/// 0711 down to it (each run dir in it is 0700, its user's, under a random name: that user
/// can reach their own and nobody else can list any).
const SHARED_RUNS: (&str, [&str; 2]) = ("/var/lib", ["sandbox-run", "runs"]);

fn shared_runs(what: &str) -> Result<PathBuf, String> {
    let (base, below) = SHARED_RUNS;
    let below: Vec<String> = below.iter().map(|s| s.to_string()).collect();
    let root = Ids { uid: 0, gid: 0 };
    let path = ensure(Path::new(base), &below, below.len(), root, what)?;
    let mut tree = Tree::open(Path::new(base)).map_err(|e| format!("{what} {base}: {e}"))?;
    for name in &below {
        tree = tree
            .child(OsStr::new(name))
            .map_err(|e| format!("{what} {}: {e}", path.display()))?;
        // SAFETY: fchmod of a directory fd we own.
        check(unsafe { libc::fchmod(tree.raw_fd(), 0o711) })
            .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    }
    Ok(path)
}

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn c_name(s: &str) -> std::io::Result<CString> {
    CString::new(s).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// 16 random bytes in hex.
fn random_hex() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    // SAFETY: getrandom into a buffer of the given length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Create the run dir's lock file (0600, never through a link).
fn create_lock(d: &Tree) -> std::io::Result<OwnedFd> {
    let c = c_name(LOCK)?;
    // SAFETY: openat on our dir fd with a plain NUL-terminated name, never following.
    let fd = unsafe {
        libc::openat(
            d.raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    check(fd)?;
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open `d/lock` as it is (never a link, never blocking), if it is there.
fn open_lock(d: &Tree) -> std::io::Result<OwnedFd> {
    let c = c_name(LOCK)?;
    // SAFETY: openat on our dir fd with a plain NUL-terminated name, never following.
    let fd = unsafe {
        libc::openat(
            d.raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    check(fd)?;
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Remove the run dirs in `runs` whose run is gone: their lock is free (a killed run's), or
/// (a dot name that was never renamed into place) they are older than [`FRESH_SECS`]. Best
/// effort: what cannot be removed now is tried again by the next run.
pub fn sweep(runs: &Tree) {
    let Ok(names) = runs.names() else { return };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    for name in names {
        let Ok(Some(st)) = runs.stat(&name) else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            remove_entry(runs, &name);
            continue;
        }
        if name.as_bytes().starts_with(b".") {
            if now - st.st_ctime > FRESH_SECS {
                remove_entry(runs, &name);
            }
            continue;
        }
        let Ok(d) = runs.child(&name) else { continue };
        match open_lock(&d) {
            Ok(lock) => {
                // Held while removing: a run still alive cannot have it.
                if crate::hostfs::flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
                    remove_entry(runs, &name);
                }
            }
            // No lock at all: not a run dir of ours in a usable state.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => remove_entry(runs, &name),
            Err(_) => {}
        }
    }
}

/// Remove `name` from `parent` with everything in it, never following a link; directories
/// the command made unreadable are opened up first (the caller owns them: only a run that is
/// not root needs that). Errors are warnings.
pub fn remove_entry(parent: &Tree, name: &OsStr) {
    if let Err(e) = remove_tree(parent, name, 0) {
        if e.raw_os_error() != Some(libc::ENOENT) {
            tracing::warn!("removing {}: {e}", name.to_string_lossy());
        }
    }
}

fn remove_tree(parent: &Tree, name: &OsStr, depth: usize) -> std::io::Result<()> {
    if depth > 512 {
        return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
    }
    let c = CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let Some(st) = parent.stat(name)? else {
        return Ok(());
    };
    let mut flags = 0;
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        let sub = match parent.child(name) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                // A mode the command set (0000): give it back to the owner, which we are.
                // SAFETY: fchmodat on our dir fd, a plain name, checked above to be a dir.
                check(unsafe { libc::fchmodat(parent.raw_fd(), c.as_ptr(), 0o700, 0) })?;
                parent.child(name)?
            }
            r => r?,
        };
        // SAFETY: as above, on the open directory itself (read and search for the walk).
        unsafe { libc::fchmod(sub.raw_fd(), 0o700) };
        for n in sub.names()? {
            remove_tree(&sub, &n, depth + 1)?;
        }
        flags = libc::AT_REMOVEDIR;
    }
    // SAFETY: unlinkat on our dir fd with a plain NUL-terminated name.
    check(unsafe { libc::unlinkat(parent.raw_fd(), c.as_ptr(), flags) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Ids {
        Ids {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        }
    }

    #[test]
    fn location_is_the_users_own_state() {
        let env = |k: &str| match k {
            "XDG_STATE_HOME" => Some("/x/state".to_string()),
            "HOME" => Some("/home/me".to_string()),
            _ => None,
        };
        let (b, below) = location(5, 5, env, None, "t").unwrap();
        assert_eq!(
            (b, below),
            (PathBuf::from("/x/state"), vec!["sandbox-run".into()])
        );
        // another user's: their passwd home, never the caller's environment
        let (b, below) = location(6, 0, env, Some("/home/six".into()), "t").unwrap();
        assert_eq!(b, PathBuf::from("/home/six"));
        assert_eq!(below, vec![".local", "state", "sandbox-run"]);
        assert!(location(6, 0, env, None, "t").is_err());
    }

    #[test]
    fn a_killed_runs_dir_is_removed_by_the_next_and_a_live_ones_kept() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = crate::testdir::base().join(format!("state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let below: Vec<String> = ["sandbox-run", "runs"].map(String::from).to_vec();
        let runs = ensure(&base, &below, 2, me(), "t").unwrap();
        assert_eq!(
            std::fs::metadata(&runs).unwrap().mode() & 0o777,
            0o700,
            "runs/"
        );
        let tree = Tree::open(&runs).unwrap();
        // a stale one: its lock is free; one with its lock held stays
        let stale = runs.join("gene-stale");
        std::fs::create_dir_all(stale.join("layer/locked")).unwrap();
        std::fs::write(stale.join(LOCK), "").unwrap();
        std::fs::write(stale.join("layer/locked/f"), "x").unwrap();
        std::fs::set_permissions(stale.join("layer/locked"), PermissionsExt::from_mode(0o000))
            .unwrap();
        let alive = runs.join("gene-alive");
        std::fs::create_dir_all(&alive).unwrap();
        std::fs::write(alive.join(LOCK), "").unwrap();
        let held = std::fs::File::open(alive.join(LOCK)).unwrap();
        // SAFETY: flock on a file we own.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
        // a link in runs/ is removed, never followed
        std::fs::create_dir_all(base.join("victim")).unwrap();
        std::os::unix::fs::symlink(base.join("victim"), runs.join("gene-link")).unwrap();
        sweep(&tree);
        assert!(
            stale.symlink_metadata().is_err(),
            "the stale run dir stayed"
        );
        assert!(alive.exists(), "a live run's dir was removed");
        assert!(runs.join("gene-link").symlink_metadata().is_err());
        assert!(base.join("victim").exists());
        drop(held);
        sweep(&tree);
        assert!(!alive.exists());
        let _ = std::fs::remove_dir_all(&base);
    }
}
