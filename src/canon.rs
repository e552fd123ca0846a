//! Canonical paths, memoized for the span of one plan.
//!
//! `std::fs::canonicalize` is glibc's `realpath`: one `readlink` per component of the path,
//! every time. Planning one run canonicalizes dozens of paths that share their directories
//! (`/etc/hosts`, `/etc/group`, … each walked `/`, `/etc`, then the name), and checks that each
//! exists with a `stat` first. Inside a [`Scope`] (one [`crate::plan::build`]), [`canonicalize`]
//! resolves each path from its parent's memoized canonical form with a single `readlink` of the
//! last component, and [`exists`] is answered from the same walk.
//!
//! The memo lives only as long as the scope: nothing is kept between runs (a `validate` gene
//! runs several commands in one process, and a command may change what a path leads to), so
//! no answer can go stale beyond the instant the plan is built. Outside a scope, or for a path
//! that is not plain (relative, with `.`, `..` or a trailing `/`), these are
//! `std::fs::canonicalize` and `Path::exists`.
//!
//! Semantics are glibc's `realpath`: every component that is a symlink is followed (at most
//! 40 in all, then `ELOOP`), `..` in a link's target goes to the parent of the physical
//! directory reached so far, and the result exists (`ENOENT`, `ENOTDIR`, `EACCES` otherwise).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Links followed in one resolution before `ELOOP` (the kernel's and glibc's limit).
const MAX_LINKS: u32 = 40;

type Memo = HashMap<PathBuf, Result<PathBuf, i32>>;

thread_local! {
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
}

/// While a `Scope` lives, [`canonicalize`] and [`exists`] on this thread share one memo.
/// Scopes nest: only the outermost one clears the memo when it ends.
pub struct Scope {
    owner: bool,
}

impl Scope {
    /// Start memoizing (or join the scope already open on this thread).
    pub fn begin() -> Scope {
        MEMO.with(|m| {
            let mut m = m.borrow_mut();
            if m.is_some() {
                Scope { owner: false }
            } else {
                *m = Some(HashMap::new());
                Scope { owner: true }
            }
        })
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.owner {
            MEMO.with(|m| *m.borrow_mut() = None);
        }
    }
}

/// An absolute path without `.`, `..`, empty components or a trailing `/`: resolved with the
/// memo. Anything else goes to `std::fs::canonicalize` as it is.
fn plain(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b.first() == Some(&b'/')
        && (b.len() == 1 || !b.ends_with(b"/"))
        && !b.windows(2).any(|w| w == b"//")
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !b
            .split(|c| *c == b'/')
            .any(|part| part == b"." || part == b"..")
}

/// `std::fs::canonicalize`, memoized inside a [`Scope`].
pub fn canonicalize(p: &Path) -> io::Result<PathBuf> {
    let active = MEMO.with(|m| m.borrow().is_some());
    if !active || !plain(p) {
        return std::fs::canonicalize(p);
    }
    let mut links = 0;
    resolve(p, &mut links).map_err(io::Error::from_raw_os_error)
}

/// Whether `p` exists, following links (`Path::exists`), from the memo inside a [`Scope`].
/// A dangling link does not exist.
pub fn exists(p: &Path) -> bool {
    let active = MEMO.with(|m| m.borrow().is_some());
    if !active || !plain(p) {
        return p.exists();
    }
    canonicalize(p).is_ok()
}

fn cached(p: &Path) -> Option<Result<PathBuf, i32>> {
    MEMO.with(|m| m.borrow().as_ref().and_then(|m| m.get(p).cloned()))
}

fn remember(p: &Path, r: &Result<PathBuf, i32>) {
    // ELOOP depends on how many links the outer resolution had followed already.
    if *r == Err(libc::ELOOP) {
        return;
    }
    MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.insert(p.to_path_buf(), r.clone());
        }
    });
}

/// The canonical form of the plain absolute path `p`.
fn resolve(p: &Path, links: &mut u32) -> Result<PathBuf, i32> {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Ok(PathBuf::from("/"));
    };
    if let Some(r) = cached(p) {
        return r;
    }
    let r = resolve(parent, links).and_then(|dir| step(dir, name, links));
    remember(p, &r);
    r
}

