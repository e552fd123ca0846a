//! The seccomp layer against the real kernel: no mocks.
//!
//! Each probe runs in a child forked from this (multi-threaded) test process: the filters are
//! built here, before the fork; the child does only raw system calls on prepared data, installs
//! the filters, attempts the thing and reports through its exit code (0: the call succeeded,
//! otherwise its errno; 2xx: the probe itself went wrong). Every denial has a positive control
//! beside it: the same probe in a child WITHOUT the filters must succeed (or fail differently),
//! so each test fails if the layer is removed.

use sandbox_run::layers::seccomp::{self, Filters};

use std::cell::Cell;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The probe went wrong in a way that is no errno.
const UNEXPECTED: i32 = 200;
/// The setup before the filters failed.
const SETUP_FAILED: i32 = 201;
/// `Filters::install` failed.
const INSTALL_FAILED: i32 = 202;
/// `execve` failed (the errno is added).
const EXEC_FAILED: i32 = 210;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Exit(i32),
    Signal(i32),
    TimedOut,
}

const OK: Outcome = Outcome::Exit(0);
const EPERM: Outcome = Outcome::Exit(libc::EPERM);
const ENOSYS: Outcome = Outcome::Exit(libc::ENOSYS);
const SIGSYS: Outcome = Outcome::Signal(libc::SIGSYS);

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

fn filters() -> Filters {
    seccomp::build(&seccomp::Options::default()).expect("the seccomp filters compile")
}

fn errno() -> i32 {
    nix::errno::Errno::last_raw()
}

/// 0 when a raw call succeeded, else its errno.
fn code(rc: libc::c_long) -> i32 {
    if rc < 0 {
        errno()
    } else {
        0
    }
}

fn is_root() -> bool {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// How the child installs the seccomp layer.
#[derive(Clone, Copy)]
enum Layer<'a> {
    /// Positive control: no filter.
    None,
    /// The layer as the sandbox installs it.
    Installed(&'a Filters),
}

/// Forks; the child runs `setup` (before the filters), installs `layer`, runs `probe` and
/// `_exit`s with its result. The closures must only make raw system calls on data prepared
/// before the fork: no allocation, no locks, no printing, no panics.
fn in_child(
    layer: Layer,
    timeout: Duration,
    setup: impl FnOnce() -> bool,
    probe: impl FnOnce() -> i32,
) -> Outcome {
    // SAFETY: the child only runs async-signal-safe code until `_exit` or `execve`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: signal() on SIG_DFL; _exit ends the child without running any Rust code.
        unsafe {
            // Rust ignores SIGPIPE, and an ignored disposition survives exec.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            if !setup() {
                libc::_exit(SETUP_FAILED);
            }
            let installed = match layer {
                Layer::None => Ok(()),
                Layer::Installed(f) => f.install().map(|_| ()),
            };
            if installed.is_err() {
                libc::_exit(INSTALL_FAILED);
            }
            libc::_exit(probe());
        }
    }
    wait_for(pid, timeout)
}

