//! The read-write repo's layer: a copy-on-write overlay whose upper layer is the run's **disk
//! layer**: a directory on disk for a cap above [`crate::layers::disk::IN_MEMORY_MAX`]
//! ([`crate::layers::disk`]: the cap is a budget the supervisor watches), else a tmpfs of
//! `[limits] disk` bytes (and a file per 4 KiB). What the command
//! changes lands there and nowhere else; once the sandbox is gone, stage 2 hands the disk layer
//! to the supervisor, whose way back ([`crate::changes`]) lists every change, refuses what
//! must never reach the host, and applies the rest all or nothing, keeps it for review, or
//! throws it away.
//!
//! Why a tmpfs for small caps and disk for large ones (measured, see docs/performance.md, "Big
//! writes"): a tmpfs's `size=` and `nr_inodes=` are a hard cap on bytes and files that works
//! rootless, but its pages are the sandbox's memory; project quotas need root, a filesystem
//! built with them (this host's ext4 is not) and cannot be set from a user namespace.
//!
//! Parent half: [`crate::layers::mounts::plan`] turns a read-write repo into a kept overlay
//! (and each git dir outside it into one more). Child halves: stage 2 makes the disk layer
//! ([`crate::layers::mounts::scratch`]) before forking pid 1, which mounts the overlays; after
//! pid 1 has ended normally, stage 2 sends the disk layer's fd on the channel.
//!
//! The same disk layer carries a gene's copy-on-write workspace from one command's sandbox to
//! the next ([`Carry`]).

use crate::hostfs::Tree;
use crate::layers::mounts::Op;
use std::ffi::OsStr;

/// Deeper trees are not carried.
const MAX_DEPTH: usize = 256;
/// Less free space than this on the disk layer counts as having hit the cap.
const FULL_MARGIN: u64 = 1 << 20;

/// Does the plan keep a layer for the way back (a read-write repo on a disk layer)?
pub fn kept(ops: &[Op]) -> bool {
    ops.iter()
        .any(|op| matches!(op, Op::Overlay { kept: true, .. }))
}

/// The size of the disk layer (the repo's overlay, kept, carried or thrown away), from the
/// plan.
pub fn disk_size(ops: &[Op]) -> Option<u64> {
    ops.iter().find_map(|op| match op {
        Op::Overlay {
            size, disk: true, ..
        } => Some(*size),
        _ => None,
    })
}

/// How full the disk layer got: bytes used, files used, and whether the cap was reached.
pub fn usage(disk: &Tree) -> (u64, u64, bool) {
    if !crate::layers::disk::on_tmpfs(disk.raw_fd()) {
        // on disk: counted; past the cap the supervisor stopped the run
        let c = crate::layers::disk::count(disk);
        return (c.bytes, c.files, false);
    }
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

/// Is the disk layer (if any) full now?
pub fn usage_full(disk: Option<&Tree>) -> bool {
    // a layer on disk is watched by the supervisor's budget ([`crate::layers::disk`]), never
    // full: no count here
    disk.is_some_and(|d| crate::layers::disk::on_tmpfs(d.raw_fd()) && usage(d).2)
}

const OPAQUE: [&std::ffi::CStr; 2] = [c"user.overlay.opaque", c"trusted.overlay.opaque"];

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
        copy_layer(&self.staging, &upper, 0, Marks::Decode).map_err(errno)
    }

    /// After the command: the disk layer's `upper`, as it is, replaces the saved layer.
    pub fn save(&self, disk: &Tree) -> Result<(), i32> {
        let upper = disk.child(OsStr::new("upper")).map_err(errno)?;
        for name in self.staging.names().map_err(errno)? {
            self.staging.remove(&name).map_err(errno)?;
        }
        copy_layer(&upper, &self.staging, 0, Marks::Encode).map_err(errno)
    }
}

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// How a saved layer holds overlayfs's marks (a removed entry, a directory replaced whole):
/// as plain files named as in an OCI image layer (`.wh.NAME`, `.wh..wh..opq`), since the
/// staging directory may lie on a filesystem that refuses whiteout devices or `user.*`
/// xattrs (a container's overlayfs root does both); the layer the overlay mounts holds the
/// real ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marks {
    /// From an upper layer to the staging directory.
    Encode,
    /// From the staging directory to an upper layer.
    Decode,
}

const WH_PREFIX: &[u8] = b".wh.";
const WH_OPAQUE: &str = ".wh..wh..opq";

