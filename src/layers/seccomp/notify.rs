//! The supervisor's side of seccomp user notification: the workload's filter sends what it
//! refuses (and, with `--observe`, its allowed path lookups) to a listener fd the supervisor
//! holds; this answers each call and names it.
//!
//! * The decision is never made here: each notified call's registers are run through the
//!   policy's errno program ([`super::interp`]), the very program the kernel would have run.
//!   `ERRNO(x)` is answered `-x` (what the command sees is what it would have seen), and named
//!   as a [`Refusal`]; `ALLOW` (only observed path lookups get here) is answered
//!   `SECCOMP_USER_NOTIF_FLAG_CONTINUE` after the path is noted: the kernel then runs the call
//!   with the registers the decision was made on, and landlock and the mounts still decide the
//!   lookup itself. Nothing read from the command's memory decides anything.
//! * Never blocks: each wake answers what is pending, at most [`BATCH`] calls, then returns to
//!   the supervisor's poll. A target that died meanwhile (ENOENT) is skipped.
//! * Bounded: the command is hostile and the supervisor is outside its cgroup. After
//!   [`BOUND`] refusals the listener is closed: the kernel then answers every call the filter
//!   would notify with `ENOSYS` itself (still refused) and the count is marked cut. Under
//!   `--observe` the listener stays (the lookups must go on) and past the bound only the
//!   answers continue. At most [`PATHS`] distinct paths are kept, the rest counted.

use super::interp::{self, Data};
use crate::refusal::{Access, PathSeen, Refusal, Refusals};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Refusals answered before the listener is closed.
pub const BOUND: u64 = 100_000;
/// Calls answered per wake of the supervisor's loop.
pub const BATCH: usize = 256;
/// Distinct paths kept under `--observe`.
pub const PATHS: usize = 4096;
/// The longest path read from the command's memory.
pub const PATH_MAX: usize = 4096;

pub struct Listener {
    fd: Option<OwnedFd>,
    errno: Vec<libc::sock_filter>,
    deny_listen: bool,
    observe: bool,
    verbose: bool,
    refusals: Refusals,
    /// Refused calls answered.
    pub answered: u64,
    /// The bound was reached: refusals past it were not counted.
    pub cut: bool,
    paths: Vec<PathSeen>,
    index: HashMap<(PathBuf, Access), usize>,
    /// Lookups not kept (past [`PATHS`] distinct paths).
    pub paths_dropped: u64,
}

impl Listener {
    pub fn new(fd: OwnedFd, opts: &super::Options, verbose: bool) -> Result<Listener, String> {
        let filters = super::build(opts)?;
        Ok(Listener {
            fd: Some(fd),
            errno: filters.errno_program().to_vec(),
            deny_listen: opts.deny_listen,
            observe: opts.observe,
            verbose,
            refusals: Refusals::default(),
            answered: 0,
            cut: false,
            paths: Vec::new(),
            index: HashMap::new(),
            paths_dropped: 0,
        })
    }

    /// The fd to poll for `POLLIN` (`None` once closed).
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    /// Every process of the filter is gone (`POLLHUP`): nothing more will come.
    pub fn close(&mut self) {
        self.fd = None;
    }

