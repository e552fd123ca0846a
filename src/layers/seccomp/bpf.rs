//! The seccomp policy as data, and its compiler to one classic BPF program. Pure: it uses only
//! `std` and `libc`, so that `build.rs` can include this file (`#[path]`) and compile the
//! program at build time, with the same code the tests check (see `super` for the policy).
//! The one input that varies between runs is `deny_listen` (see `super::Options`).

#![allow(dead_code)]

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
pub const SYS_CACHESTAT: i64 = 451;
/// `io_pgetevents` (libc lacks the constant; before the unified table, so per architecture).
#[cfg(target_arch = "x86_64")]
const SYS_IO_PGETEVENTS: i64 = 333;
#[cfg(not(target_arch = "x86_64"))]
const SYS_IO_PGETEVENTS: i64 = 292;
pub const SYS_FCHMODAT2: i64 = 452;
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

/// The `AUDIT_ARCH_*` of the architecture compiled for, if supported.
#[cfg(target_arch = "x86_64")]
pub const TARGET: Option<u32> = Some(AUDIT_ARCH_X86_64);
#[cfg(target_arch = "aarch64")]
pub const TARGET: Option<u32> = Some(AUDIT_ARCH_AARCH64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const TARGET: Option<u32> = None;

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
/// `socket-families` rules). `listen` is allowed or refused whole, by `deny_listen`.
pub fn conditional_syscalls() -> Vec<i64> {
    let mut v = vec![libc::SYS_clone, libc::SYS_ioctl, libc::SYS_personality];
    v.extend([
        libc::SYS_fallocate,
        libc::SYS_setrlimit,
        libc::SYS_prlimit64,
    ]);
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
pub const O_TMPFILE_BIT: u64 = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64;
/// The open flags under which the mode argument counts (the kernel's `WILL_CREATE`).
pub const O_CREATE_BITS: u64 = libc::O_CREAT as u64 | O_TMPFILE_BIT;
/// `MSG_FASTOPEN`: connect and send in one call, past landlock's connect hook.
pub const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `TCP_FASTOPEN_CONNECT` (a `setsockopt` at `IPPROTO_TCP` level).
pub const TCP_FASTOPEN_CONNECT: u64 = 30;
/// `IPPROTO_MPTCP` (refused: landlock's TCP rules do not see MPTCP sockets).
pub const IPPROTO_MPTCP: u64 = 262;

/// The `fallocate` modes allowed: the ones that only free space, `FALLOC_FL_PUNCH_HOLE |
/// FALLOC_FL_KEEP_SIZE` and `FALLOC_FL_COLLAPSE_RANGE`. Every mode that allocates blocks gets
/// `EOPNOTSUPP`, on which glibc's `posix_fallocate` falls back to writing, which
/// `RLIMIT_FSIZE` bounds: `KEEP_SIZE` allocates past the end of the file without any size
/// check, `INSERT_RANGE` grows a file checking only the filesystem's maximum, and mode 0,
/// `ZERO_RANGE`, `UNSHARE_RANGE` and `WRITE_ZEROES` allocate whole ranges below the file's
/// size in one call (a sparse file made earlier, when the budget left was larger).
pub const FALLOCATE_MODES: [u32; 2] = [0x03, 0x08];
/// `FICLONE` and `FICLONERANGE` (also btrfs's clone ioctls): a reflink. Refused with
/// `EOPNOTSUPP`, the answer of filesystems without reflinks, on which `cp` copies instead.
pub const FICLONE: u64 = 0x4004_9409;
pub const FICLONERANGE: u64 = 0x4020_940d;
/// `RLIMIT_FSIZE`: the supervisor keeps it at the repo layer's budget left; the workload may
/// read it, not set it (`setrlimit`, `prlimit64` with a new value: `EPERM`).
pub const RLIMIT_FSIZE: u32 = 1; // the same on every Linux architecture

/// The calls that take a file mode, with the index of the mode argument. The mode is a
/// `umode_t` (16 bits): only its low bits count, so the check masks the low 32-bit word.
pub(crate) fn mode_calls() -> Vec<(i64, u32)> {
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
pub(crate) fn open_calls() -> Vec<(i64, u32, u32)> {
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

/// One argument check, on the low 32-bit word of argument `arg` (every argument checked here is
/// an `int`, a `umode_t` or flags of which the kernel reads only those bits).
#[derive(Debug, Clone, Copy)]
pub struct Cond {
    pub arg: u32,
    pub cmp: Cmp,
}

#[derive(Debug, Clone, Copy)]
pub enum Cmp {
    Eq(u32),
    Ne(u32),
    /// `(word & mask) == value`.
    MaskedEq(u32, u32),
    /// The whole 64-bit argument is not 0 (a pointer: a non-NULL one with a zero low word
    /// is a valid address).
    NonZero64,
}

fn cond(arg: u32, cmp: Cmp) -> Cond {
    Cond { arg, cmp }
}

/// What the program does with one system call number (any number not listed gets `EPERM`).
pub enum Entry {
    /// Allowed whatever the arguments.
    Allow,
    /// Allowed when one of the rules holds (every condition of the rule), else `EPERM`.
    AnyOf(Vec<Vec<Cond>>),
    /// `ERRNO(errno)` whatever the arguments ([`enosys_syscalls`]).
    Errno(u32),
    /// `ERRNO(errno)` when one of `refuse` holds (every condition of it), else `then`.
    Unless {
        refuse: Vec<Vec<Cond>>,
        errno: u32,
        then: Box<Entry>,
    },
    /// `socket`: by family, type and protocol (see [`socket_families`]).
    Socket,
    /// `socketpair`: `AF_UNIX` only.
    Socketpair,
}

/// The allow-list as data: every allowed call, in number order. `socket` and `socketpair` are
/// `Allow` here: in the stack of separate filters (the tests' reference), their arguments are
/// the `socket-families` filter's business.
pub fn allow_list_entries(deny_listen: bool) -> Result<Vec<(u32, Entry)>, String> {
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
    // those (a 64-bit compare is bypassed by setting a high bit). Reflinks: EOPNOTSUPP.
    insert(
        libc::SYS_ioctl,
        Entry::Unless {
            refuse: vec![
                vec![cond(1, Cmp::Eq(FICLONE as u32))],
                vec![cond(1, Cmp::Eq(FICLONERANGE as u32))],
            ],
            errno: libc::EOPNOTSUPP as u32,
            then: Box::new(Entry::AnyOf(vec![vec![
                cond(1, Cmp::Ne(TIOCSTI as u32)),
                cond(1, Cmp::Ne(TIOCLINUX as u32)),
            ]])),
        },
    )?;
    // fallocate(fd, mode, ...): only the modes that free space (see FALLOCATE_MODES).
    insert(
        libc::SYS_fallocate,
        Entry::Unless {
            refuse: vec![FALLOCATE_MODES
                .iter()
                .map(|m| cond(1, Cmp::Ne(*m)))
                .collect()],
            errno: libc::EOPNOTSUPP as u32,
            then: Box::new(Entry::Allow),
        },
    )?;
    // RLIMIT_FSIZE is the supervisor's to set (the repo layer's budget left).
    insert(
        libc::SYS_setrlimit,
        Entry::Unless {
            refuse: vec![vec![cond(0, Cmp::Eq(RLIMIT_FSIZE))]],
            errno: libc::EPERM as u32,
            then: Box::new(Entry::Allow),
        },
    )?;
    insert(
        libc::SYS_prlimit64,
        Entry::Unless {
            refuse: vec![vec![
                cond(1, Cmp::Eq(RLIMIT_FSIZE)),
                cond(2, Cmp::NonZero64),
            ]],
            errno: libc::EPERM as u32,
            then: Box::new(Entry::Allow),
        },
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
    insert(libc::SYS_socket, Entry::Allow)?;
    insert(libc::SYS_socketpair, Entry::Allow)?;
    if !deny_listen {
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

/// The whole policy as one table: the allow-list, with `socket`/`socketpair` judged by their
/// arguments and the [`enosys_syscalls`] answering `ENOSYS`.
pub fn entries(deny_listen: bool) -> Result<Vec<(u32, Entry)>, String> {
    let mut v = allow_list_entries(deny_listen)?;
    for (nr, e) in v.iter_mut() {
        if *nr == libc::SYS_socket as u32 {
            *e = Entry::Socket;
        } else if *nr == libc::SYS_socketpair as u32 {
            *e = Entry::Socketpair;
        }
    }
    for nr in enosys_syscalls() {
        let nr = nr as u32;
        match v.binary_search_by_key(&nr, |(n, _)| *n) {
            Ok(_) => return Err(format!("seccomp: syscall {nr} both allowed and ENOSYS")),
            Err(at) => v.insert(at, (nr, Entry::Errno(libc::ENOSYS as u32))),
        }
    }
    Ok(v)
}

/// The policy as ONE program for `audit_arch`: another architecture -> `KILL_PROCESS`; on
/// x86_64, an x32 number -> `KILL_PROCESS`; then a binary search on the number over the
/// stretches of [`entries`] (see [`tree`]), so that every call, the ones with argument rules
/// included, is decided in a few dozen instructions, and anything not listed gets `EPERM`. The paths of the unconditional
/// calls load nothing but the number and the arch, so the kernel's action cache skips the
/// program for them.
///
/// This is the same decision as the stack of four filters it replaced (x32 guard,
/// allow-list, socket families, `ENOSYS` last): the tests run both over every number.
/// One program is one `seccomp()` call, one `bpf_prepare_filter` and one JIT at install, and
/// one program run per checked call.
pub fn program(audit_arch: u32, deny_listen: bool) -> Result<Vec<libc::sock_filter>, String> {
    program_for(audit_arch, deny_listen, Answer::Errno)
}

/// How the program answers what the policy refuses (and, under `Observe`, what it allows of
/// the calls that look up a path). The decision is the same in every mode: the supervisor
/// runs the `Errno` program on each notified call to answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answer {
    /// `ERRNO(x)` straight from the kernel: nobody learns what was refused.
    Errno,
    /// `ERRNO(EPERM | EAFNOSUPPORT | EOPNOTSUPP)` becomes `USER_NOTIF`: the supervisor
    /// answers with the same errno and names the refusal. `ENOSYS` (the fallbacks libc takes
    /// every time) and `KILL_PROCESS` stay; the constant `ALLOW` paths stay constant.
    Notify,
    /// `Notify`, and the allowed calls of [`path_calls`] go to `USER_NOTIF` too, for the
    /// supervisor to note the path they look up before it lets them continue.
    Observe,
}

impl Answer {
    pub const ALL: [Answer; 3] = [Answer::Errno, Answer::Notify, Answer::Observe];
}

/// The errnos whose refusals are named (notified): the policy's own refusals. `ENOSYS` is the
/// fallback libc takes on every `clone3`/`openat2`, and stays silent and free.
pub const NAMED_ERRNOS: [u32; 3] = [
    libc::EPERM as u32,
    libc::EAFNOSUPPORT as u32,
    libc::EOPNOTSUPP as u32,
];

/// The path arguments of a call: the index of each, with the index of its directory fd
/// (`None`: relative to the cwd).
pub type PathArgs = &'static [(u32, Option<u32>)];

/// The calls that look up a path (`--observe`), with their [`PathArgs`].
pub fn path_calls() -> Vec<(i64, PathArgs)> {
    #[allow(unused_mut)]
    let mut v: Vec<(i64, PathArgs)> = vec![
        (libc::SYS_openat, &[(1, Some(0))]),
        (libc::SYS_execve, &[(0, None)]),
        (libc::SYS_execveat, &[(1, Some(0))]),
        (libc::SYS_newfstatat, &[(1, Some(0))]),
        (libc::SYS_statx, &[(1, Some(0))]),
        (libc::SYS_faccessat, &[(1, Some(0))]),
        (libc::SYS_faccessat2, &[(1, Some(0))]),
        (libc::SYS_readlinkat, &[(1, Some(0))]),
        (libc::SYS_mkdirat, &[(1, Some(0))]),
        (libc::SYS_mknodat, &[(1, Some(0))]),
        (libc::SYS_unlinkat, &[(1, Some(0))]),
        (libc::SYS_renameat, &[(1, Some(0)), (3, Some(2))]),
        (libc::SYS_renameat2, &[(1, Some(0)), (3, Some(2))]),
        (libc::SYS_linkat, &[(1, Some(0)), (3, Some(2))]),
        (libc::SYS_symlinkat, &[(2, Some(1))]),
        (libc::SYS_truncate, &[(0, None)]),
        (libc::SYS_chdir, &[(0, None)]),
        (libc::SYS_fchmodat, &[(1, Some(0))]),
        (SYS_FCHMODAT2, &[(1, Some(0))]),
        (libc::SYS_fchownat, &[(1, Some(0))]),
        (libc::SYS_utimensat, &[(1, Some(0))]),
    ];
    const CWD: PathArgs = &[(0, None)];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_open, CWD),
        (libc::SYS_creat, CWD),
        (libc::SYS_stat, CWD),
        (libc::SYS_lstat, CWD),
        (libc::SYS_access, CWD),
        (libc::SYS_readlink, CWD),
        (libc::SYS_mkdir, CWD),
        (libc::SYS_mknod, CWD),
        (libc::SYS_unlink, CWD),
        (libc::SYS_rmdir, CWD),
        (libc::SYS_rename, &[(0, None), (1, None)]),
        (libc::SYS_link, &[(0, None), (1, None)]),
        (libc::SYS_symlink, &[(1, None)]),
        (libc::SYS_chmod, CWD),
        (libc::SYS_chown, CWD),
        (libc::SYS_lchown, CWD),
        (libc::SYS_utime, CWD),
        (libc::SYS_utimes, CWD),
    ]);
    v
}

/// The calls that name a unix socket's path in a `sockaddr` (argument 1, its length argument
/// 2): `connect` and `bind`. Observed like [`path_calls`] (every family goes to the supervisor,
/// which notes only `AF_UNIX` paths).
pub fn socket_path_calls() -> [i64; 2] {
    [libc::SYS_connect, libc::SYS_bind]
}

/// Every call `Observe` hands to the supervisor where the policy allows it.
pub fn observed_calls() -> Vec<u32> {
    path_calls()
        .iter()
        .map(|(nr, _)| *nr)
        .chain(socket_path_calls())
        .map(|nr| nr as u32)
        .collect()
}

/// The policy as one program for `audit_arch`, answering as `answer` says (see [`Answer`]).
pub fn program_for(
    audit_arch: u32,
    deny_listen: bool,
    answer: Answer,
) -> Result<Vec<libc::sock_filter>, String> {
    let entries = entries(deny_listen)?;
    let observed: Vec<u32> = match answer {
        Answer::Observe => observed_calls(),
        _ => Vec::new(),
    };
    let mut a = Asm::default();
    let arch_ok = a.label();
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jeq(audit_arch, Some(arch_ok), None);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    a.here(arch_ok);
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    if audit_arch == AUDIT_ARCH_X86_64 {
        // x32 numbers carry AUDIT_ARCH_X86_64 and would dodge every per-number rule.
        let native = a.label();
        a.jge(X32_SYSCALL_BIT, None, Some(native));
        a.stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS);
        a.here(native);
    }
    tree(&mut a, &stretches(&entries, &observed));
    let mut program = a.finish("seccomp")?;
    if answer != Answer::Errno {
        // Same decision, another answer: every return of a named errno goes to the listener.
        for i in program.iter_mut() {
            let named = i.k & libc::SECCOMP_RET_ACTION_FULL == libc::SECCOMP_RET_ERRNO
                && NAMED_ERRNOS.contains(&(i.k & libc::SECCOMP_RET_DATA));
            if i.code == BPF_RET_K && named {
                i.k = libc::SECCOMP_RET_USER_NOTIF;
            }
        }
    }
    Ok(program)
}

/// What the program does with a stretch of numbers.
enum Action<'a> {
    Allow,
    Eperm,
    /// A single number with rules of its own (arguments, errno, socket family).
    Rule(&'a Entry),
    /// A call [`path_calls`] names, under `Observe`: its rules, with `USER_NOTIF` where they
    /// allow.
    Observed(&'a Entry),
}

/// `entries` (sorted) as stretches covering every number: `(first number, action)`, in
/// order, the first starting at 0 and the last running to `u32::MAX`; neighbouring numbers
/// that are both allowed whatever the arguments, or both refused, share one stretch.
fn stretches<'a>(entries: &'a [(u32, Entry)], observed: &[u32]) -> Vec<(u32, Action<'a>)> {
    fn push<'a>(v: &mut Vec<(u32, Action<'a>)>, lo: u32, act: Action<'a>) {
        match (v.last(), &act) {
            (Some((_, Action::Allow)), Action::Allow)
            | (Some((_, Action::Eperm)), Action::Eperm) => {}
            _ => v.push((lo, act)),
        }
    }
    let mut v = Vec::new();
    let mut next = 0u32;
    for (nr, e) in entries {
        if *nr > next {
            push(&mut v, next, Action::Eperm);
        }
        let act = match e {
            e if observed.contains(nr) => Action::Observed(e),
            Entry::Allow => Action::Allow,
            e => Action::Rule(e),
        };
        push(&mut v, *nr, act);
        next = nr + 1;
    }
    if next != 0 {
        push(&mut v, next, Action::Eperm);
    }
    v
}

