//! Where a command runs: the repo root and the working directory inside it.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Canonical repo root.
    pub repo: PathBuf,
    /// Canonical working directory: the caller's if it lies inside the repo, else the repo root.
    pub cwd: PathBuf,
    /// Why this repo (`-v`): `--repo`, the git top level, or the current directory.
    pub why: &'static str,
}

impl Workspace {
    /// `--repo DIR`, else the git top level above `cwd`, else `cwd` itself. `DIR` must name
    /// its directory without a symlink on the way (compared lexically, `..` included).
    pub fn find(repo_flag: Option<&Path>, cwd: &Path) -> Result<Workspace, String> {
        let cwd = std::fs::canonicalize(cwd)
            .map_err(|e| format!("current directory {}: {e}", cwd.display()))?;
        let mut why = "--repo";
        let repo = match repo_flag {
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
                repo
            }
            None => match git_top_level(&cwd) {
                Some(top) => {
                    why = "the git top level above the current directory";
                    top
                }
                None => {
                    why = "the current directory (no .git above it)";
                    cwd.clone()
                }
            },
        };
        if repo == Path::new("/") {
            return Err(
                "the repo root would be / (use --repo DIR, or run inside a repository)".into(),
            );
        }
        let cwd = if cwd.starts_with(&repo) {
            cwd
        } else {
            repo.clone()
        };
        Ok(Workspace { repo, cwd, why })
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
        let base = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).unwrap();
        let t = tempdir_in(&base.join("target"));
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
        let base = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).unwrap();
        let t = base
            .join("target")
            .join(format!("ws-symlink-test-{}", std::process::id()));
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
        let base = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).unwrap();
        let t = base
            .join("target")
            .join(format!("ws-why-test-{}", std::process::id()));
        std::fs::create_dir_all(t.join("repo/.git")).unwrap();
        std::fs::create_dir_all(t.join("repo/sub")).unwrap();
        let w = Workspace::find(Some(&t.join("repo")), &t).unwrap();
        assert_eq!(w.why, "--repo");
        let w = Workspace::find(None, &t.join("repo/sub")).unwrap();
        assert_eq!(w.why, "the git top level above the current directory");
        // no .git anywhere above (the target dir above has one): the temp dir, if clean
        let plain = std::env::temp_dir().join(format!("ws-why-{}", std::process::id()));
        std::fs::create_dir_all(plain.join("sub")).unwrap();
        let plain = std::fs::canonicalize(&plain).unwrap();
        if !plain.ancestors().any(|d| d.join(".git").exists()) {
            let w = Workspace::find(None, &plain.join("sub")).unwrap();
            assert_eq!(w.why, "the current directory (no .git above it)");
            assert_eq!(w.repo, plain.join("sub"));
        }
        std::fs::remove_dir_all(&plain).unwrap();
        std::fs::remove_dir_all(&t).unwrap();
    }

    fn tempdir_in(dir: &Path) -> PathBuf {
        let p = dir.join(format!("ws-test-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}
