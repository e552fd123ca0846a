//! Namespaces: user, mount, pid, ipc, uts, net, cgroup.
//!
//! Child side only, in stage 2 (a single-threaded process: `unshare` of a user namespace fails
//! in a multi-threaded one). One `unshare` creates the user namespace first and the mount, pid,
//! ipc and uts ones owned by it, which gives stage 2 the capabilities to set them up; the uid/gid
//! maps then make the workload's ids the only ids that exist inside. When root runs a repo
//! for another user, root owns the namespace and the user's ids are mapped into it, so that
//! user can neither ptrace the sandbox's processes nor enter its namespaces (see [`create`]).
//! The network namespace, owned by the same user namespace, is made by stage 2 while pid 1
//! builds the root, and entered by pid 1 ([`Net`]). `CLONE_NEWPID` takes effect for the
//! children: the next fork is pid 1 of the sandbox.

use crate::layers::{Step, StepError};
use nix::sched::{unshare, CloneFlags};

/// What to check when user namespaces are not available: one text for every message.
pub const FIX: &str = " (user namespaces are not available to this user: check 'sysctl user.max_user_namespaces' (must be > 0), 'kernel.unprivileged_userns_clone=1' on Debian-patched kernels, and 'kernel.apparmor_restrict_unprivileged_userns=0' on Ubuntu 23.10+; inside a container, allow unshare in its seccomp/AppArmor profile)";

/// [`FIX`], or when Ubuntu's AppArmor restriction is what stops this binary (see
/// [`crate::apparmor`]), what lifts it.
pub fn fix() -> std::borrow::Cow<'static, str> {
    match crate::apparmor::hint(&crate::apparmor::Facts::probe()) {
        Some(h) => format!(" ({h})").into(),
        None => FIX.into(),
    }
}

/// Which ids the workload has on the host (and, identically mapped, inside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Without namespaces (a degraded run): when stage 2 runs as root but the workload is to run
/// as someone else (the repo's owner, or the profile's uid), become that user for good.
/// The uid change leaves the process non-dumpable (whatever `fs.suid_dumpable` says, we make
/// sure), and so it stays: that user may not ptrace stage 2 or pid 1, which hold the
/// supervisor's output fds. See [`enter`] for the namespaced case.
pub fn become_user(ids: Ids) -> Result<(), StepError> {
    if nix::unistd::geteuid().is_root() && ids.uid != 0 {
        nix::unistd::setgroups(&[]).map_err(|e| StepError::new(Step::Setuid, e as i32))?;
        set_ids(ids)?;
    }
    Ok(())
}

/// setresgid + setresuid to `ids`, then non-dumpable.
fn set_ids(ids: Ids) -> Result<(), StepError> {
    use nix::unistd::{setresgid, setresuid, Gid, Uid};
    let g = Gid::from_raw(ids.gid);
    setresgid(g, g, g).map_err(|e| StepError::new(Step::Setuid, e as i32))?;
    let u = Uid::from_raw(ids.uid);
    setresuid(u, u, u).map_err(|e| StepError::new(Step::Setuid, e as i32))?;
    // The kernel already made us non-dumpable when the euid changed, unless
    // fs.suid_dumpable is 1 or 2: say it ourselves. Non-dumpable, and with our memory
    // belonging to the initial user namespace (this binary was exec'd there), only
    // CAP_SYS_PTRACE on the host may attach to us or to pid 1 (which inherits both).
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(StepError::last(Step::Setuid));
    }
    Ok(())
}

