//! Apply the accepted entries of a [`Changeset`] to the real roots, all or nothing.
//!
//! 1. **Prepare**: everything new is made beside its destination under a temporary name
//!    (`.<name>.sbx-new-<random>`): files copied, links made, a new directory built whole
//!    (every entry inside it) and given its modes last; then one flush of each filesystem. A directory whose mode
//!    changes and which lacks owner write/search permission is given them for the time of the
//!    apply. Nothing visible under its own name has changed yet.
//! 2. **Swap**: each entry in walk order: a new name is renamed in (`RENAME_NOREPLACE`: what
//!    appeared there meanwhile is not overwritten), a replaced one is exchanged with its new
//!    version (`RENAME_EXCHANGE`: the name never goes missing; the old one then sits under the
//!    temporary name), a removed one is renamed aside (`.<name>.sbx-old-<random>`), then the
//!    directories get their new modes.
//! 3. **Clean up**: what was moved aside is deleted. From here on the changes are all in.
//!
//! A failure in 1 or 2 undoes every step done, in reverse order; only what cannot be undone
//! is reported ([`Applied::Partial`] and the paths). Everything goes through directory fds
//! and plain names: a parent reached through a link (or a file, a FIFO...) is an error, a
//! link is never followed on either side, a FIFO or device in the target is never opened,
//! and only regular files, directories and links are made.

use super::{Applied, Changeset, Entry, Kind, What};
use crate::fsops as fs;
use crate::hostfs::Tree;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// `All`, `None` or `Partial`.
    pub applied: Applied,
    /// When `Partial`: the paths (root index, relative path) left changed.
    pub left: Vec<(usize, PathBuf)>,
    /// The failure, one line: the step, the path, the errno. With `All`: what could not be
    /// cleaned up afterwards (a `.sbx-old-` name left beside its entry).
    pub error: Option<String>,
    /// Bytes written: files' contents and links' targets.
    pub written: u64,
    /// Entries removed (a removed directory counts once).
    pub removed: u64,
}

impl Outcome {
    fn none(error: String) -> Outcome {
        Outcome {
            applied: Applied::None,
            left: Vec::new(),
            error: Some(error),
            written: 0,
            removed: 0,
        }
    }
}

/// Apply the accepted entries of `cs`, reading the new content from `sources` (one tree per
/// root: a run's upper layer or a kept changeset's tree) into `targets` (the real roots).
pub fn apply(cs: &Changeset, sources: &[Tree], targets: &[Tree]) -> Outcome {
    apply_with(cs, sources, targets, &Faults::default(), false)
}

/// [`apply`] from a run's layer, which is thrown away afterwards: a file whose source is on
/// its target's filesystem is moved in by rename instead of copied ([`fs::move_file`]: the
/// same mode, attributes and times as a copy); the rollback moves it back.
pub fn apply_moving(cs: &Changeset, sources: &[Tree], targets: &[Tree]) -> Outcome {
    apply_with(cs, sources, targets, &Faults::default(), true)
}

/// Failure injection for the tests: the step (0-based) of each phase that fails as if the
/// kernel had said EIO; a filesystem without the rename flags.
#[derive(Default)]
struct Faults {
    prepare: Option<usize>,
    swap: Option<usize>,
    undo: Option<usize>,
    /// The filesystem has neither `RENAME_EXCHANGE` nor `RENAME_NOREPLACE`.
    old_fs: bool,
}

fn injected(at: Option<usize>, n: usize) -> io::Result<()> {
    if at == Some(n) {
        Err(io::Error::from_raw_os_error(libc::EIO))
    } else {
        Ok(())
    }
}

/// What phase 2 does with one top-level entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Rename the new thing in where nothing is.
    Place,
    /// Exchange the new thing with the old one.
    Replace,
    /// Rename the old thing aside.
    Remove,
    /// Give the directory its new mode.
    Chmod,
}

struct Item<'a> {
    entry: &'a Entry,
    /// The target directory holding the entry, opened `O_PATH`, and its path under the root.
    parent: Rc<OwnedFd>,
    parent_rel: PathBuf,
    name: OsString,
    op: Op,
    /// Entries inside a new directory, built with it.
    inside: Vec<&'a Entry>,
}

