//! Names for refused system calls: the call's name and the argument that decided, in the
//! words a user would search for (`socket(AF_PACKET)`, `clone(CLONE_NEWUSER)`,
//! `chmod(mode 04755)`), and which part of the policy refused it. Pure: the supervisor calls
//! [`refusal`] on a notified call's registers.

use super::bpf::{
    self, CLONE_NAMESPACE_FLAGS, FICLONE, FICLONERANGE, MSG_FASTOPEN, RLIMIT_FSIZE, SETID_BITS,
    TIOCLINUX, TIOCSTI,
};
use super::interp::Data;
use crate::refusal::{Kind, Patch, Refusal};

macro_rules! table {
    ($($name:ident),* $(,)?) => {
        &[$((libc::$name as i64, strip(stringify!($name)))),*]
    };
}

const fn strip(s: &'static str) -> &'static str {
    // "SYS_read" -> "read"
    let (_, rest) = s.as_bytes().split_at(4);
    match std::str::from_utf8(rest) {
        Ok(r) => r,
        Err(_) => s,
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const COMMON: &[(i64, &str)] = table![
    SYS_io_setup,
    SYS_io_destroy,
    SYS_io_submit,
    SYS_io_cancel,
    SYS_io_getevents,
    SYS_setxattr,
    SYS_getcwd,
    SYS_eventfd2,
    SYS_epoll_ctl,
    SYS_dup,
    SYS_dup3,
    SYS_fcntl,
    SYS_inotify_init1,
    SYS_ioctl,
    SYS_ioprio_set,
    SYS_flock,
    SYS_mknodat,
    SYS_mkdirat,
    SYS_unlinkat,
    SYS_symlinkat,
    SYS_linkat,
    SYS_renameat,
    SYS_umount2,
    SYS_mount,
    SYS_pivot_root,
    SYS_nfsservctl,
    SYS_statfs,
    SYS_truncate,
    SYS_fallocate,
    SYS_faccessat,
    SYS_chdir,
    SYS_fchdir,
    SYS_chroot,
    SYS_fchmod,
    SYS_fchmodat,
    SYS_fchownat,
    SYS_fchown,
    SYS_openat,
    SYS_close,
    SYS_vhangup,
    SYS_pipe2,
    SYS_quotactl,
    SYS_getdents64,
    SYS_lseek,
    SYS_read,
    SYS_write,
    SYS_readlinkat,
    SYS_newfstatat,
    SYS_fstat,
    SYS_sync,
    SYS_acct,
    SYS_capget,
    SYS_capset,
    SYS_personality,
    SYS_exit,
    SYS_exit_group,
    SYS_waitid,
    SYS_set_tid_address,
    SYS_unshare,
    SYS_futex,
    SYS_init_module,
    SYS_delete_module,
    SYS_syslog,
    SYS_ptrace,
    SYS_sched_setscheduler,
    SYS_kill,
    SYS_reboot,
    SYS_setpriority,
    SYS_setregid,
    SYS_setgid,
    SYS_setreuid,
    SYS_setuid,
    SYS_setresuid,
    SYS_setresgid,
    SYS_setfsuid,
    SYS_setfsgid,
    SYS_setpgid,
    SYS_setsid,
    SYS_setgroups,
    SYS_sethostname,
    SYS_setdomainname,
    SYS_getrlimit,
    SYS_setrlimit,
    SYS_umask,
    SYS_prctl,
    SYS_settimeofday,
    SYS_adjtimex,
    SYS_clock_settime,
    SYS_clock_adjtime,
    SYS_socket,
    SYS_socketpair,
    SYS_bind,
    SYS_listen,
    SYS_accept,
    SYS_connect,
    SYS_sendto,
    SYS_recvfrom,
    SYS_setsockopt,
    SYS_getsockopt,
    SYS_shutdown,
    SYS_sendmsg,
    SYS_recvmsg,
    SYS_readahead,
    SYS_brk,
    SYS_munmap,
    SYS_mremap,
    SYS_add_key,
    SYS_request_key,
    SYS_keyctl,
    SYS_clone,
    SYS_execve,
    SYS_mmap,
    SYS_swapon,
    SYS_swapoff,
    SYS_mprotect,
    SYS_mbind,
    SYS_migrate_pages,
    SYS_move_pages,
    SYS_perf_event_open,
    SYS_accept4,
    SYS_recvmmsg,
    SYS_wait4,
    SYS_prlimit64,
    SYS_fanotify_init,
    SYS_fanotify_mark,
    SYS_name_to_handle_at,
    SYS_open_by_handle_at,
    SYS_syncfs,
    SYS_setns,
    SYS_sendmmsg,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_kcmp,
    SYS_finit_module,
    SYS_sched_setattr,
    SYS_renameat2,
    SYS_seccomp,
    SYS_getrandom,
    SYS_memfd_create,
    SYS_bpf,
    SYS_execveat,
    SYS_userfaultfd,
    SYS_membarrier,
    SYS_mlock2,
    SYS_copy_file_range,
    SYS_preadv2,
    SYS_pwritev2,
    SYS_pkey_mprotect,
    SYS_statx,
    SYS_rseq,
    SYS_kexec_load,
    SYS_kexec_file_load,
    SYS_pidfd_send_signal,
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
    SYS_open_tree,
    SYS_move_mount,
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
    SYS_pidfd_open,
    SYS_clone3,
    SYS_close_range,
    SYS_openat2,
    SYS_pidfd_getfd,
    SYS_faccessat2,
    SYS_process_madvise,
    SYS_mount_setattr,
    SYS_landlock_create_ruleset,
    SYS_landlock_add_rule,
    SYS_landlock_restrict_self,
    SYS_memfd_secret,
    SYS_process_mrelease,
    SYS_quotactl_fd,
    SYS_lookup_dcookie,
    SYS_remap_file_pages,
    SYS_get_mempolicy,
    SYS_set_mempolicy,
    SYS_mq_open,
    SYS_msgget,
    SYS_semget,
    SYS_shmget,
    SYS_mlockall,
    SYS_utimensat,
    SYS_vmsplice,
    SYS_splice,
    SYS_tee,
    SYS_sendfile,
];

#[cfg(target_arch = "x86_64")]
const ARCH: &[(i64, &str)] = table![
    SYS_open,
    SYS_stat,
    SYS_lstat,
    SYS_access,
    SYS_pipe,
    SYS_dup2,
    SYS_fork,
    SYS_vfork,
    SYS_rename,
    SYS_mkdir,
    SYS_rmdir,
    SYS_creat,
    SYS_link,
    SYS_unlink,
    SYS_symlink,
    SYS_readlink,
    SYS_chmod,
    SYS_chown,
    SYS_lchown,
    SYS_mknod,
    SYS_uselib,
    SYS_ustat,
    SYS_sysfs,
    SYS_modify_ldt,
    SYS_iopl,
    SYS_ioperm,
    SYS_arch_prctl,
    SYS_utime,
    SYS_utimes,
    SYS_poll,
    SYS_select,
    SYS_epoll_create,
    SYS_inotify_init,
    SYS_signalfd,
    SYS_eventfd,
    SYS_time,
    SYS_alarm,
    SYS_pause,
    SYS_getdents,
    SYS_futimesat,
    SYS_epoll_wait,
];
#[cfg(not(target_arch = "x86_64"))]
const ARCH: &[(i64, &str)] = &[];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const COMMON: &[(i64, &str)] = &[];

/// The name of system call `nr` on this architecture (`syscall 999` where unknown here).
pub fn name(nr: u32) -> String {
    let newer: &[(i64, &str)] = &[
        (bpf::SYS_FCHMODAT2, "fchmodat2"),
        (467, "open_tree_attr"),
        (451, "cachestat"),
        (453, "map_shadow_stack"),
        (462, "mseal"),
    ];
    COMMON
        .iter()
        .chain(ARCH)
        .chain(newer)
        .find(|(n, _)| *n == i64::from(nr))
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| format!("syscall {nr}"))
}

fn family(f: u64) -> String {
    let known = [
        (libc::AF_UNIX, "AF_UNIX"),
        (libc::AF_INET, "AF_INET"),
        (libc::AF_INET6, "AF_INET6"),
        (libc::AF_NETLINK, "AF_NETLINK"),
        (libc::AF_PACKET, "AF_PACKET"),
        (libc::AF_VSOCK, "AF_VSOCK"),
        (libc::AF_BLUETOOTH, "AF_BLUETOOTH"),
        (libc::AF_ALG, "AF_ALG"),
        (libc::AF_KEY, "AF_KEY"),
        (libc::AF_XDP, "AF_XDP"),
        (libc::AF_CAN, "AF_CAN"),
        (libc::AF_TIPC, "AF_TIPC"),
        (libc::AF_RDS, "AF_RDS"),
    ];
    known
        .iter()
        .find(|(k, _)| *k as u64 == f & 0xffff_ffff)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("family {}", f as u32))
}

fn clone_flags(flags: u64) -> String {
    let names = [
        (libc::CLONE_NEWUSER, "CLONE_NEWUSER"),
        (libc::CLONE_NEWNS, "CLONE_NEWNS"),
        (libc::CLONE_NEWPID, "CLONE_NEWPID"),
        (libc::CLONE_NEWNET, "CLONE_NEWNET"),
        (libc::CLONE_NEWUTS, "CLONE_NEWUTS"),
        (libc::CLONE_NEWIPC, "CLONE_NEWIPC"),
        (libc::CLONE_NEWCGROUP, "CLONE_NEWCGROUP"),
        (0x80, "CLONE_NEWTIME"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(f, _)| flags & CLONE_NAMESPACE_FLAGS & *f as u64 != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        "no namespace".into()
    } else {
        set.join("|")
    }
}

const NEVER_POLICY: &str = "never: no profile setting allows it";

/// The refusal of call `d`, answered `errno` by the policy (`deny_listen` as planned).
pub fn refusal(d: &Data, errno: i32, deny_listen: bool) -> Refusal {
    let nr = i64::from(d.nr);
    let call = name(d.nr);
    let a = d.args;
    let mode = |m: u64| format!("{call}(mode {:#o})", m & 0o7777);
    let mut patch = None;
    let (what, rule, fix): (String, &str, String) = if nr == libc::SYS_socket
        || nr == libc::SYS_socketpair
    {
        let ty = a[1] & 0xf;
        let ty = match ty as i32 {
            libc::SOCK_STREAM => "SOCK_STREAM".to_string(),
            libc::SOCK_DGRAM => "SOCK_DGRAM".to_string(),
            libc::SOCK_RAW => "SOCK_RAW".to_string(),
            libc::SOCK_SEQPACKET => "SOCK_SEQPACKET".to_string(),
            t => format!("type {t}"),
        };
        let fam = family(a[0]);
        let what = if matches!(
            a[0] as i32,
            libc::AF_INET | libc::AF_INET6 | libc::AF_NETLINK
        ) {
            format!("{call}({fam}, {ty}, protocol {})", a[2] as u32)
        } else {
            format!("{call}({fam})")
        };
        (
            what,
            "socket families (only unix, TCP, UDP, ping and netlink route sockets, whose traffic the other layers judge)",
            "never: the sandbox cannot judge this socket's traffic".into(),
        )
    } else if nr == libc::SYS_clone {
        (
            format!("clone({})", clone_flags(a[0])),
            "namespace flags",
            "never: a namespace of its own would undo the sandbox's".into(),
        )
    } else if nr == libc::SYS_unshare || nr == libc::SYS_setns {
        (
            format!(
                "{call}({})",
                clone_flags(a[if nr == libc::SYS_setns { 1 } else { 0 }])
            ),
            "not on the allow-list (namespaces)",
            "never: a namespace of its own would undo the sandbox's".into(),
        )
    } else if nr == libc::SYS_ioctl {
        let req = a[1] & 0xffff_ffff;
        let (n, rule, fix) = match req {
            TIOCSTI => (
                "TIOCSTI",
                "terminal input injection",
                "never: it types into the terminal",
            ),
            TIOCLINUX => (
                "TIOCLINUX",
                "terminal input injection",
                "never: it pastes into the console",
            ),
            FICLONE => (
                "FICLONE",
                "reflinks (the repo's disk budget)",
                "never: cp copies instead",
            ),
            FICLONERANGE => (
                "FICLONERANGE",
                "reflinks (the repo's disk budget)",
                "never: cp copies instead",
            ),
            _ => ("request", "ioctl requests", NEVER_POLICY),
        };
        let what = if n == "request" {
            format!("ioctl({req:#x})")
        } else {
            format!("ioctl({n})")
        };
        (what, rule, fix.into())
    } else if let Some(arg) = mode_arg(nr) {
        let m = a[arg];
        if nr_is_open(nr) {
            (
                format!("{call}(O_CREAT, mode {:#o})", m & 0o7777),
                "set-ID bits",
                "never: a set-ID file would run with its owner's rights on the host".into(),
            )
        } else if m & SETID_BITS != 0 {
            (
                mode(m),
                "set-ID bits",
                "never: a set-ID file would run with its owner's rights on the host".into(),
            )
        } else {
            (call.clone(), "not on the allow-list", NEVER_POLICY.into())
        }
    } else if nr == libc::SYS_fallocate {
        (
            format!("fallocate(mode {:#x})", a[1] as u32),
            "allocating fallocate modes (the repo's disk budget)",
            "never: posix_fallocate writes instead".into(),
        )
    } else if (nr == libc::SYS_setrlimit || nr == libc::SYS_prlimit64)
        && a[usize::from(nr == libc::SYS_prlimit64)] as u32 == RLIMIT_FSIZE
    {
        (
            format!("{call}(RLIMIT_FSIZE)"),
            "RLIMIT_FSIZE is the supervisor's (the repo's disk budget)",
            "never: the supervisor keeps it at the budget left".into(),
        )
    } else if nr == libc::SYS_personality {
        (
            format!("personality({:#x})", a[0] as u32),
            "personality flags",
            "never: only PER_LINUX".into(),
        )
    } else if nr == libc::SYS_sendto || nr == libc::SYS_sendmsg || nr == libc::SYS_sendmmsg {
        let _ = MSG_FASTOPEN;
        (
            format!("{call}(MSG_FASTOPEN)"),
            "TCP Fast Open (it connects past the port rules)",
            "never: connect first, then send".into(),
        )
    } else if nr == libc::SYS_setsockopt {
        (
            "setsockopt(TCP_FASTOPEN_CONNECT)".into(),
            "TCP Fast Open (it connects past the port rules)",
            "never: connect first, then send".into(),
        )
    } else if nr == libc::SYS_listen && deny_listen {
        (
            "listen".into(),
            "listen with the host's network and no tcp_bind port (it would autobind a port)",
            "[network] tcp_bind = [PORT], the port the command serves on".into(),
        )
    } else {
        (call.clone(), "not on the allow-list", NEVER_POLICY.into())
    };
    if nr == libc::SYS_listen && deny_listen {
        // no port is known at listen (the socket is unbound): learn cannot pick one
        patch = None::<Patch>;
    }
    let _ = errno;
    Refusal {
        kind: Kind::Syscall,
        sub: call,
        what,
        rule: rule.into(),
        fix,
        patch,
        count: 1,
    }
}

fn nr_is_open(nr: i64) -> bool {
    #[cfg(target_arch = "x86_64")]
    if nr == libc::SYS_open {
        return true;
    }
    nr == libc::SYS_openat
}

/// The index of the mode argument of a call that takes one (open(at): only when it creates):
/// the policy's own tables ([`bpf::mode_calls`], [`bpf::open_calls`]).
fn mode_arg(nr: i64) -> Option<usize> {
    bpf::mode_calls()
        .into_iter()
        .find(|(n, _)| *n == nr)
        .map(|(_, i)| i as usize)
        .or_else(|| {
            bpf::open_calls()
                .into_iter()
                .find(|(n, _, _)| *n == nr)
                .map(|(_, _, i)| i as usize)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(nr: i64, args: &[u64]) -> Data {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        Data {
            nr: nr as u32,
            arch: bpf::TARGET.unwrap(),
            args: a,
        }
    }

    #[test]
    fn names_the_call_and_the_argument_that_decided() {
        let r = refusal(
            &d(libc::SYS_socket, &[libc::AF_PACKET as u64, 3, 0]),
            97,
            false,
        );
        assert_eq!(
            (r.sub.as_str(), r.what.as_str()),
            ("socket", "socket(AF_PACKET)")
        );
        let r = refusal(
            &d(libc::SYS_unshare, &[libc::CLONE_NEWUSER as u64]),
            1,
            false,
        );
        assert_eq!(r.what, "unshare(CLONE_NEWUSER)");
        let r = refusal(&d(libc::SYS_ioctl, &[0, 0xdead_0000_0000_5412]), 1, false);
        assert_eq!(r.what, "ioctl(TIOCSTI)");
        let r = refusal(&d(libc::SYS_fchmodat, &[0, 0, 0o104755]), 1, false);
        assert_eq!(
            (r.what.as_str(), r.rule.as_str()),
            ("fchmodat(mode 0o4755)", "set-ID bits")
        );
        let r = refusal(&d(libc::SYS_mount, &[]), 1, false);
        assert_eq!(
            (r.what.as_str(), r.rule.as_str()),
            ("mount", "not on the allow-list")
        );
        assert!(r.fix.starts_with("never: "));
        let r = refusal(&d(libc::SYS_listen, &[3, 5]), 1, true);
        assert!(r.fix.starts_with("[network] tcp_bind"), "{}", r.fix);
        assert_eq!(name(99_999), "syscall 99999");
    }
}