    /// Answers the pending calls (at most [`BATCH`]); `say` gets each new refusal's `-v` line.
    pub fn serve(&mut self, say: &mut dyn FnMut(String)) {
        for _ in 0..BATCH {
            let Some(fd) = self.fd.as_ref().map(|f| f.as_raw_fd()) else {
                return;
            };
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd on our stack, not waiting.
            if unsafe { libc::poll(&mut p, 1, 0) } <= 0 || p.revents & libc::POLLIN == 0 {
                return;
            }
            // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
            let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
            // SAFETY: NOTIF_RECV writes one seccomp_notif into `n`.
            if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) } != 0 {
                match nix::errno::Errno::last() {
                    // the caller died (or was interrupted) between the poll and the read
                    nix::errno::Errno::ENOENT | nix::errno::Errno::EINTR => continue,
                    _ => return,
                }
            }
            self.answer(fd, &n, say);
        }
    }

    fn answer(&mut self, fd: i32, n: &libc::seccomp_notif, say: &mut dyn FnMut(String)) {
        let d = Data::from_kernel(&n.data);
        let ret = interp::run(&self.errno, &d).ret;
        // SAFETY: plain data.
        let mut resp: libc::seccomp_notif_resp = unsafe { std::mem::zeroed() };
        resp.id = n.id;
        let refused = match ret & libc::SECCOMP_RET_ACTION_FULL {
            libc::SECCOMP_RET_ALLOW => {
                if self.observe && !self.cut {
                    self.note_paths(fd, n, &d, say);
                }
                resp.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32;
                None
            }
            libc::SECCOMP_RET_ERRNO => Some((ret & libc::SECCOMP_RET_DATA) as i32),
            // Never notified (the program keeps KILL and ENOSYS for the kernel): refused.
            _ => Some(libc::EPERM),
        };
        if let Some(errno) = refused {
            resp.error = -errno;
        }
        // SAFETY: NOTIF_SEND reads one seccomp_notif_resp; ENOENT (the caller died) is fine.
        unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
        let Some(errno) = refused else { return };
        self.answered += 1;
        if self.answered > BOUND {
            self.cut = true;
            if !self.observe {
                // From now on the kernel answers ENOSYS itself: still refused, costing us
                // nothing more.
                self.fd = None;
            }
            return;
        }
        let r = super::names::refusal(&d, errno, self.deny_listen);
        let line = self.verbose.then(|| format!("sandbox-run: {}\n", r.line()));
        if self.refusals.add(r) {
            if let Some(l) = line {
                say(l);
            }
        }
    }

    fn note_paths(
        &mut self,
        fd: i32,
        n: &libc::seccomp_notif,
        d: &Data,
        say: &mut dyn FnMut(String),
    ) {
        let nr = i64::from(d.nr);
        let sockaddr: super::bpf::PathArgs = &[(1, None)];
        let (args, access) = if super::bpf::socket_path_calls().contains(&nr) {
            let access = match nr {
                libc::SYS_bind => Access::Bind,
                _ => Access::Socket,
            };
            (sockaddr, access)
        } else {
            match super::bpf::path_calls().into_iter().find(|(c, _)| *c == nr) {
                Some((_, args)) => (args, access(nr, &d.args)),
                None => return,
            }
        };
        for &(arg, dirfd) in args {
            let addr = d.args[arg as usize];
            let raw = if matches!(access, Access::Socket | Access::Bind) {
                unix_path(n.pid, addr, d.args[2])
            } else {
                read_string(n.pid, addr)
            };
            let Some(raw) = raw else {
                continue;
            };
            // The pid may have been reused since the call: what we read counts only if the
            // call is still waiting for us.
            let mut id = n.id;
            // SAFETY: NOTIF_ID_VALID reads one u64.
            if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) } != 0 {
                return;
            }
            let path = PathBuf::from(
                <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(raw),
            );
            let abstract_name =
                matches!(access, Access::Socket | Access::Bind) && raw_is_abstract(&path);
            let path = if path.is_absolute() || abstract_name {
                path
            } else {
                let base = match dirfd.map(|i| d.args[i as usize] as i32) {
                    Some(dfd) if dfd != libc::AT_FDCWD => format!("/proc/{}/fd/{dfd}", n.pid),
                    _ => format!("/proc/{}/cwd", n.pid),
                };
                match std::fs::read_link(&base) {
                    Ok(b) => b.join(path),
                    Err(_) => continue,
                }
            };
            if self.note(path.clone(), access) && self.verbose {
                say(format!(
                    "sandbox-run: observed {}: {}\n",
                    access.as_str(),
                    shown(&path)
                ));
            }
        }
    }

    /// Counts a lookup; true when its path and access are new.
    fn note(&mut self, path: PathBuf, access: Access) -> bool {
        let key = (path, access);
        if let Some(&i) = self.index.get(&key) {
            self.paths[i].count += 1;
            return false;
        }
        if self.paths.len() >= PATHS {
            self.paths_dropped += 1;
            return false;
        }
        self.index.insert(key.clone(), self.paths.len());
        self.paths.push(PathSeen {
            path: key.0,
            access,
            errno: None,
            count: 1,
        });
        true
    }

    /// The paths noted so far (`--observe`), in the order first seen: `-v` judges the new ones.
    pub fn paths(&self) -> &[PathSeen] {
        &self.paths
    }

    /// The refusals named, in the order first seen.
    pub fn refusals(&self) -> &[Refusal] {
        self.refusals.as_slice()
    }

    /// What the run's [`crate::outcome::Finished`] keeps: the refusals and the paths.
    pub fn finish(self) -> (Vec<Refusal>, Vec<PathSeen>) {
        (self.refusals.into_vec(), self.paths)
    }
}