/// `dir` (canonical) joined with `name`, the link there followed if it is one.
fn step(dir: PathBuf, name: &OsStr, links: &mut u32) -> Result<PathBuf, i32> {
    let here = dir.join(name);
    match std::fs::read_link(&here) {
        Ok(target) => {
            *links += 1;
            if *links > MAX_LINKS {
                return Err(libc::ELOOP);
            }
            follow(dir, &target, links)
        }
        // Not a link: it exists as it is.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(here),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// Resolve a link's `target`, relative to the canonical directory `dir` that holds the link.
fn follow(dir: PathBuf, target: &Path, links: &mut u32) -> Result<PathBuf, i32> {
    let mut cur = if target.is_absolute() {
        PathBuf::from("/")
    } else {
        dir
    };
    for c in target.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => cur = PathBuf::from("/"),
            Component::CurDir => {}
            // `cur` is canonical: its parent is the lexical one (as realpath does it).
            Component::ParentDir => {
                cur.pop();
            }
            Component::Normal(n) => {
                let next = cur.join(n);
                cur = match cached(&next) {
                    Some(r) => r?,
                    None => {
                        let r = step(cur, n, links);
                        remember(&next, &r);
                        r?
                    }
                };
            }
        }
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A temp directory removed on drop.
    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn memoized_answers_match_realpath() {
        let base = std::env::temp_dir().join(format!("sandbox-run-canon-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("real/sub")).unwrap();
        let t = Tmp(std::fs::canonicalize(&base).unwrap());
        let b = &t.0;
        std::fs::write(b.join("real/sub/file"), "x").unwrap();
        symlink("real", b.join("rel")).unwrap();
        symlink(b.join("real/sub"), b.join("abs")).unwrap();
        symlink("../real/sub/file", b.join("real/up")).unwrap();
        symlink("rel/sub/../sub/file", b.join("dotted")).unwrap();
        symlink("nowhere", b.join("dangling")).unwrap();
        symlink("loop2", b.join("loop1")).unwrap();
        symlink("loop1", b.join("loop2")).unwrap();
        symlink("real/sub/file/x", b.join("through-file")).unwrap();
        let names = [
            "real",
            "real/sub/file",
            "rel",
            "rel/sub/file",
            "abs/file",
            "real/up",
            "dotted",
            "dangling",
            "loop1",
            "missing",
            "missing/below",
            "real/sub/file/below",
            "through-file",
        ];
        let _scope = Scope::begin();
        // Twice: the second round answers from the memo.
        for _ in 0..2 {
            for n in names {
                let p = b.join(n);
                let want = std::fs::canonicalize(&p).map_err(|e| e.raw_os_error());
                let got = canonicalize(&p).map_err(|e| e.raw_os_error());
                assert_eq!(got, want, "{n}");
                assert_eq!(exists(&p), p.exists(), "{n}");
            }
        }
        assert_eq!(canonicalize(Path::new("/")).unwrap(), PathBuf::from("/"));
        // Not plain: left to std.
        for p in [b.join("rel/"), b.join("rel/./sub"), b.join("rel/../real")] {
            assert_eq!(
                canonicalize(&p).map_err(|e| e.raw_os_error()),
                std::fs::canonicalize(&p).map_err(|e| e.raw_os_error()),
                "{}",
                p.display()
            );
        }
    }

    #[test]
    fn the_memo_ends_with_its_scope() {
        let base =
            std::env::temp_dir().join(format!("sandbox-run-canon-scope-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("a")).unwrap();
        std::fs::create_dir_all(base.join("b")).unwrap();
        let t = Tmp(std::fs::canonicalize(&base).unwrap());
        let link = t.0.join("l");
        symlink("a", &link).unwrap();
        {
            let _scope = Scope::begin();
            assert_eq!(canonicalize(&link).unwrap(), t.0.join("a"));
            // Within the scope the answer is the one taken at the first look.
            std::fs::remove_file(&link).unwrap();
            symlink("b", &link).unwrap();
            {
                let _inner = Scope::begin();
                assert_eq!(canonicalize(&link).unwrap(), t.0.join("a"));
            }
            // An inner scope does not end the memo.
            assert_eq!(canonicalize(&link).unwrap(), t.0.join("a"));
        }
        // The next plan sees the change.
        let _scope = Scope::begin();
        assert_eq!(canonicalize(&link).unwrap(), t.0.join("b"));
    }
}
