//! Thin wrappers for the syscalls that nix lacks. Each returns the errno on failure and
//! allocates nothing, so they are safe to call between fork and exec.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The errno of the last failed libc call (no allocation).
pub fn last_errno() -> i32 {
    errno()
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn cpath(p: &Path) -> Result<CString, i32> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)
}

/// Set mount attributes on the mount at `path` and every mount below it (Linux 5.12+).
pub fn mount_setattr_recursive(path: &Path, attr_set: u64) -> Result<(), i32> {
    let c = cpath(path)?;
    mount_setattr(libc::AT_FDCWD, &c, AT_RECURSIVE, attr_set)
}

/// `mount_setattr(dirfd, path, flags, {attr_set})`.
fn mount_setattr(
    dirfd: i32,
    path: &std::ffi::CStr,
    flags: libc::c_uint,
    attr_set: u64,
) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a valid NUL-terminated path and `attr` a valid struct of the size
    // passed; the kernel only reads both.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// The flags of the mount at `path` that a remount inside a user namespace must keep.
pub fn mount_flags(path: &Path) -> Result<nix::mount::MsFlags, i32> {
    use nix::mount::MsFlags;
    use nix::sys::statvfs::{statvfs, FsFlags};
    let s = statvfs(path).map_err(|e| e as i32)?;
    let f = s.flags();
    let mut out = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs) {
            out |= ms;
        }
    }
    Ok(out)
}

/// Mark every fd from `first` up close-on-exec (`close_range`, Linux 5.11+), falling back to
/// walking the fds one by one on older kernels.
pub fn cloexec_from(first: u32) -> Result<(), i32> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range takes plain integers.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if r == 0 {
        return Ok(());
    }
    let e = errno();
    if e != libc::ENOSYS && e != libc::EINVAL {
        return Err(e);
    }
    // Fallback: every fd up to the soft limit.
    // SAFETY: getrlimit writes into the struct we pass.
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur.min(1 << 20) as i32
    } else {
        1024
    };
    for fd in first as i32..max {
        // SAFETY: fcntl on an fd that may not be open just fails with EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// `pidfd_open(2)`: an fd that becomes readable when the process exits (Linux 5.3+).
pub fn pidfd_open(pid: libc::pid_t) -> Result<std::os::fd::OwnedFd, i32> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain integer arguments; on success the kernel returns a new fd that we own.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        Err(errno())
    } else {
        // SAFETY: `r` is a fresh fd returned by the kernel and owned by nobody else.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as i32) })
    }
}

pub const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// `open_tree(dirfd, "", OPEN_TREE_CLONE | AT_RECURSIVE | AT_EMPTY_PATH)`: a detached copy of
/// the mount tree at the object `fd` refers to (an `O_PATH` fd opened without following
/// links), ready to be attached with [`move_mount_fd`] (Linux 5.2+). Mounting by fd is how the
/// sandbox binds repo paths: nothing is resolved by name, so no link the repo holds can steer
/// the bind.
pub fn open_tree_clone(fd: i32) -> Result<std::os::fd::OwnedFd, i32> {
    use std::os::fd::FromRawFd;
    // SAFETY: an empty NUL-terminated path and integer flags; on success a new fd we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd,
            c"".as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        // SAFETY: a fresh fd from the kernel.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as i32) })
    }
}

/// Set mount attributes on the detached tree `fd` (from [`open_tree_clone`]) and every mount
/// in it.
pub fn mount_setattr_fd(fd: i32, attr_set: u64) -> Result<(), i32> {
    mount_setattr(
        fd,
        c"",
        AT_RECURSIVE | libc::AT_EMPTY_PATH as libc::c_uint,
        attr_set,
    )
}

/// `move_mount(from, "", to, "", F_EMPTY_PATH | T_EMPTY_PATH)`: attach the mount `from` (a
/// detached tree, or a mount) on the object the fd `to` refers to.
pub fn move_mount_fd(from: i32, to: i32) -> Result<(), i32> {
    // SAFETY: empty NUL-terminated paths and integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from,
            c"".as_ptr(),
            to,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Whether this process has exactly one thread: procfs gives `/proc/self/task` a link count
/// of 2 plus the number of threads. False when /proc cannot say.
pub fn single_threaded() -> bool {
    // SAFETY: stat(2) of a NUL-terminated literal into a zeroed struct of the right type.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::stat(c"/proc/self/task".as_ptr(), &mut st) == 0 && st.st_nlink == 3
    }
}

/// `CLONE_INTO_CGROUP` (Linux 5.7+); `libc::CLONE_INTO_CGROUP` is 0 on glibc targets.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of `clone3(2)`, up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// A fork born in the cgroup v2 directory `cgroup` (an fd of it): `clone3` with
/// `CLONE_INTO_CGROUP` and SIGCHLD, no stack of its own. Returns 0 in the child, its pid in the
/// parent. Unlike a move through `cgroup.procs`, it takes no write lock of the cgroup core
/// (whose first taking waits for an RCU grace period: 5 ms measured here).
///
/// # Safety
/// Only from a single-threaded process, like `fork`, and more: glibc's fork bookkeeping does not
/// run, so the child's cached thread id stays the parent's (`raise`, and so `abort`, cannot
/// signal the child itself then: a panic ends it with SIGSEGV instead of SIGABRT), and no
/// `pthread_atfork` handler runs. The child must not create threads.
pub unsafe fn clone3_into_cgroup(cgroup: i32) -> Result<libc::pid_t, i32> {
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup as u64,
    };
    // SAFETY: the kernel reads `args` of the size given; with no stack, the child continues
    // on a copy of ours, as after fork.
    let r = libc::syscall(
        libc::SYS_clone3,
        &args as *const CloneArgs,
        std::mem::size_of::<CloneArgs>(),
    );
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as libc::pid_t)
    }
}
