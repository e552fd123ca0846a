//! Where a command runs: the repo root and the working directory inside it.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Canonical repo root.
    pub repo: PathBuf,
    /// Canonical working directory: the caller's if it lies inside the repo, else the repo root.
    pub cwd: PathBuf,
    /// How the repo root was chosen.
    pub chosen: Chosen,
}

/// How [`Workspace::find`] chose the repo root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chosen {
    /// `--repo DIR`.
    Flag,
    /// The git top level above the current directory.
    Git,
    /// The current directory: no git repository above it.
    Cwd,
}

impl Chosen {
    fn words(self) -> &'static str {
        match self {
            Chosen::Flag => "given by --repo",
            Chosen::Git => "the git top level above the current directory",
            Chosen::Cwd => "the current directory, with no git repository above it",
        }
    }
}

/// Files that mark a project's root, for the hint of [`Workspace::notice`].
const PROJECT_MARKERS: &[&str] = &[
    "package.json",
    "Cargo.toml",
    "pyproject.toml",
    "setup.py",
    "go.mod",
    "pom.xml",
];

/// Never a repo root, nor anything beneath them: the system's own files (a rw profile would
/// let the command write them, as root when root runs it; even read-only, they are not a
/// project). `/usr/src` and `/usr/local/src` are the exceptions beneath `/usr`.
const SYSTEM_TREES: &[&str] = &[
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev",
    "/proc", "/sys",
];
const SYSTEM_TREE_EXCEPTIONS: &[&str] = &["/usr/src", "/usr/local/src"];
/// Never a repo root themselves (projects beneath them are fine): shared or system-wide
/// directories.
const SYSTEM_DIRS: &[&str] = &[
    "/var",
    "/var/lib",
    "/var/tmp",
    "/var/cache",
    "/var/log",
    "/opt",
    "/srv",
    "/home",
    "/root",
    "/tmp",
    "/run",
    "/mnt",
    "/media",
    "/snap",
    "/nix",
];

/// Why `repo` cannot be the repo root: `/`, a system directory, or a whole home directory of
/// the caller (`homes`: canonical) or one above it. `None`: fine.
fn refusal(repo: &Path, homes: &[PathBuf]) -> Option<String> {
    if repo == Path::new("/") {
        return Some("/, the whole file system".into());
    }
    if let Some(h) = homes.iter().find(|h| h.starts_with(repo)) {
        let what = if h == repo {
            "the caller's whole home directory".to_string()
        } else {
            format!("above the caller's home directory {}", h.display())
        };
        return Some(format!(
            "{}, {what} (its dotfiles and credentials would be in the sandbox, writable in a \
             read-write profile)",
            repo.display()
        ));
    }
    let under = |list: &[&str]| list.iter().any(|d| repo.starts_with(d));
    let is = |list: &[&str]| list.iter().any(|d| repo == Path::new(d));
    if (under(SYSTEM_TREES) && !under(SYSTEM_TREE_EXCEPTIONS)) || is(SYSTEM_DIRS) {
        return Some(format!(
            "{}, a system directory (its files are not a project, and a read-write profile \
             would let the command change them)",
            repo.display()
        ));
    }
    None
}

/// The caller's home directories, canonical: `$HOME` and the passwd entry of the real uid
/// (read from /etc/passwd: no NSS in a static binary).
pub fn caller_homes() -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = Vec::new();
    if let Some(h) = std::env::var_os("HOME").map(PathBuf::from) {
        homes.push(h);
    }
    let uid = nix::unistd::getuid().as_raw().to_string();
    if let Ok(t) = std::fs::read_to_string("/etc/passwd") {
        for l in t.lines() {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() >= 6 && f[2] == uid {
                homes.push(PathBuf::from(f[5]));
            }
        }
    }
    let mut out: Vec<PathBuf> = homes
        .into_iter()
        .filter(|h| h.is_absolute())
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