fn wait_for(pid: libc::pid_t, timeout: Duration) -> Outcome {
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if r == pid {
            if libc::WIFEXITED(status) {
                return Outcome::Exit(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                return Outcome::Signal(libc::WTERMSIG(status));
            }
        }
        if Instant::now() > deadline {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Outcome::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn probe(layer: Layer, f: impl FnOnce() -> i32) -> Outcome {
    in_child(layer, Duration::from_secs(30), || true, f)
}

/// The same probe with and without the layer.
fn check(what: &str, f: impl Fn() -> i32 + Copy, with: Outcome, without: Outcome) {
    let fl = filters();
    assert_eq!(
        probe(Layer::None, f),
        without,
        "{what}: control, without the filter"
    );
    assert_eq!(
        probe(Layer::Installed(&fl), f),
        with,
        "{what}: with the filter"
    );
}

// ---------------------------------------------------------------------------------------------
// Denied calls, each with its control.

#[test]
fn io_uring_setup_is_denied() {
    // SAFETY: the kernel writes at most sizeof(struct io_uring_params) = 120 bytes.
    let f = || unsafe {
        let mut params = [0u8; 120];
        let fd = libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr());
        code(fd)
    };
    check("io_uring_setup", f, EPERM, OK);
}

#[test]
fn bpf_is_denied() {
    // An invalid command: EINVAL for anyone the filter lets through.
    let invalid = || {
        let mut attr = [0u8; 128];
        // SAFETY: attr is a valid buffer of the given size.
        code(unsafe { libc::syscall(libc::SYS_bpf, 0x7fff, attr.as_mut_ptr(), 128) })
    };
    check(
        "bpf(invalid cmd)",
        invalid,
        EPERM,
        Outcome::Exit(libc::EINVAL),
    );
    // BPF_MAP_CREATE of a 1-entry array map: works as root.
    let map_create = || {
        let mut attr = [0u32; 32];
        attr[0] = 2; // BPF_MAP_TYPE_ARRAY
        attr[1] = 4; // key_size
        attr[2] = 4; // value_size
        attr[3] = 1; // max_entries

        // SAFETY: attr is a valid `union bpf_attr` prefix of the given size.
        code(unsafe { libc::syscall(libc::SYS_bpf, 0, attr.as_mut_ptr(), 128) })
    };
    if is_root() {
        check("bpf(BPF_MAP_CREATE)", map_create, EPERM, OK);
    }
}

#[test]
fn keyctl_and_add_key_are_denied() {
    // KEYCTL_GET_KEYRING_ID(KEY_SPEC_PROCESS_KEYRING, create): a keyring for this child only.
    // SAFETY: integer arguments.
    let f = || code(unsafe { libc::syscall(libc::SYS_keyctl, 0, -2, 1) });
    check("keyctl", f, EPERM, OK);
    let add_key = || {
        // SAFETY: valid NUL-terminated strings and payload.
        code(unsafe {
            libc::syscall(
                libc::SYS_add_key,
                c"user".as_ptr(),
                c"seccomp-test".as_ptr(),
                c"x".as_ptr(),
                1usize,
                -2, // KEY_SPEC_PROCESS_KEYRING
            )
        })
    };
    check("add_key", add_key, EPERM, OK);
}

#[test]
fn ptrace_traceme_is_denied() {
    // SAFETY: integer arguments.
    let f = || code(unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0) });
    check("ptrace(PTRACE_TRACEME)", f, EPERM, OK);
}

#[test]
fn process_vm_readv_is_denied() {
    let f = || {
        let src = [7u8; 16];
        let mut dst = [0u8; 16];
        let local = libc::iovec {
            iov_base: dst.as_mut_ptr().cast(),
            iov_len: 16,
        };
        let remote = libc::iovec {
            iov_base: src.as_ptr() as *mut _,
            iov_len: 16,
        };
        // SAFETY: both iovecs describe live buffers of this process.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_vm_readv,
                libc::getpid() as libc::c_long,
                &local as *const libc::iovec,
                1 as libc::c_ulong,
                &remote as *const libc::iovec,
                1 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        match r {
            16 if dst == src => 0,
            r if r < 0 => errno(),
            _ => UNEXPECTED,
        }
    };
    check("process_vm_readv", f, EPERM, OK);
}

#[test]
fn userfaultfd_is_denied() {
    // UFFD_USER_MODE_ONLY (1) is allowed to unprivileged users too.
    // SAFETY: integer argument.
    let f = || code(unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1) });
    check("userfaultfd", f, EPERM, OK);
}

#[test]
fn perf_event_open_is_denied() {
    let f = || {
        let mut attr = [0u8; 64];
        attr[0] = 1; // PERF_TYPE_SOFTWARE
        attr[4] = 64; // size (PERF_ATTR_SIZE_VER0)
        attr[8] = 1; // PERF_COUNT_SW_TASK_CLOCK
        attr[40] = 1 | 32 | 64; // disabled, exclude_kernel, exclude_hv

        // SAFETY: attr is a valid perf_event_attr of the size it declares.
        code(unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) })
    };
    // kernel.perf_event_paranoid may refuse an unprivileged user, with EACCES (not EPERM).
    let without = probe(Layer::None, f);
    assert!(
        without == OK || (!is_root() && without == Outcome::Exit(libc::EACCES)),
        "perf_event_open: control gave {without:?}"
    );
    check("perf_event_open", f, EPERM, without);
}

