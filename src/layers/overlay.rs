//! The read-write repo with a cap on what the command may add (`[limits] disk`): the repo is
//! a copy-on-write overlay whose upper layer is a tmpfs of that size, and what the command
//! changed there is copied back into the real repo once the sandbox is gone.
//!
//! Why this design (measured, see profiles/README.md): the tmpfs's `size=` and `nr_inodes=`
//! are a hard cap on bytes and files that works rootless and on any filesystem; project quotas
//! need root, a filesystem built with them (this host's ext4 is not) and cannot be set from a
//! user namespace. And the copy-back is one place that sees every change, so it also refuses
//! what must never reach the host, whatever the other layers let through:
//!
//! - **set-ID bits** are dropped (files and directories take `mode & 01777`), and of the
//!   extended attributes only `user.*` ones are copied (no file capability, no ACL, no
//!   security label, none of overlayfs's own);
//! - **special files** (FIFOs, sockets, device nodes) are not copied;
//! - **git dirs**: under any `.git`, only the work dirs of the git dirs shown as views
//!   ([`crate::layers::git::RW_DIRS`] of each) are copied; a `.git` that did not exist
//!   before, or the removal of one, is refused;
//! - **links** are copied as links and never followed on the host side
//!   ([`crate::hostfs::Tree`]);
//! - **the report file** in the repo, and each directory on its way, are left as they are:
//!   the supervisor writes the report through the file it opened at the start, and a file
//!   renamed over it would hold what the command wrote instead.
//!
//! Parent half: [`crate::layers::mounts::plan`] turns a read-write repo into a kept overlay.
//! Child halves: stage 2 makes the disk layer ([`crate::layers::mounts::scratch`]) and opens
//! the real repo ([`Real::open`]) before forking pid 1, which mounts the overlay; after pid 1
//! has ended normally, stage 2 calls [`copy_back`] and sends the [`Summary`] to the supervisor.
//!
//! The same disk layer carries a gene's copy-on-write workspace from one command's sandbox to
//! the next ([`Carry`]).

use crate::hostfs::Tree;
use crate::layers::mounts::Op;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// Deeper trees are not copied back (refused).
const MAX_DEPTH: usize = 256;
/// Refused entries named on stderr; the rest are counted.
const MAX_NAMED: usize = 20;
/// Less free space than this on the disk layer counts as having hit the cap.
const FULL_MARGIN: u64 = 1 << 20;

/// The real repo of a kept overlay, opened by stage 2 before the sandbox hides it.
pub struct Real {
    pub tree: Tree,
    /// Repo-relative git work dirs that may be copied back (`.git/objects`, ...).
    pub git: Vec<PathBuf>,
    /// Repo-relative paths left alone (the report file).
    pub keep: Vec<PathBuf>,
}

impl Real {
    /// The real repo of the plan's kept overlay, if it has one.
    pub fn open(ops: &[Op], keep: &[PathBuf]) -> Result<Option<Real>, i32> {
        let Some(repo) = ops.iter().find_map(|op| match op {
            Op::Overlay {
                lower, kept: true, ..
            } => Some(lower),
            _ => None,
        }) else {
            return Ok(None);
        };
        let git = ops
            .iter()
            .filter_map(|op| match op {
                Op::GitView {
                    dir,
                    layer: Some(_),
                    ..
                } => dir.strip_prefix(repo).ok(),
                _ => None,
            })
            .flat_map(|d| crate::layers::git::RW_DIRS.iter().map(move |w| d.join(w)))
            .collect();
        let tree = Tree::open(repo).map_err(errno)?;
        Ok(Some(Real {
            tree,
            git,
            keep: keep.to_vec(),
        }))
    }
}

/// The size of the disk layer (for a kept or carried overlay), from the plan.
pub fn disk_size(ops: &[Op]) -> Option<u64> {
    ops.iter().find_map(|op| match op {
        Op::Overlay {
            size, kept: true, ..
        }
        | Op::Overlay {
            size,
            carry: Some(_),
            ..
        } => Some(*size),
        _ => None,
    })
}

