//! The seccomp layer: an allow-list of system calls, installed as the last step before `execve`.
//!
//! * Build time (`build.rs`): the policy ([`bpf`], pure code) is compiled into one classic BPF
//!   program per value of [`Options`] (two), embedded in the binary as constants.
//! * Run time: [`build`] only picks the prebuilt program (no compiling, no allocation); a
//!   build for another architecture than the build host's compiles it here instead.
//! * Child (after `fork`, must not allocate): [`Filters::install`] sets `no_new_privs` and loads
//!   the program with raw `prctl`/`seccomp` calls on the prepared data. Nothing else.
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
//! **Space on the host's disk.** `fallocate` is allowed only in the modes that free space
//! (`PUNCH_HOLE|KEEP_SIZE`, `COLLAPSE_RANGE`); every allocating mode, and the reflink ioctls
//! `FICLONE`/`FICLONERANGE`, get `EOPNOTSUPP`, on which glibc's `posix_fallocate` writes and
//! `cp` copies instead: what a file gains then goes through calls `RLIMIT_FSIZE` bounds, which
//! the supervisor keeps at the repo layer's budget left (see `crate::layers::disk`). So
//! `setrlimit(RLIMIT_FSIZE)` and `prlimit64(.., RLIMIT_FSIZE, new != NULL, ..)` get `EPERM`
//! (the whole 64-bit pointer is compared: an address with a zero low word is valid).
//!
//! **ENOSYS for fallbacks.** `clone3` and `openat2` pass their flags and mode in memory, which
//! a classic BPF filter cannot read: they return `ENOSYS`, so libc and runtimes fall back to
//! `clone` and `openat`, which are checked. Legacy AIO (`io_setup` and friends) draws on the
//! host-wide `fs.aio-max-nr` pool, which a hostile run could drain for the host's own
//! programs: it returns `ENOSYS` too, on which callers (libaio users, databases) fall back to
//! threads.
//!
//!
//! # One program
//!
//! The policy is ONE program ([`bpf::program`]): arch check (`KILL_PROCESS` on another one),
//! x32 numbers (x86_64, `nr >= 0x4000_0000` with `AUDIT_ARCH_X86_64`) -> `KILL_PROCESS`, then
//! a binary search on the number: the allowed calls and their argument rules -> `ALLOW`,
//! `socket`/`socketpair` outside the allowed families -> `ERRNO(EAFNOSUPPORT)`,
//! [`enosys_syscalls`] -> `ERRNO(ENOSYS)`, anything else -> `ERRNO(EPERM)`. It used to be a
//! stack of four filters (x32 guard, allow-list, socket families, `ENOSYS` newest, whose
//! order decided which `ERRNO` won); the tests keep that stack, with seccompiler compiling the
//! allow-list and the `ENOSYS` filter, and check that both decide every number, on every
//! architecture, for the argument values the rules look at, the same way. One program is one
//! `seccomp()` call, one `bpf_prepare_filter` and one JIT at install, and one run per checked
//! call instead of four.
//!
//! The program returns a constant `ALLOW` for the argument-free allowed calls (no argument is
//! loaded on their path), so the kernel's seccomp action cache marks them and skips the BPF
//! program entirely for them: `read`, `write`, `futex`, `mmap`... cost nothing extra. The
//! calls with argument rules (`openat` among them) run it, a few dozen instructions each.

#[path = "seccomp/bpf.rs"]
pub mod bpf;
pub mod interp;
pub mod names;
pub mod notify;

pub use bpf::{
    conditional_syscalls, enosys_syscalls, unconditional_syscalls, AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_I386, AUDIT_ARCH_X86_64, CLONE_NAMESPACE_FLAGS, IPPROTO_MPTCP, MSG_FASTOPEN,
    O_CREATE_BITS, PERSONALITY_QUERY, SETID_BITS, TCP_FASTOPEN_CONNECT, TIOCLINUX, TIOCSTI,
    X32_SYSCALL_BIT,
};