#[test]
fn mount_is_denied() {
    // In a private mount namespace of the child (made before the filter), so nothing leaks.
    let setup = || {
        // SAFETY: the child is single-threaded; plain syscalls.
        unsafe {
            let flags = if libc::geteuid() == 0 {
                libc::CLONE_NEWNS
            } else {
                libc::CLONE_NEWUSER | libc::CLONE_NEWNS
            };
            libc::unshare(flags) == 0
                && libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
        }
    };
    let f = || {
        // SAFETY: valid strings; mounts in the child's own mount namespace.
        code(unsafe {
            libc::mount(
                c"none".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        } as libc::c_long)
    };
    let fl = filters();
    let t = Duration::from_secs(30);
    let control = in_child(Layer::None, t, setup, f);
    if control == Outcome::Exit(SETUP_FAILED) && !is_root() {
        // Unprivileged, a mount namespace needs a user namespace: no control without one.
        skip_without_userns("mount", control);
        return;
    }
    assert_eq!(control, OK, "mount: control");
    assert_eq!(
        in_child(Layer::Installed(&fl), t, setup, f),
        EPERM,
        "mount: with the filter"
    );
    // The new mount API too.
    // SAFETY: a valid string.
    let fsopen = || code(unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), 1) });
    assert_eq!(
        in_child(Layer::None, t, setup, fsopen),
        OK,
        "fsopen: control"
    );
    assert_eq!(
        in_child(Layer::Installed(&fl), t, setup, fsopen),
        EPERM,
        "fsopen: filtered"
    );
}

#[test]
fn unshare_user_is_denied() {
    // SAFETY: the child is single-threaded, as unshare(CLONE_NEWUSER) requires.
    let f = || code(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as libc::c_long);
    check_userns("unshare(CLONE_NEWUSER)", f);
}