/// What the copy-back did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Files and links written, directories made.
    pub written: u64,
    /// Entries removed (whole trees count once).
    pub removed: u64,
    /// Entries not copied back, the first [`MAX_NAMED`] with the reason.
    pub refused: u64,
    pub named: Vec<(PathBuf, &'static str)>,
    /// The first error (errno); the copy-back goes on past errors.
    pub error: Option<(PathBuf, i32)>,
}

impl Summary {
    fn refuse(&mut self, at: &Path, why: &'static str) {
        self.refused += 1;
        if self.named.len() < MAX_NAMED {
            self.named.push((at.to_path_buf(), why));
        }
    }

    fn fail(&mut self, at: &Path, e: std::io::Error) {
        if self.error.is_none() {
            self.error = Some((at.to_path_buf(), e.raw_os_error().unwrap_or(libc::EIO)));
        }
    }
}

/// What the supervisor learns of a run's disk layer and copy-back, for the report.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Changes {
    /// Bytes and files used on the disk layer when the command ended.
    pub disk_used_bytes: u64,
    pub disk_used_files: u64,
    /// The cap was reached: writes failed with ENOSPC.
    pub disk_full: bool,
    /// Files and links written back, directories made; entries removed; entries refused.
    pub written: u64,
    pub removed: u64,
    pub refused: u64,
}

impl Changes {
    /// Fold in one fact from the channel.
    pub fn add(&mut self, fact: crate::launcher::channel::DiskFact, value: u32) {
        use crate::launcher::channel::DiskFact;
        let v = u64::from(value);
        match fact {
            DiskFact::UsedKib => self.disk_used_bytes = v * 1024,
            DiskFact::Files => self.disk_used_files = v,
            DiskFact::Full => self.disk_full = v != 0,
            DiskFact::Written => self.written = v,
            DiskFact::Removed => self.removed = v,
            DiskFact::Refused => self.refused = v,
        }
    }
}

/// How full the disk layer got: bytes used, files used, and whether the cap was reached.
pub fn usage(disk: &Tree) -> (u64, u64, bool) {
    // SAFETY: all-zero is a valid statfs; fstatfs fills it for an fd we own.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(disk.raw_fd(), &mut s) } != 0 {
        return (0, 0, false);
    }
    let bsize = s.f_bsize as u64;
    let used = (s.f_blocks - s.f_bfree) as u64 * bsize;
    let files = (s.f_files - s.f_ffree) as u64;
    let full = (s.f_bavail as u64) * bsize < FULL_MARGIN || s.f_ffree == 0;
    (used, files, full)
}

/// Copy what the command changed (the overlay's upper dir, `upper` in `disk`) into the real
/// repo. Never fails as a whole: errors are counted in the summary and the rest goes on.
pub fn copy_back(disk: &Tree, real: &Real) -> Summary {
    let mut s = Summary::default();
    match disk.child(OsStr::new("upper")) {
        Ok(upper) => walk_in(
            &upper,
            &real.tree,
            Path::new(""),
            &Rules {
                git: &real.git,
                keep: &real.keep,
            },
            0,
            Git::Outside,
            &mut s,
        ),
        Err(e) => s.fail(Path::new(""), e),
    }
    s
}

/// Where an entry lies with respect to git dirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Git {
    /// Not under a `.git`.
    Outside,
    /// Under a `.git`, on the way to a work dir (a directory to go through, nothing else).
    Above,
    /// In a git work dir: copied as anything else.
    Work,
    /// Under a `.git`, nowhere writable.
    Closed,
}

fn git_place(rel: &Path, parent: Git, allowed: &[PathBuf]) -> Git {
    let in_git = parent != Git::Outside || rel.file_name() == Some(OsStr::new(".git"));
    if !in_git {
        return Git::Outside;
    }
    if parent == Git::Work || allowed.iter().any(|w| rel.starts_with(w)) {
        Git::Work
    } else if allowed.iter().any(|w| w.starts_with(rel)) {
        Git::Above
    } else {
        Git::Closed
    }
}

const OPAQUE: [&std::ffi::CStr; 2] = [c"user.overlay.opaque", c"trusted.overlay.opaque"];

/// What the walk must leave out.
struct Rules<'a> {
    git: &'a [PathBuf],
    keep: &'a [PathBuf],
}

