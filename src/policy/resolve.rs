//! Program resolution and location checks.
//!
//! The allow-list names programs ("node"), but what runs is a file. An allow-listed *name* is
//! worthless if the file it resolves to can be chosen by the code under test (a `node` in the
//! repo's `node_modules/.bin` or `bin/` shadowing the real one through PATH) or by any local
//! user (a `node` under `/tmp`). This module finds the file exactly like `execvp` would and
//! then checks every place the lookup passed through.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::deny::Deny;
use super::text::{quote, quote_path};

/// Linux gives up after 40 symbolic links (ELOOP); so do we.
const MAX_SYMLINKS: usize = 40;

/// Canonical repo root and canonical exempt paths, computed once per gate call.
pub(crate) struct Locator {
    repo: PathBuf,
    exempt: Vec<PathBuf>,
    /// The `paths` entries as named: canonical parent directory plus the entry's own name, the
    /// last link not followed (`/repo/.venv/bin/python`, not the `/usr/bin/python3.11` it leads
    /// to). A word that names one of these is allowed wherever it lies and wherever it leads.
    named: Vec<PathBuf>,
}

/// `p` with its parent directory canonicalized and its last component kept as it is (a link
/// there is not followed); `p` itself when it has no name or its parent cannot be resolved.
pub(crate) fn link_path(p: &Path) -> PathBuf {
    match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) => fs::canonicalize(parent)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| p.to_path_buf()),
        _ => p.to_path_buf(),
    }
}

/// A regular file with at least one execute bit: what `execve` could run.
pub(crate) fn is_executable_file(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// True when the file or directory at `path` (symlinks followed) is writable by everybody.
/// The sticky bit does not help: it protects entries from deletion, not a directory one of
/// them creates for itself (`/tmp/x/node`).
fn is_world_writable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o002 != 0)
        .unwrap_or(false)
}

/// `base.join(p)` unless `p` is absolute.
pub(crate) fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Looks `name` (no `/`) up in the colon-separated `path` like `execvp`: entries in order, an
/// empty or relative entry is relative to `cwd`, the first executable regular file wins. The
/// result is not canonicalized and not checked for its location (the gate does that).
pub fn search_path(name: &str, path: &OsStr, cwd: &Path) -> Option<PathBuf> {
    path.as_bytes()
        .split(|b| *b == b':')
        .map(|entry| absolute(cwd, Path::new(OsStr::from_bytes(entry))))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
}

impl Locator {
    /// `repo` and `exempt` are canonicalized here (falling back to the given path when that
    /// fails, which can only make fewer things match).
    pub fn new(repo: &Path, exempt: &[PathBuf]) -> Locator {
        let canon = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        Locator {
            repo: canon(repo),
            exempt: exempt.iter().map(|p| canon(p)).collect(),
            named: exempt.iter().map(|p| link_path(p)).collect(),
        }
    }

    /// Does `found` (absolute) name one of the profile's `paths` entries as written, up to
    /// its last component ([`link_path`])?
    pub fn is_named(&self, found: &Path) -> bool {
        let l = link_path(found);
        self.named.contains(&l)
    }

    /// Is the canonical path inside (or equal to) the canonical repo root?
    pub fn in_repo(&self, canonical: &Path) -> bool {
        canonical.starts_with(&self.repo)
    }

    /// Is the canonical path one of the profile's exact program paths?
    pub fn is_exempt(&self, canonical: &Path) -> bool {
        self.exempt.iter().any(|p| p == canonical)
    }

    /// Checks a program found at `found` (absolute, as PATH produced it, or as typed) and
    /// returns its canonical path. Denied when the file, any symlink on the way to it, or any
    /// directory those live in (including every ancestor, followed lexically and canonically)
    /// is inside the repo ("program-in-repo") or world-writable ("program-world-writable").
    ///
    /// An exempt program (`rules.paths`) may itself live in such a place, but the way to it
    /// is still checked: a symlink in the repo pointing at it is still chosen by the repo.
    ///
    /// A `found` that names a `paths` entry as written ([`Locator::is_named`]) is allowed
    /// wherever it lies and wherever its links lead, as the profile says: only an executable
    /// file must be at the end.
    pub fn check_found(&self, found: &Path, word: &str) -> Result<PathBuf, Deny> {
        let canonical = fs::canonicalize(found).map_err(|e| {
            Deny::not_found(
                word,
                format!("{} cannot be resolved ({e})", quote_path(found)),
            )
        })?;
        if self.is_named(found) && is_executable_file(&canonical) {
            return Ok(canonical);
        }
        let exempt = self.is_exempt(&canonical);
        let mut dirs = self.directories_on_the_way(found, word)?;
        if exempt {
            dirs.retain(|d| !canonical.starts_with(d));
        }
        if let Some(dir) = dirs.iter().find(|d| self.in_repo(d)) {
            return Err(self.in_repo_deny(word, found, &canonical, Some(dir)));
        }
        if !exempt && self.in_repo(&canonical) {
            return Err(self.in_repo_deny(word, found, &canonical, None));
        }
        if !exempt && is_world_writable(&canonical) {
            return Err(world_writable_deny(word, &canonical, "the file"));
        }
        if let Some(dir) = dirs.iter().find(|d| is_world_writable(d)) {
            return Err(world_writable_deny(word, dir, "the directory"));
        }
        Ok(canonical)
    }