/// Emits the decision for `stretches`, with the number in the accumulator: a balanced tree of
/// `jge` on the stretches' first numbers, each leaf a return (or a call's own rules). A `jge`
/// jumps over its lower half straight to the upper one when that fits in BPF's 8-bit offset,
/// else through a long `ja`. About one instruction per stretch and per leaf: the kernel's
/// checker, JIT and action cache cost in proportion to the length at every install.
fn tree(a: &mut Asm, stretches: &[(u32, Action)]) {
    if let [(_, act)] = stretches {
        leaf(a, act);
        return;
    }
    let mid = stretches.len() / 2;
    let lower_len = tree_len(&stretches[..mid]);
    let upper = a.label();
    if lower_len <= u8::MAX as usize {
        a.jge(stretches[mid].0, Some(upper), None);
    } else {
        let lower = a.label();
        a.jge(stretches[mid].0, None, Some(lower));
        a.ja(upper);
        a.here(lower);
    }
    tree(a, &stretches[..mid]);
    a.here(upper);
    tree(a, &stretches[mid..]);
}

/// The number of instructions [`tree`] emits for `stretches`.
fn tree_len(stretches: &[(u32, Action)]) -> usize {
    if let [(_, act)] = stretches {
        let mut scratch = Asm::default();
        leaf(&mut scratch, act);
        return scratch.code.len();
    }
    let mid = stretches.len() / 2;
    let lower = tree_len(&stretches[..mid]);
    1 + usize::from(lower > u8::MAX as usize) + lower + tree_len(&stretches[mid..])
}