/// Can `ids` get a user namespace as stage 2 would get it? Asked only for profiles that mark
/// namespaces best-effort, and answered by trying [`create`] (the very steps of stage 2) in
/// a forked child: whatever decided (the sysctls, AppArmor's userns restriction, a
/// container's seccomp profile), the attempt is the authority. Then what stage 2 needs of
/// `/proc` there ([`proc_usable`]): a container with masked `/proc` paths gives the namespace
/// but not the sandbox's own `/proc`, and a best-effort profile then runs without namespaces
/// rather than failing. The errno when they cannot.
pub fn available(ids: Ids) -> Result<(), i32> {
    // SAFETY: the supervisor has started no threads, so the child may run ordinary code; it
    // leaves with _exit and never returns into the parent's stack.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let others = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID;
            let errno = match create(ids, 0, others).and_then(|()| proc_usable()) {
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

/// In a child that has just made its user, mount and pid namespaces ([`available`]): can
/// stage 2 write the per-user limits ([`UserLimits`], opened for writing, nothing written) and
/// mount a fresh `/proc` (in a forked pid 1 of the new pid namespace, over `/proc` in this
/// private mount namespace)? A container that masks `/proc` paths or mounts `/proc/sys`
/// read-only refuses both (EROFS; EPERM: the kernel's mount_too_revealing).
fn proc_usable() -> Result<(), StepError> {
    for name in USER_COUNTS {
        match std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/sys/user/{name}"))
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                return Err(StepError::new(Step::UserLimits, errno));
            }
        }
    }
    use nix::mount::{mount, MsFlags};
    let none: Option<&str> = None;
    // SAFETY: this child of the single-threaded supervisor is single-threaded; the grandchild
    // only mounts and leaves with _exit.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            let r = mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
                .and_then(|()| mount(Some("proc"), "/proc", Some("proc"), flags, none));
            let code = match r {
                Ok(()) => 0,
                Err(e) => (e as i32).clamp(1, 255),
            };
            // SAFETY: end the grandchild without running destructors.
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            match nix::sys::wait::waitpid(child, None) {
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
                Ok(nix::sys::wait::WaitStatus::Exited(_, e)) => {
                    Err(StepError::new(Step::MountProc, e))
                }
                _ => Err(StepError::new(Step::MountProc, libc::ECHILD)),
            }
        }
        Err(e) => Err(StepError::new(Step::MountProc, e as i32)),
    }
}

/// Create the user namespace (with `others` owned by it), make `ids` the only ids that exist
/// in it, and run as them.
///
/// Run by an unprivileged caller (or by root for a root workload): the namespace is the
/// caller's own, and it maps its own ids ([`map_self`]).
///
/// Run by root for another user: the namespace is created while still root, so root owns it,
/// not the user; then we become the user inside it. Becoming the user first (as before) made
/// the namespace the user's, and stage 2 had to be dumpable to write its own uid_map: the
/// user could ptrace stage 2 and pid 1 and use root's terminal and fds. Now:
/// - stage 2 and pid 1 are non-dumpable and their memory belongs to the initial namespace:
///   ptrace and /proc/PID/{fd,mem,environ} need CAP_SYS_PTRACE on the host;
/// - the workload lives in a namespace the user does not own: the user has no capability in
///   it (no ptrace of the workload, no setns into the sandbox's namespaces);
/// - inside, stage 2 keeps every capability of the namespace's creator across the uid
///   change: cap_emulate_setxuid clears them only when leaving the namespace's uid 0, and
///   uid 0 is not mapped in it (`make_kuid(ns, 0)` is invalid, so no old id equals it).
///
/// A process inside a user namespace cannot write its maps unless they map its own euid
/// (which would be host root: never) or it has CAP_SETUID in the parent namespace (which it
/// lost with the unshare). So a helper forked beforehand, still root on the host, writes
/// them: [`MapHelper`]. It costs about 0.5 ms (measured in the `namespaces` phase of
/// `--timings`, debug build, busy machine), in runs by root for another user only.
///
/// `root_inside`: the uid (and gid) a workload that is root on the host has inside
/// ([`crate::profile::Process::uid_inside`]); 0 keeps it root there. Only the view inside
/// changes: the host uid, and so every file access, is the same. With a non-zero uid, uid 0
/// is not mapped inside at all.
fn create(ids: Ids, root_inside: u32, others: CloneFlags) -> Result<(), StepError> {
    if !nix::unistd::geteuid().is_root() || ids.uid == 0 {
        return map_self(root_inside, others);
    }
    // Supplementary groups: drop them now; inside, setgroups will be denied.
    nix::unistd::setgroups(&[]).map_err(|e| StepError::new(Step::Setuid, e as i32))?;
    let helper = MapHelper::start(ids)?;
    let unshared = unshare(CloneFlags::CLONE_NEWUSER | others)
        .map_err(|e| StepError::new(Step::UnshareUser, e as i32));
    helper.finish(unshared.is_ok())?;
    unshared?;
    set_ids(ids)
}

/// Create a user namespace (with `others` owned by it) and map our own ids in it: each to
/// itself, or a root uid or gid to `root_inside`.
fn map_self(root_inside: u32, others: CloneFlags) -> Result<(), StepError> {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let inside = |id: u32| if id == 0 { root_inside } else { id };
    unshare(CloneFlags::CLONE_NEWUSER | others)
        .map_err(|e| StepError::new(Step::UnshareUser, e as i32))?;
    write_proc("/proc/self/setgroups", "deny", Step::Setgroups)?;
    write_proc(
        "/proc/self/uid_map",
        &format!("{} {uid} 1\n", inside(uid)),
        Step::UidMap,
    )?;
    write_proc(
        "/proc/self/gid_map",
        &format!("{} {gid} 1\n", inside(gid)),
        Step::GidMap,
    )
}

