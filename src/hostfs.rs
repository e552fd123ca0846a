//! Host-side file I/O on paths the sandboxed command may have changed: the repo and everything
//! under it (a previous run in a writable mode, or a concurrent one, may have left a symlink,
//! a FIFO or a device node anywhere there), and the report file. Every host-side open of such
//! a path goes through this module. Its rules (DESIGN.md section 3, "The host boundary"):
//!
//! - **No link is followed below the repo root**: [`Dir::open`] and friends use `openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` from an fd of the repo, so
//!   a symlink in any component is an error (`ELOOP`) and `..` cannot leave it (`EXDEV`).
//! - **Nothing blocks**: files are opened with `O_NONBLOCK` (a FIFO left as `.git` opens at once
//!   instead of waiting for a writer), and only regular files are read.
//! - **Reads are bounded** ([`Dir::read_small`]): `/dev/zero` bound as `.git` cannot make the
//!   supervisor read forever.
//! - **The report file** ([`create_report`]) is created before the run: links are followed only
//!   where they live outside the repo (the caller's own path, and only links of the caller's or
//!   root's), never inside it, and inside the repo it must be a regular file with no other hard
//!   link. Outside the repo it is a fresh file of the caller's in a directory only the caller
//!   (or root) controls, never a file someone else made or can write.
//!
//! Stage 2 uses the same calls before the sandbox exists (a fresh single-threaded exec:
//! allocation is fine there).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// `struct open_how` of `openat2(2)` (libc's is `#[non_exhaustive]`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// What a path names, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `openat2(dirfd, rel, flags, resolve)`; the new fd is close-on-exec.
fn openat2(dirfd: i32, rel: &Path, flags: i32, mode: u32, resolve: u64) -> io::Result<OwnedFd> {
    let c = c_path(rel)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: u64::from(mode),
        resolve,
    };
    // SAFETY: `c` is a NUL-terminated path and `how` a struct of the size passed; the kernel
    // only reads both. On success it returns a new fd that nobody else owns.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: all-zero is a valid `stat`; fstat fills it for an fd we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `flock(2)` on `fd`: an advisory lock, held by the open file (every fd dup'ed or
/// inherited from it) until its last fd is closed.
pub fn flock(fd: &OwnedFd, op: i32) -> io::Result<()> {
    // SAFETY: flock on an fd we own; no memory is passed.
    if unsafe { libc::flock(fd.as_raw_fd(), op) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn kind_of(mode: libc::mode_t) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// A relative path with only normal components (no `/` at the start, no `..`, no `.`).
fn relative(rel: &Path) -> io::Result<&Path> {
    if rel.as_os_str().is_empty() || rel.components().all(|c| matches!(c, Component::Normal(_))) {
        Ok(rel)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a plain relative path", rel.display()),
        ))
    }
}

/// A directory opened once (`O_PATH`), under which nothing is resolved through a link.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Open the directory at `path` (the repo: a canonical path the caller chose). Its last
    /// component must not be a symlink.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = openat2(
            libc::AT_FDCWD,
            path,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
            RESOLVE_NO_MAGICLINKS,
        )?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Open the directory at the absolute `path`, which must contain no link at all (a path
    /// the plan checked on the host, reopened inside the sandbox's mount namespace).
    pub fn open_no_links(path: &Path) -> io::Result<Dir> {
        let fd = openat2(
            libc::AT_FDCWD,
            path,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
            RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        )?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The entries of the directory `rel` (`.` and `..` left out) and what each is, without
    /// following any; at most `max` of them (more is an error).
    pub fn entries(&self, rel: &Path, max: usize) -> io::Result<Vec<(std::ffi::OsString, Kind)>> {
        use std::os::unix::ffi::OsStringExt;
        let fd = self.open_at(
            rel,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        let mut dir = nix::dir::Dir::from_fd(fd).map_err(io::Error::from)?;
        let dirfd = dir.as_raw_fd();
        let mut out = Vec::new();
        for e in dir.iter() {
            let e = e.map_err(io::Error::from)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if out.len() >= max {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: more than {max} entries", self.path.join(rel).display()),
                ));
            }
            // SAFETY: all-zero is a valid `stat`; fstatat fills it, not following a link.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `dirfd` is the open directory being read, the name NUL-terminated.
            if unsafe {
                libc::fstatat(
                    dirfd,
                    e.file_name().as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            } != 0
            {
                continue; // gone meanwhile
            }
            out.push((
                std::ffi::OsString::from_vec(name.to_vec()),
                kind_of(st.st_mode),
            ));
        }
        Ok(out)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// `openat2` beneath this directory, no link followed in any component (`ELOOP`). The
    /// last component is opened itself when it is a link and `flags` has `O_PATH|O_NOFOLLOW`.
    pub fn open_at(&self, rel: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        let rel = relative(rel)?;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        openat2(
            self.fd.as_raw_fd(),
            rel,
            flags,
            mode,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        )
    }

    /// The subdirectory `rel`, reached without links.
    pub fn subdir(&self, rel: &Path) -> io::Result<Dir> {
        let fd = self.open_at(rel, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)?;
        Ok(Dir {
            fd,
            path: self.path.join(rel),
        })
    }

    /// Is `fd` the file now at `rel` (the same device and inode; `rel` not followed)?
    pub fn is_at(&self, rel: &Path, fd: &OwnedFd) -> bool {
        let now = self.open_at(rel, libc::O_PATH | libc::O_NOFOLLOW, 0);
        match (now.and_then(|n| fstat(&n)), fstat(fd)) {
            (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
            _ => false,
        }
    }

    /// What `rel` is, without following it; `None` when it does not exist (or a component on
    /// the way is not a directory). A link on the way is an error.
    pub fn kind(&self, rel: &Path) -> io::Result<Option<Kind>> {
        match self.open_at(rel, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            Ok(fd) => Ok(Some(kind_of(fstat(&fd)?.st_mode))),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The whole content of the regular file `rel`, at most `cap` bytes; `None` when it does
    /// not exist. A link, a FIFO, a device or a larger file is an error: never blocks, never
    /// reads without bound.
    pub fn read_small(&self, rel: &Path, cap: u64) -> io::Result<Option<Vec<u8>>> {
        let fd = match self.open_at(
            rel,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        ) {
            Ok(fd) => fd,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let st = fstat(&fd)?;
        if kind_of(st.st_mode) != Kind::File {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a regular file", rel.display()),
            ));
        }
        if st.st_size as u64 > cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: larger than {cap} bytes", rel.display()),
            ));
        }
        let mut buf = Vec::new();
        File::from(fd).take(cap + 1).read_to_end(&mut buf)?;
        if buf.len() as u64 > cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: larger than {cap} bytes", rel.display()),
            ));
        }
        Ok(Some(buf))
    }
}

