//! Where a command runs: the repo root and the working directory inside it.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Canonical repo root.
    pub repo: PathBuf,
    /// Canonical working directory: the caller's if it lies inside the repo, else the repo root.
    pub cwd: PathBuf,
}

impl Workspace {
    /// `--repo DIR`, else the git top level above `cwd`, else `cwd` itself.
    pub fn find(repo_flag: Option<&Path>, cwd: &Path) -> Result<Workspace, String> {
        let cwd = std::fs::canonicalize(cwd)
            .map_err(|e| format!("current directory {}: {e}", cwd.display()))?;
        let repo = match repo_flag {
            Some(r) => {
                let abs = cwd.join(r);
                let repo = std::fs::canonicalize(&abs)
                    .map_err(|e| format!("--repo {}: {e}", abs.display()))?;
                if !repo.is_dir() {
                    return Err(format!("--repo {}: not a directory", repo.display()));
                }
                repo
            }
            None => git_top_level(&cwd).unwrap_or_else(|| cwd.clone()),
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
        Ok(Workspace { repo, cwd })
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

    fn tempdir_in(dir: &Path) -> PathBuf {
        let p = dir.join(format!("ws-test-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}