/// A child of stage 2 that stays root on the host and writes stage 2's setgroups, uid_map
/// and gid_map once stage 2 has unshared its user namespace (see [`create`]). Everything it
/// writes is prepared before the fork; it reports a failure as one channel record on a pipe.
struct MapHelper {
    pid: nix::unistd::Pid,
    go: std::os::fd::OwnedFd,
    result: std::os::fd::OwnedFd,
}

impl MapHelper {
    fn start(ids: Ids) -> Result<MapHelper, StepError> {
        use std::ffi::CString;
        use std::os::fd::AsRawFd;
        let me = std::process::id();
        let c = |s: String| CString::new(s).map_err(|_| StepError::new(Step::UidMap, libc::EINVAL));
        let writes = [
            (
                c(format!("/proc/{me}/setgroups"))?,
                c("deny".into())?,
                Step::Setgroups,
            ),
            (
                c(format!("/proc/{me}/uid_map"))?,
                c(format!("{0} {0} 1\n", ids.uid))?,
                Step::UidMap,
            ),
            (
                c(format!("/proc/{me}/gid_map"))?,
                c(format!("{0} {0} 1\n", ids.gid))?,
                Step::GidMap,
            ),
        ];
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| StepError::new(Step::UidMap, e as i32))
        };
        let (go_r, go_w) = pipe()?;
        let (res_r, res_w) = pipe()?;
        // SAFETY: stage 2 (and the supervisor's probe child) is single-threaded; the child
        // only makes raw system calls on the data prepared above and leaves with _exit.
        match unsafe { nix::unistd::fork() }.map_err(|e| StepError::new(Step::Fork, e as i32))? {
            nix::unistd::ForkResult::Child => {
                // SAFETY: raw calls on our fds and the NUL-terminated strings above.
                unsafe {
                    libc::close(go_w.as_raw_fd());
                    libc::close(res_r.as_raw_fd());
                    let mut b = 0u8;
                    // One byte: stage 2 has unshared. End of file: it could not; nothing to do.
                    if libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) != 1 {
                        libc::_exit(0);
                    }
                    for (path, text, step) in &writes {
                        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                        let len = text.as_bytes().len();
                        if fd < 0 || libc::write(fd, text.as_ptr().cast(), len) != len as isize {
                            let rec =
                                crate::layers::channel::Record::Failed(StepError::last(*step))
                                    .encode();
                            libc::write(res_w.as_raw_fd(), rec.as_ptr().cast(), rec.len());
                            libc::_exit(1);
                        }
                        libc::close(fd);
                    }
                    libc::_exit(0)
                }
            }
            nix::unistd::ForkResult::Parent { child } => Ok(MapHelper {
                pid: child,
                go: go_w,
                result: res_r,
            }),
        }
    }

    /// Let the helper write the maps (when `unshared`), wait for it, and return its verdict.
    fn finish(self, unshared: bool) -> Result<(), StepError> {
        use crate::layers::channel::{Record, SIZE};
        if unshared {
            let _ = nix::unistd::write(&self.go, b"u");
        }
        drop(self.go);
        let mut rec = [0u8; SIZE];
        let n = nix::unistd::read(&self.result, &mut rec).unwrap_or(0);
        let status = nix::sys::wait::waitpid(self.pid, None);
        match (n == SIZE).then(|| Record::decode(rec)).flatten() {
            Some(Record::Failed(e)) => Err(e),
            _ if matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))) => Ok(()),
            _ => Err(StepError::new(Step::UidMap, libc::ECHILD)),
        }
    }
}

/// Create every namespace but the cgroup one ([`enter_cgroup`], once stage 2 is in its leaf)
/// and the network one ([`Net`]), make `ids` the only ids inside and run as them
/// ([`create`]), lower the per-user limits ([`UserLimits`]) and set the hostname. With `net`,
/// the [`Net`] through which stage 2, once it has forked pid 1, hands pid 1 the network
/// namespace.
pub fn enter(
    ids: Ids,
    root_inside: u32,
    limits: &UserLimits,
    net: bool,
    hostname: &str,
) -> Result<Option<Net>, StepError> {
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    create(ids, root_inside, flags)?;
    limits.apply()?;
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
        Net::new().map(Some)
    } else {
        Ok(None)
    }
}

