//! Stage 2: THE function that applies the layers, in order.
//!
//! ```text
//! stage 2 (a fork, single-threaded)       setsid, close fds -> namespaces, user, per-user
//!                                          limits -> (in the cgroup leaf)
//!                                          cgroup namespace -> fork -> network
//!                                          namespace, lo up -> to pid 1 -> wait
//!   pid 1 (init)                           mounts + pivot_root -> network namespace
//!                                          -> fork -> reap
//!                                          (without namespaces: subreaper, chdir)
//!     workload                             setsid -> rlimits -> caps -> no_new_privs
//!                                          -> landlock -> close fds -> signals -> seccomp -> execve
//! ```
//!
//! Why this order: the user namespace gives the rights for the rest; mounts and pivot_root
//! come before landlock (a landlocked process cannot mount, and landlock rules bind to the
//! inodes of the new root); capabilities are dropped while CAP_SETPCAP is still held;
//! no_new_privs before landlock and seccomp; fds are marked close-on-exec before seccomp;
//! seccomp last, right before execve, so the filter only has to allow what the workload needs.
//! Any failure becomes a `(step, errno)` record for the supervisor and exit 125.

use super::init;
use crate::hostfs::Tree;
use crate::layers::channel::{self, mark, Phase, Record};
use crate::layers::{
    caps, fds, git, landlock, mounts, ns, overlay, pty, rlimits, seccomp, Step, StepError,
};
use crate::plan::Plan;
use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;

/// Everything the workload's exec needs, prepared before the forks.
pub struct Exec {
    pub program: CString,
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
}

