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
//! query value `0xffffffff`. `clone3` returns `ENOSYS`, so libc falls back to `clone`, whose flags
//! a classic BPF filter can see (clone3 passes them in memory).
//!
//! # Stacking
//!
//! seccompiler gives one match action per filter, so the policy is three filters, installed in
//! this order (see [`Filters::filters`]):
//!
//! 1. `x32-guard` (x86_64 only, hand-written BPF): x32 numbers (`nr >= 0x4000_0000` with
//!    `AUDIT_ARCH_X86_64`) -> `KILL_PROCESS`; everything else -> `ALLOW`.
//! 2. `allow-list` (seccompiler): arch check (`KILL_PROCESS` on mismatch), the allowed calls and
//!    their argument rules -> `ALLOW`; anything else -> `ERRNO(EPERM)`.
//! 3. `clone3-enosys` (seccompiler): `clone3` -> `ERRNO(ENOSYS)`; anything else -> `ALLOW`.
//!
//! The kernel runs every filter of the stack, newest first, and keeps the most restrictive
//! action; between two results of the same action (both `ERRNO`), the first one seen, i.e. the
//! one of the NEWEST filter, wins (`seccomp_run_filters` replaces the result only on a strict
//! `<`). `clone3` gets `EPERM` from the allow-list and `ENOSYS` from the last filter: the last
//! filter must be installed last for `ENOSYS` to win. `KILL_PROCESS` beats everything, so the
//! place of the x32 guard does not matter.
//!
//! Every filter returns a constant `ALLOW` for the argument-free allowed calls (no argument is
//! loaded on their path), so the kernel's seccomp action cache marks them and skips the BPF
//! programs entirely for them: `read`, `write`, `futex`, `mmap`... cost nothing extra.

use crate::layers::{Step, StepError};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
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
    libc::SYS_openat,
    libc::SYS_openat2,
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
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    SYS_FCHMODAT2,
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
    // legacy asynchronous I/O (not io_uring)
    libc::SYS_io_setup,
    libc::SYS_io_destroy,
    libc::SYS_io_getevents,
    libc::SYS_io_submit,
    libc::SYS_io_cancel,
    // sockets (the network namespace and landlock decide where they can go)
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
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
    libc::SYS_open,
    libc::SYS_creat,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_access,
    libc::SYS_poll,
    libc::SYS_select,
    libc::SYS_pipe,
    libc::SYS_dup2,
    libc::SYS_getdents,
    libc::SYS_rename,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_link,
    libc::SYS_unlink,
    libc::SYS_symlink,
    libc::SYS_readlink,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_mknod,
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

/// The system calls allowed only for some argument values (`clone`, `ioctl`, `personality`).
pub fn conditional_syscalls() -> [i64; 3] {
    [libc::SYS_clone, libc::SYS_ioctl, libc::SYS_personality]
}

/// One compiled BPF program of the stack.
pub struct Filter {
    name: &'static str,
    program: Vec<libc::sock_filter>,
}

impl Filter {
    /// `x32-guard`, `allow-list` or `clone3-enosys`.
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
    /// `clone3-enosys` is the newest. No allocation, no logging, no panic: safe in a child forked
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
pub fn build() -> Result<Filters, String> {
    let Some((arch, audit_arch)) = TARGET else {
        return Err(format!(
            "seccomp: architecture {} is not supported (x86_64 and aarch64 are)",
            arch_name()
        ));
    };
    let mut filters = Vec::with_capacity(3);
    if audit_arch == AUDIT_ARCH_X86_64 {
        filters.push(Filter {
            name: "x32-guard",
            program: x32_guard(),
        });
    }
    filters.push(Filter {
        name: "allow-list",
        program: compile("allow-list", allow_list_filter(arch)?)?,
    });
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: clone3-enosys filter: {e}"))?;
    filters.push(Filter {
        name: "clone3-enosys",
        program: compile("clone3-enosys", clone3)?,
    });
    Ok(Filters { filters })
}

fn allow_list_filter(arch: TargetArch) -> Result<SeccompFilter, String> {
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
            .map_err(|e| format!("seccomp: allow-list condition on arg{arg}: {e}"))
    };
    let rule = |conds: Vec<SeccompCondition>| {
        SeccompRule::new(conds).map_err(|e| format!("seccomp: allow-list rule: {e}"))
    };

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in unconditional_syscalls() {
        if rules.insert(nr, Vec::new()).is_some() {
            return Err(format!("seccomp: allow-list names syscall {nr} twice"));
        }
    }
    // clone(flags, ...): the kernel reads only the low 32 bits of the flags (and the
    // namespace flags all live there): allowed when none of them is set.
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(
            0,
            SeccompCmpOp::MaskedEq(CLONE_NAMESPACE_FLAGS),
            0,
        )?])?],
    );
    // ioctl(fd, request, ...): the kernel truncates the request to 32 bits, so compare only
    // those (a 64-bit compare is bypassed by setting a high bit).
    rules.insert(
        libc::SYS_ioctl,
        vec![rule(vec![
            cond(1, SeccompCmpOp::Ne, TIOCSTI)?,
            cond(1, SeccompCmpOp::Ne, TIOCLINUX)?,
        ])?],
    );
    // personality(persona): PER_LINUX or a query; ADDR_NO_RANDOMIZE and friends are refused.
    rules.insert(
        libc::SYS_personality,
        vec![
            rule(vec![cond(0, SeccompCmpOp::Eq, 0)?])?,
            rule(vec![cond(0, SeccompCmpOp::Eq, PERSONALITY_QUERY)?])?,
        ],
    );
    SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| format!("seccomp: allow-list filter: {e}"))
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
const BPF_RET_K: u16 = 0x06;
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

/// x86_64 only: seccompiler's arch check accepts x32 calls (they carry `AUDIT_ARCH_X86_64`),
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
        let (mut a, mut pc, mut read_args) = (0u32, 0usize, false);
        loop {
            let i = &prog[pc];
            pc += 1;
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
                0x06 => return (i.k, read_args),
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
        let f = build().unwrap();
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
    }

    #[test]
    fn foreign_arch_is_killed() {
        let f = build().unwrap();
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
        let f = build().unwrap();
        let names: Vec<_> = f.filters().iter().map(|f| f.name()).collect();
        assert_eq!(names.last(), Some(&"clone3-enosys"));
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
        let f = build().unwrap();
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

    #[test]
    fn arch_name_is_the_target() {
        assert_eq!(arch_name(), std::env::consts::ARCH);
    }
}
