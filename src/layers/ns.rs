//! Namespaces: user, mount, pid, ipc, uts, net, cgroup.
//!
//! Child side only, in stage 2 (a freshly exec'd, single-threaded process: `unshare` of a user
//! namespace fails in a multi-threaded one). One `unshare` creates the user namespace first and
//! the others owned by it, which gives stage 2 the capabilities to set them up; the uid/gid
//! maps then make the caller's ids the only ids that exist inside. `CLONE_NEWPID` takes effect
//! for the children: the next fork is pid 1 of the sandbox.

use crate::layers::{Step, StepError};
use nix::sched::{unshare, CloneFlags};

/// What to check when user namespaces are not available: one text for every message.
pub const FIX: &str = " (user namespaces are not available to this user: check 'sysctl user.max_user_namespaces' (must be > 0), 'kernel.unprivileged_userns_clone=1' on Debian-patched kernels, and 'kernel.apparmor_restrict_unprivileged_userns=0' on Ubuntu 23.10+; inside a container, allow unshare in its seccomp/AppArmor profile)";

/// Which ids the workload has on the host (and, identically mapped, inside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// When stage 2 runs as root but the workload is to run as someone else (the repo's owner, or
/// the profile's uid): become that user for good, before any namespace exists, so the whole
/// sandbox is set up exactly as that user would set it up, and a kernel bug reached from
/// inside lands on an unprivileged host uid.
pub fn become_user(ids: Ids) -> Result<(), StepError> {
    use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
    if nix::unistd::geteuid().is_root() && ids.uid != 0 {
        setgroups(&[]).map_err(|e| StepError::new(Step::Setuid, e as i32))?;
        let g = Gid::from_raw(ids.gid);
        setresgid(g, g, g).map_err(|e| StepError::new(Step::Setuid, e as i32))?;
        let u = Uid::from_raw(ids.uid);
        setresuid(u, u, u).map_err(|e| StepError::new(Step::Setuid, e as i32))?;
        // Leaving uid 0 made us non-dumpable, which makes /proc/self/{setgroups,uid_map}
        // root-owned: we could no longer map our own ids. We are now that user in every
        // respect, so being dumpable (ptraceable by that user) gives nothing away.
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
            return Err(StepError::last(Step::Setuid));
        }
    }
    Ok(())
}

/// Can `ids` create a user namespace and map themselves, as stage 2 would? Asked only for
/// profiles that mark namespaces best-effort, and answered by trying, in a forked child that
/// first becomes `ids` like stage 2: whatever decided (the sysctls, AppArmor's userns
/// restriction, a container's seccomp profile), the attempt is the authority. The errno when
/// they cannot.
pub fn available(ids: Ids) -> Result<(), i32> {
    // SAFETY: the supervisor has started no threads, so the child may run ordinary code; it
    // leaves with _exit and never returns into the parent's stack.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let errno = match become_user(ids).and_then(|()| map_self(CloneFlags::empty())) {
                Ok(()) => 0,
                Err(e) => e.errno.clamp(1, 255),
            };
            // SAFETY: end the child without running the parent's destructors.
            unsafe { libc::_exit(errno) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => match nix::sys::wait::waitpid(child, None)
        {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(nix::sys::wait::WaitStatus::Exited(_, e)) => Err(e),
            _ => Err(libc::ECHILD),
        },
        Err(e) => Err(e as i32),
    }
}

/// Create a user namespace (with `others` owned by it) and map our own ids in it.
fn map_self(others: CloneFlags) -> Result<(), StepError> {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    unshare(CloneFlags::CLONE_NEWUSER | others)
        .map_err(|e| StepError::new(Step::UnshareUser, e as i32))?;
    write_proc("/proc/self/setgroups", "deny", Step::Setgroups)?;
    write_proc(
        "/proc/self/uid_map",
        &format!("{uid} {uid} 1\n"),
        Step::UidMap,
    )?;
    write_proc(
        "/proc/self/gid_map",
        &format!("{gid} {gid} 1\n"),
        Step::GidMap,
    )
}

/// Create every namespace but the cgroup one ([`enter_cgroup`], once stage 2 is in its leaf),
/// map our own ids, and set the hostname and loopback up.
pub fn enter(net: bool, hostname: &str) -> Result<(), StepError> {
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if net {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    map_self(flags)?;
    // Nothing we mount may propagate back to the host.
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| StepError::new(Step::MountPrivate, e as i32))?;
    nix::unistd::sethostname(hostname).map_err(|e| StepError::new(Step::Hostname, e as i32))?;
    if net {
        loopback_up()?;
    }
    Ok(())
}

/// The cgroup namespace, rooted at the cgroup stage 2 is in now: call it only once the
/// supervisor has moved stage 2 into its leaf, so the sandbox sees the leaf as `/`. Needs the
/// user namespace of [`enter`] (CAP_SYS_ADMIN there), which then owns it.
pub fn enter_cgroup() -> Result<(), StepError> {
    unshare(CloneFlags::CLONE_NEWCGROUP).map_err(|e| StepError::new(Step::Unshare, e as i32))
}

fn write_proc(path: &str, text: &str, step: Step) -> Result<(), StepError> {
    std::fs::write(path, text)
        .map_err(|e| StepError::new(step, e.raw_os_error().unwrap_or(libc::EIO)))
}

/// `ip link set lo up` in the new network namespace.
fn loopback_up() -> Result<(), StepError> {
    let fail = || StepError::last(Step::LoopbackUp);
    // SAFETY: plain socket(2) call; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(fail());
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own; fd is a socket.
    let result = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            Err(fail())
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
                Err(fail())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    result
}