/// One stretch's decision; every path ends in a return.
fn leaf(a: &mut Asm, act: &Action) {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    match act {
        Action::Allow => a.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
        Action::Eperm => a.stmt(BPF_RET_K, eperm),
        Action::Rule(e) => entry(a, e, libc::SECCOMP_RET_ALLOW),
        Action::Observed(e) => entry(a, e, libc::SECCOMP_RET_USER_NOTIF),
    }
}

/// One call's rules, returning `allow` where they allow it; every path ends in a return.
fn entry(a: &mut Asm, e: &Entry, allow: u32) {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    match e {
        Entry::Allow => a.stmt(BPF_RET_K, allow),
        Entry::AnyOf(rules) => {
            any_of(a, rules, allow);
            a.stmt(BPF_RET_K, eperm);
        }
        Entry::Unless {
            refuse,
            errno,
            then,
        } => {
            any_of(a, refuse, libc::SECCOMP_RET_ERRNO | errno);
            entry(a, then, allow);
        }
        Entry::Errno(errno) => a.stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | errno),
        Entry::Socket => socket_rules(a),
        Entry::Socketpair => socketpair_rules(a),
    }
}

/// Returns `ret` when one of `rules` holds (every condition of it); else goes on after them.
fn any_of(a: &mut Asm, rules: &[Vec<Cond>], ret: u32) {
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
                Cmp::NonZero64 => {
                    // low word 0: the high word decides
                    let holds = a.label();
                    a.jeq(0, None, Some(holds));
                    a.stmt(BPF_LD_W_ABS, seccomp_arg(c.arg) + 4);
                    a.jeq(0, Some(next), None);
                    a.here(holds);
                }
            }
        }
        a.stmt(BPF_RET_K, ret);
        a.here(next);
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
/// As a filter of its own (the stack's third, for the tests' comparison): other calls and
/// other architectures are allowed (the allow-list decides them).
pub fn socket_families(audit_arch: u32) -> Result<Vec<libc::sock_filter>, String> {
    let mut a = Asm::default();
    let (allow, socket) = (a.label(), a.label());
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH);
    a.jeq(audit_arch, None, Some(allow));
    a.stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR);
    a.jeq(libc::SYS_socket as u32, Some(socket), None);
    a.jeq(libc::SYS_socketpair as u32, None, Some(allow));
    socketpair_rules(&mut a);
    a.here(socket);
    socket_rules(&mut a);
    a.here(allow);
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    a.finish("socket-families")
}