/// Is `user` (comma-separated) in `SANDBOX_RUN_TEST_REQUIRE`?
fn userns_required() -> bool {
    std::env::var("SANDBOX_RUN_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|f| f.trim() == "userns")
}

/// Skip (or fail, where user namespaces are required) a test that needs them for its control.
fn skip_without_userns(what: &str, without: Outcome) {
    assert!(
        !userns_required(),
        "{what}: user namespaces are required here, but without the filter: {without:?}"
    );
    eprintln!("SKIP {what}: no user namespaces for this user here ({without:?})");
}

/// Creating a user namespace: EPERM from the filter. The control, without it, succeeds; or,
/// where the host refuses user namespaces (user.max_user_namespaces=0: ENOSPC), fails with
/// another errno, which still tells the filter's answer apart. A host answering EPERM itself
/// cannot be told apart: skipped.
fn check_userns(what: &str, f: impl Fn() -> i32 + Copy) {
    let without = probe(Layer::None, f);
    if without != OK {
        if without == EPERM || userns_required() {
            skip_without_userns(what, without);
            return;
        }
        assert_eq!(without, Outcome::Exit(libc::ENOSPC), "{what}: control");
    }
    check(what, f, EPERM, without);
}

/// A raw `clone` with these flags; the new child exits at once, the caller reaps it.
fn raw_clone(flags: libc::c_long) -> i32 {
    // SAFETY: a fork-like clone (no CLONE_VM, no new stack): the child runs on a copy of our
    // memory and only calls _exit.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
    if pid == 0 {
        // SAFETY: ends the new child.
        unsafe { libc::_exit(0) };
    }
    reap(pid)
}

fn reap(pid: libc::c_long) -> i32 {
    if pid < 0 {
        return errno();
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    if r as libc::c_long == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        0
    } else {
        UNEXPECTED
    }
}

#[test]
fn clone_with_namespace_flags_is_denied() {
    let newuser = || raw_clone((libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_long);
    check_userns("clone(CLONE_NEWUSER)", newuser);
    let plain = || raw_clone(libc::SIGCHLD as libc::c_long);
    check("clone(SIGCHLD)", plain, OK, OK);
    if is_root() {
        let newpid = || raw_clone((libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_long);
        check("clone(CLONE_NEWPID)", newpid, EPERM, OK);
    }
}

fn raw_clone3() -> i32 {
    // SAFETY: clone_args is plain data; zero is a valid value for every field.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.exit_signal = libc::SIGCHLD as u64;
    // SAFETY: a fork-like clone3 (no CLONE_VM): the child only calls _exit.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    if pid == 0 {
        // SAFETY: ends the new child.
        unsafe { libc::_exit(0) };
    }
    reap(pid)
}

#[test]
fn clone3_gets_enosys() {
    let fl = filters();
    assert_eq!(probe(Layer::None, raw_clone3), OK, "clone3: control");
    // ENOSYS, not EPERM: what libc needs to fall back to clone, whose flags the filter checks.
    assert_eq!(
        probe(Layer::Installed(&fl), raw_clone3),
        ENOSYS,
        "clone3 with the filter"
    );
}

#[test]
fn setns_is_denied() {
    let f = || {
        // SAFETY: a valid path; setns into the namespace we are already in.
        unsafe {
            let fd = libc::open(
                c"/proc/self/ns/uts".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return UNEXPECTED;
            }
            code(libc::setns(fd, libc::CLONE_NEWUTS) as libc::c_long)
        }
    };
    // Joining a namespace needs CAP_SYS_ADMIN: without it the control fails too, so only root
    // has a control that proves something.
    let without = if is_root() { OK } else { EPERM };
    check("setns", f, EPERM, without);
}

/// Opens a pty pair, makes the slave the controlling terminal of a new session (so TIOCSTI
/// needs no capability), and leaves the slave fd in `slave`.
fn pty_setup(slave: &Cell<libc::c_int>) -> bool {
    // SAFETY: plain syscalls on fds we own.
    unsafe {
        let master = libc::open(c"/dev/ptmx".as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        if master < 0 {
            return false;
        }
        let unlock: libc::c_int = 0;
        if libc::ioctl(master, libc::TIOCSPTLCK, &unlock) != 0 {
            return false;
        }
        let s = libc::ioctl(master, libc::TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY);
        if s < 0 || libc::setsid() < 0 || libc::ioctl(s, libc::TIOCSCTTY, 0) != 0 {
            return false;
        }
        slave.set(s);
        true
    }
}

fn tiocsti(fd: libc::c_int, request: u64) -> i32 {
    let c = b'x';
    // SAFETY: TIOCSTI reads one byte from a valid pointer.
    code(unsafe { libc::syscall(libc::SYS_ioctl, fd, request, &c as *const u8) })
}

#[test]
fn tiocsti_is_denied_on_the_low_32_bits() {
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").unwrap_or_default();
    if legacy.trim() == "0" {
        eprintln!("skip: dev.tty.legacy_tiocsti=0, TIOCSTI is refused with or without the filter");
        return;
    }
    let fl = filters();
    let t = Duration::from_secs(30);
    let slave = Cell::new(-1);
    let setup = || pty_setup(&slave);
    for (what, request) in [("TIOCSTI", TIOCSTI), ("TIOCSTI | 1<<32", TIOCSTI | 1 << 32)] {
        let f = || tiocsti(slave.get(), request);
        // The control: the kernel truncates the request to 32 bits, so both work unfiltered.
        assert_eq!(in_child(Layer::None, t, setup, f), OK, "{what}: control");
        assert_eq!(
            in_child(Layer::Installed(&fl), t, setup, f),
            EPERM,
            "{what}: filtered"
        );
    }
    // TIOCLINUX is refused before the driver sees it (unfiltered, a pty answers ENOTTY/EINVAL).
    let tioclinux = || tiocsti(slave.get(), TIOCLINUX);
    assert_ne!(
        in_child(Layer::None, t, setup, tioclinux),
        EPERM,
        "TIOCLINUX: control"
    );
    assert_eq!(
        in_child(Layer::Installed(&fl), t, setup, tioclinux),
        EPERM,
        "TIOCLINUX"
    );
    // Other ioctls on the same terminal still work (FIONREAD).
    let fionread = || {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        code(unsafe { libc::ioctl(slave.get(), libc::FIONREAD, &mut n) } as libc::c_long)
    };
    assert_eq!(
        in_child(Layer::Installed(&fl), t, setup, fionread),
        OK,
        "FIONREAD"
    );
}

#[test]
fn personality_allows_only_linux_and_query() {
    // SAFETY: personality takes an integer.
    let norandom = || {
        code(unsafe { libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) } as libc::c_long)
    };
    check("personality(ADDR_NO_RANDOMIZE)", norandom, EPERM, OK);
    // SAFETY: as above.
    let query = || code(unsafe { libc::personality(0xffff_ffff) } as libc::c_long);
    check("personality(0xffffffff)", query, OK, OK);
    // SAFETY: as above.
    let linux = || code(unsafe { libc::personality(0) } as libc::c_long);
    check("personality(PER_LINUX)", linux, OK, OK);
}

#[cfg(target_arch = "x86_64")]
fn int80_getpid() -> i32 {
    let ret: i32;
    // SAFETY: the i386 getpid (20) through the legacy gate: no memory is touched; the kernel
    // may clobber r8-r11 on this path.
    unsafe {
        std::arch::asm!(
            "int 0x80",
            inlateout("eax") 20i32 => ret,
            lateout("r8") _, lateout("r9") _, lateout("r10") _, lateout("r11") _,
            options(nostack),
        );
    }
    // SAFETY: no arguments.
    if ret == unsafe { libc::getpid() } {
        0
    } else if ret < 0 {
        -ret
    } else {
        UNEXPECTED
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn i386_int80_is_killed() {
    // Without the filter, i386 emulation answers (this kernel has it on).
    check("int 0x80 getpid", int80_getpid, SIGSYS, OK);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_numbers_are_killed() {
    // SAFETY: a system call number without arguments.
    let f = || code(unsafe { libc::syscall(libc::SYS_getpid | 0x4000_0000) });
    // Without the filter this kernel (x32 off) says ENOSYS; with x32 on it would succeed.
    let without = probe(Layer::None, f);
    assert!(
        without == ENOSYS || without == OK,
        "x32 getpid: control gave {without:?}"
    );
    check("x32 getpid", f, SIGSYS, without);
}

#[test]
fn fork_wait_pipe_getppid_loop_works() {
    let f = || {
        for _ in 0..50 {
            let mut fds = [0; 2];
            // SAFETY: plain syscalls on our own fds and children; the grandchild only writes
            // and _exits.
            unsafe {
                if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                    return errno();
                }
                let pid = libc::fork();
                if pid < 0 {
                    return errno();
                }
                if pid == 0 {
                    let ppid = libc::getppid();
                    let ok = libc::write(fds[1], (&ppid as *const libc::pid_t).cast(), 4) == 4;
                    libc::_exit(if ok { 0 } else { 1 });
                }
                libc::close(fds[1]);
                let mut got: libc::pid_t = 0;
                let n = libc::read(fds[0], (&mut got as *mut libc::pid_t).cast(), 4);
                libc::close(fds[0]);
                if reap(pid as libc::c_long) != 0 || n != 4 || got != libc::getpid() {
                    return UNEXPECTED;
                }
            }
        }
        0
    };
    check("fork/pipe/wait/getppid", f, OK, OK);
}

#[test]
fn install_is_repeatable_and_sets_no_new_privs() {
    let fl = filters();
    assert!(
        fl.instructions() > 100,
        "{} instructions",
        fl.instructions()
    );
    assert_eq!(seccomp::arch_name(), std::env::consts::ARCH);
    let f = || {
        // Installing twice only stacks the same filters again.
        if fl.install().is_err() {
            return INSTALL_FAILED;
        }
        // SAFETY: integer arguments.
        match unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } {
            1 => 0,
            _ => UNEXPECTED,
        }
    };
    assert_eq!(probe(Layer::Installed(&fl), f), OK);
    // PR_GET_SECCOMP says mode 2 (filter) after install, 0 before.
    // SAFETY: no arguments.
    let mode = || unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    assert_eq!(probe(Layer::Installed(&fl), mode), Outcome::Exit(2));
    assert_eq!(probe(Layer::None, mode), OK);
}

// ---------------------------------------------------------------------------------------------
// Real programs keep working under the filter.

/// `command -v NAME`: the first executable NAME on PATH.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| {
                    m.is_file() && {
                        use std::os::unix::fs::PermissionsExt;
                        m.permissions().mode() & 0o111 != 0
                    }
                })
                .unwrap_or(false)
        })
}

