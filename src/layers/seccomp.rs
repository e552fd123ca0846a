//! The seccomp layer: an allow-list of system calls, installed as the last step before `execve`.
//!
//! * Parent (supervisor, may allocate): [`build`] compiles the policy into BPF programs, once.
//! * Child (after `fork`, must not allocate): [`Filters::install`] sets `no_new_privs` and loads
//!   each program with raw `prctl`/`seccomp` calls on the prepared data. Nothing else.
//!
//! # Policy
//!
//! Everything not on the allow-list returns `EPERM`. Foreign architectures (the i386 `int 0x80`
//! entry on x86_64) and x32 system call numbers kill the whole process. `clone` is allowed only
//! without namespace flags, `ioctl` is allowed except `TIOCSTI` and `TIOCLINUX` (compared on the
//! low 32 bits, which is all the kernel looks at), `personality` only for `PER_LINUX` and the
//! query value `0xffffffff`.
//!
//! **No set-ID file.** The workload must never create or leave a set-user-ID or set-group-ID
//! file in a writable host path (the host's users would run it from the host's own mount,
//! where the sandbox's `nosuid` does not apply). Every mode argument with `S_ISUID` or
//! `S_ISGID` is refused with `EPERM`: `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `creat`,
//! `mkdir(at)`, `mknod(at)`, and `open`/`openat` when they create (`O_CREAT` or
//! `__O_TMPFILE`; without them the mode is ignored by the kernel and not looked at here). The
//! mode is a `umode_t`: the kernel keeps its low 16 bits, so the check masks the low 32-bit
//! word, and high garbage can neither hide the bits nor cause a false refusal. File
//! capabilities (`security.capability`) need `CAP_SETFCAP`, which the workload does not have.
//!
//! **Network.** Landlock's TCP rules hook `bind` and `connect` of plain TCP sockets only, so
//! what would pass beside them is refused here: socket families and protocols outside an
//! allow-list (MPTCP, SCTP, raw, packet, vsock, which is not per network namespace, netlink
//! other than `NETLINK_ROUTE`; see `socket_families`) get `EAFNOSUPPORT`; `MSG_FASTOPEN` in
//! `sendto`/`sendmsg`/`sendmmsg` flags and `setsockopt(IPPROTO_TCP, TCP_FASTOPEN_CONNECT)` get
//! `EPERM`. With [`Options::deny_listen`] (the host's network and no TCP port to bind),
//! `listen` is refused too (`EPERM`), because on an unbound socket it autobinds without the
//! bind hook; seccomp cannot tell socket kinds apart there, so `listen` on unix sockets is
//! refused as well in that mode. What host mode leaves open: UDP (landlock has no UDP rules:
//! the workload may send and receive datagrams anywhere the host can), ICMP ping sockets,
//! netlink route queries, unix sockets on paths landlock allows, and with ports listed in
//! `tcp_bind`, `listen` (an autobound port included).
//!
//! **ENOSYS for fallbacks.** `clone3` and `openat2` pass their flags and mode in memory, which
//! a classic BPF filter cannot read: they return `ENOSYS`, so libc and runtimes fall back to
//! `clone` and `openat`, which are checked. Legacy AIO (`io_setup` and friends) draws on the
//! host-wide `fs.aio-max-nr` pool, which a hostile run could drain for the host's own
//! programs: it returns `ENOSYS` too, on which callers (libaio users, databases) fall back to
//! threads.
//!
//! # Stacking
//!
//! One refusal per filter (seccompiler gives one match action per filter, and the hand-written
//! ones keep that shape), so the policy is four filters, installed in this order (see
//! [`Filters::filters`]):
//!
//! 1. `x32-guard` (x86_64 only, hand-written BPF): x32 numbers (`nr >= 0x4000_0000` with
//!    `AUDIT_ARCH_X86_64`) -> `KILL_PROCESS`; everything else -> `ALLOW`.
//! 2. `allow-list` (compiled here: a binary search on the number, see `allow_list`): arch
//!    check (`KILL_PROCESS` on mismatch), the allowed calls and their argument rules ->
//!    `ALLOW`; anything else -> `ERRNO(EPERM)`.
//! 3. `socket-families` (hand-written BPF): `socket`/`socketpair` outside the allowed families
//!    and protocols -> `ERRNO(EAFNOSUPPORT)`; anything else -> `ALLOW`.
//! 4. `enosys` (seccompiler): [`enosys_syscalls`] -> `ERRNO(ENOSYS)`; anything else -> `ALLOW`.
//!
//! The kernel runs every filter of the stack, newest first, and keeps the most restrictive
//! action; between two results of the same action (both `ERRNO`), the first one seen, i.e. the
//! one of the NEWEST filter, wins (`seccomp_run_filters` replaces the result only on a strict
//! `<`). `clone3` gets `EPERM` from the allow-list and `ENOSYS` from the last filter: the
//! `enosys` filter must be installed last for `ENOSYS` to win. `socket` and `socketpair` are
//! allowed by the allow-list, so only the `socket-families` filter can refuse them, and its
//! place does not matter. `KILL_PROCESS` beats everything, so the place of the x32 guard does
//! not matter either.
//!
//! Every filter returns a constant `ALLOW` for the argument-free allowed calls (no argument is
//! loaded on their path), so the kernel's seccomp action cache marks them and skips the BPF
//! programs entirely for them: `read`, `write`, `futex`, `mmap`... cost nothing extra. The
//! calls with argument rules (`openat` among them) run the whole stack.

use crate::layers::{Step, StepError};

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `__X32_SYSCALL_BIT`: x32 system call numbers have it set.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `AUDIT_ARCH_X86_64` (`EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`).
pub const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_I386` (`EM_386 | __AUDIT_ARCH_LE`).
pub const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64`.
pub const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// The namespace flags that `clone` must not carry.
pub const CLONE_NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | CLONE_NEWTIME) as u64;
/// `CLONE_NEWTIME` (not in every libc release).
const CLONE_NEWTIME: libc::c_int = 0x80;

/// `TIOCSTI`: push a byte into a terminal's input queue.
pub const TIOCSTI: u64 = 0x5412;
/// `TIOCLINUX`: virtual console subcommands (selection paste among them).
pub const TIOCLINUX: u64 = 0x541C;
/// `personality(0xffffffff)` only queries the current persona.
pub const PERSONALITY_QUERY: u64 = 0xffff_ffff;

// System calls newer than the libc constants (the same numbers on every architecture since
// 424, the unified table).
const SYS_CACHESTAT: i64 = 451;
/// `io_pgetevents` (libc lacks the constant; before the unified table, so per architecture).
#[cfg(target_arch = "x86_64")]
const SYS_IO_PGETEVENTS: i64 = 333;
#[cfg(not(target_arch = "x86_64"))]
const SYS_IO_PGETEVENTS: i64 = 292;
const SYS_FCHMODAT2: i64 = 452;
const SYS_MAP_SHADOW_STACK: i64 = 453;
const SYS_FUTEX_WAKE: i64 = 454;
const SYS_FUTEX_WAIT: i64 = 455;
const SYS_FUTEX_REQUEUE: i64 = 456;
const SYS_SETXATTRAT: i64 = 463;
const SYS_GETXATTRAT: i64 = 464;
const SYS_LISTXATTRAT: i64 = 465;
const SYS_REMOVEXATTRAT: i64 = 466;