/// One step done, and how to undo it.
enum Done {
    /// A file moved from the source (its entry's path under the root's source) to `below`
    /// under `parent` (the temporary name, and the path inside it for a file in a new
    /// directory): moved back (else removed). Paths, not fds: a tree of thousands of files
    /// must not hold thousands of fds.
    Moved {
        parent: Rc<OwnedFd>,
        below: Vec<OsString>,
        root: usize,
        src: PathBuf,
        at: (usize, PathBuf),
    },
    /// A new thing under a temporary name: removed.
    Temp {
        parent: Rc<OwnedFd>,
        tmp: OsString,
        at: (usize, PathBuf),
    },
    /// A directory's mode changed: set back.
    Chmod {
        fd: OwnedFd,
        old: u32,
        at: (usize, PathBuf),
    },
    /// `tmp` renamed to `name`: renamed back.
    Placed {
        parent: Rc<OwnedFd>,
        name: OsString,
        tmp: OsString,
        at: (usize, PathBuf),
    },
    /// `tmp` and `name` exchanged: exchanged again.
    Exchanged {
        parent: Rc<OwnedFd>,
        name: OsString,
        tmp: OsString,
        at: (usize, PathBuf),
    },
    /// `name` renamed to `old`: renamed back.
    Aside {
        parent: Rc<OwnedFd>,
        name: OsString,
        old: OsString,
        at: (usize, PathBuf),
    },
}

fn what_of(st: &libc::stat) -> What {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => What::File,
        libc::S_IFDIR => What::Dir,
        libc::S_IFLNK => What::Link,
        _ => What::Special,
    }
}

/// Is the new thing of this entry a directory whose whole tree is built in phase 1?
fn new_dir(e: &Entry) -> bool {
    e.what == What::Dir && matches!(e.kind, Kind::Added | Kind::TypeChange)
}

struct Ctx<'a> {
    cs: &'a Changeset,
    sources: &'a [Tree],
    targets: &'a [Tree],
    faults: &'a Faults,
    /// Per root: files may be moved in from the source by rename.
    moving: Vec<bool>,
    written: u64,
    removed: u64,
    /// Steps of the current phase so far (for [`Faults`]).
    steps: std::cell::Cell<usize>,
}

impl<'a> Ctx<'a> {
    /// One line naming the step, the path and the error.
    fn fail(&self, step: &str, root: usize, rel: &Path, e: impl std::fmt::Display) -> String {
        let base = self.cs.roots.get(root).cloned().unwrap_or_default();
        format!(
            "apply: {step} {}: {e}",
            crate::visible::path(&base.join(rel))
        )
    }