fn cstr(s: impl AsRef<OsStr>) -> CString {
    CString::new(s.as_ref().as_bytes()).expect("no NUL")
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "seccomp-layer-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `argv` in `dir`, under the filters, with the test's environment (less cargo's
/// build-time variables) and stdout+stderr to a file. Returns the outcome and the output.
fn run_program(layer: Layer, dir: &Path, argv: &[&OsStr], timeout: Duration) -> (Outcome, String) {
    let out_path = dir.join(".output");
    let out = cstr(&out_path);
    let cwd = cstr(dir);
    let args: Vec<CString> = argv.iter().map(cstr).collect();
    let env: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            !(k.starts_with("CARGO_") && k != "CARGO_HOME") && k != "RUST_TEST_THREADS"
        })
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).expect("no NUL")
        })
        .chain([cstr(format!("TMPDIR={}", dir.display()))])
        .collect();
    let mut argp: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argp.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());

    let setup = || {
        // SAFETY: prepared strings; the new fd replaces stdout and stderr.
        unsafe {
            let fd = libc::open(
                out.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                0o644,
            );
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            fd >= 0
                && null >= 0
                && libc::dup2(null, 0) == 0
                && libc::dup2(fd, 1) == 1
                && libc::dup2(fd, 2) == 2
                && libc::chdir(cwd.as_ptr()) == 0
        }
    };
    let exec = || {
        // SAFETY: argv and envp are NUL-terminated arrays of prepared C strings.
        unsafe {
            libc::execve(argp[0], argp.as_ptr(), envp.as_ptr());
        }
        EXEC_FAILED + errno()
    };
    let outcome = in_child(layer, timeout, setup, exec);
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    (outcome, output)
}