/// Copy an overlayfs upper layer: directories (with their opaque marks), files (set-ID bits
/// dropped), links, whiteouts; FIFOs, sockets and devices are left out. The marks are turned
/// into plain files or back, by `marks`.
fn copy_layer(from: &Tree, to: &Tree, depth: usize, marks: Marks) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if depth >= MAX_DEPTH {
        return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
    }
    for name in from.names()? {
        let Some(st) = from.stat(&name)? else {
            continue;
        };
        let bytes = name.as_bytes();
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                to.make_dir(&name, st.st_mode & 0o1777)?;
                let (sub_from, sub_to) = (from.child(&name)?, to.child(&name)?);
                let opaque = OPAQUE
                    .iter()
                    .any(|a| sub_from.xattr(a).as_deref() == Some(b"y"));
                if opaque && marks == Marks::Encode {
                    sub_to.put_bytes(OsStr::new(WH_OPAQUE), b"", 0o600)?;
                }
                copy_layer(&sub_from, &sub_to, depth + 1, marks)?;
            }
            libc::S_IFREG if marks == Marks::Decode && bytes == WH_OPAQUE.as_bytes() => {
                // The upper layer is a tmpfs of Linux 6.6+ (user xattrs); elsewhere the
                // directory merges with the one below, as it did before the mark.
                let _ = to.set_xattr(OPAQUE[0], b"y");
            }
            libc::S_IFREG if marks == Marks::Decode && bytes.starts_with(WH_PREFIX) => {
                let hidden = OsStr::from_bytes(&bytes[WH_PREFIX.len()..]);
                let plain = !matches!(hidden.as_bytes(), b"" | b"." | b"..");
                if plain && to.stat(hidden)?.is_none() {
                    to.put_whiteout(hidden)?;
                }
            }
            libc::S_IFREG => {
                let mut data = from.open_file(&name)?;
                to.put_file(&name, &mut data, st.st_mode & 0o1777, &st)?;
            }
            libc::S_IFLNK => to.put_link(&name, &from.read_link(&name)?)?,
            _ if is_whiteout(&st) => match marks {
                Marks::Encode => {
                    let mut marked = WH_PREFIX.to_vec();
                    marked.extend_from_slice(bytes);
                    to.put_bytes(OsStr::from_bytes(&marked), b"", 0o600)?;
                }
                Marks::Decode => to.put_whiteout(&name)?,
            },
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

    /// A saved layer holds no whiteout device and no xattr (a container's overlayfs root takes
    /// neither), and comes back as the layer it was.
    #[test]
    fn a_saved_layer_holds_its_marks_as_plain_files() {
        let base = crate::testdir::base().join(format!("overlay-marks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for d in ["upper/replaced", "staging", "back"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("upper/replaced/new.txt"), "new\n").unwrap();
        let t = |p: &str| Tree::open(&base.join(p)).unwrap();
        let upper = t("upper");
        if upper.put_whiteout(OsStr::new("gone.txt")).is_err()
            || upper
                .child(OsStr::new("replaced"))
                .unwrap()
                .set_xattr(OPAQUE[0], b"y")
                .is_err()
        {
            eprintln!("skipped: this filesystem takes no whiteout or user xattr");
            return;
        }
        copy_layer(&upper, &t("staging"), 0, Marks::Encode).unwrap();
        let staged = |p: &str| std::fs::symlink_metadata(base.join("staging").join(p));
        assert!(staged(".wh.gone.txt").unwrap().is_file());
        assert!(staged("gone.txt").is_err());
        assert!(staged("replaced/.wh..wh..opq").unwrap().is_file());
        assert_eq!(
            t("staging")
                .child(OsStr::new("replaced"))
                .unwrap()
                .xattr(OPAQUE[0]),
            None
        );
        copy_layer(&t("staging"), &t("back"), 0, Marks::Decode).unwrap();
        let back = t("back");
        assert!(is_whiteout(
            &back.stat(OsStr::new("gone.txt")).unwrap().unwrap()
        ));
        assert!(back.stat(OsStr::new(".wh.gone.txt")).unwrap().is_none());
        let replaced = back.child(OsStr::new("replaced")).unwrap();
        assert_eq!(replaced.xattr(OPAQUE[0]).as_deref(), Some(&b"y"[..]));
        assert!(replaced.stat(OsStr::new(WH_OPAQUE)).unwrap().is_none());
        assert!(replaced.stat(OsStr::new("new.txt")).unwrap().is_some());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