impl Workspace {
    /// `--repo DIR`, else the git top level above `cwd`, else `cwd` itself. `DIR` must name
    /// its directory without a symlink on the way (compared lexically, `..` included). The
    /// root is refused when it is `/`, a system directory or the caller's whole home.
    pub fn find(repo_flag: Option<&Path>, cwd: &Path) -> Result<Workspace, String> {
        Workspace::find_with(repo_flag, cwd, &caller_homes())
    }

    /// [`Workspace::find`] with the caller's home directories given (canonical).
    pub fn find_with(
        repo_flag: Option<&Path>,
        cwd: &Path,
        homes: &[PathBuf],
    ) -> Result<Workspace, String> {
        let cwd = std::fs::canonicalize(cwd)
            .map_err(|e| format!("current directory {}: {e}", cwd.display()))?;
        let (repo, chosen) = match repo_flag {
            Some(r) => {
                let abs = cwd.join(r);
                let repo = std::fs::canonicalize(&abs)
                    .map_err(|e| format!("--repo {}: {e}", abs.display()))?;
                // A symlink on the way may be one a sandboxed command planted (an rw run
                // replaced `packages/app` by a link to a host directory, which the next run
                // would mount read-write as the repo): never follow one silently.
                if repo != crate::hostfs::lexical(&cwd, r) {
                    return Err(format!(
                        "--repo {}: reached through a symlink (it resolves to {}); pass the \
                         resolved path if you mean it",
                        r.display(),
                        repo.display()
                    ));
                }
                if !repo.is_dir() {
                    return Err(format!("--repo {}: not a directory", repo.display()));
                }
                (repo, Chosen::Flag)
            }
            None => match git_top_level(&cwd) {
                Some(top) => (top, Chosen::Git),
                None => (cwd.clone(), Chosen::Cwd),
            },
        };
        if let Some(why) = refusal(&repo, homes) {
            return Err(format!(
                "the repo root would be {why}; it is {}: pass --repo DIR with the project's \
                 directory, or run inside a repository",
                chosen.words()
            ));
        }
        let cwd = if cwd.starts_with(&repo) {
            cwd
        } else {
            repo.clone()
        };
        Ok(Workspace { repo, cwd, chosen })
    }

    /// Why this repo (`-v`): `--repo`, the git top level, or the current directory.
    pub fn why(&self) -> &'static str {
        match self.chosen {
            Chosen::Flag => "--repo",
            Chosen::Git => "the git top level above the current directory",
            Chosen::Cwd => "the current directory (no .git above it)",
        }
    }

    /// One line for stderr when the repo root was the current directory for want of a git
    /// repository (a subdirectory of a project without git would otherwise quietly become
    /// the whole repo): which directory, and how to choose another.
    pub fn notice(&self) -> Option<String> {
        if self.chosen != Chosen::Cwd {
            return None;
        }
        let homes = caller_homes();
        let hint = self
            .repo
            .ancestors()
            .skip(1)
            .take_while(|d| refusal(d, &homes).is_none())
            .find_map(|d| {
                PROJECT_MARKERS
                    .iter()
                    .find(|m| d.join(m).symlink_metadata().is_ok())
                    .map(|m| {
                        format!(
                            " ({m} is in {}: --repo {0} makes that the repo)",
                            d.display()
                        )
                    })
            })
            .unwrap_or_default();
        Some(format!(
            "no git repository above the current directory: the repo is {} (choose another \
             with --repo DIR){hint}",
            self.repo.display()
        ))
    }
}

/// How many entries [`foreign_owner`] looks at before a run: the repo root and the first
/// entries of its top levels. Every run pays for it (256 entries cost 0.7-1.1 ms of a release
/// build's plan here, against 1.5 ms for the whole plan), so it stays short; a failed run
/// looks deeper ([`OWNER_SCAN_AFTER_FAILURE`]).
pub const OWNER_SCAN_BEFORE: usize = 32;
/// How many after a run that failed, when the reason may be a file it could not write.
pub const OWNER_SCAN_AFTER_FAILURE: usize = 20_000;