/// Allowed whatever the arguments, on every supported architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const ALLOWED_COMMON: &[i64] = &[
    // file descriptors and file I/O
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_getdents64,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_fcntl,
    libc::SYS_flock,
    libc::SYS_pipe2,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_sync,
    libc::SYS_syncfs,
    libc::SYS_sync_file_range,
    libc::SYS_truncate,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_readahead,
    libc::SYS_fadvise64,
    libc::SYS_copy_file_range,
    libc::SYS_sendfile,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_vmsplice,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    SYS_CACHESTAT,
    // paths
    libc::SYS_getcwd,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_umask,
    // extended attributes
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    SYS_SETXATTRAT,
    SYS_GETXATTRAT,
    SYS_LISTXATTRAT,
    SYS_REMOVEXATTRAT,
    // event notification and polling
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    libc::SYS_signalfd4,
    libc::SYS_inotify_init1,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    libc::SYS_ppoll,
    libc::SYS_pselect6,
    // sockets (the network namespace and landlock decide where they can go; `socket`,
    // `socketpair`, `listen`, the `send*` calls and `setsockopt` have argument rules)
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_recvmmsg,
    libc::SYS_getsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_shutdown,
    // memory
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_msync,
    libc::SYS_mincore,
    libc::SYS_madvise,
    libc::SYS_mlock,
    libc::SYS_mlock2,
    libc::SYS_munlock,
    libc::SYS_mlockall,
    libc::SYS_munlockall,
    libc::SYS_membarrier,
    libc::SYS_memfd_create,
    libc::SYS_pkey_mprotect,
    libc::SYS_pkey_alloc,
    libc::SYS_pkey_free,
    libc::SYS_mbind,
    libc::SYS_set_mempolicy,
    libc::SYS_get_mempolicy,
    libc::SYS_set_mempolicy_home_node,
    libc::SYS_mseal,
    SYS_MAP_SHADOW_STACK,
    // processes and threads
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_set_tid_address,
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_rseq,
    libc::SYS_futex,
    libc::SYS_futex_waitv,
    SYS_FUTEX_WAKE,
    SYS_FUTEX_WAIT,
    SYS_FUTEX_REQUEUE,
    libc::SYS_prctl,
    libc::SYS_seccomp,
    libc::SYS_restart_syscall,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal,
    libc::SYS_getcpu,
    libc::SYS_sched_yield,
    libc::SYS_sched_setparam,
    libc::SYS_sched_getparam,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min,
    libc::SYS_sched_rr_get_interval,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setattr,
    libc::SYS_sched_getattr,
    libc::SYS_getpriority,
    libc::SYS_setpriority,
    libc::SYS_ioprio_get,
    libc::SYS_ioprio_set,
    libc::SYS_getrlimit,
    libc::SYS_setrlimit,
    libc::SYS_prlimit64,
    libc::SYS_getrusage,
    // signals
    libc::SYS_kill,
    libc::SYS_tkill,
    libc::SYS_tgkill,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigpending,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_rt_sigsuspend,
    libc::SYS_sigaltstack,
    // identity (harmless without capabilities)
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_gettid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getresuid,
    libc::SYS_getresgid,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_getgroups,
    libc::SYS_setgroups,
    libc::SYS_getpgid,
    libc::SYS_setpgid,
    libc::SYS_getsid,
    libc::SYS_setsid,
    libc::SYS_capget,
    libc::SYS_capset,
    // time
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_gettimeofday,
    libc::SYS_getitimer,
    libc::SYS_setitimer,
    libc::SYS_timer_create,
    libc::SYS_timer_settime,
    libc::SYS_timer_gettime,
    libc::SYS_timer_getoverrun,
    libc::SYS_timer_delete,
    libc::SYS_times,
    // system information
    libc::SYS_uname,
    libc::SYS_sysinfo,
    libc::SYS_getrandom,
    // System V and POSIX IPC (the IPC namespace is private)
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmdt,
    libc::SYS_shmctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semctl,
    libc::SYS_semtimedop,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
];

/// The legacy calls that x86_64 still has (the generic table of aarch64 dropped them).
#[cfg(target_arch = "x86_64")]
const ALLOWED_ARCH: &[i64] = &[
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_access,
    libc::SYS_poll,
    libc::SYS_select,
    libc::SYS_pipe,
    libc::SYS_dup2,
    libc::SYS_getdents,
    libc::SYS_rename,
    libc::SYS_rmdir,
    libc::SYS_link,
    libc::SYS_unlink,
    libc::SYS_symlink,
    libc::SYS_readlink,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_epoll_create,
    libc::SYS_epoll_wait,
    libc::SYS_eventfd,
    libc::SYS_signalfd,
    libc::SYS_inotify_init,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_pause,
    libc::SYS_alarm,
    libc::SYS_time,
    libc::SYS_getpgrp,
    libc::SYS_arch_prctl,
];

#[cfg(target_arch = "aarch64")]
const ALLOWED_ARCH: &[i64] = &[];

#[cfg(target_arch = "x86_64")]
const TARGET: Option<(TargetArch, u32)> = Some((TargetArch::x86_64, AUDIT_ARCH_X86_64));
#[cfg(target_arch = "aarch64")]
const TARGET: Option<(TargetArch, u32)> = Some((TargetArch::aarch64, AUDIT_ARCH_AARCH64));
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const TARGET: Option<(TargetArch, u32)> = None;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ALLOWED_COMMON: &[i64] = &[];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ALLOWED_ARCH: &[i64] = &[];

/// The system calls allowed whatever their arguments, on this architecture.
pub fn unconditional_syscalls() -> impl Iterator<Item = i64> {
    ALLOWED_COMMON.iter().chain(ALLOWED_ARCH.iter()).copied()
}

/// The system calls with argument rules: `clone`, `ioctl`, `personality`, the calls that take a
/// file mode (set-ID bits refused), the `send*` calls (no `MSG_FASTOPEN`), `setsockopt` (no
/// `TCP_FASTOPEN_CONNECT`), and `socket`/`socketpair` (families and protocols, in the
/// `socket-families` filter). `listen` is allowed or refused whole, by [`Options::deny_listen`].
pub fn conditional_syscalls() -> Vec<i64> {
    let mut v = vec![libc::SYS_clone, libc::SYS_ioctl, libc::SYS_personality];
    v.extend(mode_calls().iter().map(|c| c.0));
    v.extend(open_calls().iter().map(|c| c.0));
    v.extend(SEND_CALLS.iter().map(|c| c.0));
    v.extend([libc::SYS_setsockopt, libc::SYS_socket, libc::SYS_socketpair]);
    v
}

/// The calls that return `ENOSYS`, so that libc and runtimes fall back to a call the filter can
/// judge (or to threads): `clone3` and `openat2` pass their flags and mode in memory, which
/// classic BPF cannot read; legacy AIO draws on the host-wide `fs.aio-max-nr` pool, which a
/// workload could drain for everyone.
pub fn enosys_syscalls() -> [i64; 8] {
    [
        libc::SYS_clone3,
        libc::SYS_openat2,
        libc::SYS_io_setup,
        libc::SYS_io_destroy,
        libc::SYS_io_submit,
        libc::SYS_io_cancel,
        libc::SYS_io_getevents,
        SYS_IO_PGETEVENTS,
    ]
}

