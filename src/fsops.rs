//! The few directory-fd operations the way back ([`crate::changes`]) and the repo's disk layer
//! ([`crate::layers::disk`]) need beyond [`crate::hostfs::Tree`]: every
//! call takes an open directory fd and one plain name (never a path, never `..`), never
//! follows a link, and names the errno when it fails.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};

/// A plain directory entry name as a C string.
pub fn cname(name: &OsStr) -> io::Result<CString> {
    crate::hostfs::entry_name(name)
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The components of an entry path: plain names only, at least one.
pub fn components(rel: &Path) -> io::Result<Vec<&OsStr>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }
    if out.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(out)
}

/// `openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC)`.
pub fn open_at(dirfd: RawFd, name: &OsStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cname(name)?;
    // SAFETY: openat on a directory fd with a plain NUL-terminated name, never following.
    let fd = unsafe {
        libc::openat(
            dirfd,
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    };
    check(fd)?;
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The directory `name` of `dirfd` (not a link to one), opened for lookups only (`O_PATH`:
/// needs search permission, not read).
pub fn open_dir(dirfd: RawFd, name: &OsStr) -> io::Result<OwnedFd> {
    open_at(dirfd, name, libc::O_PATH | libc::O_DIRECTORY, 0)
}

/// The directory `rel` below `root`, one plain component at a time: a link, a file or a
/// device on the way is an error (`ENOTDIR`), never followed.
pub fn walk_dir(root: RawFd, rel: &[&OsStr]) -> io::Result<OwnedFd> {
    // SAFETY: dup of a valid fd: a new fd that we own.
    let dup = unsafe { libc::fcntl(root, libc::F_DUPFD_CLOEXEC, 0) };
    check(dup)?;
    // SAFETY: a fresh fd from the kernel.
    let mut fd = unsafe { OwnedFd::from_raw_fd(dup) };
    for n in rel {
        fd = open_dir(fd.as_raw_fd(), n)?;
    }
    Ok(fd)
}

/// `name`'s metadata, not following it; `None` when there is no such entry.
pub fn lstat_at(dirfd: RawFd, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = cname(name)?;
    // SAFETY: all-zero is a valid `stat`; fstatat fills it, not following a link.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a directory fd, a plain NUL-terminated name, a stat to fill.
    let r = unsafe { libc::fstatat(dirfd, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    match check(r) {
        Ok(()) => Ok(Some(st)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: all-zero is a valid `stat`; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of a valid fd into a stat we own.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// `renameat2` within one directory: `RENAME_NOREPLACE` or `RENAME_EXCHANGE` (or 0).
pub fn rename(dirfd: RawFd, from: &OsStr, to: &OsStr, flags: u32) -> io::Result<()> {
    let (a, b) = (cname(from)?, cname(to)?);
    // SAFETY: renameat2 within one directory fd, plain NUL-terminated names; no link is
    // followed by a rename.
    check(unsafe { libc::renameat2(dirfd, a.as_ptr(), dirfd, b.as_ptr(), flags) })
}

/// Set the permission bits of the inode `fd` (opened `O_PATH` or otherwise) to `mode`:
/// `fchmodat2(fd, "", AT_EMPTY_PATH)` (Linux 6.6), else through `/proc/self/fd`, which
/// names that very inode.
pub fn chmod_fd(fd: RawFd, mode: u32) -> io::Result<()> {
    // SAFETY: fchmodat2 on a valid fd with an empty NUL-terminated path.
    let r = unsafe {
        libc::syscall(
            452, // fchmodat2
            fd,
            c"".as_ptr(),
            mode as libc::c_uint,
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) {
        return Err(e);
    }
    let p = CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default();
    // SAFETY: chmod of a NUL-terminated path naming our own fd's inode.
    check(unsafe { libc::chmod(p.as_ptr(), mode) })
}

/// Remove `name` from `dirfd`: a directory with everything in it, links removed and never
/// followed. A directory without owner write or search permission is given them first (a
/// read-only tree such as a module cache is still removable by its owner).
pub fn remove_all(dirfd: RawFd, name: &OsStr) -> io::Result<()> {
    let Some(st) = lstat_at(dirfd, name)? else {
        return Ok(());
    };
    let c = cname(name)?;
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        if st.st_mode & 0o700 != 0o700 {
            let p = open_dir(dirfd, name)?;
            chmod_fd(p.as_raw_fd(), (st.st_mode & 0o7777) | 0o700)?;
        }
        let sub = open_at(dirfd, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        for n in names(sub.as_raw_fd())? {
            remove_all(sub.as_raw_fd(), &n)?;
        }
        // SAFETY: unlinkat of a plain NUL-terminated name in a directory fd.
        check(unsafe { libc::unlinkat(dirfd, c.as_ptr(), libc::AT_REMOVEDIR) })
    } else {
        // SAFETY: as above.
        check(unsafe { libc::unlinkat(dirfd, c.as_ptr(), 0) })
    }
}

/// The names in the directory `dirfd` (`.` and `..` left out).
pub fn names(dirfd: RawFd) -> io::Result<Vec<OsString>> {
    // SAFETY: openat of "." on a directory fd (O_PATH or not), for a read position of its own.
    let fd = unsafe {
        libc::openat(
            dirfd,
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    check(fd)?;
    // SAFETY: a fresh fd from the kernel.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(io::Error::from)?;
    let mut out = Vec::new();
    for e in dir.iter() {
        let e = e.map_err(io::Error::from)?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(OsString::from_vec(n.to_vec()));
        }
    }
    out.sort();
    Ok(out)
}

/// The target of the link `name`.
pub fn read_link(dirfd: RawFd, name: &OsStr) -> io::Result<OsString> {
    let c = cname(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: readlinkat into a buffer of the given length.
    let n = unsafe { libc::readlinkat(dirfd, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

/// Make the link `name` -> `target` (fails when `name` exists).
pub fn symlink(dirfd: RawFd, name: &OsStr, target: &OsStr) -> io::Result<()> {
    let c = cname(name)?;
    let t =
        CString::new(target.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: symlinkat with NUL-terminated strings on a directory fd.
    check(unsafe { libc::symlinkat(t.as_ptr(), dirfd, c.as_ptr()) })
}

/// Make the directory `name` (0700: the caller sets its mode once it is filled).
pub fn mkdir(dirfd: RawFd, name: &OsStr) -> io::Result<()> {
    let c = cname(name)?;
    // SAFETY: mkdirat on a directory fd with a plain NUL-terminated name.
    check(unsafe { libc::mkdirat(dirfd, c.as_ptr(), 0o700) })
}

/// The regular file `name` of `dirfd`, opened for reading: never a link, never blocking (a
/// FIFO is refused after a non-blocking open).
pub fn open_regular(dirfd: RawFd, name: &OsStr) -> io::Result<File> {
    let fd = open_at(
        dirfd,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )?;
    let st = fstat(fd.as_raw_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(File::from(fd))
}

/// A copy of `data` as the new file `name` of `dirfd` (which must not exist): its bytes, its
/// `user.*` extended attributes (never `user.overlay.*`), its times, `mode` (set-ID bits
/// never). Not flushed: the caller flushes the filesystem once ([`sync_fs`]). Returns the
/// bytes copied. On failure the new file is removed.
pub fn copy_file(dirfd: RawFd, name: &OsStr, data: &mut File, mode: u32) -> io::Result<u64> {
    let mut out = File::from(open_at(
        dirfd,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )?);
    let done = (|| {
        let n = io::copy(data, &mut out)?;
        crate::hostfs::copy_user_xattrs(data, &out);
        let like = fstat(data.as_raw_fd())?;
        let times = [
            libc::timespec {
                tv_sec: like.st_atime,
                tv_nsec: like.st_atime_nsec,
            },
            libc::timespec {
                tv_sec: like.st_mtime,
                tv_nsec: like.st_mtime_nsec,
            },
        ];
        // SAFETY: fchmod and futimens of an fd we own, with a two-element times array.
        check(unsafe { libc::fchmod(out.as_raw_fd(), mode & 0o1777) })?;
        // SAFETY: as above.
        check(unsafe { libc::futimens(out.as_raw_fd(), times.as_ptr()) })?;
        Ok(n)
    })();
    if done.is_err() {
        if let Ok(c) = cname(name) {
            // SAFETY: unlinkat of the file we just made.
            unsafe { libc::unlinkat(dirfd, c.as_ptr(), 0) };
        }
    }
    done
}

/// Random bytes from the kernel.
pub fn random(buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: getrandom into the unfilled part of a buffer we own.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(())
}

/// `n` random characters of the base32 alphabet (`a`-`z`, `2`-`7`).
pub fn random_base32(n: usize) -> io::Result<String> {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut buf = vec![0u8; n];
    random(&mut buf)?;
    Ok(buf
        .iter()
        .map(|b| ALPHABET[(b & 31) as usize] as char)
        .collect())
}

/// A name beside `name` for a temporary copy: `.<name>.sbx-<tag>-<random>`, the name part
/// shortened so that the whole fits in 255 bytes.
pub fn temp_name(name: &OsStr, tag: &str) -> io::Result<OsString> {
    let suffix = format!(".sbx-{tag}-{}", random_base32(8)?);
    let keep = 255 - 1 - suffix.len();
    let b = name.as_bytes();
    let mut v = Vec::with_capacity(256);
    v.push(b'.');
    v.extend_from_slice(&b[..b.len().min(keep)]);
    v.extend_from_slice(suffix.as_bytes());
    Ok(OsString::from_vec(v))
}

/// Give the entry `name` of `dirfd` to `uid`:`gid`, not following a link.
pub fn chown_at(dirfd: RawFd, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
    let c = cname(name)?;
    // SAFETY: fchownat on a directory fd with a plain NUL-terminated name, not following.
    check(unsafe { libc::fchownat(dirfd, c.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
}

/// Flush the whole filesystem `fd` lies on (`syncfs`): once after many files were written,
/// where an fsync of each would cost a disk round trip per file (20,000 files: 100 s against
/// 1 s here). Best effort.
pub fn sync_fs(fd: RawFd) {
    // SAFETY: syncfs on an fd we hold; it takes no pointer.
    unsafe { libc::syncfs(fd) };
}

/// fsync a directory (opened `O_PATH` or not): best effort, for the renames in it.
pub fn sync_dir(dirfd: RawFd) {
    // SAFETY: openat of "." on a directory fd, then fsync and close of that new fd.
    unsafe {
        let fd = libc::openat(
            dirfd,
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::fsync(fd);
            libc::close(fd);
        }
    }
}

/// `renameat2` between two directories, plain names, `flags` as in [`rename`].
pub fn rename_between(
    from_dir: RawFd,
    from: &OsStr,
    to_dir: RawFd,
    to: &OsStr,
    flags: u32,
) -> io::Result<()> {
    let (a, b) = (cname(from)?, cname(to)?);
    // SAFETY: renameat2 between directory fds with plain NUL-terminated names; a rename
    // follows no link.
    check(unsafe { libc::renameat2(from_dir, a.as_ptr(), to_dir, b.as_ptr(), flags) })
}

/// The names of the extended attributes of the open file `fd`.
fn xattr_names(fd: RawFd) -> io::Result<Vec<CString>> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: flistxattr into a buffer of the given length.
        let n = unsafe { libc::flistxattr(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            break;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    }
    Ok(buf
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .filter_map(|n| CString::new(n).ok())
        .collect())
}

/// Move the regular file `sname` of `sdir` (a run's upper layer) to the new name `name` of
/// `dirfd` by rename, as [`copy_file`] would have made it: every extended attribute but
/// `user.*` removed (never `user.overlay.*`; ACLs and `security.*` go too), `mode` (set-ID bits
/// never), times kept. `Ok(None)` when it cannot be moved so (another filesystem, a hard link,
/// an attribute that cannot be removed, a directory it may not leave): the caller copies it.
/// Returns the file's length.
pub fn move_file(
    sdir: RawFd,
    sname: &OsStr,
    dirfd: RawFd,
    name: &OsStr,
    mode: u32,
) -> io::Result<Option<u64>> {
    let Ok(f) = open_regular(sdir, sname) else {
        return Ok(None);
    };
    let st = fstat(f.as_raw_fd())?;
    if st.st_nlink != 1 {
        return Ok(None);
    }
    let Ok(names) = xattr_names(f.as_raw_fd()) else {
        return Ok(None);
    };
    for n in names {
        let b = n.as_bytes();
        if b.starts_with(b"user.") && !b.starts_with(b"user.overlay.") {
            continue;
        }
        // SAFETY: fremovexattr of a NUL-terminated name on an fd we own.
        if unsafe { libc::fremovexattr(f.as_raw_fd(), n.as_ptr()) } != 0 {
            return Ok(None);
        }
    }
    // SAFETY: fchmod of an fd we own.
    if unsafe { libc::fchmod(f.as_raw_fd(), mode & 0o1777) } != 0 {
        return Ok(None);
    }
    match rename_between(sdir, sname, dirfd, name, libc::RENAME_NOREPLACE) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EXDEV | libc::EACCES | libc::EPERM)
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e),
    }
    // what arrived is the inode made clean above
    match lstat_at(dirfd, name)? {
        Some(now) if now.st_dev == st.st_dev && now.st_ino == st.st_ino => {
            Ok(Some(st.st_size as u64))
        }
        _ => Err(io::Error::other("the moved file changed on the way")),
    }
}

/// Raise the soft limit on open fds to the hard one. Best effort.
pub fn raise_nofile() {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}
