//! One run's leaf: limits written, processes moved in, usage read back, the whole tree
//! killed, the directories removed (also on drop).

use super::*;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// This run's cgroup: one directory (v2) or one per hierarchy (v1). Dropping it without
/// [`Leaf::remove`] kills what is inside and removes it (errors ignored).
#[derive(Debug)]
pub struct Leaf {
    pub(super) version: Version,
    pub(super) dirs: Vec<Parent>,
    /// `None` for a stale leaf found by `remove_stale`.
    pub(super) limits: Option<Limits>,
    pub(super) plain: bool,
    pub(super) removed: bool,
    /// The maker's `flock` on each dir (see `lock_leaf_dir`); empty for a plain-files tree.
    pub(super) locks: Vec<LeafLock>,
}

impl Leaf {
    /// The cgroup version of this leaf.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The limits written to this leaf.
    pub fn limits(&self) -> Option<&Limits> {
        self.limits.as_ref()
    }

    /// The leaf's directories (v1: one per hierarchy).
    pub fn paths(&self) -> Vec<&Path> {
        self.dirs.iter().map(|d| d.dir.as_path()).collect()
    }

    /// The leaf's directory on cgroup v2; `None` on v1.
    pub fn path_v2(&self) -> Option<&Path> {
        match self.version {
            Version::V2 => self.dirs.first().map(|d| d.dir.as_path()),
            Version::V1 => None,
        }
    }

    /// An fd of the v2 leaf directory (close-on-exec), for `clone3` with
    /// `CLONE_INTO_CGROUP` (`0x2_0000_0000`; `libc::CLONE_INTO_CGROUP` is 0 on glibc), so the
    /// child is born inside. v1 has no such thing: an `Op::Open` error.
    pub fn open_v2(&self) -> Result<OwnedFd, Error> {
        let Some(p) = self.path_v2() else {
            return Err(Error::detail(
                Op::Open,
                None,
                "CLONE_INTO_CGROUP needs cgroup v2".into(),
            ));
        };
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(p)
            .map(OwnedFd::from)
            .map_err(|e| Error::io(Op::Open, p, &e))
    }

    /// Move process `pid` (all its threads) into the leaf: its `cgroup.procs` (v1: in every
    /// hierarchy, memory first). Call it while the process is still held, before it runs
    /// workload code; its children are born inside.
    pub fn add(&self, pid: i32) -> Result<(), Error> {
        for d in &self.dirs {
            write_file(&d.dir.join("cgroup.procs"), &pid.to_string(), self.plain)?;
        }
        Ok(())
    }

    /// cgroup v1 as root: the leaf's `tasks` file in every hierarchy (memory first), for
    /// [`join_self`] in stage 2. Otherwise empty, and the supervisor moves stage 2 with
    /// [`Leaf::add`]: v2 moves no single thread between domains, and a v1 subtree delegated to
    /// a user (its directories and `cgroup.procs` chowned) may leave `tasks` root's.
    pub fn self_join_files(&self) -> Vec<PathBuf> {
        match self.version {
            Version::V1 if euid() == 0 => self.dirs.iter().map(|d| d.dir.join("tasks")).collect(),
            _ => Vec::new(),
        }
    }

    /// The processes in the leaf (v1: in any of its hierarchies), sorted.
    pub fn procs(&self) -> Vec<i32> {
        let set: BTreeSet<i32> = self
            .dirs
            .iter()
            .flat_map(|d| read_procs(&d.dir.join("cgroup.procs")))
            .collect();
        set.into_iter().collect()
    }

    pub(super) fn dir_for(&self, controller: &str) -> Option<&Path> {
        match self.version {
            Version::V2 => self.dirs.first().map(|d| d.dir.as_path()),
            Version::V1 => self
                .dirs
                .iter()
                .find(|d| d.controllers.iter().any(|c| c == controller))
                .map(|d| d.dir.as_path()),
        }
    }