/// The sandbox's network namespace, made by stage 2 while pid 1 builds the root, and entered
/// by pid 1.
///
/// Why: it is the dearest namespace (about 0.5 ms here: `copy_net_ns` registers the
/// namespace's sysctls and its loopback device; then `lo` is brought up), and nothing else of
/// the setup needs it; but made in stage 2's one `unshare`, it sat on the critical path while
/// the second core was idle, and once it has forked pid 1, stage 2 only waits.
///
/// How: a `SOCK_SEQPACKET` pair, made before the fork of pid 1. Then stage 2
/// ([`Net::make_for_pid1`]) unshares the network namespace (so, as before, stage 2 is in it
/// and the sandbox's user namespace owns it, rootless too), brings `lo` up, takes the
/// namespace as an fd from its socket (`SIOCGSKNS`) and sends it to pid 1, or the failed step
/// and errno; meanwhile pid 1 builds the root, then receives the namespace and enters it
/// ([`NetEntry::enter`]) before it makes the proxy's socket and forks the workload. Until
/// then pid 1 is in the caller's network namespace, with no capability over it (its
/// capabilities are in the sandbox's user namespace) and with no workload yet. No extra
/// process and no thread: nothing to reap, and nothing that could outlive a failure.
pub struct Net {
    /// pid 1's end.
    rx: std::os::fd::OwnedFd,
    /// Stage 2's end.
    tx: std::os::fd::OwnedFd,
}

/// pid 1's half of [`Net`]: the end the namespace arrives on.
pub struct NetEntry {
    rx: std::os::fd::OwnedFd,
}

impl Net {
    fn new() -> Result<Net, StepError> {
        use std::os::fd::{FromRawFd, OwnedFd};
        let mut pair = [0; 2];
        // SAFETY: socketpair writes two fds into the array we pass; each is owned below.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        } != 0
        {
            return Err(StepError::last(Step::NetNs));
        }
        // SAFETY: both fds were just made and are ours alone.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        Ok(Net { rx, tx })
    }

    /// pid 1's half (stage 2's end closed, so that pid 1 sees end-of-file if stage 2 dies).
    pub fn pid1_half(self) -> NetEntry {
        NetEntry { rx: self.rx }
    }

    /// Stage 2, once pid 1 is forked: make the network namespace, enter it, and send it to
    /// pid 1. A failure goes to pid 1 too, which reports it and exits 125 (stage 2 then exits
    /// with its code); if pid 1 is already gone, there is nobody to send it to.
    pub fn make_for_pid1(self) {
        use crate::layers::channel::{send_with_fd, Record};
        use std::os::fd::AsRawFd;
        drop(self.rx);
        match make() {
            Ok(ns) => {
                let _ = send_with_fd(self.tx.as_raw_fd(), Record::Ready, ns.as_raw_fd());
            }
            Err(e) => {
                let rec = Record::Failed(e).encode();
                // SAFETY: send(2) of a stack buffer on our end of the pair.
                unsafe {
                    libc::send(
                        self.tx.as_raw_fd(),
                        rec.as_ptr().cast(),
                        rec.len(),
                        libc::MSG_NOSIGNAL,
                    )
                };
            }
        }
    }
}

/// A new network namespace with `lo` up, as an fd.
fn make() -> Result<std::os::fd::OwnedFd, StepError> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    unshare(CloneFlags::CLONE_NEWNET).map_err(|e| StepError::new(Step::NetNs, e as i32))?;
    let sock = loopback_up()?;
    // SAFETY: SIOCGSKNS takes no argument and returns a new fd (the socket's network
    // namespace), owned below.
    let ns = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGSKNS as _) };
    if ns < 0 {
        return Err(StepError::last(Step::NetNs));
    }
    // SAFETY: a new fd of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(ns) })
}

impl NetEntry {
    /// pid 1: wait for the namespace (or stage 2's failure to make it) and enter it.
    pub fn enter(self) -> Result<(), StepError> {
        use crate::layers::channel::{recv_wait, Record};
        use std::os::fd::AsRawFd;
        match recv_wait(self.rx.as_raw_fd()) {
            Some((Record::Ready, Some(ns))) => {
                // SAFETY: setns on an fd we own; affects only this (single-threaded) process.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(StepError::last(Step::NetNs));
                }
                Ok(())
            }
            Some((Record::Failed(e), _)) => Err(e),
            // End of file: stage 2 is gone without a word.
            None => Err(StepError::new(Step::NetNs, libc::ECHILD)),
            Some(_) => Err(StepError::new(Step::NetNs, libc::EPROTO)),
        }
    }
}