/// What a path call means to do with its path, from the call and its flags.
fn access(nr: i64, args: &[u64; 6]) -> Access {
    let open_flags = |f: u64| {
        let f = f as i32;
        if f & libc::O_CREAT != 0 {
            Access::Create
        } else if f & (libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) != 0 {
            Access::Write
        } else {
            Access::Read
        }
    };
    #[cfg(target_arch = "x86_64")]
    {
        match nr {
            libc::SYS_open => return open_flags(args[1]),
            libc::SYS_creat
            | libc::SYS_mkdir
            | libc::SYS_mknod
            | libc::SYS_unlink
            | libc::SYS_rmdir
            | libc::SYS_rename
            | libc::SYS_link
            | libc::SYS_symlink => return Access::Create,
            libc::SYS_chmod
            | libc::SYS_chown
            | libc::SYS_lchown
            | libc::SYS_utime
            | libc::SYS_utimes => return Access::Write,
            _ => {}
        }
    }
    match nr {
        libc::SYS_openat => open_flags(args[2]),
        libc::SYS_execve | libc::SYS_execveat => Access::Exec,
        libc::SYS_mkdirat
        | libc::SYS_mknodat
        | libc::SYS_unlinkat
        | libc::SYS_renameat
        | libc::SYS_renameat2
        | libc::SYS_linkat
        | libc::SYS_symlinkat => Access::Create,
        libc::SYS_truncate => Access::Truncate,
        libc::SYS_fchmodat | libc::SYS_fchownat | libc::SYS_utimensat => Access::Write,
        n if n == super::bpf::SYS_FCHMODAT2 => Access::Write,
        _ => Access::Read,
    }
}

/// The path of an `AF_UNIX` `sockaddr_un` of `len` bytes at `addr` in process `pid`'s memory,
/// or for an abstract name `@name`, as `ss` writes it (`None` for another family or an
/// unnamed socket). At most `sun_path`'s 108 bytes.
fn unix_path(pid: u32, addr: u64, len: u64) -> Option<Vec<u8>> {
    const SUN: usize = std::mem::size_of::<libc::sockaddr_un>();
    let len = usize::try_from(len).ok()?.min(SUN);
    if addr == 0 || len <= 2 {
        return None;
    }
    let mut buf = [0u8; SUN];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: reads at most `len` (<= SUN) bytes into `buf`; the remote address is only read
    // by the kernel, in the other process.
    let got = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    if got != len as isize || u16::from_ne_bytes([buf[0], buf[1]]) != libc::AF_UNIX as u16 {
        return None;
    }
    let path = &buf[2..len];
    if path[0] == 0 {
        // abstract: every byte of the address counts, NULs too (kept as they are; the line
        // that shows it escapes them)
        let mut name = b"@".to_vec();
        name.extend_from_slice(&path[1..]);
        return Some(name);
    }
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    // a relative path that starts with `@` is not an abstract name: `./@x`
    let dot = if path[0] == b'@' {
        &b"./"[..]
    } else {
        &b""[..]
    };
    (end > 0).then(|| [dot, &path[..end]].concat())
}