    /// Kill every process in the leaf and wait (up to 2 s) until it is empty. v2:
    /// `cgroup.kill` (Linux 5.14+), else freeze with `cgroup.freeze` and SIGKILL each member;
    /// v1: freeze with the freezer hierarchy (when mounted), SIGKILL each member, thaw; repeat
    /// until empty. Without a freezer it loops SIGKILL over `cgroup.procs` (the pids limit
    /// bounds a fork bomb racing it). Signals go through pidfds, so a recycled pid is never
    /// hit. Errors when processes are still inside after the wait (e.g. stuck in the kernel).
    pub fn kill(&self) -> Result<(), Error> {
        if self.procs().is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + DRAIN;
        let v2 = self.path_v2();
        let cgroup_kill = v2.map(|d| d.join("cgroup.kill")).filter(|p| p.exists());
        let v2_freeze = v2.map(|d| d.join("cgroup.freeze")).filter(|p| p.exists());
        let v1_freezer = match self.version {
            Version::V1 => self
                .dir_for("freezer")
                .map(|d| d.join("freezer.state"))
                .filter(|p| p.exists()),
            Version::V2 => None,
        };
        loop {
            if let Some(k) = &cgroup_kill {
                if write_file(k, "1", self.plain).is_err() {
                    self.sigkill_members();
                }
            } else if let Some(f) = &v2_freeze {
                let frozen = write_file(f, "1", self.plain).is_ok();
                if frozen {
                    self.wait_state(&f.with_file_name("cgroup.events"), |s| {
                        flat_keyed(s, "frozen") == Some(1)
                    });
                }
                self.sigkill_members();
                if frozen {
                    let _ = write_file(f, "0", self.plain);
                }
            } else if let Some(f) = &v1_freezer {
                let frozen = write_file(f, "FROZEN", self.plain).is_ok();
                if frozen {
                    self.wait_state(f, |s| s.trim() == "FROZEN");
                }
                self.sigkill_members();
                // Never leave the group frozen: the killed tasks die when thawed.
                if frozen {
                    let _ = write_file(f, "THAWED", self.plain);
                }
            } else {
                self.sigkill_members();
            }
            let round = (Instant::now() + ROUND).min(deadline);
            if self.wait_empty(round) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let left = self.procs();
                return Err(Error::detail(
                    Op::Kill,
                    self.dirs.first().map(|d| d.dir.as_path()),
                    format!(
                        "{} process(es) still inside after {} s: {:?}",
                        left.len(),
                        DRAIN.as_secs(),
                        &left[..left.len().min(8)]
                    ),
                ));
            }
        }
    }

    /// SIGKILL every member through a pidfd opened while the pid was listed, and only if it is
    /// still listed after the pidfd was opened (so the pidfd is a member, not a recycled pid).
    pub(super) fn sigkill_members(&self) {
        let first = self.procs();
        let fds: Vec<(i32, Result<OwnedFd, i32>)> = first
            .into_iter()
            .map(|p| (p, crate::sys::pidfd_open(p)))
            .collect();
        let now: BTreeSet<i32> = self.procs().into_iter().collect();
        for (pid, fd) in fds {
            if !now.contains(&pid) {
                continue;
            }
            match fd {
                Ok(fd) => pidfd_kill(&fd),
                // Kernels before 5.3: plain kill.
                Err(libc::ENOSYS) => {
                    // SAFETY: kill takes plain integers.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                Err(_) => {}
            }
        }
    }

    /// Poll `path` until `done` holds for its content (at most one round).
    pub(super) fn wait_state(&self, path: &Path, done: impl Fn(&str) -> bool) {
        let until = Instant::now() + ROUND;
        while Instant::now() < until {
            if read_text(path).is_ok_and(|s| done(&s)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Wait until no process is left, or `until`.
    pub(super) fn wait_empty(&self, until: Instant) -> bool {
        let mut nap = Duration::from_micros(500);
        loop {
            if self.procs().is_empty() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(10));
        }
    }

    /// Read back what the run cost. Missing files give `None` / 0. Read it after the
    /// processes ended (after [`Leaf::kill`]) and before [`Leaf::remove`].
    pub fn usage(&self) -> Usage {
        match self.version {
            Version::V2 => {
                let Some(d) = self.path_v2() else {
                    return Usage::default();
                };
                let cpu = read_text(&d.join("cpu.stat")).unwrap_or_default();
                let mem = read_text(&d.join("memory.events")).unwrap_or_default();
                Usage {
                    peak_memory_bytes: read_u64(&d.join("memory.peak")),
                    cpu_user_usec: flat_keyed(&cpu, "user_usec"),
                    cpu_system_usec: flat_keyed(&cpu, "system_usec"),
                    oom_kills: flat_keyed(&mem, "oom_kill")
                        .unwrap_or(0)
                        .max(flat_keyed(&mem, "oom_group_kill").unwrap_or(0)),
                    pids_max_hits: read_keyed(&d.join("pids.events"), "max").unwrap_or(0),
                }
            }
            Version::V1 => {
                let mem = self.dir_for("memory");
                let (user, system) = match self.dir_for("cpuacct") {
                    Some(d) => v1_cpu(d),
                    None => (None, None),
                };
                Usage {
                    peak_memory_bytes: mem
                        .and_then(|d| read_u64(&d.join("memory.max_usage_in_bytes"))),
                    cpu_user_usec: user,
                    cpu_system_usec: system,
                    oom_kills: mem
                        .and_then(|d| read_keyed(&d.join("memory.oom_control"), "oom_kill"))
                        .unwrap_or(0),
                    pids_max_hits: self
                        .dir_for("pids")
                        .and_then(|d| read_keyed(&d.join("pids.events"), "max"))
                        .unwrap_or(0),
                }
            }
        }
    }

    /// Remove the leaf: kill what is still inside, then rmdir every directory created,
    /// retrying up to 2 s while it drains (EBUSY). Directories already gone are fine.
    ///
    /// The kernel refuses to remove a group that holds a process (`EBUSY`, v1 and v2), so
    /// the rmdir is the emptiness check: a leaf whose run ended cleanly goes with one rmdir
    /// per directory, and a busy one is killed ([`Leaf::kill`]) and then removed.
    pub fn remove(mut self) -> Result<(), Error> {
        self.removed = true;
        if self.plain {
            // Plain files say nothing by refusing an rmdir: kill by the listed pids first.
            let killed = self.kill();
            return self.remove_dirs().and(killed);
        }
        self.remove_dirs()
    }

    /// rmdir the leaf's directories, last hierarchy first. A directory still busy after the
    /// wait stops it there, the earlier ones kept with it (for [`Host::remove_stale`] of a
    /// later run). On the first `EBUSY` the leaf is killed.
    pub(super) fn remove_dirs(&self) -> Result<(), Error> {
        let mut deadline = Instant::now() + DRAIN;
        let mut first_err = None;
        let mut killed: Option<Result<(), Error>> = None;
        'dirs: for d in self.dirs.iter().rev() {
            if self.plain {
                if let Err(e) = fs::remove_dir_all(&d.dir) {
                    if e.kind() != io::ErrorKind::NotFound {
                        first_err.get_or_insert(Error::io(Op::Rmdir, &d.dir, &e));
                        break 'dirs;
                    }
                }
                continue;
            }
            loop {
                match fs::remove_dir(&d.dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if errno_of(&e) == libc::EBUSY && Instant::now() < deadline => {
                        if killed.is_none() {
                            killed = Some(self.kill());
                            // the kill may have used its own wait: the drain starts now
                            deadline = Instant::now() + DRAIN;
                            continue;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => {
                        first_err.get_or_insert(Error::io(Op::Rmdir, &d.dir, &e));
                        break 'dirs;
                    }
                }
            }
        }
        match (first_err, killed) {
            (Some(e), _) | (None, Some(Err(e))) => Err(e),
            _ => Ok(()),
        }
    }

    /// Write the limits into a freshly made leaf.
    pub(super) fn write_limits(&self) -> Result<(), Error> {
        let Some(l) = self.limits else {
            return Ok(());
        };
        let plain = self.plain;
        // Optional files are written when the kernel offers them (always on plain files):
        // tried, and ENOENT taken for "not offered".
        let optional = |r: Result<(), Error>| match r {
            Err(e) if e.errno == Some(libc::ENOENT) => Ok(false),
            r => r.map(|()| true),
        };
        match self.version {
            Version::V2 => {
                let d = &self.dirs[0].dir;
                write_file(&d.join("memory.max"), &l.memory_max.to_string(), plain)?;
                optional(write_file(&d.join("memory.swap.max"), "0", plain))?;
                write_file(&d.join("cpu.max"), &l.cpu_max(), plain)?;
                write_file(&d.join("pids.max"), &l.pids_max.to_string(), plain)?;
            }
            Version::V1 => {
                let need = |c: &str| {
                    self.dir_for(c)
                        .ok_or_else(|| Error::detail(Op::Mkdir, None, format!("no {c} leaf")))
                };
                let m = need("memory")?;
                let mem = l.memory_max.to_string();
                // The memory limit first: memsw must stay >= it.
                write_file(&m.join("memory.limit_in_bytes"), &mem, plain)?;
                // memsw exists with swap accounting (written, not looked up first).
                if !optional(write_file(
                    &m.join("memory.memsw.limit_in_bytes"),
                    &mem,
                    plain,
                ))? {
                    // No swap accounting: at least keep the group from swapping.
                    let _ = write_file(&m.join("memory.swappiness"), "0", plain);
                }
                // oom_kill_disable is inherited from the parent: it must be 0 here, or an
                // OOM would hang the run instead of killing.
                let oc = m.join("memory.oom_control");
                if read_keyed(&oc, "oom_kill_disable").is_some_and(|v| v != 0) {
                    write_file(&oc, "0", plain)?;
                }
                let c = need("cpu")?;
                // cpu.cfs_period_us is not written: a new group's period is always the
                // kernel's default, 100 ms (CPU_PERIOD_US; init_cfs_bandwidth, not inherited),
                // and each bandwidth write locks every CPU's runqueue.
                write_file(
                    &c.join("cpu.cfs_quota_us"),
                    &l.cpu_quota_us().to_string(),
                    plain,
                )?;
                let p = need("pids")?;
                write_file(&p.join("pids.max"), &l.pids_max.to_string(), plain)?;
            }
        }
        Ok(())
    }
}

/// v1 CPU time from the cpuacct hierarchy: `cpuacct.usage_user`/`usage_sys` (nanoseconds),
/// else `cpuacct.stat` (USER_HZ ticks).
pub(super) fn v1_cpu(d: &Path) -> (Option<u64>, Option<u64>) {
    let user = read_u64(&d.join("cpuacct.usage_user"));
    let sys = read_u64(&d.join("cpuacct.usage_sys"));
    if let (Some(u), Some(s)) = (user, sys) {
        return (Some(u / 1000), Some(s / 1000));
    }
    let stat = read_text(&d.join("cpuacct.stat")).unwrap_or_default();
    let us = |ticks: u64| ticks.saturating_mul(1_000_000) / clk_tck();
    (
        flat_keyed(&stat, "user").map(us),
        flat_keyed(&stat, "system").map(us),
    )
}

impl Drop for Leaf {
    fn drop(&mut self) {
        if !self.removed {
            self.removed = true;
            let _ = self.kill();
            let _ = self.remove_dirs();
        }
    }
}