use crate::layers::{Step, StepError};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The programs `build.rs` compiled, by answer and `deny_listen` (`None` when the build
/// host's architecture is not the target's: then [`build`] compiles at run time).
mod prebuilt {
    include!(concat!(env!("OUT_DIR"), "/seccomp_prebuilt.rs"));
}

pub use bpf::Answer;

/// Choices the plan makes for the filter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    /// Refuse `listen` (`EPERM`), on every socket. Set when the workload shares the host's
    /// network and its profile allows no TCP bind: `listen` on an unbound socket autobinds an
    /// ephemeral port without passing landlock's bind hook.
    #[serde(default)]
    pub deny_listen: bool,
    /// The refusals go to the supervisor (seccomp user notification), which answers them
    /// with the same errno and names them ([`notify`]).
    #[serde(default)]
    pub notify: bool,
    /// `--observe`: the allowed path lookups go to the supervisor too (implies `notify`).
    #[serde(default)]
    pub observe: bool,
}

impl Options {
    /// Whether the filter sends calls to the supervisor (`notify` or `observe`).
    pub fn notifies(&self) -> bool {
        self.answer() != Answer::Errno
    }

    pub fn answer(&self) -> Answer {
        match (self.observe, self.notify) {
            (true, _) => Answer::Observe,
            (false, true) => Answer::Notify,
            _ => Answer::Errno,
        }
    }
}

/// The compiled filter, ready to install: one BPF program, and the errno program of the same
/// policy (what the supervisor runs to answer a notified call, and what is installed instead
/// where the kernel refuses a listener).
pub struct Filters {
    program: Cow<'static, [libc::sock_filter]>,
    errno: Cow<'static, [libc::sock_filter]>,
    answer: Answer,
}

/// The outcome of [`Filters::install`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// The errno program, as planned.
    Errno,
    /// The notifying program: the listener's fd (for the supervisor; the caller passes it on
    /// and closes it before `execve`).
    Listener(std::os::fd::RawFd),
    /// The kernel refused a listener (this errno): the errno program is in force instead.
    Unnamed(i32),
}

impl Filters {
    /// Sets `PR_SET_NO_NEW_PRIVS` (idempotent), then loads the program, with a listener when
    /// it notifies. No allocation, no logging, no panic: safe in a child forked from a
    /// multi-threaded process. Errors name the step and carry the errno.
    pub fn install(&self) -> Result<Installed, StepError> {
        set_no_new_privs()?;
        if self.answer == Answer::Errno {
            load(&self.program, 0)?;
            return Ok(Installed::Errno);
        }
        match load(&self.program, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER) {
            Ok(fd) => Ok(Installed::Listener(fd)),
            Err(e) => {
                // No listener (an older kernel; or a filter above ours already has one, as
                // in a sandbox within a sandbox): the same policy, answered by the kernel.
                load(&self.errno, 0)?;
                Ok(Installed::Unnamed(e.errno))
            }
        }
    }

    /// BPF instructions in the program (for the report and the benchmarks).
    pub fn instructions(&self) -> usize {
        self.program.len()
    }

    /// The BPF instructions, as the kernel receives them.
    pub fn program(&self) -> &[libc::sock_filter] {
        &self.program
    }

    /// The errno program of the same policy: the decision the supervisor applies.
    pub fn errno_program(&self) -> &[libc::sock_filter] {
        &self.errno
    }

    /// Whether this is the program `build.rs` compiled (not one compiled at run time).
    pub fn is_prebuilt(&self) -> bool {
        matches!(self.program, Cow::Borrowed(_))
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, program)`: the listener's fd with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`, else 0. No allocation.
fn load(program: &[libc::sock_filter], flags: libc::c_ulong) -> Result<i32, StepError> {
    let prog = libc::sock_fprog {
        // `build` checked that the program fits (BPF_MAXINSNS is 4096).
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `program`, which outlives the call; the kernel copies the
    // instructions and keeps no reference to our memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(last_error());
    }
    Ok(rc as i32)
}

/// `"x86_64"`, `"aarch64"`: the architecture the filter is compiled for.
pub fn arch_name() -> &'static str {
    std::env::consts::ARCH
}

/// The filter for `opts`: the prebuilt program, else (another build host) compiled now. The
/// error text names what failed.
pub fn build(opts: &Options) -> Result<Filters, String> {
    if let Some(programs) = prebuilt::PROGRAMS {
        let dl = opts.deny_listen as usize;
        return Ok(Filters {
            program: Cow::Borrowed(programs[opts.answer() as usize][dl]),
            errno: Cow::Borrowed(programs[Answer::Errno as usize][dl]),
            answer: opts.answer(),
        });
    }
    compile(opts)
}

