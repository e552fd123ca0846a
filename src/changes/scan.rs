//! From a run's layer to a [`Changeset`]: walk each root's overlayfs upper directory against
//! the host directory below it, list every change as an [`Entry`], and accept or refuse each
//! by the rules of the way back.
//!
//! The rules, in the order they are checked:
//! - **special files** (FIFOs, sockets, device nodes) never reach the host;
//! - **the report file** and each directory on its way are never replaced or removed: the
//!   supervisor writes the report through the file it opened before the run;
//! - **a `.git`** that appears, goes away, changes type or (a `.git` file) names another git
//!   dir changes which repository the host's next git reads: refused, and so is anything inside
//!   a `.git` that is not one of the run's git dirs;
//! - **inside a git dir** only what git writes to record work may change, as git writes it:
//!   regular files and directories under `objects/`, `refs/`, `logs/`, `rr-cache/`, `lfs/`
//!   (never `objects/info/alternates`, which moves where git reads objects from), ref and reflog
//!   names that pass `git check-ref-format`, and the files at the top that git replaces by
//!   rename (`HEAD`, `index`, `packed-refs`, `*_HEAD`, ...), `HEAD` and `packed-refs` with
//!   contents git would write. No link (git writes through links in its own dirs: a reflog
//!   linked to `~/.bashrc` gets the next `git checkout`'s line), no type change, no removal of
//!   `HEAD`;
//! - **the byte cap**: past `[limits] disk` bytes written (a file's length counts, not the
//!   blocks it took in the layer: a sparse file is written whole on the host), entries are
//!   refused;
//! - set-ID bits are never part of a mode.
//!
//! A refused directory refuses everything in it. Nothing here writes anything.

use super::{Changeset, Entry, Kind, What};
use crate::hostfs::Tree;
use crate::refname;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Deeper trees are refused.
const MAX_DEPTH: usize = 256;
/// `packed-refs` larger than this is refused rather than read whole to check it.
const PACKED_REFS_MAX: u64 = 64 << 20;

/// One root of a run's layer: the host directory and the upper directory that holds what the
/// run changed in it.
pub struct Root {
    /// The host path (absolute; the repo, or a git dir outside it).
    pub path: PathBuf,
    /// The overlayfs upper directory of this root.
    pub upper: Tree,
    /// The host directory, opened without following a link.
    pub real: Tree,
    /// Root-relative git dirs of the run (the repo's `.git`, its submodules' dirs; `""` when
    /// the root is itself a git dir).
    pub git_dirs: Vec<PathBuf>,
}

/// What the rules need besides the roots.
#[derive(Debug, Default, Clone)]
pub struct Limits {
    /// Repo-relative paths left alone (the report file).
    pub keep: Vec<PathBuf>,
    /// At most this many bytes reach the host.
    pub max_bytes: Option<u64>,
}

/// Walk every root's layer. An error reading the layer or the host is returned with the path
/// where it happened (the run's changes are then not applied at all).
pub fn scan(roots: &[Root], limits: &Limits) -> Result<Changeset, (PathBuf, io::Error)> {
    let mut w = Walk {
        root: 0,
        git_dirs: &[],
        limits,
        total: 0,
        out: Vec::new(),
    };
    for (i, r) in roots.iter().enumerate() {
        w.root = i;
        w.git_dirs = &r.git_dirs;
        w.dir(&r.upper, Some(&r.real), Path::new(""), 0, None)
            .map_err(|(p, e)| (r.path.join(p), e))?;
    }
    Ok(Changeset {
        roots: roots.iter().map(|r| r.path.clone()).collect(),
        entries: w.out,
    })
}

struct Walk<'a> {
    root: usize,
    git_dirs: &'a [PathBuf],
    limits: &'a Limits,
    total: u64,
    out: Vec<Entry>,
}

fn what_of(mode: libc::mode_t) -> What {
    match mode & libc::S_IFMT {
        libc::S_IFREG => What::File,
        libc::S_IFDIR => What::Dir,
        libc::S_IFLNK => What::Link,
        _ => What::Special,
    }
}

/// overlayfs marks a removed entry with a character device 0:0.
pub fn is_whiteout(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == 0
}

/// An upper directory that hides everything below it (it replaced a directory whole).
fn is_opaque(d: &Tree) -> bool {
    [c"user.overlay.opaque", c"trusted.overlay.opaque"]
        .iter()
        .any(|a| d.xattr(a).as_deref() == Some(b"y"))
}

/// The permission bits that may reach the host: never set-ID.
fn mode_of(st: &libc::stat) -> u32 {
    st.st_mode & 0o1777
}

