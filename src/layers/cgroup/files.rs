//! Small reads and writes of cgroupfs files, each error naming the file and the errno.

use super::*;
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

pub(super) fn euid() -> u32 {
    // SAFETY: geteuid has no failure mode and touches no memory.
    unsafe { libc::geteuid() }
}

pub(super) fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// A control file or a /proc file, whole: one `read(2)` into a page-sized buffer, and one more
/// that returns 0. (`fs::read_to_string` also `statx`es the file for a size that procfs and
/// cgroupfs report as 0, then reads in 32-byte steps.)
pub(super) fn read_text(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub(super) fn read(path: &Path) -> Result<String, Error> {
    read_text(path).map_err(|e| Error::io(Op::Read, path, &e))
}

/// Controller names in a `cgroup.controllers` / `cgroup.subtree_control` file. (A `+` is
/// ignored, so plain-file trees that hold what was written read back the same.)
pub(super) fn read_controllers(path: &Path) -> Result<BTreeSet<String>, Error> {
    Ok(read(path)?
        .split_whitespace()
        .map(|c| c.trim_start_matches('+').to_string())
        .collect())
}

/// The pids in a `cgroup.procs` file; a missing file is an empty group.
pub(super) fn read_procs(path: &Path) -> Vec<i32> {
    read_text(path)
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `key value` lines (`memory.events`, `cpu.stat`, `pids.events`, `cpuacct.stat`...).
pub(super) fn flat_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then_some(())?;
        it.next()?.parse().ok()
    })
}

pub(super) fn read_u64(path: &Path) -> Option<u64> {
    read_text(path).ok()?.trim().parse().ok()
}

pub(super) fn read_keyed(path: &Path, key: &str) -> Option<u64> {
    flat_keyed(&read_text(path).ok()?, key)
}

pub(super) fn missing(needed: &[&str], have: &BTreeSet<String>) -> Vec<String> {
    needed
        .iter()
        .filter(|c| !have.contains(**c))
        .map(|c| c.to_string())
        .collect()
}

pub(super) fn owner(path: &Path) -> Option<u32> {
    fs::metadata(path).ok().map(|m| m.uid())
}

pub(super) fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `pidfd_send_signal(2)` (Linux 5.1+).
pub(super) fn pidfd_kill(fd: &OwnedFd) {
    // SAFETY: plain integer arguments and a null siginfo; the fd is ours and open.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

pub(super) fn clk_tck() -> u64 {
    // SAFETY: sysconf takes an integer and returns one.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

// ---------------------------------------------------------------------------------------------
// Host

/// The pid in a leaf name `<prefix><pid>-<n>`.
pub(super) fn leaf_owner(name: &str, prefix: &str) -> Option<Owner> {
    let rest = name.strip_prefix(prefix)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = rest.split('-').collect();
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| digits(p)) {
        return None;
    }
    let pid = parts[0].parse().ok().filter(|p| *p > 0)?;
    let pidns = match parts.get(2) {
        Some(ns) => Some(ns.parse().ok()?),
        None => None,
    };
    Some(Owner { pid, pidns })
}

/// Who made a leaf, from its name `PREFIX<pid>-<n>[-<pid namespace>]`: the pid as its maker's
/// pid namespace numbers it, and that namespace (the inode of `/proc/self/ns/pid`; absent in
/// names made before it was recorded, which are taken to be this namespace's).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Owner {
    pub pid: i32,
    pub pidns: Option<u64>,
}

/// The pid namespace this process numbers pids in (0 when /proc cannot say).
pub(super) fn own_pidns() -> u64 {
    fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// An exclusive `flock` on a leaf directory, taken without waiting. Its maker holds one on each
/// of its dirs for as long as it lives; the kernel drops it when the maker's last copy of the
/// fd closes, which is when sandbox-run ends, however it ends, seen from any pid namespace.
/// (Stage 2 closes every inherited fd first, so the sandbox never holds it.)
pub(super) fn lock_leaf_dir(dir: &Path) -> io::Result<LeafLock> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| io::Error::from_raw_os_error(e as i32))
}

pub(super) type LeafLock = nix::fcntl::Flock<fs::File>;

pub(super) fn mkdir_exist_ok(dir: &Path) -> Result<(), Error> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(Op::Mkdir, dir, &e)),
    }
}

/// Write `value` in one `write(2)`, as cgroupfs wants it. `plain`: create the file if needed.
pub(super) fn write_file(path: &Path, value: &str, plain: bool) -> Result<(), Error> {
    let mut o = fs::OpenOptions::new();
    // O_TRUNC is harmless on cgroupfs (shells use it) and right for plain files.
    o.write(true).truncate(true).custom_flags(libc::O_CLOEXEC);
    if plain {
        o.create(true);
    }
    let mut f = o.open(path).map_err(|e| Error::io(Op::Write, path, &e))?;
    match f.write(value.as_bytes()) {
        Ok(n) if n == value.len() => Ok(()),
        Ok(_) => Err(Error::detail(Op::Write, Some(path), "short write".into())),
        Err(e) => Err(Error::io(Op::Write, path, &e)),
    }
}