    /// Canonical forms of every directory whose contents decide what `found` resolves to: all
    /// lexical ancestors of `found` and of each symlink it leads through, plus the ancestors
    /// of the final file.
    fn directories_on_the_way(&self, found: &Path, word: &str) -> Result<Vec<PathBuf>, Deny> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut hop = found.to_path_buf();
        for _ in 0..=MAX_SYMLINKS {
            let parent = hop.parent().unwrap_or(Path::new("/")).to_path_buf();
            for ancestor in parent.ancestors().filter(|a| !a.as_os_str().is_empty()) {
                let canonical = fs::canonicalize(ancestor).map_err(|e| {
                    Deny::not_found(
                        word,
                        format!(
                            "directory {} cannot be resolved ({e})",
                            quote_path(ancestor)
                        ),
                    )
                })?;
                for dir in canonical.ancestors() {
                    if !dirs.iter().any(|d| d == dir) {
                        dirs.push(dir.to_path_buf());
                    }
                }
            }
            match fs::read_link(&hop) {
                Ok(target) => hop = absolute(&parent, &target),
                Err(_) => return Ok(dirs),
            }
        }
        Err(Deny::not_found(
            word,
            format!(
                "{} has too many levels of symbolic links",
                quote_path(found)
            ),
        ))
    }

    fn in_repo_deny(&self, word: &str, found: &Path, canonical: &Path, dir: Option<&Path>) -> Deny {
        let how = match dir {
            Some(dir) if !self.in_repo(canonical) => format!(
                "is found through {} ({}), which is inside the repository {} and so chosen by \
                 the code under test",
                quote_path(found),
                quote_path(dir),
                quote_path(&self.repo)
            ),
            _ => format!(
                "resolves to {}, inside the repository {}; the code under test could replace it",
                quote_path(canonical),
                quote_path(&self.repo)
            ),
        };
        Deny::denied(
            "program-in-repo",
            Some(word),
            format!("{} {how}", quote(word)),
        )
    }

    /// Checks a repo script (`./build.sh`, `ci` profile): a regular executable file inside the
    /// repo, and neither it nor a directory between it and the repo root is world-writable.
    /// Directories above the repo root were chosen by the trusted caller.
    pub fn check_repo_script(&self, canonical: &Path, word: &str) -> Result<(), Deny> {
        if !is_executable_file(canonical) {
            return Err(Deny::denied(
                "not-allowed",
                Some(word),
                format!(
                    "{} is a repository path but not an executable regular file ({})",
                    quote(word),
                    quote_path(canonical)
                ),
            ));
        }
        let mut below_root = canonical.ancestors().take_while(|d| self.in_repo(d));
        match below_root.find(|d| is_world_writable(d)) {
            Some(dir) => Err(world_writable_deny(word, dir, "the path")),
            None => Ok(()),
        }
    }
}

impl Locator {
    /// Checks a link inside the repo that leads out of it (`.venv/bin/python` ->
    /// `/usr/bin/python3.11`), for a profile that runs the repo's own programs (`ci`): the
    /// repo chose that program as surely as a script's `#!` line would, so the program at the
    /// end must be an executable regular file that no local user can swap: neither it nor a
    /// directory on the way outside the repo is world-writable, and no directory between the
    /// link and the repo root is (as for a repo script). `link` is [`link_path`] of the word.
    pub fn check_repo_link(&self, link: &Path, canonical: &Path, word: &str) -> Result<(), Deny> {
        if !is_executable_file(canonical) {
            return Err(Deny::denied(
                "not-allowed",
                Some(word),
                format!(
                    "{} is a link in the repository to {}, which is not an executable regular \
                     file",
                    quote(word),
                    quote_path(canonical)
                ),
            ));
        }
        let mut below_root = link
            .parent()
            .into_iter()
            .flat_map(Path::ancestors)
            .take_while(|d| self.in_repo(d));
        if let Some(dir) = below_root.find(|d| is_world_writable(d)) {
            return Err(world_writable_deny(word, dir, "the path"));
        }
        if is_world_writable(canonical) {
            return Err(world_writable_deny(word, canonical, "the file"));
        }
        // From the link's target on: the directories above the repo root were chosen by the
        // trusted caller (as for a repo script); where the link leads was not.
        let Ok(target) = fs::read_link(link) else {
            return Ok(());
        };
        let first = absolute(link.parent().unwrap_or(Path::new("/")), &target);
        let dirs = self.directories_on_the_way(&first, word)?;
        match dirs
            .iter()
            .find(|d| !self.in_repo(d) && is_world_writable(d))
        {
            Some(dir) => Err(world_writable_deny(word, dir, "the directory")),
            None => Ok(()),
        }
    }
}

fn world_writable_deny(word: &str, path: &Path, what: &str) -> Deny {
    Deny::denied(
        "program-world-writable",
        Some(word),
        format!(
            "{} resolves through {what} {}, which any local user can write",
            quote(word),
            quote_path(path)
        ),
    )
}

/// Resolves `p` against `base` like the kernel would, for a path that may not exist yet:
/// existing components are canonicalized (symlinks followed, so `link/..` goes where the
/// kernel goes), the missing tail is appended lexically.
pub(crate) fn resolve_lenient(base: &Path, p: &Path) -> PathBuf {
    use std::path::Component;
    let full = absolute(base, p);
    let mut current = PathBuf::from("/");
    let mut exists = true;
    for component in full.components() {
        match component {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                current.pop();
            }
            Component::Normal(name) => {
                current.push(name);
                if exists {
                    match fs::canonicalize(&current) {
                        Ok(c) => current = c,
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    current
}