/// `S_ISUID | S_ISGID`: no mode the workload passes may carry them.
pub const SETID_BITS: u64 = 0o6000;
/// `__O_TMPFILE` (`O_TMPFILE` without `O_DIRECTORY`): with it or `O_CREAT`, the open creates a
/// file and the kernel uses the mode argument; without both, the mode is ignored (and may be
/// garbage, so it is not looked at).
const O_TMPFILE_BIT: u64 = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64;
/// The open flags under which the mode argument counts (the kernel's `WILL_CREATE`).
pub const O_CREATE_BITS: u64 = libc::O_CREAT as u64 | O_TMPFILE_BIT;
/// `MSG_FASTOPEN`: connect and send in one call, past landlock's connect hook.
pub const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `TCP_FASTOPEN_CONNECT` (a `setsockopt` at `IPPROTO_TCP` level).
pub const TCP_FASTOPEN_CONNECT: u64 = 30;
/// `IPPROTO_MPTCP` (refused: landlock's TCP rules do not see MPTCP sockets).
pub const IPPROTO_MPTCP: u64 = 262;

/// The calls that take a file mode, with the index of the mode argument. The mode is a
/// `umode_t` (16 bits): only its low bits count, so the check masks the low 32-bit word.
fn mode_calls() -> Vec<(i64, u32)> {
    #[allow(unused_mut)]
    let mut v = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_mkdirat, 2),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_creat, 1),
        (libc::SYS_mkdir, 1),
        (libc::SYS_mknod, 1),
    ]);
    v
}

/// The calls that create a file only with [`O_CREATE_BITS`] in their flags: the number, the
/// index of the flags argument and that of the mode argument.
fn open_calls() -> Vec<(i64, u32, u32)> {
    #[allow(unused_mut)]
    let mut v = vec![(libc::SYS_openat, 2, 3)];
    #[cfg(target_arch = "x86_64")]
    v.push((libc::SYS_open, 1, 2));
    v
}

/// The calls that send with flags, with the index of the flags argument.
const SEND_CALLS: [(i64, u32); 3] = [
    (libc::SYS_sendto, 3),
    (libc::SYS_sendmsg, 2),
    (libc::SYS_sendmmsg, 3),
];

/// Choices the plan makes for the filters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    /// Refuse `listen` (`EPERM`), on every socket. Set when the workload shares the host's
    /// network and its profile allows no TCP bind: `listen` on an unbound socket autobinds an
    /// ephemeral port without passing landlock's bind hook.
    #[serde(default)]
    pub deny_listen: bool,
}

/// One compiled BPF program of the stack.
pub struct Filter {
    name: &'static str,
    program: Vec<libc::sock_filter>,
}

impl Filter {
    /// `x32-guard`, `allow-list`, `socket-families` or `enosys`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The BPF instructions, as the kernel receives them.
    pub fn program(&self) -> &[libc::sock_filter] {
        &self.program
    }

    /// Sets `no_new_privs` (idempotent) and loads this one program on the calling thread.
    /// Raw system calls on prepared data only: safe after `fork` in a multi-threaded process.
    pub fn install(&self) -> Result<(), StepError> {
        set_no_new_privs()?;
        self.load()
    }

    fn load(&self) -> Result<(), StepError> {
        let prog = libc::sock_fprog {
            // `build` checked that every program fits (BPF_MAXINSNS is 4096).
            len: self.program.len() as libc::c_ushort,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at `self.program`, which outlives the call; the kernel copies
        // the instructions and keeps no reference to our memory.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                0 as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc != 0 {
            return Err(last_error());
        }
        Ok(())
    }
}

/// Compiled filters, ready to install. Built once, in the parent.
pub struct Filters {
    /// In installation order (oldest first).
    filters: Vec<Filter>,
}

impl Filters {
    /// Sets `PR_SET_NO_NEW_PRIVS` (idempotent), then installs every filter in order, so that
    /// `enosys` is the newest. No allocation, no logging, no panic: safe in a child forked
    /// from a multi-threaded process. Errors name the step and carry the errno.
    pub fn install(&self) -> Result<(), StepError> {
        set_no_new_privs()?;
        for filter in &self.filters {
            filter.load()?;
        }
        Ok(())
    }

    /// Total BPF instructions over the stack (for the report and the benchmarks).
    pub fn instructions(&self) -> usize {
        self.filters.iter().map(|f| f.program.len()).sum()
    }

    /// The stack, in installation order (oldest first; the kernel runs them newest first).
    pub fn filters(&self) -> &[Filter] {
        &self.filters
    }
}

/// `"x86_64"`, `"aarch64"`: the architecture the filters are compiled for.
pub fn arch_name() -> &'static str {
    std::env::consts::ARCH
}