    /// Check the changeset's shape and group its accepted entries: the top-level ones in
    /// order, each new directory with every entry inside it.
    fn plan(&self) -> Result<Vec<Item<'a>>, String> {
        let n = self.cs.roots.len();
        if self.sources.len() < n || self.targets.len() < n {
            return Err(format!(
                "apply: {n} roots but {} source and {} target trees",
                self.sources.len(),
                self.targets.len()
            ));
        }
        let mut items: Vec<Item> = Vec::new();
        // top-level new directories -> their item; paths whose new thing is not a directory
        let mut tops: HashMap<(usize, &Path), usize> = HashMap::new();
        let mut leaves: HashSet<(usize, &Path)> = HashSet::new();
        let mut parents: HashMap<(usize, PathBuf), Rc<OwnedFd>> = HashMap::new();
        for e in self.cs.entries.iter().filter(|e| e.accepted()) {
            let malformed = |why: &str| self.fail("checking", e.root, &e.path, why);
            if e.root >= n {
                return Err(malformed("no such root"));
            }
            let comps = fs::components(&e.path).map_err(|_| malformed("not a plain path"))?;
            if e.what == What::Special {
                return Err(malformed("a special file is never written"));
            }
            let mut top = None;
            for a in e.path.ancestors().skip(1) {
                if leaves.contains(&(e.root, a)) {
                    return Err(malformed("inside an entry that is not a directory"));
                }
                if let Some(&i) = tops.get(&(e.root, a)) {
                    top = Some(i);
                }
            }
            if e.kind == Kind::Removed || e.what != What::Dir {
                leaves.insert((e.root, e.path.as_path()));
            }
            if let Some(i) = top {
                if e.kind != Kind::Added {
                    return Err(malformed("not an addition inside a new directory"));
                }
                items[i].inside.push(e);
                continue;
            }
            let op = match (e.kind, e.what) {
                (Kind::Removed, _) => Op::Remove,
                (Kind::Added, _) => Op::Place,
                (Kind::Modified | Kind::Mode, What::Dir) => Op::Chmod,
                // a link has no mode of its own
                (Kind::Mode, What::Link) => continue,
                // a file's new mode comes with its (copied) content: one atomic exchange
                _ => Op::Replace,
            };
            let parent_rel: PathBuf = comps[..comps.len() - 1].iter().collect();
            let parent = match parents.get(&(e.root, parent_rel.clone())) {
                Some(p) => p.clone(),
                None => {
                    let fd = fs::walk_dir(self.targets[e.root].raw_fd(), &comps[..comps.len() - 1])
                        .map_err(|err| {
                            self.fail(
                                "opening the directory (no link followed) of",
                                e.root,
                                &e.path,
                                err,
                            )
                        })?;
                    let fd = Rc::new(fd);
                    parents.insert((e.root, parent_rel.clone()), fd.clone());
                    fd
                }
            };
            if new_dir(e) {
                tops.insert((e.root, e.path.as_path()), items.len());
            }
            items.push(Item {
                entry: e,
                parent,
                parent_rel,
                name: comps[comps.len() - 1].to_os_string(),
                op,
                inside: Vec::new(),
            });
        }
        Ok(items)
    }

    /// What the target holds at the item's name now, checked against what the step expects.
    fn check_target(&self, it: &Item) -> Result<(), String> {
        let e = it.entry;
        let st = fs::lstat_at(it.parent.as_raw_fd(), &it.name)
            .map_err(|err| self.fail("looking at", e.root, &e.path, err))?;
        let why = match (it.op, st) {
            (Op::Place, Some(_)) => "exists (nothing was there when the changes were made)",
            (Op::Place, None) => return Ok(()),
            (_, None) => "is missing (it was there when the changes were made)",
            (Op::Chmod, Some(st)) if what_of(&st) != What::Dir => "is no longer a directory",
            (Op::Replace, Some(st)) if e.kind != Kind::TypeChange && what_of(&st) != e.what => {
                "changed type since the changes were made"
            }
            _ => return Ok(()),
        };
        Err(self.fail("checking", e.root, &e.path, why))
    }

    /// `renameat2` in one directory. Where the filesystem lacks `RENAME_NOREPLACE` (EINVAL),
    /// a check that nothing is there, then a plain rename.
    fn rename(&self, dirfd: i32, from: &OsStr, to: &OsStr, flags: u32) -> io::Result<()> {
        let r = if self.faults.old_fs && flags != 0 {
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        } else {
            fs::rename(dirfd, from, to, flags)
        };
        match r {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && flags == libc::RENAME_NOREPLACE => {
                if fs::lstat_at(dirfd, to)?.is_some() {
                    return Err(io::Error::from_raw_os_error(libc::EEXIST));
                }
                fs::rename(dirfd, from, to, 0)
            }
            r => r,
        }
    }

    fn step(&self, at: Option<usize>) -> io::Result<()> {
        let n = self.steps.get();
        self.steps.set(n + 1);
        injected(at, n)
    }

    /// Make the new thing of `e` as `name` in the directory `dirfd`. A file moved from the
    /// source: its source directory and name, for the rollback.
    fn make(&mut self, e: &Entry, dirfd: i32, name: &OsStr) -> io::Result<bool> {
        let src = self.sources[e.root].raw_fd();
        let comps = fs::components(&e.path)?;
        let sdir = fs::walk_dir(src, &comps[..comps.len() - 1])?;
        let sname = comps[comps.len() - 1];
        match e.what {
            What::File if self.moving.get(e.root) == Some(&true) => {
                if let Some(n) = fs::move_file(sdir.as_raw_fd(), sname, dirfd, name, e.mode)? {
                    self.written += n;
                    return Ok(true);
                }
                let mut f = fs::open_regular(sdir.as_raw_fd(), sname)?;
                self.written += fs::copy_file(dirfd, name, &mut f, e.mode)?;
            }
            What::File => {
                let mut f = fs::open_regular(sdir.as_raw_fd(), sname)?;
                self.written += fs::copy_file(dirfd, name, &mut f, e.mode)?;
            }
            What::Link => {
                let st = fs::lstat_at(sdir.as_raw_fd(), sname)?
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
                if what_of(&st) != What::Link {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "not a link"));
                }
                let target = fs::read_link(sdir.as_raw_fd(), sname)?;
                fs::symlink(dirfd, name, &target)?;
                self.written += target.len() as u64;
            }
            What::Dir => fs::mkdir(dirfd, name)?,
            What::Special => return Err(io::Error::from_raw_os_error(libc::EPERM)),
        }
        Ok(false)
    }

    /// Phase 1 for one item: its new thing under a temporary name (a directory with
    /// everything inside it).
    fn prepare(&mut self, it: &Item, done: &mut Vec<Done>) -> Result<Option<OsString>, String> {
        let e = it.entry;
        if matches!(it.op, Op::Remove | Op::Chmod) {
            return Ok(None);
        }
        let tmp = fs::temp_name(&it.name, "new")
            .map_err(|err| self.fail("naming a temporary copy of", e.root, &e.path, err))?;
        let dirfd = it.parent.as_raw_fd();
        let fault = self.faults.prepare;
        let moved = self
            .step(fault)
            .and_then(|()| self.make(e, dirfd, &tmp))
            .map_err(|err| self.fail("writing a copy of", e.root, &e.path, err))?;
        let at = (e.root, it.parent_rel.join(&tmp));
        done.push(match moved {
            true => Done::Moved {
                parent: it.parent.clone(),
                below: vec![tmp.clone()],
                root: e.root,
                src: e.path.clone(),
                at,
            },
            false => Done::Temp {
                parent: it.parent.clone(),
                tmp: tmp.clone(),
                at,
            },
        });
        if e.what != What::Dir {
            return Ok(Some(tmp));
        }
        // Build the tree inside; directories get their modes last, deepest first.
        let top = fs::open_at(dirfd, &tmp, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|err| self.fail("opening the new directory", e.root, &e.path, err))?;
        let mut dirs: HashMap<&Path, OwnedFd> = HashMap::new();
        let mut modes: Vec<(OwnedFd, u32, &Path)> = Vec::new();
        for c in &it.inside {
            let parent = c.path.parent().unwrap_or(Path::new(""));
            let pfd = if parent == e.path {
                top.as_raw_fd()
            } else {
                match dirs.get(parent) {
                    Some(fd) => fd.as_raw_fd(),
                    None => {
                        return Err(self.fail(
                            "building",
                            c.root,
                            &c.path,
                            "its directory is not in the changeset",
                        ))
                    }
                }
            };
            let name = c.path.file_name().unwrap_or_default();
            let moved = self
                .step(fault)
                .and_then(|()| self.make(c, pfd, name))
                .map_err(|err| self.fail("writing a copy of", c.root, &c.path, err))?;
            if moved {
                // moved back before the new directory is removed (undone in reverse order)
                let inside = c.path.strip_prefix(&e.path).unwrap_or(&c.path);
                done.push(Done::Moved {
                    parent: it.parent.clone(),
                    below: std::iter::once(tmp.clone())
                        .chain(inside.iter().map(OsStr::to_os_string))
                        .collect(),
                    root: c.root,
                    src: c.path.clone(),
                    at: (c.root, c.path.clone()),
                });
            }
            if c.what == What::Dir {
                let fd = fs::open_at(pfd, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                    .map_err(|err| self.fail("opening the new directory", c.root, &c.path, err))?;
                let again = fs::open_at(pfd, name, libc::O_PATH | libc::O_DIRECTORY, 0)
                    .map_err(|err| self.fail("opening the new directory", c.root, &c.path, err))?;
                dirs.insert(c.path.as_path(), fd);
                modes.push((again, c.mode, c.path.as_path()));
            }
        }
        for (fd, mode, p) in modes.iter().rev() {
            fs::chmod_fd(fd.as_raw_fd(), mode & 0o1777)
                .map_err(|err| self.fail("setting the mode of", e.root, p, err))?;
        }
        fs::chmod_fd(top.as_raw_fd(), e.mode & 0o1777)
            .map_err(|err| self.fail("setting the mode of", e.root, &e.path, err))?;
        Ok(Some(tmp))
    }

    /// Undo `done` in reverse order; the paths that could not be set back (and where the
    /// old content of such a path is kept, beside it).
    fn undo(&self, done: Vec<Done>) -> Vec<(usize, PathBuf)> {
        let mut left = Vec::new();
        // temporary names that hold old content after an exchange that could not be undone
        let mut keep: HashSet<(i32, OsString)> = HashSet::new();
        for (n, d) in done.into_iter().rev().enumerate() {
            let fault = injected(self.faults.undo, n);
            match d {
                Done::Moved {
                    parent,
                    below,
                    root,
                    src,
                    at,
                } => {
                    if below.len() == 1 && keep.contains(&(parent.as_raw_fd(), below[0].clone())) {
                        // it holds the old content of an exchange that stayed
                        left.push(at);
                        continue;
                    }
                    let n = below.len();
                    let back = fault.and_then(|()| {
                        let names: Vec<&OsStr> = below.iter().map(OsString::as_os_str).collect();
                        let to = fs::walk_dir(parent.as_raw_fd(), &names[..n - 1])?;
                        let comps = fs::components(&src)?;
                        let from =
                            fs::walk_dir(self.sources[root].raw_fd(), &comps[..comps.len() - 1])?;
                        fs::rename_between(
                            to.as_raw_fd(),
                            &below[n - 1],
                            from.as_raw_fd(),
                            comps[comps.len() - 1],
                            libc::RENAME_NOREPLACE,
                        )
                    });
                    // else removed with the rest (a file in a new directory goes with it)
                    if back.is_err()
                        && n == 1
                        && fs::remove_all(parent.as_raw_fd(), &below[0]).is_err()
                    {
                        left.push(at);
                    }
                }
                Done::Temp { parent, tmp, at } => {
                    // kept: it holds the old content of an exchange that stayed
                    if keep.contains(&(parent.as_raw_fd(), tmp.clone()))
                        || fault
                            .and_then(|()| fs::remove_all(parent.as_raw_fd(), &tmp))
                            .is_err()
                    {
                        left.push(at);
                    }
                }
                Done::Chmod { fd, old, at } => {
                    if fault
                        .and_then(|()| fs::chmod_fd(fd.as_raw_fd(), old))
                        .is_err()
                    {
                        left.push(at);
                    }
                }
                Done::Placed {
                    parent,
                    name,
                    tmp,
                    at,
                } => {
                    if fault
                        .and_then(|()| {
                            self.rename(parent.as_raw_fd(), &name, &tmp, libc::RENAME_NOREPLACE)
                        })
                        .is_err()
                    {
                        left.push(at);
                    }
                }
                Done::Exchanged {
                    parent,
                    name,
                    tmp,
                    at,
                } => {
                    if fault
                        .and_then(|()| {
                            fs::rename(parent.as_raw_fd(), &tmp, &name, libc::RENAME_EXCHANGE)
                        })
                        .is_err()
                    {
                        keep.insert((parent.as_raw_fd(), tmp));
                        left.push(at);
                    }
                }
                Done::Aside {
                    parent,
                    name,
                    old,
                    at,
                } => {
                    if fault
                        .and_then(|()| {
                            self.rename(parent.as_raw_fd(), &old, &name, libc::RENAME_NOREPLACE)
                        })
                        .is_err()
                    {
                        let beside = at.1.parent().unwrap_or(Path::new("")).join(&old);
                        left.push(at.clone());
                        left.push((at.0, beside));
                    }
                }
            }
        }
        left
    }
}