type Failed = (PathBuf, io::Error);

fn at(p: &Path) -> impl Fn(io::Error) -> Failed + '_ {
    move |e| (p.to_path_buf(), e)
}

impl Walk<'_> {
    fn dir(
        &mut self,
        upper: &Tree,
        real: Option<&Tree>,
        rel: &Path,
        depth: usize,
        inherited: Option<&str>,
    ) -> Result<(), Failed> {
        let mut names = upper.names().map_err(at(rel))?;
        names.sort();
        for name in names {
            let p = rel.join(&name);
            self.one(upper, real, &name, &p, depth, inherited)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn one(
        &mut self,
        upper: &Tree,
        real: Option<&Tree>,
        name: &OsString,
        p: &Path,
        depth: usize,
        inherited: Option<&str>,
    ) -> Result<(), Failed> {
        let Some(st) = upper.stat(name).map_err(at(p))? else {
            return Ok(());
        };
        let there = match real {
            Some(r) => r.stat(name).map_err(at(p))?,
            None => None,
        };
        let too_deep = (depth >= MAX_DEPTH).then_some("too deep");
        let inherited = inherited.or(too_deep);
        if is_whiteout(&st) {
            if let Some(t) = there {
                self.push(p, Kind::Removed, what_of(t.st_mode), 0, 0, inherited, None);
            }
            return Ok(());
        }
        let what = what_of(st.st_mode);
        let old = there.map(|t| what_of(t.st_mode));
        match what {
            What::Dir => {
                let sub = upper.child(name).map_err(at(p))?;
                let kind = match old {
                    None => Some(Kind::Added),
                    Some(What::Dir) if mode_of(&st) != there.map_or(0, |t| mode_of(&t)) => {
                        Some(Kind::Mode)
                    }
                    Some(What::Dir) => None,
                    Some(_) => Some(Kind::TypeChange),
                };
                let refused = match kind {
                    Some(k) => self.push(p, k, What::Dir, mode_of(&st), 0, inherited, None),
                    None => self.refusal(p, None, What::Dir, 0, inherited, None),
                };
                // What is in a new directory, or in one the rules close, goes with it.
                let closes = matches!(kind, Some(Kind::Added | Kind::TypeChange)) || kind.is_none();
                let inherit = if closes {
                    refused.as_deref()
                } else {
                    inherited
                };
                let sub_real = match (old, real) {
                    (Some(What::Dir), Some(r)) => Some(r.child(name).map_err(at(p))?),
                    _ => None,
                };
                if let Some(sr) = &sub_real {
                    if is_opaque(&sub) {
                        // Replaced whole: what the old one held and the new one lacks is gone.
                        let mut gone = sr.names().map_err(at(p))?;
                        gone.sort();
                        for n in gone {
                            if sub.stat(&n).map_err(at(p))?.is_none() {
                                let q = p.join(&n);
                                if let Some(t) = sr.stat(&n).map_err(at(&q))? {
                                    let w = what_of(t.st_mode);
                                    self.push(&q, Kind::Removed, w, 0, 0, inherit, None);
                                }
                            }
                        }
                    }
                }
                self.dir(&sub, sub_real.as_ref(), p, depth + 1, inherit)
            }
            What::File => {
                let kind = match (old, real) {
                    (None, _) => Kind::Added,
                    (Some(What::File), Some(r)) => {
                        let t = there.unwrap_or(st);
                        if !same_content(upper, r, name, &st, &t).map_err(at(p))?
                            || user_xattrs(upper, name) != user_xattrs(r, name)
                        {
                            Kind::Modified
                        } else if mode_of(&st) != mode_of(&t) {
                            Kind::Mode
                        } else {
                            return Ok(());
                        }
                    }
                    _ => Kind::TypeChange,
                };
                let content = Content { upper, name };
                let bytes = st.st_size as u64;
                self.push(
                    p,
                    kind,
                    What::File,
                    mode_of(&st),
                    bytes,
                    inherited,
                    Some(content),
                );
                Ok(())
            }
            What::Link => {
                let target = upper.read_link(name).map_err(at(p))?;
                let kind = match (old, real) {
                    (None, _) => Kind::Added,
                    (Some(What::Link), Some(r)) => {
                        if r.read_link(name).map_err(at(p))? == target {
                            return Ok(());
                        }
                        Kind::Modified
                    }
                    _ => Kind::TypeChange,
                };
                let bytes = target.len() as u64;
                self.push(p, kind, What::Link, 0, bytes, inherited, None);
                Ok(())
            }
            What::Special => {
                let kind = if old.is_some() {
                    Kind::TypeChange
                } else {
                    Kind::Added
                };
                self.push(p, kind, What::Special, 0, 0, inherited, None);
                Ok(())
            }
        }
    }

    /// Record an entry, accepted or refused by the rules; returns the refusal.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        p: &Path,
        kind: Kind,
        what: What,
        mode: u32,
        bytes: u64,
        inherited: Option<&str>,
        content: Option<Content>,
    ) -> Option<String> {
        let refused = self.refusal(p, Some(kind), what, bytes, inherited, content);
        if refused.is_none() {
            self.total += bytes;
        }
        self.out.push(Entry {
            root: self.root,
            path: p.to_path_buf(),
            kind,
            what,
            mode: if matches!(what, What::File | What::Dir) && kind != Kind::Removed {
                mode
            } else {
                0
            },
            bytes,
            refused: refused.clone(),
        });
        refused
    }

    /// Why the change `kind` (`None`: a directory walked through unchanged) at `p` does not
    /// reach the host, if it does not.
    fn refusal(
        &self,
        p: &Path,
        kind: Option<Kind>,
        what: What,
        bytes: u64,
        inherited: Option<&str>,
        content: Option<Content>,
    ) -> Option<String> {
        if let Some(why) = inherited {
            return Some(why.to_string());
        }
        if what == What::Special && kind != Some(Kind::Removed) {
            return Some("a FIFO, socket or device node".into());
        }
        if self.root == 0 {
            for k in &self.limits.keep {
                if k == p {
                    return kind.map(|_| "the report's path".into());
                }
                let replaced = matches!(kind, Some(Kind::Removed | Kind::TypeChange));
                if k.starts_with(p) && replaced {
                    return Some("a directory on the report's path".into());
                }
            }
        }
        if let Some(why) = self.git_rule(p, kind, what, content) {
            return Some(why);
        }
        if let (Some(max), true) = (self.limits.max_bytes, kind.is_some()) {
            if self.total + bytes > max {
                return Some(format!(
                    "past the disk cap of {} written",
                    crate::units::Size(max)
                ));
            }
        }
        None
    }

    /// The rules of git dirs and `.git` entries.
    fn git_rule(
        &self,
        p: &Path,
        kind: Option<Kind>,
        what: What,
        content: Option<Content>,
    ) -> Option<String> {
        // A directory on the way to one of the run's git dirs (`.git/modules` on the way to a
        // submodule's): only gone through.
        if self.git_dirs.iter().any(|g| g.starts_with(p) && g != p) {
            return kind.map(|_| "changing a directory that holds a git dir".into());
        }
        let dot_git = p.file_name() == Some(OsStr::new(".git"));
        let is_git_dir = self.git_dirs.iter().any(|g| g == p);
        // The git dir `p` lies in (the innermost: a submodule's dir lies in the repo's).
        let inside = self
            .git_dirs
            .iter()
            .filter(|g| p.starts_with(g) && p != g.as_path())
            .max_by_key(|g| g.components().count())
            .filter(|_| !is_git_dir);
        let Some(g) = inside else {
            // The git dir itself, or a `.git` that is none of the run's.
            if dot_git || is_git_dir {
                return match (kind, what) {
                    (None, What::Dir) => None,
                    (Some(Kind::Added), _) => Some("a new .git".into()),
                    (Some(Kind::Removed), _) => Some("removing a .git".into()),
                    (Some(Kind::Modified), What::File) => {
                        Some("a .git file naming another git dir".into())
                    }
                    _ => Some("changing a .git".into()),
                };
            }
            if p.components().any(|c| c.as_os_str() == ".git") {
                return Some("inside a .git that is not a git dir of this run".into());
            }
            return None;
        };
        let q = p.strip_prefix(g).unwrap_or(p);
        let mut parts = q.components().map(|c| c.as_os_str().as_bytes());
        let top = parts.next().unwrap_or_default();
        let depth = q.components().count();
        if matches!(what, What::Link | What::Special) {
            return Some("a link or special file in a git dir".into());
        }
        if kind == Some(Kind::TypeChange) {
            return Some("a type change in a git dir".into());
        }
        if depth == 1 && crate::layers::git::copied(OsStr::from_bytes(top)) {
            if what != What::File {
                return Some("outside git's recording paths".into());
            }
            let read = |cap| {
                content
                    .as_ref()
                    .and_then(|c| c.upper.read_small(c.name, cap))
            };
            return match (top, kind) {
                (b"HEAD", Some(Kind::Removed)) => Some("removing HEAD".into()),
                (b"HEAD", Some(Kind::Added | Kind::Modified)) => match read(4096) {
                    Some(c) if refname::head(&c) => None,
                    _ => Some("HEAD names no valid ref or object".into()),
                },
                (b"packed-refs", Some(Kind::Added | Kind::Modified)) => {
                    match read(PACKED_REFS_MAX) {
                        Some(c) if refname::packed_refs(&c) => None,
                        Some(_) => Some("packed-refs holds an invalid line".into()),
                        None => Some("packed-refs too large to check".into()),
                    }
                }
                _ => None,
            };
        }
        let rest: Vec<&[u8]> = parts.collect();
        match top {
            b"objects" => {
                if rest.first() == Some(&&b"info"[..])
                    && matches!(rest.get(1), Some(&b"alternates" | &b"http-alternates"))
                {
                    return Some("objects/info/alternates (where git reads objects from)".into());
                }
                None
            }
            b"refs" => ref_rule(q.as_os_str().as_bytes(), what, kind),
            b"logs" => match rest.first() {
                None => None,
                Some(&b"HEAD") if rest.len() == 1 && what == What::File => None,
                Some(&b"refs") => {
                    let name = &q.as_os_str().as_bytes()[b"logs/".len()..];
                    ref_rule(name, what, kind)
                }
                _ => Some("not a reflog git writes".into()),
            },
            b"rr-cache" | b"lfs" => None,
            _ => Some("outside git's recording paths".into()),
        }
    }
}