/// Compiles the policy for this architecture. The error text names what failed.
pub fn build(opts: &Options) -> Result<Filters, String> {
    let Some((arch, audit_arch)) = TARGET else {
        return Err(format!(
            "seccomp: architecture {} is not supported (x86_64 and aarch64 are)",
            arch_name()
        ));
    };
    let mut filters = Vec::with_capacity(4);
    if audit_arch == AUDIT_ARCH_X86_64 {
        filters.push(Filter {
            name: "x32-guard",
            program: x32_guard(),
        });
    }
    filters.push(Filter {
        name: "allow-list",
        program: allow_list(audit_arch, opts)?,
    });
    filters.push(Filter {
        name: "socket-families",
        program: socket_families(audit_arch)?,
    });
    let enosys = SeccompFilter::new(
        enosys_syscalls()
            .iter()
            .map(|nr| (*nr, Vec::new()))
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: enosys filter: {e}"))?;
    filters.push(Filter {
        name: "enosys",
        program: compile("enosys", enosys)?,
    });
    Ok(Filters { filters })
}

/// One argument check, on the low 32-bit word of argument `arg` (every argument checked here is
/// an `int`, a `umode_t` or flags of which the kernel reads only those bits).
#[derive(Debug, Clone, Copy)]
struct Cond {
    arg: u32,
    cmp: Cmp,
}

#[derive(Debug, Clone, Copy)]
enum Cmp {
    Eq(u32),
    Ne(u32),
    /// `(word & mask) == value`.
    MaskedEq(u32, u32),
}

fn cond(arg: u32, cmp: Cmp) -> Cond {
    Cond { arg, cmp }
}

/// What the allow-list does with one system call: allow it, or allow it when one of the rules
/// holds (every condition of the rule), else `EPERM`.
enum Entry {
    Allow,
    AnyOf(Vec<Vec<Cond>>),
}

/// The allow-list as data: every allowed call, in number order.
fn allow_list_entries(opts: &Options) -> Result<Vec<(u32, Entry)>, String> {
    let mut map: BTreeMap<i64, Entry> = BTreeMap::new();
    let mut insert = |nr: i64, e: Entry| {
        if map.insert(nr, e).is_some() {
            return Err(format!("seccomp: allow-list names syscall {nr} twice"));
        }
        Ok(())
    };
    for nr in unconditional_syscalls() {
        insert(nr, Entry::Allow)?;
    }
    // clone(flags, ...): the kernel reads only the low 32 bits of the flags (and the
    // namespace flags all live there): allowed when none of them is set.
    insert(
        libc::SYS_clone,
        Entry::AnyOf(vec![vec![cond(
            0,
            Cmp::MaskedEq(CLONE_NAMESPACE_FLAGS as u32, 0),
        )]]),
    )?;
    // ioctl(fd, request, ...): the kernel truncates the request to 32 bits, so compare only
    // those (a 64-bit compare is bypassed by setting a high bit).
    insert(
        libc::SYS_ioctl,
        Entry::AnyOf(vec![vec![
            cond(1, Cmp::Ne(TIOCSTI as u32)),
            cond(1, Cmp::Ne(TIOCLINUX as u32)),
        ]]),
    )?;
    // personality(persona): PER_LINUX or a query; ADDR_NO_RANDOMIZE and friends are refused.
    insert(
        libc::SYS_personality,
        Entry::AnyOf(vec![
            vec![cond(0, Cmp::Eq(0))],
            vec![cond(0, Cmp::Eq(PERSONALITY_QUERY as u32))],
        ]),
    )?;
    // No set-ID file: a mode with S_ISUID or S_ISGID is refused. The mode is a umode_t, of
    // which the kernel keeps the low 16 bits: a masked compare of the low 32-bit word sees
    // exactly the bits that count, whatever garbage the high ones hold.
    let no_setid = |arg: u32| cond(arg, Cmp::MaskedEq(SETID_BITS as u32, 0));
    for (nr, mode) in mode_calls() {
        insert(nr, Entry::AnyOf(vec![vec![no_setid(mode)]]))?;
    }
    // open(at): the mode counts only when the call creates (O_CREAT or __O_TMPFILE); else it
    // is ignored, and may be anything: allowed when not creating, or when the mode is clean.
    for (nr, flags, mode) in open_calls() {
        insert(
            nr,
            Entry::AnyOf(vec![
                vec![cond(flags, Cmp::MaskedEq(O_CREATE_BITS as u32, 0))],
                vec![no_setid(mode)],
            ]),
        )?;
    }
    // TCP Fast Open connects from inside sendto/sendmsg, past landlock's connect hook.
    for (nr, flags) in SEND_CALLS {
        insert(
            nr,
            Entry::AnyOf(vec![vec![cond(
                flags,
                Cmp::MaskedEq(MSG_FASTOPEN as u32, 0),
            )]]),
        )?;
    }
    // setsockopt(fd, level, optname, ...): anything but IPPROTO_TCP/TCP_FASTOPEN_CONNECT.
    insert(
        libc::SYS_setsockopt,
        Entry::AnyOf(vec![
            vec![cond(1, Cmp::Ne(libc::IPPROTO_TCP as u32))],
            vec![cond(2, Cmp::Ne(TCP_FASTOPEN_CONNECT as u32))],
        ]),
    )?;
    // Their arguments are the socket-families filter's business.
    insert(libc::SYS_socket, Entry::Allow)?;
    insert(libc::SYS_socketpair, Entry::Allow)?;
    if !opts.deny_listen {
        insert(libc::SYS_listen, Entry::Allow)?;
    }
    map.into_iter()
        .map(|(nr, e)| {
            u32::try_from(nr)
                .map(|nr| (nr, e))
                .map_err(|_| format!("seccomp: syscall number {nr} out of range"))
        })
        .collect()
}

/// Compiles the allow-list: arch check (`KILL_PROCESS` on another one), then a binary search on
/// the system call number, so that every call, the ones with argument rules included, is
/// decided in a few dozen instructions (a linear chain of ~300 numbers made an `openat` with
/// its mode check 15 % dearer). The paths of the unconditional calls load nothing but the
/// number and the arch, so the kernel's action cache still skips the filter for them.
fn allow_list(audit_arch: u32, opts: &Options) -> Result<Vec<libc::sock_filter>, String> {
    let entries = allow_list_entries(opts)?;
    let mut a = Asm::default();
    let arch_ok = a.label();
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jeq(audit_arch, Some(arch_ok), None);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    a.here(arch_ok);
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    search(&mut a, &entries);
    a.finish("allow-list")
}

/// Entries per leaf of the search: compared one by one.
const LEAF: usize = 8;

/// Emits the decision for `entries` (sorted), with the number in the accumulator. A leaf
/// compares each number and falls through to `EPERM`; an inner node splits at the middle
/// number, with a long jump (`ja`) to the upper half, which may be far away.
fn search(a: &mut Asm, entries: &[(u32, Entry)]) {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    if entries.len() > LEAF {
        let mid = entries.len() / 2;
        let (upper, lower) = (a.label(), a.label());
        a.jge(entries[mid].0, None, Some(lower));
        a.ja(upper);
        a.here(lower);
        search(a, &entries[..mid]);
        a.here(upper);
        search(a, &entries[mid..]);
        return;
    }
    let allow = a.label();
    let targets: Vec<usize> = entries
        .iter()
        .map(|(nr, e)| match e {
            Entry::Allow => {
                a.jeq(*nr, Some(allow), None);
                allow
            }
            Entry::AnyOf(_) => {
                let l = a.label();
                a.jeq(*nr, Some(l), None);
                l
            }
        })
        .collect();
    a.stmt(BPF_RET_K, eperm);
    a.here(allow);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    for ((_, e), target) in entries.iter().zip(targets) {
        let Entry::AnyOf(rules) = e else { continue };
        a.here(target);
        for rule in rules {
            let next = a.label();
            for c in rule {
                a.stmt(BPF_LD_W_ABS, seccomp_arg(c.arg));
                match c.cmp {
                    Cmp::Eq(v) => a.jeq(v, None, Some(next)),
                    Cmp::Ne(v) => a.jeq(v, Some(next), None),
                    Cmp::MaskedEq(mask, v) => {
                        a.stmt(BPF_ALU_AND_K, mask);
                        a.jeq(v, None, Some(next));
                    }
                }
            }
            a.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
            a.here(next);
        }
        a.stmt(BPF_RET_K, eperm);
    }
}

/// The socket families and protocols whose traffic the other layers can judge; anything else
/// is refused with `EAFNOSUPPORT`, the kernel's own answer for a family it was built without,
/// on which well-behaved programs fall back (Go's MPTCP probe, getaddrinfo, libaudit) where
/// `EPERM` would read as a hard failure.
///
/// * `socket`: `AF_UNIX` (any type); `AF_INET` and `AF_INET6` with `SOCK_STREAM` (protocol 0
///   or TCP) or `SOCK_DGRAM` (0, UDP, and ICMP / ICMPv6 for unprivileged ping sockets);
///   `AF_NETLINK` with `NETLINK_ROUTE` only (getaddrinfo, interface lists). `SOCK_NONBLOCK`
///   and `SOCK_CLOEXEC` are masked out of the type; any other flag bit is refused. Refused:
///   MPTCP (landlock's TCP rules miss it), SCTP, raw and packet sockets, vsock (not per
///   network namespace), other netlink protocols, every other family.
/// * `socketpair`: `AF_UNIX` only.
///
/// Hand-written: seccompiler's rules cannot express "masked value not equal".
fn socket_families(audit_arch: u32) -> Result<Vec<libc::sock_filter>, String> {
    let type_mask = !((libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u32);
    let mut a = Asm::default();
    let (allow, refuse) = (a.label(), a.label());
    let (socket, inet, inet6, stream, netlink) =
        (a.label(), a.label(), a.label(), a.label(), a.label());
    let (dgram4, dgram6) = (a.label(), a.label());
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    // Another architecture: the allow-list kills it.
    a.jeq(audit_arch, None, Some(allow));
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    a.jeq(libc::SYS_socket as u32, Some(socket), None);
    a.jeq(libc::SYS_socketpair as u32, None, Some(allow));
    // socketpair(domain, ...)
    a.stmt(BPF_LD_W_ABS, seccomp_arg(0));
    a.jeq(libc::AF_UNIX as u32, Some(allow), Some(refuse));
    // socket(domain, type, protocol)
    a.here(socket);
    a.stmt(BPF_LD_W_ABS, seccomp_arg(0));
    a.jeq(libc::AF_UNIX as u32, Some(allow), None);
    a.jeq(libc::AF_INET as u32, Some(inet), None);
    a.jeq(libc::AF_INET6 as u32, Some(inet6), None);
    a.jeq(libc::AF_NETLINK as u32, Some(netlink), Some(refuse));
    for (family, dgram, icmp) in [
        (inet, dgram4, libc::IPPROTO_ICMP),
        (inet6, dgram6, libc::IPPROTO_ICMPV6),
    ] {
        a.here(family);
        a.stmt(BPF_LD_W_ABS, seccomp_arg(1));
        a.stmt(BPF_ALU_AND_K, type_mask);
        a.jeq(libc::SOCK_STREAM as u32, Some(stream), None);
        a.jeq(libc::SOCK_DGRAM as u32, Some(dgram), Some(refuse));
        a.here(dgram);
        a.stmt(BPF_LD_W_ABS, seccomp_arg(2));
        a.jeq(0, Some(allow), None);
        a.jeq(libc::IPPROTO_UDP as u32, Some(allow), None);
        a.jeq(icmp as u32, Some(allow), Some(refuse));
    }
    a.here(stream);
    a.stmt(BPF_LD_W_ABS, seccomp_arg(2));
    a.jeq(0, Some(allow), None);
    a.jeq(libc::IPPROTO_TCP as u32, Some(allow), Some(refuse));
    a.here(netlink);
    a.stmt(BPF_LD_W_ABS, seccomp_arg(2));
    a.jeq(libc::NETLINK_ROUTE as u32, None, Some(refuse));
    a.stmt(BPF_LD_W_ABS, seccomp_arg(1));
    a.stmt(BPF_ALU_AND_K, type_mask);
    a.jeq(libc::SOCK_RAW as u32, Some(allow), None);
    a.jeq(libc::SOCK_DGRAM as u32, Some(allow), Some(refuse));
    a.here(refuse);
    a.stmt(
        BPF_RET_K,
        libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32,
    );
    a.here(allow);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    a.finish("socket-families")
}

/// `offsetof(struct seccomp_data, args[i])`, low 32-bit word (little-endian targets only).
fn seccomp_arg(i: u32) -> u32 {
    16 + 8 * i
}

/// A tiny assembler for hand-written classic BPF: conditional jumps name labels (`None`: the
/// next instruction), resolved to the 8-bit forward offsets BPF wants.
#[derive(Default)]
struct Asm {
    code: Vec<(u16, u32, Option<usize>, Option<usize>)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn here(&mut self, label: usize) {
        self.labels[label] = Some(self.code.len());
    }

    fn stmt(&mut self, code: u16, k: u32) {
        self.code.push((code, k, None, None));
    }

    fn jeq(&mut self, k: u32, jt: Option<usize>, jf: Option<usize>) {
        self.code.push((BPF_JMP_JEQ_K, k, jt, jf));
    }

    fn jge(&mut self, k: u32, jt: Option<usize>, jf: Option<usize>) {
        self.code.push((BPF_JMP_JGE_K, k, jt, jf));
    }

    /// An unconditional jump, with a 32-bit offset.
    fn ja(&mut self, to: usize) {
        self.code.push((BPF_JMP_JA, 0, Some(to), None));
    }

    fn finish(self, name: &str) -> Result<Vec<libc::sock_filter>, String> {
        let target = |at: usize, label: Option<usize>| -> Result<u8, String> {
            let Some(l) = label else { return Ok(0) };
            let to = self.labels[l].ok_or(format!("seccomp: {name}: label {l} never placed"))?;
            to.checked_sub(at + 1)
                .and_then(|off| u8::try_from(off).ok())
                .ok_or(format!(
                    "seccomp: {name}: jump from {at} to {to} out of range"
                ))
        };
        let program = self
            .code
            .iter()
            .enumerate()
            .map(|(at, &(code, k, jt, jf))| {
                if code == BPF_JMP_JA {
                    let to = jt.and_then(|l| self.labels[l]);
                    let off = to
                        .and_then(|to| to.checked_sub(at + 1))
                        .ok_or(format!("seccomp: {name}: bad long jump at {at}"))?;
                    return Ok(stmt(code, off as u32));
                }
                Ok(jump(code, k, target(at, jt)?, target(at, jf)?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        if program.len() > BPF_MAXINSNS {
            return Err(format!("seccomp: the {name} filter is too long"));
        }
        Ok(program)
    }
}

fn compile(name: &str, filter: SeccompFilter) -> Result<Vec<libc::sock_filter>, String> {
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| format!("seccomp: compiling the {name} filter: {e}"))?;
    if program.is_empty() || program.len() > BPF_MAXINSNS {
        return Err(format!(
            "seccomp: the {name} filter has {} instructions (1..={BPF_MAXINSNS} allowed)",
            program.len()
        ));
    }
    Ok(program
        .into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

const BPF_MAXINSNS: usize = 4096;

// Classic BPF opcodes (linux/bpf_common.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JA: u16 = 0x05;
const BPF_RET_K: u16 = 0x06;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
/// `offsetof(struct seccomp_data, nr)` and `arch`.
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// x86_64 only: the allow-list's arch check accepts x32 calls (they carry `AUDIT_ARCH_X86_64`),
/// and x32 numbers would otherwise dodge every per-number rule. Kill on them.
fn x32_guard() -> Vec<libc::sock_filter> {
    vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        // Other architectures: not this filter's business (the allow-list kills them).
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 0, 3),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
        jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}

fn set_no_new_privs() -> Result<(), StepError> {
    // SAFETY: plain prctl with integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(last_error());
    }
    Ok(())
}

/// The errno of the last failed call, read without allocating.
fn last_error() -> StepError {
    StepError::new(Step::SeccompInstall, nix::errno::Errno::last_raw())
}

#[cfg(test)]
mod tests {
    //! The compiled programs, run through a small classic-BPF interpreter and combined the way
    //! the kernel combines a stack. No privileges, nothing installed.
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Verdict {
        Allow,
        Errno(i32),
        KillProcess,
        Other(u32),
    }

    struct Data {
        nr: u32,
        arch: u32,
        args: [u64; 6],
    }

    fn data(nr: i64, args: &[u64]) -> Data {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        Data {
            nr: nr as u32,
            arch: TARGET.unwrap().1,
            args: a,
        }
    }

    fn word(d: &Data, off: u32) -> (u32, bool) {
        match off {
            0 => (d.nr, false),
            4 => (d.arch, false),
            16..=63 if off % 4 == 0 => {
                let arg = d.args[((off - 16) / 8) as usize];
                let v = if off % 8 == 0 {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                };
                (v, true)
            }
            _ => panic!("load of unexpected seccomp_data offset {off}"),
        }
    }

    /// Runs one program; also says whether the path read an argument (the kernel's action
    /// cache only caches paths that read nothing but `nr` and `arch`).
    fn run(prog: &[libc::sock_filter], d: &Data) -> (u32, bool) {
        let (ret, read_args, _) = run_counted(prog, d);
        (ret, read_args)
    }

    /// [`run`], also counting the instructions executed.
    fn run_counted(prog: &[libc::sock_filter], d: &Data) -> (u32, bool, usize) {
        let (mut a, mut pc, mut read_args, mut steps) = (0u32, 0usize, false, 0usize);
        loop {
            let i = &prog[pc];
            pc += 1;
            steps += 1;
            match i.code {
                0x20 => {
                    let (v, arg) = word(d, i.k);
                    a = v;
                    read_args |= arg;
                }
                0x54 => a &= i.k,
                0x05 => pc += i.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += if taken { i.jt } else { i.jf } as usize;
                }
                0x06 => return (i.k, read_args, steps),
                c => panic!("unexpected BPF opcode {c:#x}"),
            }
        }
    }

    /// `seccomp_run_filters`: newest first, keep the lowest action (as s32), strict `<`.
    fn verdict(filters: &[&[libc::sock_filter]], d: &Data) -> Verdict {
        let mut ret = libc::SECCOMP_RET_ALLOW;
        for prog in filters.iter().rev() {
            let (cur, _) = run(prog, d);
            if ((cur & 0xffff_0000) as i32) < ((ret & 0xffff_0000) as i32) {
                ret = cur;
            }
        }
        match ret & 0xffff_0000 {
            libc::SECCOMP_RET_ALLOW => Verdict::Allow,
            libc::SECCOMP_RET_ERRNO => Verdict::Errno((ret & 0xffff) as i32),
            libc::SECCOMP_RET_KILL_PROCESS => Verdict::KillProcess,
            _ => Verdict::Other(ret),
        }
    }

    fn stack(f: &Filters) -> Vec<&[libc::sock_filter]> {
        f.filters().iter().map(|f| f.program()).collect()
    }

    #[test]
    fn policy_table() {
        let f = build(&Options::default()).unwrap();
        let s = stack(&f);
        let eperm = Verdict::Errno(libc::EPERM);
        let table: &[(&str, i64, &[u64], Verdict)] = &[
            ("read", libc::SYS_read, &[0, 0, 0], Verdict::Allow),
            ("futex", libc::SYS_futex, &[], Verdict::Allow),
            ("seccomp", libc::SYS_seccomp, &[], Verdict::Allow),
            ("io_uring_setup", libc::SYS_io_uring_setup, &[], eperm),
            ("bpf", libc::SYS_bpf, &[], eperm),
            ("keyctl", libc::SYS_keyctl, &[], eperm),
            ("ptrace", libc::SYS_ptrace, &[], eperm),
            ("process_vm_readv", libc::SYS_process_vm_readv, &[], eperm),
            ("userfaultfd", libc::SYS_userfaultfd, &[], eperm),
            ("perf_event_open", libc::SYS_perf_event_open, &[], eperm),
            ("mount", libc::SYS_mount, &[], eperm),
            ("fsopen", libc::SYS_fsopen, &[], eperm),
            ("open_tree_attr", 467, &[], eperm),
            ("unshare", libc::SYS_unshare, &[], eperm),
            ("setns", libc::SYS_setns, &[], eperm),
            (
                "landlock_create_ruleset",
                libc::SYS_landlock_create_ruleset,
                &[],
                eperm,
            ),
            ("lsm_set_self_attr", 460, &[], eperm),
            ("pidfd_getfd", libc::SYS_pidfd_getfd, &[], eperm),
            (
                "clone3",
                libc::SYS_clone3,
                &[],
                Verdict::Errno(libc::ENOSYS),
            ),
            ("clone thread", libc::SYS_clone, &[0x3d0f00], Verdict::Allow),
            ("clone fork", libc::SYS_clone, &[0x1200011], Verdict::Allow),
            (
                "clone newuser",
                libc::SYS_clone,
                &[libc::CLONE_NEWUSER as u64 | 17],
                eperm,
            ),
            ("clone newtime", libc::SYS_clone, &[0x80 | 17], eperm),
            (
                "clone newns high bits",
                libc::SYS_clone,
                &[(1 << 32) | libc::CLONE_NEWNS as u64],
                eperm,
            ),
            (
                "ioctl FIONREAD",
                libc::SYS_ioctl,
                &[0, 0x541B],
                Verdict::Allow,
            ),
            ("ioctl TIOCSTI", libc::SYS_ioctl, &[0, TIOCSTI], eperm),
            (
                "ioctl TIOCSTI high",
                libc::SYS_ioctl,
                &[0, TIOCSTI | 1 << 32],
                eperm,
            ),
            ("ioctl TIOCLINUX", libc::SYS_ioctl, &[0, TIOCLINUX], eperm),
            (
                "ioctl TIOCLINUX high",
                libc::SYS_ioctl,
                &[0, TIOCLINUX | 0xffff_ffff << 32],
                eperm,
            ),
            ("personality 0", libc::SYS_personality, &[0], Verdict::Allow),
            (
                "personality query",
                libc::SYS_personality,
                &[PERSONALITY_QUERY],
                Verdict::Allow,
            ),
            (
                "personality norandom",
                libc::SYS_personality,
                &[0x0040000],
                eperm,
            ),
            (
                "x32 getpid",
                libc::SYS_getpid | X32_SYSCALL_BIT as i64,
                &[],
                if cfg!(target_arch = "x86_64") {
                    Verdict::KillProcess
                } else {
                    eperm
                },
            ),
            ("out of range", 0x1000, &[], eperm),
        ];
        for (what, nr, args, want) in table {
            assert_eq!(verdict(&s, &data(*nr, args)), *want, "{what}");
        }
        for (what, nr, args, want) in setid_table().iter().chain(&network_table()) {
            assert_eq!(verdict(&s, &data(*nr, args)), *want, "{what}");
        }
        for nr in enosys_syscalls() {
            let want = Verdict::Errno(libc::ENOSYS);
            assert_eq!(verdict(&s, &data(nr, &[])), want, "nr {nr}");
        }
        let listen = data(libc::SYS_listen, &[3, 128]);
        assert_eq!(verdict(&s, &listen), Verdict::Allow, "listen by default");
        let deny = build(&Options { deny_listen: true }).unwrap();
        assert_eq!(
            verdict(&stack(&deny), &listen),
            eperm,
            "listen, deny_listen"
        );
        assert_eq!(
            verdict(&stack(&deny), &data(libc::SYS_bind, &[3, 0, 16])),
            Verdict::Allow,
            "bind, deny_listen"
        );
    }

    type Row = (&'static str, i64, Vec<u64>, Verdict);

    /// No set-ID bit in any mode; the mode of an open counts only when it creates.
    fn setid_table() -> Vec<Row> {
        let eperm = Verdict::Errno(libc::EPERM);
        let allow = Verdict::Allow;
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
        let tmpfile = (libc::O_TMPFILE | libc::O_RDWR) as u64;
        let at = libc::AT_FDCWD as u32 as u64;
        let reg = libc::S_IFREG as u64;
        #[allow(unused_mut)]
        let mut t: Vec<Row> = vec![
            ("fchmod 0755", libc::SYS_fchmod, vec![3, 0o755], allow),
            (
                "fchmod 1777 (sticky)",
                libc::SYS_fchmod,
                vec![3, 0o1777],
                allow,
            ),
            ("fchmod 4755", libc::SYS_fchmod, vec![3, 0o4755], eperm),
            ("fchmod 2755", libc::SYS_fchmod, vec![3, 0o2755], eperm),
            ("fchmod 6755", libc::SYS_fchmod, vec![3, 0o6755], eperm),
            ("fchmod 4000", libc::SYS_fchmod, vec![3, 0o4000], eperm),
            // the kernel keeps 16 bits: garbage above them is no set-ID bit...
            (
                "fchmod garbage 0755",
                libc::SYS_fchmod,
                vec![3, 0xfff0_0000 | 0o755],
                allow,
            ),
            (
                "fchmod garbage hi 0755",
                libc::SYS_fchmod,
                vec![3, 0xffff_ffff_0000_0000 | 0o755],
                allow,
            ),
            // ...and cannot hide one either
            (
                "fchmod garbage 4755",
                libc::SYS_fchmod,
                vec![3, 0xffff_ffff_fff0_0000 | 0o4755],
                eperm,
            ),
            (
                "fchmodat 0644",
                libc::SYS_fchmodat,
                vec![at, 0, 0o644],
                allow,
            ),
            (
                "fchmodat 4755",
                libc::SYS_fchmodat,
                vec![at, 0, 0o4755],
                eperm,
            ),
            (
                "fchmodat 2755",
                libc::SYS_fchmodat,
                vec![at, 0, 0o2755],
                eperm,
            ),
            (
                "fchmodat2 0755",
                SYS_FCHMODAT2,
                vec![at, 0, 0o755, 0x100],
                allow,
            ),
            (
                "fchmodat2 4755",
                SYS_FCHMODAT2,
                vec![at, 0, 0o4755, 0x100],
                eperm,
            ),
            ("openat read", libc::SYS_openat, vec![at, 0, 0, 0], allow),
            // without O_CREAT/O_TMPFILE the mode is garbage: never a refusal
            (
                "openat read, garbage mode",
                libc::SYS_openat,
                vec![at, 0, 0, 0o6777],
                allow,
            ),
            (
                "openat creat 0644",
                libc::SYS_openat,
                vec![at, 0, creat, 0o644],
                allow,
            ),
            (
                "openat creat 4755",
                libc::SYS_openat,
                vec![at, 0, creat, 0o4755],
                eperm,
            ),
            (
                "openat creat 2755",
                libc::SYS_openat,
                vec![at, 0, creat, 0o2755],
                eperm,
            ),
            (
                "openat creat|excl 4755",
                libc::SYS_openat,
                vec![at, 0, creat | libc::O_EXCL as u64, 0o4755],
                eperm,
            ),
            (
                "openat creat hi 4755",
                libc::SYS_openat,
                vec![at, 0, creat, 0xffff_0000_0000_0000 | 0o4755],
                eperm,
            ),
            (
                "openat tmpfile 0600",
                libc::SYS_openat,
                vec![at, 0, tmpfile, 0o600],
                allow,
            ),
            (
                "openat tmpfile 2755",
                libc::SYS_openat,
                vec![at, 0, tmpfile, 0o2755],
                eperm,
            ),
            (
                "openat __O_TMPFILE 4755",
                libc::SYS_openat,
                vec![at, 0, O_TMPFILE_BIT, 0o4755],
                eperm,
            ),
            // flags are an int: a high bit is no O_CREAT
            (
                "openat hi creat bit",
                libc::SYS_openat,
                vec![at, 0, (libc::O_CREAT as u64) << 32, 0o4755],
                allow,
            ),
            (
                "openat2",
                libc::SYS_openat2,
                vec![at, 0, 0, 24],
                Verdict::Errno(libc::ENOSYS),
            ),
            ("mkdirat 0755", libc::SYS_mkdirat, vec![at, 0, 0o755], allow),
            (
                "mkdirat 2775",
                libc::SYS_mkdirat,
                vec![at, 0, 0o2775],
                eperm,
            ),
            (
                "mknodat reg 0644",
                libc::SYS_mknodat,
                vec![at, 0, reg | 0o644, 0],
                allow,
            ),
            (
                "mknodat fifo 0600",
                libc::SYS_mknodat,
                vec![at, 0, libc::S_IFIFO as u64 | 0o600, 0],
                allow,
            ),
            (
                "mknodat reg 4755",
                libc::SYS_mknodat,
                vec![at, 0, reg | 0o4755, 0],
                eperm,
            ),
            (
                "mknodat reg 2755",
                libc::SYS_mknodat,
                vec![at, 0, reg | 0o2755, 0],
                eperm,
            ),
        ];
        #[cfg(target_arch = "x86_64")]
        t.extend([
            ("chmod 0755", libc::SYS_chmod, vec![0, 0o755], allow),
            ("chmod 4755", libc::SYS_chmod, vec![0, 0o4755], eperm),
            ("chmod 2755", libc::SYS_chmod, vec![0, 0o2755], eperm),
            ("creat 0644", libc::SYS_creat, vec![0, 0o644], allow),
            ("creat 4755", libc::SYS_creat, vec![0, 0o4755], eperm),
            (
                "open read, garbage mode",
                libc::SYS_open,
                vec![0, 0, 0o4755],
                allow,
            ),
            (
                "open creat 0644",
                libc::SYS_open,
                vec![0, creat, 0o644],
                allow,
            ),
            (
                "open creat 4755",
                libc::SYS_open,
                vec![0, creat, 0o4755],
                eperm,
            ),
            (
                "open tmpfile 2700",
                libc::SYS_open,
                vec![0, tmpfile, 0o2700],
                eperm,
            ),
            ("mkdir 0755", libc::SYS_mkdir, vec![0, 0o755], allow),
            ("mkdir 4755", libc::SYS_mkdir, vec![0, 0o4755], eperm),
            (
                "mknod reg 0644",
                libc::SYS_mknod,
                vec![0, reg | 0o644, 0],
                allow,
            ),
            (
                "mknod reg 6755",
                libc::SYS_mknod,
                vec![0, reg | 0o6755, 0],
                eperm,
            ),
        ]);
        t
    }

    /// Socket families and protocols by allow-list; no TCP Fast Open.
    fn network_table() -> Vec<Row> {
        let eperm = Verdict::Errno(libc::EPERM);
        let nosupport = Verdict::Errno(libc::EAFNOSUPPORT);
        let allow = Verdict::Allow;
        let (unix, inet, inet6) = (
            libc::AF_UNIX as u64,
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
        );
        let (stream, dgram, raw) = (
            libc::SOCK_STREAM as u64,
            libc::SOCK_DGRAM as u64,
            libc::SOCK_RAW as u64,
        );
        let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
        let (tcp, udp) = (libc::IPPROTO_TCP as u64, libc::IPPROTO_UDP as u64);
        let netlink = libc::AF_NETLINK as u64;
        let sock = libc::SYS_socket;
        vec![
            ("unix stream", sock, vec![unix, stream, 0], allow),
            (
                "unix dgram cloexec",
                sock,
                vec![unix, dgram | flags, 0],
                allow,
            ),
            (
                "unix seqpacket",
                sock,
                vec![unix, libc::SOCK_SEQPACKET as u64, 0],
                allow,
            ),
            ("inet stream", sock, vec![inet, stream, 0], allow),
            (
                "inet stream tcp flags",
                sock,
                vec![inet, stream | flags, tcp],
                allow,
            ),
            ("inet6 stream tcp", sock, vec![inet6, stream, tcp], allow),
            ("inet dgram", sock, vec![inet, dgram, 0], allow),
            (
                "inet dgram udp nonblock",
                sock,
                vec![inet, dgram | flags, udp],
                allow,
            ),
            (
                "inet ping",
                sock,
                vec![inet, dgram, libc::IPPROTO_ICMP as u64],
                allow,
            ),
            (
                "inet6 ping",
                sock,
                vec![inet6, dgram, libc::IPPROTO_ICMPV6 as u64],
                allow,
            ),
            (
                "inet6 dgram icmp (v4)",
                sock,
                vec![inet6, dgram, libc::IPPROTO_ICMP as u64],
                nosupport,
            ),
            (
                "inet hi garbage domain",
                sock,
                vec![(7 << 32) | inet, stream, 0],
                allow,
            ),
            (
                "inet mptcp",
                sock,
                vec![inet, stream, IPPROTO_MPTCP],
                nosupport,
            ),
            (
                "inet6 mptcp",
                sock,
                vec![inet6, stream | flags, IPPROTO_MPTCP],
                nosupport,
            ),
            (
                "inet mptcp hi",
                sock,
                vec![inet, stream, (1 << 32) | IPPROTO_MPTCP],
                nosupport,
            ),
            (
                "inet stream sctp",
                sock,
                vec![inet, stream, libc::IPPROTO_SCTP as u64],
                nosupport,
            ),
            (
                "inet seqpacket",
                sock,
                vec![inet, libc::SOCK_SEQPACKET as u64, 0],
                nosupport,
            ),
            (
                "inet dgram udplite",
                sock,
                vec![inet, dgram, libc::IPPROTO_UDPLITE as u64],
                nosupport,
            ),
            (
                "inet stream, stray flag",
                sock,
                vec![inet, stream | 0x100, 0],
                nosupport,
            ),
            (
                "inet raw",
                sock,
                vec![inet, raw, libc::IPPROTO_ICMP as u64],
                nosupport,
            ),
            ("inet6 raw", sock, vec![inet6, raw, 0], nosupport),
            (
                "packet",
                sock,
                vec![libc::AF_PACKET as u64, raw, 0x0300],
                nosupport,
            ),
            (
                "vsock",
                sock,
                vec![libc::AF_VSOCK as u64, stream, 0],
                nosupport,
            ),
            (
                "bluetooth",
                sock,
                vec![libc::AF_BLUETOOTH as u64, stream, 0],
                nosupport,
            ),
            (
                "alg",
                sock,
                vec![libc::AF_ALG as u64, libc::SOCK_SEQPACKET as u64, 0],
                nosupport,
            ),
            ("netlink route", sock, vec![netlink, raw | flags, 0], allow),
            ("netlink route dgram", sock, vec![netlink, dgram, 0], allow),
            (
                "netlink audit",
                sock,
                vec![netlink, raw, libc::NETLINK_AUDIT as u64],
                nosupport,
            ),
            (
                "netlink uevent",
                sock,
                vec![netlink, dgram, libc::NETLINK_KOBJECT_UEVENT as u64],
                nosupport,
            ),
            (
                "socketpair unix",
                libc::SYS_socketpair,
                vec![unix, stream | flags, 0, 0],
                allow,
            ),
            (
                "socketpair inet",
                libc::SYS_socketpair,
                vec![inet, stream, 0, 0],
                nosupport,
            ),
            (
                "socketpair vsock",
                libc::SYS_socketpair,
                vec![libc::AF_VSOCK as u64, stream, 0, 0],
                nosupport,
            ),
            (
                "sendto",
                libc::SYS_sendto,
                vec![3, 0, 1, libc::MSG_NOSIGNAL as u64, 0, 0],
                allow,
            ),
            (
                "sendto fastopen",
                libc::SYS_sendto,
                vec![3, 0, 1, MSG_FASTOPEN, 0, 16],
                eperm,
            ),
            (
                "sendto fastopen|nosignal",
                libc::SYS_sendto,
                vec![3, 0, 1, MSG_FASTOPEN | libc::MSG_NOSIGNAL as u64, 0, 16],
                eperm,
            ),
            (
                "sendmsg",
                libc::SYS_sendmsg,
                vec![3, 0, libc::MSG_DONTWAIT as u64],
                allow,
            ),
            (
                "sendmsg fastopen",
                libc::SYS_sendmsg,
                vec![3, 0, MSG_FASTOPEN],
                eperm,
            ),
            ("sendmmsg", libc::SYS_sendmmsg, vec![3, 0, 1, 0], allow),
            (
                "sendmmsg fastopen",
                libc::SYS_sendmmsg,
                vec![3, 0, 1, MSG_FASTOPEN],
                eperm,
            ),
            (
                "setsockopt tcp nodelay",
                libc::SYS_setsockopt,
                vec![3, tcp, libc::TCP_NODELAY as u64, 0, 4],
                allow,
            ),
            (
                "setsockopt socket 30",
                libc::SYS_setsockopt,
                vec![3, libc::SOL_SOCKET as u64, 30, 0, 4],
                allow,
            ),
            (
                "setsockopt tcp fastopen_connect",
                libc::SYS_setsockopt,
                vec![3, tcp, TCP_FASTOPEN_CONNECT, 0, 4],
                eperm,
            ),
            ("bind", libc::SYS_bind, vec![3, 0, 16], allow),
            ("connect", libc::SYS_connect, vec![3, 0, 16], allow),
        ]
    }

    #[test]
    fn foreign_arch_is_killed() {
        let f = build(&Options::default()).unwrap();
        let s = stack(&f);
        for arch in [AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64] {
            if arch == TARGET.unwrap().1 {
                continue;
            }
            let mut d = data(20, &[]);
            d.arch = arch;
            assert_eq!(verdict(&s, &d), Verdict::KillProcess, "arch {arch:#x}");
        }
    }

    #[test]
    fn install_order_decides_clone3_errno() {
        let f = build(&Options::default()).unwrap();
        let names: Vec<_> = f.filters().iter().map(|f| f.name()).collect();
        assert_eq!(names.last(), Some(&"enosys"));
        let mut reversed = stack(&f);
        reversed.reverse();
        assert_eq!(
            verdict(&reversed, &data(libc::SYS_clone3, &[])),
            Verdict::Errno(libc::EPERM),
            "the ordering matters: reversed, the allow-list's EPERM wins"
        );
    }

    #[test]
    fn unconditional_calls_are_cacheable_in_every_filter() {
        let f = build(&Options::default()).unwrap();
        let mut count = 0;
        for nr in unconditional_syscalls() {
            for filter in f.filters() {
                let (ret, read_args) = run(filter.program(), &data(nr, &[]));
                assert_eq!(ret, libc::SECCOMP_RET_ALLOW, "{} nr {nr}", filter.name());
                assert!(!read_args, "{} reads args for nr {nr}", filter.name());
            }
            count += 1;
        }
        assert!(count > 250, "{count}");
        for nr in conditional_syscalls() {
            assert!(unconditional_syscalls().all(|u| u != nr));
        }
        assert_eq!(
            f.instructions(),
            stack(&f).iter().map(|p| p.len()).sum::<usize>()
        );
        assert!(f.instructions() < 3 * BPF_MAXINSNS);
    }

    /// The calls with argument rules run the whole stack (the action cache cannot skip them):
    /// the allow-list's binary search keeps each of them to a few dozen instructions, where a
    /// linear chain of numbers took hundreds for `openat`.
    #[test]
    fn calls_with_argument_rules_take_short_paths() {
        let f = build(&Options::default()).unwrap();
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
        let mut calls: Vec<(i64, Vec<u64>)> = conditional_syscalls()
            .into_iter()
            .map(|nr| (nr, vec![0; 6]))
            .collect();
        calls.push((libc::SYS_openat, vec![0, 0, creat, 0o644]));
        calls.push((libc::SYS_getpid, vec![]));
        calls.push((0x1000, vec![]));
        for (nr, args) in calls {
            let d = data(nr, &args);
            let total: usize = f
                .filters()
                .iter()
                .map(|filter| run_counted(filter.program(), &d).2)
                .sum();
            assert!(total <= 60, "nr {nr}: {total} instructions over the stack");
        }
    }

    #[test]
    fn arch_name_is_the_target() {
        assert_eq!(arch_name(), std::env::consts::ARCH);
    }
}