/// Make the mount point `rel` beneath the directory `root` (a place the command can write: the
/// kept home, a read-write repo) when it is missing: directories 0755, and at the end an empty
/// file 0644 when `file`. Nothing on the way is followed or removed: a link there, or a file
/// where a directory goes, is an error (`ELOOP`, `ENOTDIR`). Returns the mount point opened
/// with `O_PATH`, to mount onto by fd.
pub fn mount_point_beneath(root: &Path, rel: &Path, file: bool) -> io::Result<OwnedFd> {
    let dir = Dir::open(root)?;
    let rel = relative(rel)?;
    let n = rel.components().count();
    let mut at = PathBuf::new();
    for (i, c) in rel.components().enumerate() {
        let want_file = file && i + 1 == n;
        let parent = dir.open_at(&at, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)?;
        at.push(c);
        let name = c_path(Path::new(c.as_os_str()))?;
        let r = match dir.kind(&at)? {
            Some(Kind::Dir) if !want_file => continue,
            Some(Kind::File) if want_file => continue,
            Some(Kind::Symlink) => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
            Some(Kind::Dir) => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            Some(_) => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            // SAFETY: mknodat of a regular file in a directory fd reached without links.
            None if want_file => unsafe {
                libc::mknodat(parent.as_raw_fd(), name.as_ptr(), libc::S_IFREG | 0o644, 0)
            },
            // SAFETY: mkdirat in a directory fd reached without links, a plain name.
            None => unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755) },
        };
        if r != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return Err(io::Error::last_os_error());
        }
    }
    // Opened again, not followed: a link put there meanwhile is the link itself, refused.
    let fd = dir.open_at(rel, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
    match (kind_of(fstat(&fd)?.st_mode), file) {
        (Kind::Dir, false) | (Kind::File, true) => Ok(fd),
        _ => Err(io::Error::from_raw_os_error(libc::ELOOP)),
    }
}

/// A directory opened for reading and writing by name, one level at a time: every name is a
/// plain entry of it (never `..`, never a path), opened with `O_NOFOLLOW`, and files are
/// replaced by renaming a new one over them, so no link in the tree is ever followed. Used by
/// stage 2 to copy a run's changes back into the real repo ([`crate::layers::overlay`]).
#[derive(Debug)]
pub struct Tree(OwnedFd);