/// A ref (or reflog) under `refs/`: files need a valid full name, directories valid components.
fn ref_rule(name: &[u8], what: What, kind: Option<Kind>) -> Option<String> {
    let ok = match (what, kind) {
        (What::File, _) if name == b"refs" => false,
        (What::File, _) => refname::valid(name),
        (What::Dir, _) => name
            .split(|c| *c == b'/')
            .skip(1)
            .all(|c| refname::component(c) && refname::valid(&[b"refs/", c].concat())),
        _ => false,
    };
    (!ok).then(|| "not a valid ref name".into())
}

/// Where a file's new content is, for the rules that read it.
struct Content<'a> {
    upper: &'a Tree,
    name: &'a OsStr,
}

/// Do the files `name` of `a` and of `b` hold the same bytes?
fn same_content(
    a: &Tree,
    b: &Tree,
    name: &OsStr,
    sa: &libc::stat,
    sb: &libc::stat,
) -> io::Result<bool> {
    if sa.st_size != sb.st_size {
        return Ok(false);
    }
    let (mut fa, mut fb) = (a.open_file(name)?, b.open_file(name)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut fa, &mut ba)?;
        let m = read_full(&mut fb, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// The `user.*` extended attributes of the file `name` (never `user.overlay.*`, overlayfs's
/// own), sorted: the ones that travel with it to the host.
fn user_xattrs(d: &Tree, name: &OsStr) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::os::fd::AsRawFd;
    let Ok(f) = d.open_file(name) else {
        return Vec::new();
    };
    let fd = f.as_raw_fd();
    let mut names = vec![0u8; 64 * 1024];
    // SAFETY: flistxattr into a buffer of the given length.
    let n = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for a in names[..n as usize].split(|b| *b == 0) {
        if !a.starts_with(b"user.") || a.starts_with(b"user.overlay.") {
            continue;
        }
        let Ok(c) = std::ffi::CString::new(a) else {
            continue;
        };
        let mut value = vec![0u8; 64 * 1024];
        // SAFETY: fgetxattr into a buffer of the given length, a NUL-terminated name.
        let len =
            unsafe { libc::fgetxattr(fd, c.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len >= 0 {
            value.truncate(len as usize);
            out.push((a.to_vec(), value));
        }
    }
    out.sort();
    out
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_rules_take_valid_names_only() {
        assert_eq!(
            ref_rule(b"refs/heads/main", What::File, Some(Kind::Added)),
            None
        );
        assert!(ref_rule(b"refs/heads/x.lock", What::File, Some(Kind::Added)).is_some());
        assert!(ref_rule(b"refs/heads/a..b", What::File, Some(Kind::Added)).is_some());
        assert_eq!(
            ref_rule(b"refs/heads/team", What::Dir, Some(Kind::Added)),
            None
        );
        assert!(ref_rule(b"refs/heads/.hidden", What::Dir, Some(Kind::Added)).is_some());
        assert!(ref_rule(b"refs", What::File, Some(Kind::Added)).is_some());
    }
}
