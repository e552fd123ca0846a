//! The read-write repo's layer: a copy-on-write overlay whose upper layer is a tmpfs of
//! `[limits] disk` bytes (and a file per 4 KiB), the run's **disk layer**. What the command
//! changes lands there and nowhere else; once the sandbox is gone, stage 2 hands the disk layer
//! to the supervisor, whose way back ([`crate::changes`]) lists every change, refuses what
//! must never reach the host, and applies the rest all or nothing, keeps it for review, or
//! throws it away.
//!
//! Why a tmpfs (measured, see profiles/README.md): its `size=` and `nr_inodes=` are a hard cap
//! on bytes and files that works rootless and on any filesystem; project quotas need root, a
//! filesystem built with them (this host's ext4 is not) and cannot be set from a user
//! namespace.
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