/// The cgroup namespace, rooted at the cgroup stage 2 is in now: call it only once the
/// supervisor has moved stage 2 into its leaf, so the sandbox sees the leaf as `/`. Needs the
/// user namespace of [`enter`] (CAP_SYS_ADMIN there), which then owns it.
pub fn enter_cgroup() -> Result<(), StepError> {
    unshare(CloneFlags::CLONE_NEWCGROUP).map_err(|e| StepError::new(Step::Unshare, e as i32))
}

/// The per-user counts that the kernel keeps for each user namespace (`/proc/sys/user/NAME`)
/// and that the workload can charge: inotify and fanotify. The namespace counts
/// (`max_*_namespaces`) are left alone: creating any namespace needs a capability the workload
/// has dropped (seccomp refuses new user namespaces too), so it cannot charge them. Each file
/// costs about 10 us to read and 10 us to write.
const USER_COUNTS: &[&str] = &[
    "max_inotify_instances",
    "max_inotify_watches",
    "max_fanotify_groups",
    "max_fanotify_marks",
];

/// The sandbox user namespace's limits on the per-user counts, read before it exists.
///
/// Why: these counts are kept per (user namespace, uid), and a charge in the sandbox's
/// namespace is charged again, one level up, to the namespace's owner, and so on up to the
/// host. A fresh namespace starts unlimited (INT_MAX), so without this a workload could take
/// the whole host allowance of that uid (128 inotify instances here), and the host user's
/// own programs (editors, file watchers, systemd --user) would fail while it runs. The uid
/// charged on the host is the namespace's owner: the caller when rootless; root when root
/// runs a repo for another user (see [`create`]), whose own counts on the host are then not
/// touched at all.
///
/// What: half of each limit of the namespace stage 2 starts in (the host's, or a
/// container's), written into the new namespace by its creator (CAP_SYS_RESOURCE there; the
/// workload drops every capability, so it cannot raise them back, and a namespace it might
/// nest is charged against these too). Half, because whatever the workload does, the owner
/// keeps the other half for its own programs, and half of the defaults (64 inotify
/// instances, ~96k watches) is still far more than a build, a test runner in watch mode or a
/// dev server uses. (Several hostile runs at once, by the same caller, each get half: two of
/// them can still take it all.)
///
/// A run without namespaces (degraded) has no namespace to set these in: there the workload
/// is charged directly to its own uid on the host, inotify included, and only the rlimits
/// (RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE, see rlimits.rs) bound it.
#[derive(Debug, Clone, Default)]
pub struct UserLimits {
    /// `/proc/sys/user/NAME` and the value to write there.
    set: Vec<(String, String)>,
}

impl UserLimits {
    /// Read the current namespace's limits (call before unsharing). A count this kernel
    /// does not have (no file) is skipped; any other failure to read is an error.
    pub fn read() -> Result<UserLimits, StepError> {
        let mut set = Vec::new();
        for name in USER_COUNTS {
            let path = format!("/proc/sys/user/{name}");
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(StepError::new(
                        Step::UserLimits,
                        e.raw_os_error().unwrap_or(libc::EIO),
                    ))
                }
            };
            let host: u64 = text
                .trim()
                .parse()
                .map_err(|_| StepError::new(Step::UserLimits, libc::EINVAL))?;
            set.push((path, (host / 2).to_string()));
        }
        Ok(UserLimits { set })
    }

    /// Write the lowered limits. Call in the new user namespace, as its creator.
    fn apply(&self) -> Result<(), StepError> {
        for (path, value) in &self.set {
            write_proc(path, value, Step::UserLimits)?;
        }
        Ok(())
    }
}

fn write_proc(path: &str, text: &str, step: Step) -> Result<(), StepError> {
    std::fs::write(path, text)
        .map_err(|e| StepError::new(step, e.raw_os_error().unwrap_or(libc::EIO)))
}

/// `ip link set lo up` in the new network namespace; the socket that did it, whose namespace
/// it is.
fn loopback_up() -> Result<std::os::fd::OwnedFd, StepError> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let fail = || StepError::last(Step::LoopbackUp);
    // SAFETY: plain socket(2) call; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(fail());
    }
    // SAFETY: a new fd of ours.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own; fd is a socket.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(fail());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(fail());
        }
    }
    Ok(sock)
}