fn walk_in(
    upper: &Tree,
    real: &Tree,
    rel: &Path,
    rules: &Rules,
    depth: usize,
    parent: Git,
    s: &mut Summary,
) {
    let names = match upper.names() {
        Ok(n) => n,
        Err(e) => return s.fail(rel, e),
    };
    for name in names {
        let at = rel.join(&name);
        if let Err(e) = entry(upper, real, &name, &at, rules, depth, parent, s) {
            s.fail(&at, e);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn entry(
    upper: &Tree,
    real: &Tree,
    name: &OsString,
    at: &Path,
    rules: &Rules,
    depth: usize,
    parent: Git,
    s: &mut Summary,
) -> std::io::Result<()> {
    let Some(st) = upper.stat(name)? else {
        return Ok(());
    };
    let place = git_place(at, parent, rules.git);
    // The report file, and each directory on its way: only gone through, never replaced.
    if rules.keep.iter().any(|k| k.starts_with(at)) {
        let dir_to_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR
            && matches!(real.stat(name)?, Some(t) if t.st_mode & libc::S_IFMT == libc::S_IFDIR);
        let opaque = dir_to_dir && {
            let sub = upper.child(name)?;
            OPAQUE.iter().any(|a| sub.xattr(a).as_deref() == Some(b"y"))
        };
        if !dir_to_dir || opaque || rules.keep.iter().any(|k| k == at) {
            s.refuse(at, "the report's path");
            return Ok(());
        }
    }
    let fmt = st.st_mode & libc::S_IFMT;
    let there = real.stat(name)?;
    let is_git = name == ".git";
    // A `.git` appearing or going away changes which repo the host's git reads.
    if is_git && parent == Git::Outside && (there.is_none() || is_whiteout(&st)) {
        s.refuse(
            at,
            if there.is_none() {
                "a new .git"
            } else {
                "removing a .git"
            },
        );
        return Ok(());
    }
    if fmt == libc::S_IFDIR {
        if place == Git::Closed {
            s.refuse(at, "in a git dir, outside its work dirs");
            return Ok(());
        }
        if depth >= MAX_DEPTH {
            s.refuse(at, "too deep");
            return Ok(());
        }
        let sub_upper = upper.child(name)?;
        let opaque = OPAQUE
            .iter()
            .any(|a| sub_upper.xattr(a).as_deref() == Some(b"y"));
        let real_dir = matches!(there, Some(t) if t.st_mode & libc::S_IFMT == libc::S_IFDIR);
        if there.is_some() && (!real_dir || opaque) {
            real.remove(name)?;
            s.removed += 1;
        }
        let mode = st.st_mode & 0o1777;
        let same = real_dir && !opaque && there.is_some_and(|t| t.st_mode & 0o7777 == mode);
        if !same {
            real.make_dir(name, mode)?;
            if !real_dir || opaque {
                s.written += 1;
            }
        }
        let sub_real = real.child(name)?;
        walk_in(&sub_upper, &sub_real, at, rules, depth + 1, place, s);
        return Ok(());
    }
    if place == Git::Above || place == Git::Closed {
        s.refuse(at, "in a git dir, outside its work dirs");
        return Ok(());
    }
    if is_whiteout(&st) {
        if there.is_some() {
            real.remove(name)?;
            s.removed += 1;
        }
        return Ok(());
    }
    match fmt {
        libc::S_IFREG => {
            let mut data = upper.open_file(name)?;
            real.put_file(name, &mut data, st.st_mode & 0o1777, &st)?;
            s.written += 1;
        }
        libc::S_IFLNK => {
            real.put_link(name, &upper.read_link(name)?)?;
            s.written += 1;
        }
        libc::S_IFIFO => s.refuse(at, "a FIFO"),
        libc::S_IFSOCK => s.refuse(at, "a socket"),
        _ => s.refuse(at, "a device node"),
    }
    Ok(())
}

/// A gene's layer, carried from one command's sandbox to the next: the copy-on-write repo's
/// upper layer is saved to a private host directory (`staging`, made by the supervisor for the
/// gene, removed after it) when a command ends and put back into the next command's fresh disk
/// layer before its overlay is mounted. Later commands see what earlier ones wrote (a build's
/// output); the repo itself is never written, and the disk cap holds for the gene as a whole.
pub struct Carry {
    pub staging: Tree,
}

impl Carry {
    /// The staging directory of the plan's carried overlay, if it has one.
    pub fn open(ops: &[Op]) -> Result<Option<Carry>, i32> {
        let Some(dir) = ops.iter().find_map(|op| match op {
            Op::Overlay {
                carry: Some(dir), ..
            } => Some(dir),
            _ => None,
        }) else {
            return Ok(None);
        };
        let staging = Tree::open(dir).map_err(errno)?;
        Ok(Some(Carry { staging }))
    }

    /// Before the overlay is mounted: the saved layer into the disk layer's `upper`.
    pub fn put_back(&self, disk: &Tree) -> Result<(), i32> {
        let upper = disk.child(OsStr::new("upper")).map_err(errno)?;
        copy_layer(&self.staging, &upper, 0).map_err(errno)
    }

    /// After the command: the disk layer's `upper`, as it is, replaces the saved layer.
    pub fn save(&self, disk: &Tree) -> Result<(), i32> {
        let upper = disk.child(OsStr::new("upper")).map_err(errno)?;
        for name in self.staging.names().map_err(errno)? {
            self.staging.remove(&name).map_err(errno)?;
        }
        copy_layer(&upper, &self.staging, 0).map_err(errno)
    }
}

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Copy an overlayfs upper layer as it is: directories (with their opaque marks), files
/// (set-ID bits dropped), links, whiteouts; FIFOs, sockets and devices are left out.
fn copy_layer(from: &Tree, to: &Tree, depth: usize) -> std::io::Result<()> {
    if depth >= MAX_DEPTH {
        return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
    }
    for name in from.names()? {
        let Some(st) = from.stat(&name)? else {
            continue;
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                to.make_dir(&name, st.st_mode & 0o1777)?;
                let (sub_from, sub_to) = (from.child(&name)?, to.child(&name)?);
                for a in OPAQUE {
                    if sub_from.xattr(a).as_deref() == Some(b"y") {
                        // Only where the filesystem takes user xattrs (tmpfs: Linux 6.6).
                        let _ = sub_to.set_xattr(a, b"y");
                    }
                }
                copy_layer(&sub_from, &sub_to, depth + 1)?;
            }
            libc::S_IFREG => {
                let mut data = from.open_file(&name)?;
                to.put_file(&name, &mut data, st.st_mode & 0o1777, &st)?;
            }
            libc::S_IFLNK => to.put_link(&name, &from.read_link(&name)?)?,
            _ if is_whiteout(&st) => to.put_whiteout(&name)?,
            _ => {}
        }
    }
    Ok(())
}

/// overlayfs marks a removed entry with a character device 0:0.
fn is_whiteout(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_dirs_are_closed_but_for_their_work_dirs() {
        let allowed = [
            PathBuf::from(".git/objects"),
            PathBuf::from(".git/modules/sub/refs"),
        ];
        let p = |rel: &str, parent| git_place(Path::new(rel), parent, &allowed);
        assert_eq!(p("src", Git::Outside), Git::Outside);
        assert_eq!(p(".git", Git::Outside), Git::Above);
        assert_eq!(p(".git/config", Git::Above), Git::Closed);
        assert_eq!(p(".git/hooks", Git::Above), Git::Closed);
        assert_eq!(p(".git/objects", Git::Above), Git::Work);
        assert_eq!(p(".git/objects/ab/cd", Git::Work), Git::Work);
        assert_eq!(p(".git/modules", Git::Above), Git::Above);
        assert_eq!(p(".git/modules/sub/config", Git::Above), Git::Closed);
        assert_eq!(p(".git/modules/sub/refs/heads/x", Git::Above), Git::Work);
        // a nested repo that is no view: nothing in it
        assert_eq!(p("vendor/x/.git", Git::Outside), Git::Closed);
        assert_eq!(p("vendor/x/.git/objects", Git::Closed), Git::Closed);
    }
}