/// `@name`, as [`unix_path`] writes an abstract socket's name.
fn raw_is_abstract(p: &Path) -> bool {
    p.as_os_str().as_encoded_bytes().starts_with(b"@")
}

/// A NUL-terminated string at `addr` in process `pid`'s memory, at most [`PATH_MAX`] bytes,
/// read a page at a time (a read across into an unmapped page would fail whole).
fn read_string(pid: u32, addr: u64) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < PATH_MAX {
        let page_left = 4096 - (at % 4096) as usize;
        let want = page_left.min(PATH_MAX - out.len());
        let mut buf = vec![0u8; want];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: want,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: want,
        };
        // SAFETY: reads at most `want` bytes into `buf`, which is that long; the remote
        // address is only read by the kernel, in the other process.
        let got = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
        if got <= 0 {
            return None;
        }
        let got = got as usize;
        if let Some(end) = buf[..got].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..got]);
        at += got as u64;
    }
    None
}

/// The path as the sandbox sees it, for a line on the caller's stderr: the command chose its
/// bytes, so control characters (a terminal's escape sequences) are written out as `\u{1b}`,
/// never passed.
pub fn shown(p: &Path) -> String {
    p.to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::bpf::{self, Answer};
    use super::super::interp::{run, Data};
    use super::*;

    fn cases() -> Vec<Data> {
        let mut v = Vec::new();
        let arch = bpf::TARGET.unwrap();
        for nr in 0..1100u32 {
            v.push(Data {
                nr,
                arch,
                args: [0x41; 6],
            });
        }
        let interesting: [u64; 24] = [
            0,
            1,
            2,
            3,
            5,
            10,
            16,
            17,
            40,
            0o4755,
            0o2755,
            0o755,
            0o100,
            0x41,
            0x5412,
            0x541c,
            libc::CLONE_NEWUSER as u64,
            libc::CLONE_NEWNS as u64,
            0x2000_0000,
            262,
            30,
            6,
            libc::O_CREAT as u64 | 1,
            u64::MAX,
        ];
        for nr in bpf::conditional_syscalls()
            .into_iter()
            .chain([libc::SYS_listen])
        {
            for (i, x) in interesting.iter().enumerate() {
                for arg in 0..4 {
                    let mut args = [interesting[(i * 7 + arg) % 24]; 6];
                    args[arg] = *x;
                    v.push(Data {
                        nr: nr as u32,
                        arch,
                        args,
                    });
                }
            }
        }
        v
    }

    /// The notify and observe programs decide exactly like the errno program, except that a
    /// named errno becomes USER_NOTIF (and, observing, the allowed path lookups do too); the
    /// constant-ALLOW paths stay constant (cacheable) under Notify.
    #[test]
    fn notify_and_observe_decide_like_errno() {
        let arch = bpf::TARGET.unwrap();
        let paths = bpf::observed_calls();
        for deny_listen in [false, true] {
            let errno = bpf::program_for(arch, deny_listen, Answer::Errno).unwrap();
            for answer in [Answer::Notify, Answer::Observe] {
                let p = bpf::program_for(arch, deny_listen, answer).unwrap();
                let (mut notified, mut observed) = (0, 0);
                for d in cases() {
                    let want = run(&errno, &d);
                    let got = run(&p, &d);
                    let named = want.ret & libc::SECCOMP_RET_ACTION_FULL == libc::SECCOMP_RET_ERRNO
                        && bpf::NAMED_ERRNOS.contains(&(want.ret & libc::SECCOMP_RET_DATA));
                    let looked = answer == Answer::Observe
                        && want.ret == libc::SECCOMP_RET_ALLOW
                        && paths.contains(&d.nr);
                    if named {
                        notified += 1;
                        assert_eq!(got.ret, libc::SECCOMP_RET_USER_NOTIF, "{d:?} {answer:?}");
                    } else if looked {
                        observed += 1;
                        assert_eq!(got.ret, libc::SECCOMP_RET_USER_NOTIF, "{d:?} {answer:?}");
                    } else {
                        assert_eq!(got.ret, want.ret, "{d:?} {answer:?}");
                        if answer == Answer::Notify {
                            assert_eq!(got.read_args, want.read_args, "{d:?}");
                        }
                    }
                }
                assert!(notified > 1000, "{notified}");
                assert_eq!(observed > 100, answer == Answer::Observe, "{observed}");
            }
        }
    }

    /// ENOSYS (clone3, openat2, AIO) and KILL stay the kernel's, never notified.
    #[test]
    fn enosys_and_kill_are_not_notified() {
        let arch = bpf::TARGET.unwrap();
        let p = bpf::program_for(arch, false, Answer::Observe).unwrap();
        for nr in bpf::enosys_syscalls() {
            let d = Data {
                nr: nr as u32,
                arch,
                args: [0; 6],
            };
            assert_eq!(
                run(&p, &d).ret,
                libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
            );
        }
        let d = Data {
            nr: 0,
            arch: bpf::AUDIT_ARCH_I386,
            args: [0; 6],
        };
        assert_eq!(run(&p, &d).ret, libc::SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn a_path_shown_on_stderr_carries_no_control_characters() {
        let p = Path::new("/tmp/\u{1b}]52;c;aGk=\u{7}x\ny");
        let s = shown(p);
        assert!(!s.chars().any(char::is_control), "{s}");
        assert_eq!(s, "/tmp/\\u{1b}]52;c;aGk=\\u{7}x\\ny");
    }

    /// At most PATHS distinct paths are kept; the rest are counted, the known ones still
    /// counted on.
    #[test]
    fn observed_paths_are_bounded() {
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let opts = super::super::Options {
            observe: true,
            ..Default::default()
        };
        let mut l = Listener::new(fd, &opts, false).unwrap();
        for i in 0..PATHS + 10 {
            assert_eq!(
                l.note(PathBuf::from(format!("/p/{i}")), Access::Read),
                i < PATHS
            );
        }
        assert!(!l.note(PathBuf::from("/p/0"), Access::Read));
        assert!(!l.note(PathBuf::from("/p/0"), Access::Write));
        assert_eq!(l.paths_dropped, 11);
        let (_, paths) = l.finish();
        assert_eq!(paths.len(), PATHS);
        assert_eq!(paths[0].count, 2);
    }

    /// A unix address read as `--observe` reads it (here from our own memory): a path, an
    /// abstract name as `@name`, a relative path that starts with `@` kept apart from one.
    #[test]
    fn unix_addresses_are_read_bounded() {
        let read = |path: &[u8]| {
            // SAFETY: an all-zero sockaddr_un is valid.
            let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
            sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, s) in sun.sun_path.iter_mut().zip(path) {
                *d = *s as libc::c_char;
            }
            let len = 2 + path.len() as u64;
            unix_path(std::process::id(), &sun as *const _ as u64, len)
        };
        assert_eq!(read(b"/tmp/s\0").as_deref(), Some(&b"/tmp/s"[..]));
        assert_eq!(read(b"\0name").as_deref(), Some(&b"@name"[..]));
        assert_eq!(read(b"@rel\0").as_deref(), Some(&b"./@rel"[..]));
        assert_eq!(read(&[b'a'; 200]).map(|v| v.len()), Some(108));
    }

    #[test]
    fn access_from_the_flags() {
        let o = |f: i32| access(libc::SYS_openat, &[0, 0, f as u64, 0, 0, 0]);
        assert_eq!(o(libc::O_RDONLY), Access::Read);
        assert_eq!(o(libc::O_WRONLY), Access::Write);
        assert_eq!(o(libc::O_RDWR | libc::O_CREAT), Access::Create);
        assert_eq!(access(libc::SYS_execve, &[0; 6]), Access::Exec);
        assert_eq!(access(libc::SYS_mkdirat, &[0; 6]), Access::Create);
        assert_eq!(access(libc::SYS_truncate, &[0; 6]), Access::Truncate);
    }
}