fn apply_with(
    cs: &Changeset,
    sources: &[Tree],
    targets: &[Tree],
    faults: &Faults,
    moving: bool,
) -> Outcome {
    // A new directory is built holding an fd per directory inside it (a node_modules: a few
    // thousand): the soft fd limit (often 1024) up to the hard one.
    fs::raise_nofile();
    let dev = |t: &Tree| fs::fstat(t.raw_fd()).map(|st| st.st_dev).ok();
    let moving = sources
        .iter()
        .zip(targets)
        .map(|(s, t)| moving && dev(s).is_some() && dev(s) == dev(t))
        .collect();
    let mut ctx = Ctx {
        cs,
        sources,
        targets,
        faults,
        moving,
        written: 0,
        removed: 0,
        steps: std::cell::Cell::new(0),
    };
    let items = match ctx.plan() {
        Ok(items) => items,
        Err(e) => return Outcome::none(e),
    };
    if items.is_empty() {
        return Outcome {
            applied: Applied::None,
            left: Vec::new(),
            error: None,
            written: 0,
            removed: 0,
        };
    }
    let mut done: Vec<Done> = Vec::new();
    let fail = |ctx: &Ctx, done: Vec<Done>, error: String| {
        let left = ctx.undo(done);
        Outcome {
            applied: if left.is_empty() {
                Applied::None
            } else {
                Applied::Partial
            },
            left,
            error: Some(error),
            written: 0,
            removed: 0,
        }
    };

    // Phase 1: directories whose mode changes get owner rwx meanwhile; every new thing is
    // made under a temporary name.
    let mut chmods: Vec<(OwnedFd, &Item)> = Vec::new();
    for it in items.iter().filter(|it| it.op == Op::Chmod) {
        let e = it.entry;
        let r = (|| {
            ctx.check_target(it)?;
            let fd = fs::open_dir(it.parent.as_raw_fd(), &it.name)
                .map_err(|err| ctx.fail("opening", e.root, &e.path, err))?;
            let st = fs::fstat(fd.as_raw_fd())
                .map_err(|err| ctx.fail("looking at", e.root, &e.path, err))?;
            let old = st.st_mode & 0o7777;
            if old & 0o700 != 0o700 {
                let fault = ctx.faults.prepare;
                ctx.step(fault)
                    .and_then(|()| fs::chmod_fd(fd.as_raw_fd(), old | 0o700))
                    .map_err(|err| ctx.fail("setting the mode of", e.root, &e.path, err))?;
                let undo = fs::open_dir(it.parent.as_raw_fd(), &it.name)
                    .map_err(|err| ctx.fail("opening", e.root, &e.path, err))?;
                done.push(Done::Chmod {
                    fd: undo,
                    old,
                    at: (e.root, e.path.clone()),
                });
            }
            Ok(fd)
        })();
        match r {
            Ok(fd) => chmods.push((fd, it)),
            Err(e) => return fail(&ctx, done, e),
        }
    }
    let mut temps: Vec<Option<OsString>> = Vec::with_capacity(items.len());
    for it in &items {
        let r = ctx
            .check_target(it)
            .and_then(|()| ctx.prepare(it, &mut done));
        match r {
            Ok(t) => temps.push(t),
            Err(e) => return fail(&ctx, done, e),
        }
    }

    // The new contents on disk before any of them is renamed in (one flush per root, not one
    // fsync per file).
    for t in targets {
        fs::sync_fs(t.raw_fd());
    }

    // Phase 2: swap, then the directories' new modes.
    ctx.steps.set(0);
    for (it, tmp) in items.iter().zip(&temps) {
        let e = it.entry;
        let dirfd = it.parent.as_raw_fd();
        let at = (e.root, e.path.clone());
        let fault = ctx.faults.swap;
        let r: Result<Vec<Done>, String> = match (it.op, tmp) {
            (Op::Place, Some(tmp)) => ctx
                .step(fault)
                .and_then(|()| ctx.rename(dirfd, tmp, &it.name, libc::RENAME_NOREPLACE))
                .map(|()| {
                    vec![Done::Placed {
                        parent: it.parent.clone(),
                        name: it.name.clone(),
                        tmp: tmp.clone(),
                        at,
                    }]
                })
                .map_err(|err| ctx.fail("renaming in", e.root, &e.path, err)),
            (Op::Replace, Some(tmp)) => {
                match ctx
                    .step(fault)
                    .and_then(|()| ctx.rename(dirfd, tmp, &it.name, libc::RENAME_EXCHANGE))
                {
                    Ok(()) => Ok(vec![Done::Exchanged {
                        parent: it.parent.clone(),
                        name: it.name.clone(),
                        tmp: tmp.clone(),
                        at,
                    }]),
                    // A filesystem without RENAME_EXCHANGE: the old one aside, the new one in
                    // (two steps, each undone on failure).
                    Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                        let mut two = Vec::new();
                        let r = fs::temp_name(&it.name, "old").and_then(|old| {
                            ctx.rename(dirfd, &it.name, &old, libc::RENAME_NOREPLACE)?;
                            two.push(Done::Aside {
                                parent: it.parent.clone(),
                                name: it.name.clone(),
                                old,
                                at: at.clone(),
                            });
                            ctx.step(fault)?;
                            ctx.rename(dirfd, tmp, &it.name, libc::RENAME_NOREPLACE)?;
                            two.push(Done::Placed {
                                parent: it.parent.clone(),
                                name: it.name.clone(),
                                tmp: tmp.clone(),
                                at,
                            });
                            Ok(())
                        });
                        match r {
                            Ok(()) => Ok(two),
                            Err(err) => {
                                done.extend(two);
                                Err(ctx.fail("replacing", e.root, &e.path, err))
                            }
                        }
                    }
                    Err(err) => Err(ctx.fail("exchanging", e.root, &e.path, err)),
                }
            }
            (Op::Remove, _) => fs::temp_name(&it.name, "old")
                .and_then(|old| {
                    ctx.step(fault)?;
                    ctx.rename(dirfd, &it.name, &old, libc::RENAME_NOREPLACE)?;
                    Ok(vec![Done::Aside {
                        parent: it.parent.clone(),
                        name: it.name.clone(),
                        old,
                        at,
                    }])
                })
                .map_err(|err| ctx.fail("moving aside", e.root, &e.path, err)),
            _ => continue,
        };
        match r {
            Ok(d) => {
                if it.op == Op::Remove {
                    ctx.removed += 1;
                }
                done.extend(d)
            }
            Err(e) => return fail(&ctx, done, e),
        }
    }
    for (fd, it) in &chmods {
        let e = it.entry;
        let old = match fs::fstat(fd.as_raw_fd()) {
            Ok(st) => st.st_mode & 0o7777,
            Err(err) => return fail(&ctx, done, ctx.fail("looking at", e.root, &e.path, err)),
        };
        let fault = ctx.faults.swap;
        let r = ctx
            .step(fault)
            .and_then(|()| fs::chmod_fd(fd.as_raw_fd(), e.mode & 0o1777))
            .and_then(|()| fs::open_dir(it.parent.as_raw_fd(), &it.name));
        match r {
            Ok(undo) => done.push(Done::Chmod {
                fd: undo,
                old,
                at: (e.root, e.path.clone()),
            }),
            Err(err) => {
                let msg = ctx.fail("setting the mode of", e.root, &e.path, err);
                return fail(&ctx, done, msg);
            }
        }
    }
    // The renames on disk before what was moved aside goes (one flush per root, not per
    // directory).
    for t in targets {
        fs::sync_fs(t.raw_fd());
    }

    // Phase 3: delete what was moved aside. The changes are in whatever happens here.
    let mut error = None;
    for d in done {
        let (parent, old, at) = match d {
            Done::Exchanged {
                parent, tmp, at, ..
            } => (parent, tmp, at),
            Done::Aside {
                parent, old, at, ..
            } => (parent, old, at),
            _ => continue,
        };
        if let Err(err) = fs::remove_all(parent.as_raw_fd(), &old) {
            let rel = at.1.parent().unwrap_or(Path::new("")).join(&old);
            error.get_or_insert_with(|| {
                ctx.fail("cleaning up (applied; remove it by hand)", at.0, &rel, err)
            });
        }
    }
    Outcome {
        applied: Applied::All,
        left: Vec::new(),
        error,
        written: ctx.written,
        removed: ctx.removed,
    }
}

#[cfg(test)]
mod tests;