impl Exec {
    fn new(plan: &Plan) -> Result<Exec, StepError> {
        let c = |b: &[u8]| CString::new(b).map_err(|_| StepError::new(Step::Exec, libc::EINVAL));
        Ok(Exec {
            program: c(plan.program.as_os_str().as_bytes())?,
            argv: plan
                .argv
                .iter()
                .map(|a| c(a.as_bytes()))
                .collect::<Result<_, _>>()?,
            env: plan
                .env
                .iter()
                .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// Entry point of the re-executed stage 2 (see [`super::spawn`]): the plan comes as JSON on
/// stdin. Never returns.
pub fn main() -> ! {
    leave(
        detach()
            .and_then(|()| read_plan(&mut *stdin()))
            .and_then(|plan| run(&plan)),
    )
}

/// Entry point of the forked stage 2: the plan is the supervisor's own. Never returns.
pub fn enter(plan: &Plan) -> ! {
    scrub_environ();
    leave(detach().and_then(|()| run(plan)))
}

/// A forked stage 2 (and pid 1, its fork) still holds the caller's environment, which the
/// plan scrubbed of secrets for the workload: zero it, so that not even /proc/1/environ of a
/// sandbox (which the workload cannot read: pid 1 is non-dumpable, see `ns::set_ids`) shows
/// it. The supervisor's copy is untouched (this is the child's own memory).
fn scrub_environ() {
    extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    // SAFETY: single-threaded; environ is a NULL-terminated array of NUL-terminated strings
    // owned by the C runtime; each is overwritten within its own length, the array unchanged.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let s = *p;
            std::ptr::write_bytes(s, 0, libc::strlen(s));
            p = p.add(1);
        }
    }
}

fn leave(r: Result<i32, StepError>) -> ! {
    let code = match r {
        Ok(code) => code,
        Err(e) => {
            channel::send(Record::Failed(e));
            125
        }
    };
    // SAFETY: _exit, not exit: a forked stage 2 must not flush the supervisor's buffers or
    // run its exit handlers.
    unsafe { libc::_exit(code) }
}

/// Stage 2's stdin (the supervisor's pipe), read unbuffered: after the plan and the JOINED
/// byte, the rest is the workload's stdin (`--stdin`), so not one byte more may be read here.
fn stdin() -> std::mem::ManuallyDrop<std::fs::File> {
    // SAFETY: fd 0 is open (the supervisor's pipe); ManuallyDrop never closes it.
    std::mem::ManuallyDrop::new(unsafe {
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(0)
    })
}

fn run(plan: &Plan) -> Result<i32, StepError> {
    let mut input = stdin();
    let input = &mut *input;
    mark(Phase::Stage2);
    // cgroup v1 as root: we move ourselves into the leaf the supervisor makes meanwhile, while
    // still uid 0 on the host (see join_self): after our namespaces when we stay uid 0 there
    // (nothing in `ns::enter` forks then), else now, before we change user or fork the map
    // helper.
    let join_first = plan.cgroup_self_join && plan.ids.uid != 0;
    if join_first {
        join_leaf(input)?;
    }
    // The channel must not cross the workload's exec.
    // SAFETY: fcntl on our own fd number.
    unsafe { libc::fcntl(channel::FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    let exec = Exec::new(plan)?;
    let filters = if plan.seccomp {
        Some(
            seccomp::build(&plan.seccomp_options)
                .map_err(|_| StepError::new(Step::SeccompInstall, libc::EINVAL))?,
        )
    } else {
        None
    };
    mark(Phase::SeccompCompiled);

    // The network namespace is made once pid 1 is forked (ns::Net).
    let mut net = None;
    if plan.namespaces {
        // The host's limits, read before the new namespace hides them.
        let limits = ns::UserLimits::read()?;
        let own_net = plan.net != crate::profile::NetMode::Host;
        net = ns::enter(plan.ids, plan.root_inside, &limits, own_net, &plan.hostname)?;
    } else {
        ns::become_user(plan.ids)?;
    }
    // After the credential changes above, which clear the parent-death signal.
    die_with_parent(plan.supervisor_pid)?;
    mark(Phase::Namespaces);
    // cgroup v2: meanwhile the supervisor has been moving us into the leaf (the first move can
    // wait for an RCU grace period); v1: making it. Nothing runs workload code or forks
    // before we are in it.
    if !plan.cgroup_self_join {
        wait_joined(input)?;
    } else if !join_first {
        join_leaf(input)?;
    }
    if plan.namespaces {
        ns::enter_cgroup()?;
    }
    if !plan.stdin_pipe {
        fds::stdin_null()?;
    }
    mark(Phase::CgroupJoined);
    let forwarded = init::block_signals()?;
    let alive = init::AlivePipe::new()?;
    // Read-write repo: the real git dirs, opened now (pid 1 will hide them behind views), for
    // bringing back what git recorded once the sandbox is gone.
    let (views, cap) = git_views(plan);
    let dirs: Vec<_> = views.iter().map(|v| v.dir.clone()).collect();
    let real = git::Real::open(&dirs).map_err(|e| StepError::new(Step::GitView, e))?;
    // A kept layer (a read-write repo): the disk layer, on the scratch root pid 1 pivots onto,
    // made here so that it outlives pid 1, goes to the supervisor once the sandbox is gone.
    let kept = overlay::kept(&plan.mounts);
    let carry =
        overlay::Carry::open(&plan.mounts).map_err(|e| StepError::new(Step::CopyBack, e))?;
    let disk = if plan.namespaces {
        mounts::scratch(overlay::disk_size(&plan.mounts), plan.layer_dir.as_deref())?
            .map(Tree::from_fd)
    } else {
        None
    };
    // A gene's later command: what the earlier ones wrote, back in the layer.
    if let (Some(carry), Some(disk)) = (&carry, &disk) {
        carry
            .put_back(disk)
            .map_err(|e| StepError::new(Step::CopyBack, e))?;
    }
    // SAFETY: stage 2 is single-threaded (a fork of a single-threaded supervisor, or a fresh
    // exec, that started no threads).
    match unsafe { nix::unistd::fork() }.map_err(|e| StepError::new(Step::Fork, e as i32))? {
        nix::unistd::ForkResult::Child => {
            // The workload must never hold a writable fd of a real git dir or repo.
            let disk_fds = disk.iter().map(Tree::raw_fd);
            let carry_fds = carry.iter().map(|c| c.staging.raw_fd());
            let fds = real.raw_fds().into_iter().chain(disk_fds);
            for fd in fds.chain(carry_fds) {
                // SAFETY: closing fds this process inherited and never uses.
                unsafe { libc::close(fd) };
            }
            alive.child_side();
            let net = net.map(ns::Net::pid1_half);
            let code = match init::run(plan, &exec, filters.as_ref(), &alive, net) {
                Ok(code) => code,
                Err(e) => {
                    channel::send(Record::Failed(e));
                    125
                }
            };
            // SAFETY: _exit: nothing of stage 2's may be flushed or run twice.
            unsafe { libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            // pid 1 builds the root meanwhile, then enters it.
            if let Some(net) = net {
                net.make_for_pid1();
            }
            // The repo's layer: was it ever full? A command may fill it, meet ENOSPC, and free
            // the space again before it ends (an unlinked file it held open): look meanwhile.
            let mut full = false;
            let mut watch = || full = full || overlay::usage_full(disk.as_ref());
            let watching = disk.is_some().then_some(&mut watch as &mut dyn FnMut());
            let code = init::wait_forwarding(child, &forwarded, watching);
            if full || overlay::usage_full(disk.as_ref()) {
                channel::send(Record::Full);
            }
            mark(Phase::InitEnded);
            let held = Held {
                views,
                real,
                cap,
                disk,
                kept,
                carry,
            };
            let code = held.finish(code);
            mark(Phase::Stage2Ended);
            Ok(code)
        }
    }
}

/// What stage 2 holds for the end of the run: the real git dirs and repo, the disk layer and a
/// gene's carried workspace.
struct Held {
    views: Vec<View>,
    real: git::Real,
    cap: u64,
    disk: Option<Tree>,
    /// The disk layer holds kept layers: it goes to the supervisor's way back.
    kept: bool,
    carry: Option<overlay::Carry>,
}

impl Held {
    /// After pid 1 ended with `code`: hand what the run changed to the supervisor (or, for a
    /// repo bound as it is, bring back git's files). Returns stage 2's code.
    fn finish(&self, code: i32) -> i32 {
        if code != 0 {
            return code;
        }
        // pid 1 ended normally, so every process of the sandbox is gone; stage 2 shares its
        // mount namespace and (since pid 1's pivot_root) its root, where the views are.
        if let (Some(disk), true) = (&self.disk, self.kept) {
            channel::send(Record::Handing);
            let views: Vec<(std::path::PathBuf, usize, std::path::PathBuf)> = self
                .views
                .iter()
                .filter_map(|v| {
                    let layer = v.layer.as_ref()?;
                    let rel = v.dir.strip_prefix(layer).ok()?.to_path_buf();
                    Some((v.dir.clone(), v.root, rel))
                })
                .collect();
            if let Err(e) = git::into_layer(&self.real, &views, disk, self.cap) {
                channel::send(Record::Failed(StepError::new(Step::GitCopyBack, e)));
                return 125;
            }
            if let Err(e) = channel::send_with_fd(channel::FD, Record::Layer, disk.raw_fd()) {
                channel::send(Record::Failed(StepError::new(Step::CopyBack, e)));
                return 125;
            }
            return 0;
        }
        if !self.views.is_empty() {
            if let Err(e) = git::copy_back(&self.real, self.cap) {
                channel::send(Record::Failed(StepError::new(Step::GitCopyBack, e)));
                return 125;
            }
        }
        if let (Some(disk), Some(carry)) = (&self.disk, &self.carry) {
            if let Err(e) = carry.save(disk) {
                channel::send(Record::Failed(StepError::new(Step::CopyBack, e)));
                return 125;
            }
        }
        0
    }
}

/// A git dir shown as a view: where, and which kept layer (if any) holds its work dirs.
struct View {
    dir: std::path::PathBuf,
    layer: Option<std::path::PathBuf>,
    root: usize,
}

/// The git dirs shown as views in this plan, and the size bound of their files.
fn git_views(plan: &Plan) -> (Vec<View>, u64) {
    let mut cap = 0;
    let views = plan
        .mounts
        .iter()
        .filter_map(|op| match op {
            crate::layers::mounts::Op::GitView {
                dir,
                size,
                layer,
                root,
            } => {
                cap = *size;
                Some(View {
                    dir: dir.clone(),
                    layer: layer.clone(),
                    root: *root,
                })
            }
            _ => None,
        })
        .collect();
    (views, cap)
}

/// First thing: a session of our own, so no controlling terminal (the caller's, often root's,
/// where TIOCSTI could push keystrokes into its shell), and no fds but the ones stage 2 needs:
/// stdin (the plan pipe), stdout and stderr (the command's), and the record channel (fd 3).
/// Whatever else the caller leaked to sandbox-run is closed before anything else runs. The
/// supervisor does the same before exec (`spawn_stage2`); this makes stage 2 not depend on it.
fn detach() -> Result<(), StepError> {
    // SAFETY: getsid/getpid/setsid take no pointers.
    if unsafe { libc::getsid(0) != libc::getpid() && libc::setsid() < 0 } {
        return Err(StepError::last(Step::Setsid));
    }
    let first = channel::FD as libc::c_uint + 1;
    // SAFETY: close_range takes plain integers; nothing in this process uses fds above 3 yet.
    if unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) } != 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if e != libc::ENOSYS {
            return Err(StepError::new(Step::CloseFds, e));
        }
        // Before Linux 5.9: one by one.
        for fd in first..4096 {
            // SAFETY: closing an fd that may not be open fails harmlessly.
            unsafe { libc::close(fd as i32) };
        }
    }
    Ok(())
}

/// The plan from stdin: its length (u64, little-endian), then its JSON.
fn read_plan(input: &mut impl Read) -> Result<Plan, StepError> {
    let io = |e: std::io::Error| StepError::new(Step::Exec, e.raw_os_error().unwrap_or(libc::EIO));
    let mut len = [0u8; 8];
    input.read_exact(&mut len).map_err(io)?;
    let len = u64::from_le_bytes(len);
    if len > super::PLAN_MAX {
        return Err(StepError::new(Step::Exec, libc::E2BIG));
    }
    let mut text = vec![0u8; len as usize];
    input.read_exact(&mut text).map_err(io)?;
    serde_json::from_slice(&text).map_err(|_| StepError::new(Step::Exec, libc::EINVAL))
}

/// Block until the supervisor says stage 2 is in its cgroup leaf. End of file instead means it
/// could not move us (it kills us then): never go on outside the leaf.
fn wait_joined(input: &mut impl Read) -> Result<(), StepError> {
    let mut b = [0u8; 1];
    match input.read_exact(&mut b) {
        Ok(()) if b[0] == super::JOINED => Ok(()),
        Ok(()) => Err(StepError::new(Step::Cgroup, libc::EPROTO)),
        Err(e) => Err(StepError::new(
            Step::Cgroup,
            e.raw_os_error().unwrap_or(libc::EPIPE),
        )),
    }
}

/// cgroup v1 as root: wait for the supervisor's [`super::joined_with`] message (the leaf is
/// made and limited), then move ourselves into the leaf through its `tasks` files. No file:
/// the run goes without a cgroup (best-effort). End of file instead means the supervisor could
/// not make the leaf (it kills us then): never go on outside it.
fn join_leaf(input: &mut impl Read) -> Result<(), StepError> {
    use std::os::unix::ffi::OsStrExt;
    wait_joined(input)?;
    let io =
        |e: std::io::Error| StepError::new(Step::Cgroup, e.raw_os_error().unwrap_or(libc::EPIPE));
    let mut len = [0u8; 4];
    input.read_exact(&mut len).map_err(io)?;
    let len = u32::from_le_bytes(len);
    if len > super::JOINED_MAX {
        return Err(StepError::new(Step::Cgroup, libc::E2BIG));
    }
    let mut rest = vec![0u8; len as usize];
    input.read_exact(&mut rest).map_err(io)?;
    let tasks: Vec<std::path::PathBuf> = rest
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| std::ffi::OsStr::from_bytes(p).into())
        .collect();
    crate::layers::cgroup::join_self(&tasks)?;
    mark(Phase::CgroupSelfJoined);
    Ok(())
}

/// SIGKILL when the supervisor dies; and if it already has, stop now.
fn die_with_parent(supervisor: i32) -> Result<(), StepError> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(StepError::last(Step::Pdeathsig));
    }
    if nix::unistd::getppid().as_raw() != supervisor {
        // SAFETY: leaving at once, as the parent-death signal would have made us.
        unsafe { libc::_exit(125) };
    }
    Ok(())
}