/// Copy the `user.*` extended attributes of `from` to `to` (never `user.overlay.*`, which
/// is overlayfs's bookkeeping, nor any other namespace); best effort.
pub fn copy_user_xattrs(from: &File, to: &File) {
    let mut names = vec![0u8; 4096];
    // SAFETY: flistxattr into a buffer of the given length.
    let n = unsafe { libc::flistxattr(from.as_raw_fd(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return;
    }
    let mut value = vec![0u8; 64 * 1024];
    for name in names[..n as usize].split(|b| *b == 0) {
        if !name.starts_with(b"user.") || name.starts_with(b"user.overlay.") {
            continue;
        }
        let Ok(c) = CString::new(name) else { continue };
        // SAFETY: fgetxattr into a buffer of the given length, a NUL-terminated name.
        let len = unsafe {
            libc::fgetxattr(
                from.as_raw_fd(),
                c.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if len >= 0 {
            // SAFETY: fsetxattr from the bytes just read, a NUL-terminated name.
            unsafe {
                libc::fsetxattr(
                    to.as_raw_fd(),
                    c.as_ptr(),
                    value.as_ptr().cast(),
                    len as usize,
                    0,
                )
            };
        }
    }
}

/// A plain directory entry name.
pub fn entry_name(name: &std::ffi::OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Tree {
    /// The directory at the absolute `path`, reached without any link (the repo root).
    pub fn open(path: &Path) -> io::Result<Tree> {
        openat2(
            libc::AT_FDCWD,
            path,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
            RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        )
        .map(Tree)
    }

    pub fn from_fd(fd: OwnedFd) -> Tree {
        Tree(fd)
    }

    pub fn raw_fd(&self) -> i32 {
        self.0.as_raw_fd()
    }

    /// The subdirectory `name` (not a link to one).
    pub fn child(&self, name: &std::ffi::OsStr) -> io::Result<Tree> {
        let c = entry_name(name)?;
        // SAFETY: openat on our dir fd with a plain NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                self.raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        check(fd)?;
        // SAFETY: a fresh fd from the kernel.
        Ok(Tree(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// `name`'s metadata, not following it; `None` when there is no such entry.
    pub fn stat(&self, name: &std::ffi::OsStr) -> io::Result<Option<libc::stat>> {
        let c = entry_name(name)?;
        // SAFETY: all-zero is a valid `stat`; fstatat fills it, not following a link.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our dir fd, a plain NUL-terminated name, a stat to fill.
        let r = unsafe {
            libc::fstatat(
                self.raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        match check(r) {
            Ok(()) => Ok(Some(st)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The names in this directory (`.` and `..` left out).
    pub fn names(&self) -> io::Result<Vec<std::ffi::OsString>> {
        use std::os::unix::ffi::OsStringExt;
        // SAFETY: openat of "." on our dir fd, for a separate read position.
        let fd = unsafe {
            libc::openat(
                self.raw_fd(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        check(fd)?;
        // SAFETY: a fresh fd from the kernel, owned by the nix Dir from here on.
        let mut dir =
            nix::dir::Dir::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }).map_err(io::Error::from)?;
        let mut out = Vec::new();
        for e in dir.iter() {
            let e = e.map_err(io::Error::from)?;
            let name = e.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push(std::ffi::OsString::from_vec(name.to_vec()));
            }
        }
        Ok(out)
    }

    /// The value of the extended attribute `attr` of this directory, if it has it.
    pub fn xattr(&self, attr: &std::ffi::CStr) -> Option<Vec<u8>> {
        let mut buf = [0u8; 16];
        // SAFETY: fgetxattr on our fd into a stack buffer of the given length.
        let n = unsafe {
            libc::fgetxattr(
                self.raw_fd(),
                attr.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        (n >= 0).then(|| buf[..n as usize].to_vec())
    }

    /// Open the regular file `name` for reading (never a link, never blocking).
    pub fn open_file(&self, name: &std::ffi::OsStr) -> io::Result<File> {
        let c = entry_name(name)?;
        // SAFETY: openat on our dir fd with a plain NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                self.raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        check(fd)?;
        // SAFETY: a fresh fd from the kernel.
        let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        if !f.metadata()?.is_file() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(f)
    }

    /// The target of the link `name`.
    pub fn read_link(&self, name: &std::ffi::OsStr) -> io::Result<std::ffi::OsString> {
        use std::os::unix::ffi::OsStringExt;
        let c = entry_name(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: readlinkat on our dir fd into a buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                self.raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(std::ffi::OsString::from_vec(buf))
    }

    /// Remove `name`: a directory with everything in it (links removed, never followed).
    pub fn remove(&self, name: &std::ffi::OsStr) -> io::Result<()> {
        let c = entry_name(name)?;
        if let Some(st) = self.stat(name)? {
            let mut flags = 0;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                let sub = self.child(name)?;
                for n in sub.names()? {
                    sub.remove(&n)?;
                }
                flags = libc::AT_REMOVEDIR;
            }
            // SAFETY: unlinkat on our dir fd with a plain NUL-terminated name.
            check(unsafe { libc::unlinkat(self.raw_fd(), c.as_ptr(), flags) })?;
        }
        Ok(())
    }

    /// Make the directory `name`, or give an existing one `mode`.
    pub fn make_dir(&self, name: &std::ffi::OsStr, mode: u32) -> io::Result<()> {
        self.make_dir_as(name, mode, None)
    }

    /// [`Tree::make_dir`], and give the directory to `owner` (uid, gid) when one is named.
    pub fn make_dir_as(
        &self,
        name: &std::ffi::OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let c = entry_name(name)?;
        // SAFETY: mkdirat on our dir fd with a plain NUL-terminated name.
        let r = unsafe { libc::mkdirat(self.raw_fd(), c.as_ptr(), 0o700) };
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return Err(io::Error::last_os_error());
        }
        let sub = match self.child(name) {
            // A directory of ours with no read or search permission (a run may leave one so):
            // given 0700 through an O_PATH fd of it (not a link: O_NOFOLLOW|O_DIRECTORY), then
            // opened again.
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                // SAFETY: openat on our dir fd with a plain NUL-terminated name.
                let fd = unsafe {
                    libc::openat(
                        self.raw_fd(),
                        c.as_ptr(),
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    )
                };
                check(fd)?;
                // SAFETY: a fresh fd from the kernel.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                std::fs::set_permissions(
                    format!("/proc/self/fd/{}", fd.as_raw_fd()),
                    std::os::unix::fs::PermissionsExt::from_mode(0o700),
                )?;
                self.child(name)?
            }
            r => r?,
        };
        if let Some((uid, gid)) = owner {
            // SAFETY: fchown of an fd we own.
            check(unsafe { libc::fchown(sub.raw_fd(), uid, gid) })?;
        }
        // SAFETY: fchmod of an fd we own.
        check(unsafe { libc::fchmod(sub.raw_fd(), mode) })
    }

    /// Put an overlayfs whiteout (a character device 0:0, which needs no privilege since Linux
    /// 5.8) at `name`, where nothing is.
    pub fn put_whiteout(&self, name: &std::ffi::OsStr) -> io::Result<()> {
        let c = entry_name(name)?;
        // SAFETY: mknodat on our dir fd with a plain NUL-terminated name.
        check(unsafe { libc::mknodat(self.raw_fd(), c.as_ptr(), libc::S_IFCHR | 0o600, 0) })
    }

    /// Set the extended attribute `attr` of this directory.
    pub fn set_xattr(&self, attr: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
        // SAFETY: fsetxattr on our fd from a slice of the given length.
        check(unsafe {
            libc::fsetxattr(
                self.raw_fd(),
                attr.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        })
    }

    /// A name no entry has, for a file about to be renamed over another. Random as well as
    /// counted: pid 1 of a sandbox always has pid 1, and an entry a hostile run left under a
    /// name known in advance would make every later `O_EXCL` create fail.
    fn temp_name() -> CString {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut r = [0u8; 8];
        // SAFETY: getrandom into a stack buffer of the given length; a short read leaves
        // zeros, which only makes the name less unpredictable.
        unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), libc::GRND_NONBLOCK) };
        CString::new(format!(
            ".sandbox-run-{}-{n}-{:016x}",
            std::process::id(),
            u64::from_ne_bytes(r)
        ))
        .unwrap_or_default()
    }

    /// A fresh file beside the others, under a name no entry has, to be renamed over one.
    fn create_temp(&self) -> io::Result<(CString, File)> {
        let tmp = Self::temp_name();
        // SAFETY: openat on our dir fd with a fresh NUL-terminated name, never following.
        let fd = unsafe {
            libc::openat(
                self.raw_fd(),
                tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        };
        check(fd)?;
        // SAFETY: a fresh fd from the kernel.
        Ok((tmp, File::from(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Put a copy of `data` at `name` with `mode` and the times of `like`, replacing what was
    /// there (by rename: a link at `name` is replaced, not followed). Returns the bytes copied.
    pub fn put_file(
        &self,
        name: &std::ffi::OsStr,
        data: &mut File,
        mode: u32,
        like: &libc::stat,
    ) -> io::Result<u64> {
        self.put_file_as(name, data, mode, like, None)
    }

    /// [`Tree::put_file`], the new file given to `owner` (uid, gid) before it takes its name.
    pub fn put_file_as(
        &self,
        name: &std::ffi::OsStr,
        data: &mut File,
        mode: u32,
        like: &libc::stat,
        owner: Option<(u32, u32)>,
    ) -> io::Result<u64> {
        let c = entry_name(name)?;
        let (tmp, mut out) = self.create_temp()?;
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
        let done = io::copy(data, &mut out).and_then(|n| {
            copy_user_xattrs(data, &out);
            if let Some((uid, gid)) = owner {
                // SAFETY: fchown of an fd we own.
                check(unsafe { libc::fchown(out.as_raw_fd(), uid, gid) })?;
            }
            // SAFETY: fchmod and futimens of an fd we own, with a two-element times array.
            check(unsafe { libc::fchmod(out.as_raw_fd(), mode) })?;
            // SAFETY: as above.
            check(unsafe { libc::futimens(out.as_raw_fd(), times.as_ptr()) })?;
            Ok(n)
        });
        self.rename_over(&tmp, &c, name, done)
    }

    /// Put `data` at `name` with `mode`, replacing what was there, as [`Tree::put_file`].
    pub fn put_bytes(&self, name: &std::ffi::OsStr, data: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        let c = entry_name(name)?;
        let (tmp, mut out) = self.create_temp()?;
        let done = out.write_all(data).and_then(|()| {
            // SAFETY: fchmod of an fd we own.
            check(unsafe { libc::fchmod(out.as_raw_fd(), mode) })
        });
        self.rename_over(&tmp, &c, name, done)
    }

    /// The whole content of the regular file `name`, at most `cap` bytes; `None` when it is
    /// missing, not a regular file (never a link followed, never a blocking open) or larger.
    pub fn read_small(&self, name: &std::ffi::OsStr, cap: u64) -> Option<Vec<u8>> {
        let f = self.open_file(name).ok()?;
        let mut buf = Vec::new();
        f.take(cap + 1).read_to_end(&mut buf).ok()?;
        (buf.len() as u64 <= cap).then_some(buf)
    }

    /// Put a link to `target` at `name`, replacing what was there.
    pub fn put_link(&self, name: &std::ffi::OsStr, target: &std::ffi::OsStr) -> io::Result<()> {
        self.put_link_as(name, target, None)
    }

    /// [`Tree::put_link`], the link (not what it names) given to `owner` (uid, gid).
    pub fn put_link_as(
        &self,
        name: &std::ffi::OsStr,
        target: &std::ffi::OsStr,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let c = entry_name(name)?;
        let t = CString::new(target.as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let tmp = Self::temp_name();
        // SAFETY: symlinkat with NUL-terminated strings on our dir fd.
        check(unsafe { libc::symlinkat(t.as_ptr(), self.raw_fd(), tmp.as_ptr()) })?;
        let done = match owner {
            // SAFETY: fchownat of our own new link, never following it.
            Some((uid, gid)) => check(unsafe {
                libc::fchownat(
                    self.raw_fd(),
                    tmp.as_ptr(),
                    uid,
                    gid,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            }),
            None => Ok(()),
        };
        self.rename_over(&tmp, &c, name, done)
    }

    /// Rename `tmp` over `c` when `done` succeeded (a directory there is removed first), else
    /// remove `tmp`.
    fn rename_over<T>(
        &self,
        tmp: &CString,
        c: &CString,
        name: &std::ffi::OsStr,
        done: io::Result<T>,
    ) -> io::Result<T> {
        let done = done.and_then(|v| {
            if matches!(self.stat(name)?, Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR) {
                self.remove(name)?;
            }
            // SAFETY: renameat within our dir fd, plain NUL-terminated names.
            check(unsafe {
                libc::renameat(self.raw_fd(), tmp.as_ptr(), self.raw_fd(), c.as_ptr())
            })?;
            Ok(v)
        });
        if done.is_err() {
            // SAFETY: unlinkat of our own temporary name.
            unsafe { libc::unlinkat(self.raw_fd(), tmp.as_ptr(), 0) };
        }
        done
    }
}

/// `path` made absolute against `cwd` and normalized without touching the filesystem (`.`
/// dropped, `..` pops a component).
pub fn lexical(cwd: &Path, path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in cwd.join(path).components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// What [`open_dir_outside_links`] passed on its way: each directory and link, with its
/// metadata, for [`check_way`].
type Way = Vec<(PathBuf, libc::stat)>;

/// Open the directory `path` (absolute), following a link only where the link itself lies
/// outside `repo`: the caller's own path may go through links, the repo's may not. Links are
/// resolved one component at a time, at most 40 of them. Every directory and link passed on
/// the way is recorded in `way`.
fn open_dir_outside_links(path: &Path, repo: &Path, way: &mut Way) -> io::Result<OwnedFd> {
    let mut todo: Vec<PathBuf> = vec![path.to_path_buf()];
    let mut hops = 0;
    let mut cur = PathBuf::from("/");
    let mut fd = openat2(
        libc::AT_FDCWD,
        Path::new("/"),
        libc::O_PATH | libc::O_DIRECTORY,
        0,
        0,
    )?;
    while let Some(p) = todo.pop() {
        let comps: Vec<Component> = p.components().collect();
        for (i, c) in comps.iter().enumerate() {
            match c {
                Component::RootDir => {
                    cur = PathBuf::from("/");
                    fd = openat2(libc::AT_FDCWD, Path::new("/"), libc::O_PATH, 0, 0)?;
                }
                Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    cur.pop();
                    fd = openat2(libc::AT_FDCWD, &cur, libc::O_PATH | libc::O_DIRECTORY, 0, 0)?;
                }
                Component::Normal(n) => {
                    let next = openat2(
                        fd.as_raw_fd(),
                        Path::new(n),
                        libc::O_PATH | libc::O_NOFOLLOW,
                        0,
                        RESOLVE_NO_MAGICLINKS,
                    )?;
                    let here = cur.join(n);
                    let st = fstat(&next)?;
                    way.push((here.clone(), st));
                    if kind_of(st.st_mode) == Kind::Symlink {
                        if repo == Path::new("/") {
                            return Err(io::Error::other(format!(
                                "{} is a symlink, and with the repo unknown no link is followed",
                                here.display()
                            )));
                        }
                        if here.starts_with(repo) {
                            return Err(io::Error::other(format!(
                                "{} is a symlink inside the repo: not followed",
                                here.display()
                            )));
                        }
                        hops += 1;
                        if hops > 40 {
                            return Err(io::Error::from_raw_os_error(libc::ELOOP));
                        }
                        let target = std::fs::read_link(&here)?;
                        let rest: PathBuf = comps[i + 1..].iter().collect();
                        todo.push(rest);
                        todo.push(target);
                        break;
                    }
                    fd = next;
                    cur = here;
                }
            }
        }
    }
    // Must be a directory.
    if kind_of(fstat(&fd)?.st_mode) != Kind::Dir {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    Ok(fd)
}

/// The caller: the effective uid and gid of this process.
fn caller() -> (u32, u32) {
    (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    )
}

/// The uid that files of users this user namespace does not map show as, when the caller is
/// in a user namespace other than the first (`unshare --user`, a rootless container): there
/// host root's directories (`/`, `/home`) are owned by it, and which user really owns them
/// cannot be told, so it counts as root's. `None` in the initial user namespace, where it is
/// a user like any other (`nobody`).
pub fn unmapped_uid() -> Option<u32> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let initial = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    if initial {
        return None;
    }
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .or(Some(65534))
}

/// May someone other than the caller (and root) write into the directory `st`: world-writable,
/// or group-writable by a group other than the caller's own (with user private groups, a
/// caller's 0775 directory is still the caller's alone)?
fn others_may_write(st: &libc::stat, gid: u32) -> bool {
    st.st_mode & 0o002 != 0 || (st.st_mode & 0o020 != 0 && st.st_gid != gid)
}

/// The way to a report outside the repo must be the caller's: no link on it owned by anyone
/// but the caller or root (its owner could point it elsewhere); no directory on it owned by
/// anyone else (its owner could replace what is below), nor writable by other users unless
/// sticky (`/tmp`: there only an entry's owner may rename or remove it). With `links_only`,
/// only the links are checked (the report is in the repo, whose own rules apply).
fn check_way(way: &Way, links_only: bool) -> io::Result<()> {
    let (uid, gid) = caller();
    let unmapped = unmapped_uid();
    let refuse = |p: &Path, why: String| {
        Err(io::Error::other(format!(
            "{} {why}: refused (the report must be made where only you or root can change it)",
            p.display()
        )))
    };
    for (p, st) in way {
        let owner_ok = st.st_uid == uid || st.st_uid == 0 || Some(st.st_uid) == unmapped;
        match kind_of(st.st_mode) {
            Kind::Symlink if !owner_ok => {
                return refuse(p, format!("is a symlink of uid {}", st.st_uid))
            }
            Kind::Dir if links_only => {}
            Kind::Dir if !owner_ok => {
                return refuse(p, format!("is a directory of uid {}", st.st_uid))
            }
            Kind::Dir if others_may_write(st, gid) && st.st_mode & libc::S_ISVTX == 0 => {
                return refuse(
                    p,
                    format!(
                        "is a directory other users may write to (mode {:o}, no sticky bit)",
                        st.st_mode & 0o7777
                    ),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// `fstatat(dirfd, name)`, not following a link; `None` when there is no such entry.
fn stat_at(dirfd: &OwnedFd, name: &CString) -> io::Result<Option<libc::stat>> {
    // SAFETY: all-zero is a valid `stat`; fstatat fills it, not following a link.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a dir fd we own, a NUL-terminated name, a stat to fill.
    let r = unsafe {
        libc::fstatat(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 {
        return Ok(Some(st));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOENT) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// A fresh report file at `name` in `dirfd` (a directory the caller controls): created under
/// a new name (`O_EXCL`, mode 0644 less the umask, owned by the caller) and renamed over
/// `name`, so that whatever was there (another user's file, a file with other hard links, one
/// others may write) is replaced, never written into.
fn fresh_file(
    dirfd: &OwnedFd,
    name: &std::ffi::OsStr,
    had: Option<&libc::stat>,
) -> io::Result<OwnedFd> {
    let c =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut rnd = [0u8; 8];
    // SAFETY: getrandom into a buffer of the given length.
    if unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) } != rnd.len() as isize {
        return Err(io::Error::last_os_error());
    }
    let tmp_name = format!(
        ".sandbox-run-report-{}",
        rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let tmp =
        CString::new(tmp_name.clone()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = openat2(
        dirfd.as_raw_fd(),
        Path::new(&tmp_name),
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY,
        0o644,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    )?;
    // SAFETY: renameat within one dir fd, NUL-terminated names.
    let r = unsafe {
        libc::renameat(
            dirfd.as_raw_fd(),
            tmp.as_ptr(),
            dirfd.as_raw_fd(),
            c.as_ptr(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        // SAFETY: unlinkat of our own fresh name.
        unsafe { libc::unlinkat(dirfd.as_raw_fd(), tmp.as_ptr(), 0) };
        return Err(match (e.raw_os_error(), had) {
            (Some(libc::EPERM | libc::EACCES), Some(st)) if st.st_uid != caller().0 => {
                io::Error::other(format!(
                    "an existing file of uid {} that may not be replaced here: refused (remove it or choose another path)",
                    st.st_uid
                ))
            }
            _ => e,
        });
    }
    Ok(fd)
}

/// Create the report file `path` before anything runs, as [`hostfs`](self) says.
///
/// - **Inside the repo** no link is followed (neither the file nor a directory on the way), a
///   FIFO does not block the open, and only a regular file with no other hard link is
///   accepted, then truncated.
/// - **Outside it** (or with the repo unknown, `repo` = `/`: then no link is followed at all)
///   the way must be the caller's ([`check_way`]: no link or directory of another user on it,
///   no directory others may write to unless sticky), and the report is a fresh file of the
///   caller's renamed over the name ([`fresh_file`]): never a file someone else made or can
///   write. A FIFO or a character device of the caller's or root's (`--report >(jq .)`,
///   `/dev/null`) is written as it is.
///
/// Returns the open file, ready for writing.
pub fn create_report(path: &Path, cwd: &Path, repo: &Path) -> io::Result<File> {
    let abs = lexical(cwd, path);
    let name = abs
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?
        .to_os_string();
    let parent = abs.parent().unwrap_or(Path::new("/"));
    let unknown = repo == Path::new("/");
    let (dirfd, inside) = match parent.strip_prefix(repo) {
        Ok(rel) if !unknown => (Dir::open(repo)?.subdir(rel)?.fd, true),
        _ => {
            let mut way = Way::new();
            let fd = open_dir_outside_links(parent, repo, &mut way)?;
            // Where did the caller's links lead? Into the repo, everything from there on must
            // be link-free: reopen beneath the repo from the resolved path.
            let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
            match real.strip_prefix(repo) {
                Ok(rel) if !unknown => {
                    check_way(&way, true)?;
                    (Dir::open(repo)?.subdir(rel)?.fd, true)
                }
                _ => {
                    check_way(&way, false)?;
                    (fd, !unknown && real == repo)
                }
            }
        }
    };
    let c =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let had = if inside { None } else { stat_at(&dirfd, &c)? };
    if had.is_some_and(|st| kind_of(st.st_mode) == Kind::Symlink) {
        // The name itself is never followed (nor replaced): it could not be told from one a
        // command planted. As before, ELOOP.
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let fresh = !inside && had.is_none_or(|st| kind_of(st.st_mode) == Kind::File);
    let fd = if fresh {
        fresh_file(&dirfd, &name, had.as_ref())?
    } else {
        openat2(
            dirfd.as_raw_fd(),
            Path::new(&name),
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0o644,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        )?
    };
    let st = fstat(&fd)?;
    let (uid, _) = caller();
    let ok =
        match kind_of(st.st_mode) {
            // A second name elsewhere (a hard link the command made) would be truncated too.
            Kind::File if inside && st.st_nlink > 1 => return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a file with other hard links (inside the repo only a file of its own is written)",
            )),
            Kind::File => true,
            // another user's FIFO or device: they would read, or feed, what the consumer gets
            Kind::Other if !inside && st.st_uid != uid && st.st_uid != 0 => {
                return Err(io::Error::other(format!(
                    "a FIFO or device of uid {}: refused (the report is written only to your own or root's)",
                    st.st_uid
                )))
            }
            Kind::Other if !inside => {
                matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFCHR)
            }
            _ => false,
        };
    if !ok {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            if inside {
                "not a regular file (inside the repo only a regular file is written)"
            } else {
                "not a regular file, FIFO or character device"
            },
        ));
    }
    // Blocking writes from now on (a pipe reader may be slow).
    // SAFETY: fcntl on our own fd.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    let file = File::from(fd);
    if kind_of(st.st_mode) == Kind::File {
        file.set_len(0)?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let base = crate::testdir::base().join(format!("hostfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("repo/sub")).unwrap();
        base
    }

    #[test]
    fn no_link_is_followed_beneath_the_repo() {
        let b = scratch("beneath");
        let repo = b.join("repo");
        std::fs::write(b.join("secret"), "s").unwrap();
        std::fs::write(repo.join("sub/file"), "data").unwrap();
        symlink(b.join("secret"), repo.join("link")).unwrap();
        symlink("../secret", repo.join("sub/rel")).unwrap();
        symlink(&b, repo.join("dirlink")).unwrap();
        let d = Dir::open(&repo).unwrap();
        assert_eq!(
            d.read_small(Path::new("sub/file"), 100).unwrap().unwrap(),
            b"data"
        );
        assert_eq!(d.kind(Path::new("link")).unwrap(), Some(Kind::Symlink));
        assert_eq!(d.kind(Path::new("sub")).unwrap(), Some(Kind::Dir));
        assert_eq!(d.kind(Path::new("nope")).unwrap(), None);
        assert!(d.read_small(Path::new("link"), 100).is_err());
        assert!(d.read_small(Path::new("sub/rel"), 100).is_err());
        assert!(d.read_small(Path::new("dirlink/secret"), 100).is_err());
        assert!(d.kind(Path::new("dirlink/secret")).is_err());
        assert!(d.subdir(Path::new("dirlink")).is_err());
        assert!(d.read_small(Path::new("../secret"), 100).is_err());
        // bounded
        assert!(d.read_small(Path::new("sub/file"), 3).is_err());
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn a_fifo_or_device_is_refused_without_blocking() {
        let b = scratch("fifo");
        let repo = b.join("repo");
        nix::unistd::mkfifo(
            &repo.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        symlink("/dev/zero", repo.join("zero")).unwrap();
        let d = Dir::open(&repo).unwrap();
        assert!(d.read_small(Path::new("fifo"), 100).is_err());
        assert!(d.read_small(Path::new("zero"), 100).is_err());
        assert_eq!(d.kind(Path::new("fifo")).unwrap(), Some(Kind::Other));
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn the_report_never_goes_through_a_link_in_the_repo() {
        let b = scratch("report");
        let repo = b.join("repo");
        let target = b.join("target-file");
        std::fs::write(&target, "keep").unwrap();
        // a plain report in the repo and outside it
        create_report(Path::new("sub/r.json"), &repo, &repo).unwrap();
        assert!(repo.join("sub/r.json").is_file());
        create_report(&b.join("out.json"), &repo, &repo).unwrap();
        // the file itself is a link: refused, the target untouched
        symlink(&target, repo.join("r.json")).unwrap();
        assert!(create_report(Path::new("r.json"), &repo, &repo).is_err());
        // a directory on the way is a link
        symlink(&b, repo.join("d")).unwrap();
        assert!(create_report(Path::new("d/target-file"), &repo, &repo).is_err());
        // a FIFO in the repo: refused at once
        nix::unistd::mkfifo(
            &repo.join("f"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        assert!(create_report(Path::new("f"), &repo, &repo).is_err());
        // the caller's own link outside the repo is followed, into the repo too, but not
        // through a link the repo holds
        symlink(&repo, b.join("to-repo")).unwrap();
        create_report(&b.join("to-repo/sub/r2.json"), &repo, &repo).unwrap();
        assert!(repo.join("sub/r2.json").is_file());
        assert!(create_report(&b.join("to-repo/d/target-file"), &repo, &repo).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // a hard link in the repo: refused before truncation, the other name untouched
        std::fs::write(repo.join("sub/orig"), "keep").unwrap();
        std::fs::hard_link(repo.join("sub/orig"), repo.join("hard.json")).unwrap();
        assert!(create_report(Path::new("hard.json"), &repo, &repo).is_err());
        assert_eq!(
            std::fs::read_to_string(repo.join("sub/orig")).unwrap(),
            "keep"
        );
        // outside the repo, a character device is fine
        create_report(Path::new("/dev/null"), &repo, &repo).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn mount_points_are_made_without_links() {
        let b = scratch("mountpoint");
        let home = b.join("repo");
        std::fs::create_dir_all(b.join("outside")).unwrap();
        // made when missing, a directory or an empty file
        let fd = mount_point_beneath(&home, Path::new(".cargo/bin"), false).unwrap();
        assert_eq!(kind_of(fstat(&fd).unwrap().st_mode), Kind::Dir);
        mount_point_beneath(&home, Path::new(".rustup/settings.toml"), true).unwrap();
        assert!(home.join(".rustup/settings.toml").is_file());
        // a link on the way, or at the end, is refused and nothing is made where it points
        symlink(b.join("outside"), home.join(".local")).unwrap();
        let e = mount_point_beneath(&home, Path::new(".local/bin"), false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        assert!(mount_point_beneath(&home, Path::new(".local"), false).is_err());
        assert_eq!(std::fs::read_dir(b.join("outside")).unwrap().count(), 0);
        // a file where a directory goes
        std::fs::write(home.join(".nvm"), "x").unwrap();
        assert!(mount_point_beneath(&home, Path::new(".nvm/versions"), false).is_err());
        assert!(mount_point_beneath(&home, Path::new("../outside/x"), false).is_err());
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn lexical_normalizes_without_the_filesystem() {
        assert_eq!(
            lexical(Path::new("/a/b"), Path::new("../c/./d")),
            Path::new("/a/c/d")
        );
        assert_eq!(
            lexical(Path::new("/a"), Path::new("/x/../y")),
            Path::new("/y")
        );
    }
}