/// Runs the program under the filters and asserts it exits 0 and prints `marker` (printing its
/// output otherwise).
fn program_works(
    tag: &str,
    program: &str,
    args: &[&str],
    marker: &str,
    prepare: impl FnOnce(&Path),
) {
    let Some(exe) = which(program) else {
        eprintln!("skip {tag}: {program} is not on PATH");
        return;
    };
    let dir = TempDir::new(tag);
    prepare(&dir.0);
    let mut argv: Vec<&OsStr> = vec![exe.as_os_str()];
    argv.extend(args.iter().map(OsStr::new));
    let fl = filters();
    let (outcome, output) = run_program(
        Layer::Installed(&fl),
        &dir.0,
        &argv,
        Duration::from_secs(240),
    );
    assert_eq!(
        outcome,
        OK,
        "{tag}: `{}` under the seccomp filter failed; its output:\n{output}",
        exe.display()
    );
    assert!(
        output.contains(marker),
        "{tag}: `{marker}` missing from the output:\n{output}"
    );
    eprintln!("{tag}: ok ({} bytes of output)", output.len());
}

/// Shell: fail unless this shell runs under a seccomp filter.
const IN_FILTER: &str = "grep -q '^Seccomp:[[:space:]]*2$' /proc/self/status;";

const NODE_SCRIPT: &str = r#"
const fs = require('fs'), cp = require('child_process'), os = require('os');
const path = require('path'), net = require('net'), crypto = require('crypto');
const { Worker } = require('worker_threads');
if (!/^Seccomp:\s+2$/m.test(fs.readFileSync('/proc/self/status', 'utf8'))) throw new Error('no filter');
fs.readdirSync('/');
cp.execFileSync('/bin/true');
if (cp.execSync('echo hi').toString().trim() !== 'hi') throw new Error('sh -c');
const d = fs.mkdtempSync(path.join(os.tmpdir(), 'n-'));
fs.writeFileSync(path.join(d, 'a'), 'x'.repeat(1 << 20));
fs.renameSync(path.join(d, 'a'), path.join(d, 'b'));
fs.watch(d).close();
fs.rmSync(d, { recursive: true });
crypto.randomBytes(32);
crypto.createHash('sha256').update('x').digest('hex');
(async () => {
  await fs.promises.readFile('/etc/passwd');
  const answer = await new Promise((res, rej) => {
    const w = new Worker('require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
    w.on('message', res); w.on('error', rej);
  });
  if (answer !== 42) throw new Error('worker');
  await new Promise((res, rej) => {
    const srv = net.createServer(s => s.pipe(s)).listen(0, '127.0.0.1', () => {
      const c = net.connect(srv.address().port, '127.0.0.1', () => c.write('ping'));
      c.on('data', b => { c.end(); srv.close(); b.toString() === 'ping' ? res() : rej(new Error('echo')); });
      c.on('error', rej);
    });
  });
  const out = await new Promise((res, rej) => {
    const c = cp.spawn(process.execPath, ['-e', 'process.stdout.write(String(1 + 1))']);
    let s = ''; c.stdout.on('data', b => s += b); c.on('close', () => res(s)); c.on('error', rej);
  });
  if (out !== '2') throw new Error('node child: ' + out);
  await new Promise(r => setTimeout(r, 20));
  console.log('node ok');
})().catch(e => { console.error(e); process.exit(1); });
"#;

#[test]
fn real_program_node() {
    program_works("node", "node", &["-e", NODE_SCRIPT], "node ok", |_| {});
}

#[test]
fn real_program_npm() {
    program_works("npm", "npm", &["--version"], ".", |_| {});
}

#[test]
fn real_program_git() {
    let Some(git) = which("git") else {
        eprintln!("skip git: not on PATH");
        return;
    };
    let script = format!(
        "set -e; {check} G={git}; $G --version; $G init -q r; cd r; echo x > f; $G add f; \
         $G -c user.name=t -c user.email=t@example.invalid commit -qm first; \
         $G log --oneline | grep -q first; $G status --porcelain; $G gc -q; echo git ok",
        check = IN_FILTER,
        git = git.display()
    );
    program_works("git", "bash", &["-c", &script], "git ok", |_| {});
}

const PYTHON_SCRIPT: &str = r#"
import subprocess, threading, tempfile, os, socket, multiprocessing, re
assert re.search(r'^Seccomp:\s+2$', open('/proc/self/status').read(), re.M), 'no filter'
subprocess.run(['/bin/true'], check=True)
assert subprocess.run(['/bin/sh', '-c', 'echo hi'], capture_output=True).stdout == b'hi\n'
out = []
ts = [threading.Thread(target=lambda: out.append(sum(range(100000)))) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert len(out) == 4
with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, 'f')
    with open(p, 'w') as f: f.write('x')
    os.rename(p, p + '2')
    assert os.listdir(d) == ['f2']
a, b = socket.socketpair(); a.sendall(b'x'); assert b.recv(1) == b'x'
if __name__ == '__main__':
    with multiprocessing.Pool(2) as pool:
        assert pool.map(abs, [-1, -2]) == [1, 2]
print('python ok')
"#;

#[test]
fn real_program_python3() {
    program_works(
        "python3",
        "python3",
        &["-c", PYTHON_SCRIPT],
        "python ok",
        |_| {},
    );
}

#[test]
fn real_program_cc() {
    let Some(cc) = which("cc") else {
        eprintln!("skip cc: not on PATH");
        return;
    };
    let script = format!(
        "set -e; {IN_FILTER} {} -O1 -o hello hello.c; ./hello | grep -qx 'hello'; echo cc ok",
        cc.display()
    );
    program_works("cc", "bash", &["-c", &script], "cc ok", |dir| {
        std::fs::write(
            dir.join("hello.c"),
            "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
        )
        .expect("hello.c");
    });
}

#[test]
fn real_program_cargo() {
    let Some(cargo) = which("cargo") else {
        eprintln!("skip cargo: not on PATH");
        return;
    };
    let script = format!(
        "set -e; {IN_FILTER} C={}; $C --version; $C new -q --vcs none hello; cd hello; \
         $C build -q --offline; ./target/debug/hello | grep -qx 'Hello, world!'; echo cargo ok",
        cargo.display()
    );
    program_works("cargo", "bash", &["-c", &script], "cargo ok", |_| {});
}