/// Someone other than `uid` owning something in the repo: the owner and the repo-relative
/// path of the first such entry, breadth first (the repo root itself first), at most `budget`
/// entries looked at. Symlinks are not counted (nobody writes through one's own inode) and
/// never followed: every directory is reopened beneath the repo without links
/// ([`crate::hostfs::Dir::open_at`]), so nothing the repo swaps in leads elsewhere.
///
/// `skip_git`: leave out the repo root's `.git` (the empty placeholder sandbox-run made for
/// this run, owned by the caller).
pub fn foreign_owner(
    repo: &Path,
    uid: u32,
    budget: usize,
    skip_git: bool,
) -> Option<(u32, PathBuf)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let root = crate::hostfs::Dir::open(repo).ok()?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let mut queue = std::collections::VecDeque::from([PathBuf::new()]);
    let mut seen = 0usize;
    while let Some(rel) = queue.pop_front() {
        let Ok(fd) = root.open_at(&rel, flags, 0) else {
            continue; // replaced or removed meanwhile
        };
        if rel.as_os_str().is_empty() {
            // SAFETY: all-zero is a valid `stat`; fstat fills it for our open fd.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0 && st.st_uid != uid {
                return Some((st.st_uid, PathBuf::from(".")));
            }
        }
        let Ok(mut dir) = nix::dir::Dir::from_fd(fd) else {
            continue;
        };
        let dirfd = dir.as_raw_fd();
        for e in dir.iter() {
            let Ok(e) = e else { break };
            let name = e.file_name();
            if matches!(name.to_bytes(), b"." | b"..")
                || (skip_git && rel.as_os_str().is_empty() && name.to_bytes() == b".git")
            {
                continue;
            }
            seen += 1;
            if seen > budget {
                return None;
            }
            // SAFETY: all-zero is a valid `stat`; fstatat fills it, not following a link.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `dirfd` is the open directory being read, the name NUL-terminated.
            if unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) }
                != 0
            {
                continue;
            }
            let kind = st.st_mode & libc::S_IFMT;
            if kind == libc::S_IFLNK {
                continue;
            }
            let path = rel.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            if st.st_uid != uid {
                return Some((st.st_uid, path));
            }
            if kind == libc::S_IFDIR {
                queue.push_back(path);
            }
        }
    }
    None
}

/// The one-line warning for a repo holding files of a user other than the one the command
/// runs as, once per process (a gene's commands share the repo); `budget` entries at most.
pub fn warn_foreign_owner(repo: &Path, uid: u32, placeholder: bool, budget: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if WARNED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if let Some((owner, path)) = foreign_owner(repo, uid, budget, placeholder) {
        WARNED.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            "the repo holds files of several users ({} is uid {owner}'s): the command runs as \
             uid {uid} and can write only the files uid {uid} owns",
            repo.join(&path).display()
        );
    }
}