/// `socketpair(domain, ...)`: `AF_UNIX` only. Ends in a return on every path.
fn socketpair_rules(a: &mut Asm) {
    let refuse = a.label();
    a.stmt(BPF_LD_W_ABS, seccomp_arg(0));
    a.jeq(libc::AF_UNIX as u32, None, Some(refuse));
    a.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    a.here(refuse);
    a.stmt(
        BPF_RET_K,
        libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32,
    );
}

/// `socket(domain, type, protocol)`, see [`socket_families`]. Ends in a return on every path.
fn socket_rules(a: &mut Asm) {
    let type_mask = !((libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u32);
    let (allow, refuse) = (a.label(), a.label());
    let (inet, inet6, stream, netlink) = (a.label(), a.label(), a.label(), a.label());
    let (dgram4, dgram6) = (a.label(), a.label());
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
        if program.is_empty() || program.len() > BPF_MAXINSNS {
            return Err(format!(
                "seccomp: the {name} filter has {} instructions (1..={BPF_MAXINSNS} allowed)",
                program.len()
            ));
        }
        Ok(program)
    }
}

pub const BPF_MAXINSNS: usize = 4096;

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

/// The stack's first filter, for the tests' comparison (x86_64): x32 numbers with
/// `AUDIT_ARCH_X86_64` -> `KILL_PROCESS`, anything else `ALLOW`.
pub fn x32_guard() -> Vec<libc::sock_filter> {
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

/// The program as Rust source: a `&[libc::sock_filter]` literal (for `build.rs`).
pub fn to_source(program: &[libc::sock_filter]) -> String {
    let mut s = String::from("&[\n");
    for i in program {
        s.push_str(&format!(
            "    libc::sock_filter {{ code: {:#06x}, jt: {}, jf: {}, k: {:#x} }},\n",
            i.code, i.jt, i.jf, i.k
        ));
    }
    s.push(']');
    s
}