/// The workload: the last layers, then exec. Runs in the child of pid 1.
pub fn workload(plan: &Plan, exec: &Exec, filters: Option<&seccomp::Filters>) -> StepError {
    match harden(plan, filters) {
        Ok(()) => {
            let argv: Vec<*const libc::c_char> = exec
                .argv
                .iter()
                .map(|a| a.as_ptr())
                .chain([std::ptr::null()])
                .collect();
            let envp: Vec<*const libc::c_char> = exec
                .env
                .iter()
                .map(|a| a.as_ptr())
                .chain([std::ptr::null()])
                .collect();
            // SAFETY: program, argv and envp are NUL-terminated strings in arrays terminated by
            // a null pointer, all alive until execve returns (only on failure).
            unsafe { libc::execve(exec.program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            StepError::last(Step::Exec)
        }
        Err(e) => e,
    }
}

fn harden(plan: &Plan, filters: Option<&seccomp::Filters>) -> Result<(), StepError> {
    nix::unistd::setsid().map_err(|e| StepError::new(Step::Setsid, e as i32))?;
    pty::take_controlling()?;
    rlimits::apply(plan.rlimits)?;
    caps::drop_all()?;
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(StepError::last(Step::NoNewPrivs));
    }
    mark(Phase::Process);
    if let Some(spec) = &plan.landlock {
        let applied = landlock::apply(spec, plan.landlock_min_abi)?;
        let status = if applied.status == "fully_enforced" {
            2
        } else {
            1
        };
        channel::send(Record::Landlock {
            abi: applied.abi,
            status,
        });
    }
    mark(Phase::Landlock);
    fds::cloexec_above_stderr()?;
    fds::reset_signals()?;
    rlimits::ignore_sigxfsz(plan.rlimits)?;
    channel::send(Record::Ready);
    if let Some(f) = filters {
        match f.install()? {
            seccomp::Installed::Listener(fd) => {
                // The supervisor answers the refused calls; the workload must never hold the
                // listener (it could answer its own calls): sent, then closed before execve.
                if channel::send_with_fd(channel::FD, Record::Notify, fd).is_err() {
                    // Closed unsent: the kernel answers ENOSYS to what the filter notifies
                    // (still refused); the report says the refusals went unnamed.
                    channel::send(Record::Unnamed(libc::EPIPE));
                }
                // SAFETY: closing our own copy of the listener fd.
                unsafe { libc::close(fd) };
            }
            seccomp::Installed::Unnamed(errno) => channel::send(Record::Unnamed(errno)),
            seccomp::Installed::Errno => {}
        }
    }
    mark(Phase::Seccomp);
    Ok(())
}