/// The nearest ancestor holding `.git` (a directory, or a file for worktrees and submodules).
fn git_top_level(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join(".git").symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_git_top_and_keeps_inner_cwd() {
        let t = tempdir_in(&crate::testdir::base());
        let repo = t.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        let w = Workspace::find(None, &repo.join("src/deep")).unwrap();
        assert_eq!(w.repo, repo);
        assert_eq!(w.cwd, repo.join("src/deep"));
        // --repo elsewhere: the cwd falls back to the repo root
        let other = t.join("other");
        std::fs::create_dir_all(&other).unwrap();
        let w = Workspace::find(Some(&other), &repo.join("src")).unwrap();
        assert_eq!((w.repo.clone(), w.cwd.clone()), (other.clone(), other));
        assert!(Workspace::find(Some(Path::new("/nonexistent/x")), &repo).is_err());
        assert!(Workspace::find(Some(Path::new("/")), &repo).is_err());
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn a_repo_reached_through_a_symlink_is_refused() {
        let t = crate::testdir::base().join(format!("ws-symlink-test-{}", std::process::id()));
        let host = t.join("host-dir");
        std::fs::create_dir_all(t.join("real")).unwrap();
        std::fs::create_dir_all(&host).unwrap();
        std::fs::create_dir_all(t.join("mono/packages")).unwrap();
        std::os::unix::fs::symlink(&host, t.join("mono/packages/app")).unwrap();
        std::os::unix::fs::symlink(t.join("mono"), t.join("mono-link")).unwrap();
        std::fs::create_dir_all(t.join("mono/packages/real")).unwrap();
        let refused = |flag: &str| {
            let e = Workspace::find(Some(Path::new(flag)), &t).unwrap_err();
            assert!(e.contains("reached through a symlink"), "{flag}: {e}");
            e
        };
        // the last component, a directory on the way, and `..` after a link
        let e = refused("mono/packages/app");
        assert!(
            e.contains(&format!("it resolves to {}", host.display())),
            "{e}"
        );
        assert!(e.starts_with("--repo mono/packages/app: "), "{e}");
        refused("mono-link/packages/real");
        refused(t.join("mono/packages/app").to_str().unwrap());
        refused("mono/packages/app/../real");
        // control: the resolved paths, relative or absolute, with `..` and `.`
        for ok in ["mono/packages/real", "mono/./packages/../packages/real/"] {
            let w = Workspace::find(Some(Path::new(ok)), &t).unwrap();
            assert_eq!(w.repo, t.join("mono/packages/real"));
        }
        assert_eq!(Workspace::find(Some(&host), &t).unwrap().repo, host);
        // no --repo: the cwd is the kernel's real path, a symlinked cwd is fine
        let w = Workspace::find(None, &t.join("mono-link/packages/real")).unwrap();
        assert_eq!(w.cwd, t.join("mono/packages/real"));
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn says_why_it_chose_the_repo() {
        let t = crate::testdir::base().join(format!("ws-why-test-{}", std::process::id()));
        std::fs::create_dir_all(t.join("repo/.git")).unwrap();
        std::fs::create_dir_all(t.join("repo/sub")).unwrap();
        let w = Workspace::find(Some(&t.join("repo")), &t).unwrap();
        assert_eq!(w.why(), "--repo");
        let w = Workspace::find(None, &t.join("repo/sub")).unwrap();
        assert_eq!(w.why(), "the git top level above the current directory");
        // no .git anywhere above (the target dir above has one): the temp dir, if clean
        let plain = std::env::temp_dir().join(format!("ws-why-{}", std::process::id()));
        std::fs::create_dir_all(plain.join("sub")).unwrap();
        let plain = std::fs::canonicalize(&plain).unwrap();
        if !plain.ancestors().any(|d| d.join(".git").exists()) {
            let w = Workspace::find(None, &plain.join("sub")).unwrap();
            assert_eq!(w.why(), "the current directory (no .git above it)");
            assert_eq!(w.repo, plain.join("sub"));
        }
        std::fs::remove_dir_all(&plain).unwrap();
    }

    #[test]
    fn system_directories_and_whole_homes_are_refused_as_repo_roots() {
        let refused = |p: &str| refusal(Path::new(p), &[PathBuf::from("/home/u")]);
        for p in [
            "/",
            "/usr",
            "/usr/lib",
            "/usr/share/doc/x",
            "/usr/local",
            "/usr/local/lib/node_modules/x",
            "/etc",
            "/etc/nginx",
            "/bin",
            "/lib64",
            "/boot",
            "/proc/1",
            "/sys/fs",
            "/dev",
            "/var",
            "/var/lib",
            "/opt",
            "/home",
            "/tmp",
            "/root",
            "/run",
        ] {
            assert!(refused(p).is_some(), "{p} must be refused");
        }
        let e = refused("/home/u").unwrap();
        assert!(e.contains("the caller's whole home directory"), "{e}");
        for p in [
            "/usr/src/linux",
            "/usr/local/src/app",
            "/var/lib/jenkins/workspace/job",
            "/opt/app",
            "/srv/site",
            "/home/u/project",
            "/home/other",
            "/tmp/build",
            "/root/project",
        ] {
            assert_eq!(refused(p), None, "{p} must be allowed");
        }
        // through find: a flag, and the current directory for want of git
        let t = crate::testdir::base().join(format!("ws-home-test-{}", std::process::id()));
        std::fs::create_dir_all(t.join("home/proj/src")).unwrap();
        let homes = [t.join("home")];
        let e = Workspace::find_with(Some(&t.join("home")), &t, &homes).unwrap_err();
        assert!(
            e.contains("whole home directory") && e.contains("given by --repo"),
            "{e}"
        );
        let e = Workspace::find_with(Some(&t), &t, &homes).unwrap_err();
        assert!(e.contains("above the caller's home directory"), "{e}");
        let e = Workspace::find_with(Some(Path::new("/usr/lib")), &t, &homes).unwrap_err();
        assert!(e.contains("/usr/lib, a system directory"), "{e}");
        assert!(e.contains("pass --repo DIR"), "{e}");
        let w = Workspace::find_with(Some(&t.join("home/proj")), &t, &homes).unwrap();
        assert_eq!((w.chosen, w.notice()), (Chosen::Flag, None));
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn the_current_directory_as_repo_says_so() {
        let w = Workspace {
            repo: PathBuf::from("/srv/proj/src"),
            cwd: PathBuf::from("/srv/proj/src"),
            chosen: Chosen::Cwd,
        };
        let n = w.notice().unwrap();
        assert!(
            n.contains("the repo is /srv/proj/src") && n.contains("--repo DIR"),
            "{n}"
        );
        assert!(!n.contains('\n'));
        let git = Workspace {
            chosen: Chosen::Git,
            ..w
        };
        assert_eq!(git.notice(), None);
    }

    #[test]
    fn foreign_owners_are_found_breadth_first_within_the_budget() {
        // the cost of a whole budget, on a tree named by SANDBOX_RUN_SCAN_DIR (--nocapture)
        if let Some(dir) = std::env::var_os("SANDBOX_RUN_SCAN_DIR") {
            for _ in 0..3 {
                let t0 = std::time::Instant::now();
                let r = foreign_owner(Path::new(&dir), 0, OWNER_SCAN_AFTER_FAILURE, false);
                eprintln!("scan {r:?} in {:?}", t0.elapsed());
            }
        }
        // as anyone else, the root directory itself is the first foreign entry
        assert_eq!(
            foreign_owner(Path::new("/usr/share"), 4242, 10, false),
            Some((0, PathBuf::from(".")))
        );
        // a link is neither counted nor followed
        let t = crate::testdir::base().join(format!("ws-owner-test-{}", std::process::id()));
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        std::os::unix::fs::symlink("/usr/share", t.join("a/link")).unwrap();
        std::os::unix::fs::symlink("/usr", t.join("a/b/link")).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(foreign_owner(&t, me, 1000, false), None);
        if me == 0 {
            // breadth first: the shallower of two foreign entries; none past the budget
            std::fs::write(t.join("a/b/deep"), "").unwrap();
            std::fs::write(t.join("a/shallow"), "").unwrap();
            std::os::unix::fs::lchown(t.join("a/b/deep"), Some(1001), None).unwrap();
            std::os::unix::fs::lchown(t.join("a/shallow"), Some(1002), None).unwrap();
            assert_eq!(
                foreign_owner(&t, 0, 1000, false),
                Some((1002, PathBuf::from("a/shallow")))
            );
            assert_eq!(foreign_owner(&t, 0, 1, false), None);
            // a foreign link is not counted
            std::fs::remove_file(t.join("a/shallow")).unwrap();
            std::fs::remove_file(t.join("a/b/deep")).unwrap();
            std::os::unix::fs::lchown(t.join("a/link"), Some(1001), None).unwrap();
            assert_eq!(foreign_owner(&t, 0, 1000, false), None);
        }
        std::fs::remove_dir_all(&t).unwrap();
    }

    fn tempdir_in(dir: &Path) -> PathBuf {
        let p = dir.join(format!("ws-test-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}