/// Compiles the policy for this architecture, now ([`build`] without the prebuilt programs).
pub fn compile(opts: &Options) -> Result<Filters, String> {
    let Some(audit_arch) = bpf::TARGET else {
        return Err(format!(
            "seccomp: architecture {} is not supported (x86_64 and aarch64 are)",
            arch_name()
        ));
    };
    Ok(Filters {
        program: Cow::Owned(bpf::program_for(
            audit_arch,
            opts.deny_listen,
            opts.answer(),
        )?),
        errno: Cow::Owned(bpf::program(audit_arch, opts.deny_listen)?),
        answer: opts.answer(),
    })
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
    use super::bpf::{O_TMPFILE_BIT, SYS_FCHMODAT2};
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Verdict {
        Allow,
        Errno(i32),
        KillProcess,
        Other(u32),
    }

    use super::interp::Data;

    fn data(nr: i64, args: &[u64]) -> Data {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        Data {
            nr: nr as u32,
            arch: bpf::TARGET.unwrap(),
            args: a,
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
        let r = interp::run(prog, d);
        (r.ret, r.read_args, r.steps)
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
        vec![f.program()]
    }

    #[test]
    fn policy_table() {
        let f = build(&Options::default()).unwrap();
        let s = stack(&f);
        let eperm = Verdict::Errno(libc::EPERM);
        let eopnotsupp = Verdict::Errno(libc::EOPNOTSUPP);
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
            (
                "ioctl FICLONE",
                libc::SYS_ioctl,
                &[0, bpf::FICLONE],
                eopnotsupp,
            ),
            (
                "ioctl FICLONERANGE high",
                libc::SYS_ioctl,
                &[0, bpf::FICLONERANGE | 1 << 32],
                eopnotsupp,
            ),
            ("fallocate 0", libc::SYS_fallocate, &[3, 0], eopnotsupp),
            (
                "fallocate keep size",
                libc::SYS_fallocate,
                &[3, 1],
                eopnotsupp,
            ),
            (
                "fallocate insert",
                libc::SYS_fallocate,
                &[3, 0x20],
                eopnotsupp,
            ),
            (
                "fallocate zero",
                libc::SYS_fallocate,
                &[3, 0x10],
                eopnotsupp,
            ),
            (
                "fallocate punch",
                libc::SYS_fallocate,
                &[3, 3],
                Verdict::Allow,
            ),
            (
                "fallocate collapse",
                libc::SYS_fallocate,
                &[3, 8],
                Verdict::Allow,
            ),
            ("setrlimit fsize", libc::SYS_setrlimit, &[1, 0x1000], eperm),
            (
                "setrlimit nofile",
                libc::SYS_setrlimit,
                &[7, 0x1000],
                Verdict::Allow,
            ),
            (
                "prlimit get fsize",
                libc::SYS_prlimit64,
                &[0, 1, 0, 8],
                Verdict::Allow,
            ),
            (
                "prlimit set fsize",
                libc::SYS_prlimit64,
                &[0, 1, 0x1000, 0],
                eperm,
            ),
            (
                "prlimit set fsize, low word 0",
                libc::SYS_prlimit64,
                &[0, 1, 0x7f00_0000_0000, 0],
                eperm,
            ),
            (
                "prlimit set nofile",
                libc::SYS_prlimit64,
                &[0, 7, 0x1000, 0],
                Verdict::Allow,
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
        let deny = build(&Options {
            deny_listen: true,
            ..Default::default()
        })
        .unwrap();
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
            if arch == bpf::TARGET.unwrap() {
                continue;
            }
            let mut d = data(20, &[]);
            d.arch = arch;
            assert_eq!(verdict(&s, &d), Verdict::KillProcess, "arch {arch:#x}");
        }
    }

    /// The stack of four filters the one program replaced, compiled the old way: the x32
    /// guard, the allow-list with seccompiler (its own arch check and linear chain of
    /// numbers, mismatch `EPERM`), the socket families, and `ENOSYS` with seccompiler, newest.
    fn reference_stack(deny_listen: bool) -> Vec<Vec<libc::sock_filter>> {
        use seccompiler::{
            BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
            SeccompFilter, SeccompRule, TargetArch,
        };
        let (arch, audit) = match bpf::TARGET.unwrap() {
            AUDIT_ARCH_X86_64 => (TargetArch::x86_64, AUDIT_ARCH_X86_64),
            a => (TargetArch::aarch64, a),
        };
        let compile = |f: SeccompFilter| -> Vec<libc::sock_filter> {
            let p: BpfProgram = f.try_into().unwrap();
            p.into_iter()
                .map(|i| libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect()
        };
        let to_rules = |rules: &[Vec<bpf::Cond>]| -> Vec<SeccompRule> {
            rules
                .iter()
                .map(|rule| {
                    let conds = rule
                        .iter()
                        .map(|c| {
                            let (op, v, len) = match c.cmp {
                                bpf::Cmp::Eq(v) => (SeccompCmpOp::Eq, v, SeccompCmpArgLen::Dword),
                                bpf::Cmp::Ne(v) => (SeccompCmpOp::Ne, v, SeccompCmpArgLen::Dword),
                                bpf::Cmp::MaskedEq(m, v) => {
                                    (SeccompCmpOp::MaskedEq(m as u64), v, SeccompCmpArgLen::Dword)
                                }
                                bpf::Cmp::NonZero64 => {
                                    (SeccompCmpOp::Ne, 0, SeccompCmpArgLen::Qword)
                                }
                            };
                            SeccompCondition::new(c.arg as u8, len, op, v as u64).unwrap()
                        })
                        .collect();
                    SeccompRule::new(conds).unwrap()
                })
                .collect()
        };
        // refusals by errno: a filter of their own each, newer than the allow-list
        let mut refusals: std::collections::BTreeMap<u32, Vec<(i64, Vec<SeccompRule>)>> =
            Default::default();
        let rules = bpf::allow_list_entries(deny_listen)
            .unwrap()
            .into_iter()
            .map(|(nr, e)| {
                let e = match e {
                    bpf::Entry::Unless {
                        refuse,
                        errno,
                        then,
                    } => {
                        let r = to_rules(&refuse);
                        refusals.entry(errno).or_default().push((nr as i64, r));
                        *then
                    }
                    e => e,
                };
                let rules = match e {
                    bpf::Entry::Allow => vec![],
                    bpf::Entry::AnyOf(rules) => to_rules(&rules),
                    _ => unreachable!("the allow-list has no other entries"),
                };
                (nr as i64, rules)
            })
            .collect();
        let eperm = SeccompAction::Errno(libc::EPERM as u32);
        let allow_list = SeccompFilter::new(rules, eperm, SeccompAction::Allow, arch).unwrap();
        let enosys = SeccompFilter::new(
            enosys_syscalls().iter().map(|nr| (*nr, vec![])).collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .unwrap();
        let mut v = Vec::new();
        if audit == AUDIT_ARCH_X86_64 {
            v.push(bpf::x32_guard());
        }
        v.push(compile(allow_list));
        for (errno, rules) in refusals {
            let f = SeccompFilter::new(
                rules.into_iter().collect(),
                SeccompAction::Allow,
                SeccompAction::Errno(errno),
                arch,
            )
            .unwrap();
            v.push(compile(f));
        }
        v.push(bpf::socket_families(audit).unwrap());
        v.push(compile(enosys));
        v
    }

    /// Argument vectors worth trying for `nr`: in each argument its rules read, the values they
    /// compare with, their neighbours, each with every bit of the rule's mask flipped, and the
    /// same with garbage in the high word; every combination of them.
    fn arg_cases(nr: i64) -> Vec<[u64; 6]> {
        let mut per_arg: Vec<(usize, Vec<u32>)> = Vec::new();
        let base = [0u32, 1, 2, 3, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff];
        let mut add = |arg: usize, vals: &[u32]| match per_arg.iter_mut().find(|(a, _)| *a == arg) {
            Some((_, v)) => v.extend(vals),
            None => per_arg.push((arg, base.iter().chain(vals).copied().collect())),
        };
        for (n, e) in bpf::entries(false).unwrap() {
            if n as i64 != nr {
                continue;
            }
            let e = match e {
                bpf::Entry::Unless { refuse, then, .. } => {
                    let mut all = refuse;
                    if let bpf::Entry::AnyOf(rules) = *then {
                        all.extend(rules);
                    }
                    bpf::Entry::AnyOf(all)
                }
                e => e,
            };
            match e {
                bpf::Entry::AnyOf(rules) => {
                    for c in rules.iter().flatten() {
                        let mut v = match c.cmp {
                            bpf::Cmp::Eq(v) | bpf::Cmp::Ne(v) => {
                                vec![v, v.wrapping_add(1), v.wrapping_sub(1), v ^ 0x8000_0000]
                            }
                            bpf::Cmp::NonZero64 => vec![0, 1, 0x1000],
                            bpf::Cmp::MaskedEq(m, v) => {
                                let mut x = vec![v, m, !m, v | 0o755, v | 0o1777];
                                x.extend(
                                    (0..32).filter(|b| m & (1 << b) != 0).map(|b| v ^ (1 << b)),
                                );
                                x
                            }
                        };
                        if nr == libc::SYS_setsockopt {
                            v.extend([libc::IPPROTO_TCP as u32, TCP_FASTOPEN_CONNECT as u32]);
                        }
                        add(c.arg as usize, &v);
                    }
                }
                bpf::Entry::Socket | bpf::Entry::Socketpair => {
                    let families = [
                        libc::AF_UNIX,
                        libc::AF_INET,
                        libc::AF_INET6,
                        libc::AF_NETLINK,
                        libc::AF_PACKET,
                        libc::AF_VSOCK,
                    ];
                    let types = [
                        libc::SOCK_STREAM,
                        libc::SOCK_DGRAM,
                        libc::SOCK_RAW,
                        libc::SOCK_SEQPACKET,
                        libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                        libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                        libc::SOCK_STREAM | 0x100,
                    ];
                    let protocols = [
                        libc::IPPROTO_TCP,
                        libc::IPPROTO_UDP,
                        libc::IPPROTO_ICMP,
                        libc::IPPROTO_ICMPV6,
                        libc::IPPROTO_SCTP,
                        libc::NETLINK_AUDIT,
                        IPPROTO_MPTCP as i32,
                    ];
                    for (arg, vals) in [(0, &families[..]), (1, &types[..]), (2, &protocols[..])] {
                        add(arg, &vals.iter().map(|v| *v as u32).collect::<Vec<_>>());
                    }
                }
                _ => {}
            }
        }
        let mut cases = vec![[0u64; 6]];
        for (arg, mut vals) in per_arg {
            vals.sort();
            vals.dedup();
            let vals: Vec<u64> = vals
                .iter()
                .flat_map(|&v| [v as u64, 0xdead_0001_0000_0000 | v as u64])
                .collect();
            cases = cases
                .iter()
                .flat_map(|c| {
                    vals.iter().map(move |&v| {
                        let mut c = *c;
                        c[arg] = v;
                        c
                    })
                })
                .collect();
        }
        cases
    }

    /// The one program decides exactly as the old stack did: every number up to past the end
    /// of the table (and x32 ones), on this and the foreign architectures, and for each call
    /// with argument rules, every combination of [`arg_cases`].
    #[test]
    fn one_program_decides_like_the_old_stack() {
        for deny_listen in [false, true] {
            let one = compile(&Options {
                deny_listen,
                ..Default::default()
            })
            .unwrap();
            let one = [one.program()];
            let reference = reference_stack(deny_listen);
            let reference: Vec<&[libc::sock_filter]> =
                reference.iter().map(|p| p.as_slice()).collect();
            let mut numbers: Vec<u32> = (0..1100).collect();
            numbers.extend((0..600).map(|n| n | X32_SYSCALL_BIT));
            numbers.extend([0x7fff_ffff, 0x8000_0000, 0xffff_ffff]);
            for arch in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64] {
                for &nr in &numbers {
                    let mut d = data(0, &[0x41; 6]);
                    d.nr = nr;
                    d.arch = arch;
                    assert_eq!(
                        verdict(&one, &d),
                        verdict(&reference, &d),
                        "nr {nr:#x} arch {arch:#x} deny_listen {deny_listen}"
                    );
                }
            }
            let mut checked = 0usize;
            for nr in conditional_syscalls() {
                let cases = arg_cases(nr);
                assert!(cases.len() >= 16, "nr {nr}: {} cases", cases.len());
                for args in cases {
                    let d = data(nr, &args);
                    assert_eq!(
                        verdict(&one, &d),
                        verdict(&reference, &d),
                        "nr {nr} args {args:x?}"
                    );
                    checked += 1;
                }
            }
            assert!(checked > 10_000, "{checked}");
        }
    }

    /// What `build.rs` embedded is what the policy compiles to now, for both options: the
    /// prebuilt programs cannot drift from the rules.
    #[test]
    fn prebuilt_is_what_the_policy_compiles_to() {
        let same = |a: &[libc::sock_filter], b: &[libc::sock_filter]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| (x.code, x.jt, x.jf, x.k) == (y.code, y.jt, y.jf, y.k))
        };
        for (deny_listen, (notify, observe)) in [false, true]
            .into_iter()
            .flat_map(|d| [(false, false), (true, false), (true, true)].map(|a| (d, a)))
        {
            let opts = Options {
                deny_listen,
                notify,
                observe,
            };
            let built = build(&opts).unwrap();
            assert!(built.is_prebuilt(), "build.rs compiled no program");
            let now = compile(&opts).unwrap();
            assert!(!now.is_prebuilt());
            assert!(
                same(built.program(), now.program())
                    && same(built.errno_program(), now.errno_program()),
                "{opts:?}"
            );
        }
        let (a, b) = (
            build(&Options {
                deny_listen: false,
                ..Default::default()
            })
            .unwrap(),
            build(&Options {
                deny_listen: true,
                ..Default::default()
            })
            .unwrap(),
        );
        assert!(!same(a.program(), b.program()));
    }

    #[test]
    fn unconditional_calls_are_cacheable() {
        let f = build(&Options::default()).unwrap();
        let mut count = 0;
        for nr in unconditional_syscalls() {
            let (ret, read_args) = run(f.program(), &data(nr, &[]));
            assert_eq!(ret, libc::SECCOMP_RET_ALLOW, "nr {nr}");
            assert!(!read_args, "reads args for nr {nr}");
            count += 1;
        }
        assert!(count > 250, "{count}");
        for nr in conditional_syscalls() {
            assert!(unconditional_syscalls().all(|u| u != nr));
        }
        assert!(f.instructions() < bpf::BPF_MAXINSNS);
    }

    /// The calls with argument rules run the program (the action cache cannot skip them): the
    /// binary search keeps each of them to a few dozen instructions, where a linear chain of
    /// numbers took hundreds for `openat`.
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
            let total = run_counted(f.program(), &data(nr, &args)).2;
            assert!(total <= 50, "nr {nr}: {total} instructions");
        }
    }

    /// What installing costs in the kernel (checker, conversion, JIT, action cache), for the
    /// one program and for the old stack, in fresh forked children: median microseconds.
    /// `cargo test --lib -- --ignored --nocapture install_cost`.
    #[test]
    #[ignore]
    fn install_cost() {
        fn median_install(programs: &[&[libc::sock_filter]]) -> f64 {
            let mut times: Vec<f64> = (0..200)
                .map(|_| {
                    let mut fds = [0; 2];
                    // SAFETY: pipe writes two fds into the array.
                    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
                    // SAFETY: the child makes system calls only and leaves with _exit.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        let t = std::time::Instant::now();
                        for p in programs {
                            let prog = libc::sock_fprog {
                                len: p.len() as u16,
                                filter: p.as_ptr() as *mut _,
                            };
                            // SAFETY: prctl, seccomp on a program alive for the call.
                            unsafe {
                                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                                libc::syscall(libc::SYS_seccomp, 1, 0, &prog as *const _);
                            }
                        }
                        let us = t.elapsed().as_secs_f64() * 1e6;
                        // SAFETY: writes 8 bytes from a local; ends the child.
                        unsafe {
                            libc::write(fds[1], &us as *const f64 as *const _, 8);
                            libc::_exit(0);
                        }
                    }
                    let mut us = 0f64;
                    // SAFETY: reads 8 bytes into a local; waits for our child; closes our fds.
                    unsafe {
                        libc::read(fds[0], &mut us as *mut f64 as *mut _, 8);
                        libc::waitpid(pid, std::ptr::null_mut(), 0);
                        libc::close(fds[0]);
                        libc::close(fds[1]);
                    }
                    us
                })
                .collect();
            times.sort_by(|a, b| a.partial_cmp(b).unwrap());
            times[times.len() / 2]
        }
        let one = build(&Options::default()).unwrap();
        let old = reference_stack(false);
        let old: Vec<&[libc::sock_filter]> = old.iter().map(|p| p.as_slice()).collect();
        let old_sizes: Vec<usize> = old.iter().map(|p| p.len()).collect();
        for _ in 0..2 {
            println!(
                "one program ({} insns): {:.1} us; the old stack (seccompiler's allow-list) \
                 {:?}: {:.1} us",
                one.instructions(),
                median_install(&[one.program()]),
                old_sizes,
                median_install(&old)
            );
        }
    }

    #[test]
    fn arch_name_is_the_target() {
        assert_eq!(arch_name(), std::env::consts::ARCH);
    }
}
