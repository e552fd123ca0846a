//! The host's cgroups: where the leaves' parents are, prepared once (created, controllers
//! enabled), and the leaf made under them; stale leaves of dead runs removed.

use super::*;
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How the parent of the leaves is made ready (cgroup v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Prepare {
    /// Nothing to do: the parent is ready as is (`Host::v2_at`).
    Nothing,
    /// Root: enable the controllers in `root`, create the parent, enable them there.
    Root { root: PathBuf },
    /// A delegated subtree: the parent is the caller's own cgroup; move its processes into
    /// `SUPERVISOR_GROUP`, then enable the controllers in it.
    Delegated,
}

/// One directory that receives a leaf, and the v1 controllers of its hierarchy (v2: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Parent {
    pub(super) controllers: Vec<String>,
    pub(super) dir: PathBuf,
}

/// Where this caller may create cgroups, found once per run with [`Host::detect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub(super) version: Version,
    /// v2: one; v1: one per hierarchy (memory, cpu, pids, then cpuacct and freezer if mounted
    /// separately).
    pub(super) parents: Vec<Parent>,
    /// The leaf name before `<pid>-<n>`.
    pub(super) leaf_prefix: &'static str,
    pub(super) prepare: Prepare,
    pub(super) plain: bool,
}

impl Host {
    /// Find where this process may create cgroups, from `/proc/self/mountinfo`,
    /// `/proc/self/cgroup` and the effective uid. Changes nothing on the host.
    ///
    /// Prefers cgroup v2 when its hierarchy offers the memory, cpu and pids controllers (as
    /// root: a `sandbox-run` group under the mount root; otherwise the caller's own cgroup when
    /// it is delegated to this uid), else cgroup v1 when the memory, cpu and pids hierarchies
    /// are mounted (and ours to write). The error says why neither works and how to fix it.
    pub fn detect() -> Result<Host, Error> {
        let mountinfo = read(Path::new("/proc/self/mountinfo")).map_err(|e| Error {
            op: Op::Detect,
            ..e
        })?;
        let cgroup = read(Path::new("/proc/self/cgroup")).map_err(|e| Error {
            op: Op::Detect,
            ..e
        })?;
        Host::detect_from(&mountinfo, &cgroup, euid())
    }

    /// Whether a leaf for this process can only be a cgroup v1 one, from `/proc/self/cgroup`
    /// alone (one small read; [`Host::detect`] also reads and parses `/proc/self/mountinfo`,
    /// ~0.1 ms): memory, cpu and pids are each bound to a v1 hierarchy, and a controller is
    /// bound to one hierarchy at a time, so cgroup v2 cannot offer them. Then, as root, stage 2
    /// moves itself in ([`Host::self_join`]) and the full detection may wait until stage 2
    /// has started. `false` when unsure.
    pub fn v1_only() -> bool {
        read_text(Path::new("/proc/self/cgroup")).is_ok_and(|t| v1_only_in(&t))
    }

    /// [`Host::detect`] on given texts of `/proc/self/mountinfo` and `/proc/self/cgroup` for
    /// the effective uid `euid`. The mount points named in `mountinfo` are inspected on disk
    /// (`cgroup.controllers`, ownership), so tests can point them at a fake layout.
    pub fn detect_from(mountinfo: &str, proc_self_cgroup: &str, euid: u32) -> Result<Host, Error> {
        let mounts = parse_mountinfo(mountinfo);
        let own = parse_proc_cgroup(proc_self_cgroup);
        let v2 = match detect_v2(&mounts, &own, euid) {
            Ok(h) => return Ok(h),
            Err(r) => r,
        };
        let v1 = match detect_v1(&mounts, &own, euid) {
            Ok(h) => return Ok(h),
            Err(r) => r,
        };
        // The fix that matters is the one for the hierarchy that has the controllers.
        let hint = if v2.has_controllers {
            v2.hint
        } else {
            v1.hint.or(v2.hint)
        };
        Err(Error {
            op: Op::Detect,
            path: None,
            errno: None,
            detail: Some(format!(
                "no cgroup to be had: v2: {}; v1: {}",
                v2.text, v1.text
            )),
            hint: hint.map(str::to_string),
        })
    }

    /// A cgroup v2 host whose leaves (`sandbox-run-<pid>-<n>`) go directly under `parent`,
    /// which must exist with the memory, cpu and pids controllers enabled for its children.
    pub fn v2_at(parent: impl Into<PathBuf>) -> Host {
        Host {
            version: Version::V2,
            parents: vec![Parent {
                controllers: Vec::new(),
                dir: parent.into(),
            }],
            leaf_prefix: "sandbox-run-",
            prepare: Prepare::Nothing,
            plain: false,
        }
    }

    /// A cgroup v1 host with the given hierarchies: `(controllers, parent)` pairs such as
    /// `("memory", "/sys/fs/cgroup/memory/x")` or `("cpu,cpuacct", ...)`. Leaves
    /// `sandbox-run-<pid>-<n>` go directly under each parent. memory, cpu and pids must be
    /// among them; cpuacct and freezer are used when given.
    pub fn v1_at<I, S>(hierarchies: I) -> Host
    where
        I: IntoIterator<Item = (S, PathBuf)>,
        S: AsRef<str>,
    {
        Host {
            version: Version::V1,
            parents: hierarchies
                .into_iter()
                .map(|(c, dir)| Parent {
                    controllers: c.as_ref().split(',').map(str::to_string).collect(),
                    dir,
                })
                .collect(),
            leaf_prefix: "sandbox-run-",
            prepare: Prepare::Nothing,
            plain: false,
        }
    }

    /// Treat the tree as plain files and directories (unit tests, dry runs): a control file
    /// that does not exist is created when written (optional ones included), and `remove`
    /// deletes the files it finds. Never use on a real cgroupfs.
    pub fn with_plain_files(mut self) -> Host {
        self.plain = true;
        self
    }

    /// The cgroup version in use.
    pub fn version(&self) -> Version {
        self.version
    }

    /// cgroup v1 as root: stage 2 moves itself into the leaf through its `tasks` files
    /// ([`join_self`], [`Leaf::self_join_files`]), so the leaf may be made after stage 2 has
    /// started, beside its namespace setup. Otherwise the leaf comes first (v2: stage 2 is born
    /// in it; a v1 subtree delegated to a user: the supervisor moves stage 2).
    pub fn self_join(&self) -> bool {
        self.version == Version::V1 && euid() == 0
    }

    /// How leaf names begin (`run-` under the `sandbox-run` parent as root on v2, else
    /// `sandbox-run-`); the rest is `<pid of sandbox-run>-<n>`.
    pub fn leaf_prefix(&self) -> &str {
        self.leaf_prefix
    }

    /// The directories that receive the leaves (v1: one per hierarchy).
    pub fn leaf_parents(&self) -> Vec<&Path> {
        self.parents.iter().map(|p| p.dir.as_path()).collect()
    }

    /// One line for `doctor` and logs: `cgroup v2: leaves under /sys/fs/cgroup/sandbox-run`.
    pub fn describe(&self) -> String {
        let places: Vec<String> = match self.version {
            Version::V2 => self
                .parents
                .iter()
                .map(|p| p.dir.display().to_string())
                .collect(),
            Version::V1 => self
                .parents
                .iter()
                .map(|p| format!("{} in {}", p.controllers.join(","), p.dir.display()))
                .collect(),
        };
        let mode = match self.prepare {
            Prepare::Delegated => " (delegated subtree)",
            _ => "",
        };
        format!(
            "cgroup v{}{mode}: leaves under {}",
            self.version.number(),
            places.join("; ")
        )
    }

    /// Create this run's leaf and write its limits, before the workload runs. Prepares the
    /// parent first when needed (idempotent). On any error nothing created is left behind.
    pub fn create_leaf(&self, limits: &Limits) -> Result<Leaf, Error> {
        limits.check()?;
        self.check_layout()?;
        self.prepare_parent()?;
        // From here the leaf removes itself when dropped on an error path.
        let leaf = self.mkdir_leaf(*limits)?;
        leaf.write_limits()?;
        Ok(leaf)
    }

    /// Remove the leaves left by a sandbox-run that no longer exists (killed with SIGKILL):
    /// `<prefix><pid>-<n>` whose `<pid>` is gone. Their processes are killed first. Returns
    /// the directories removed; the first failure (after trying them all) is the error.
    /// A leaf whose pid was reused by an unrelated process stays until that process is gone.
    pub fn remove_stale(&self) -> Result<Vec<PathBuf>, Error> {
        let mut names = BTreeSet::new();
        // Every hierarchy's parent is listed, not just the first: the caller's place can move
        // in one hierarchy and not the others (a new login session gets a new memory group
        // while cpu and pids stay at the root), and a leftover in the hierarchies that did not
        // move is still ours to remove. About 5 us per directory.
        for p in &self.parents {
            let Ok(rd) = fs::read_dir(&p.dir) else {
                continue;
            };
            for entry in rd.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(owner) = leaf_owner(&name, self.leaf_prefix) {
                    if entry.path().is_dir() {
                        names.insert((name, owner));
                    }
                }
            }
        }
        // Whether a leaf's maker is gone: a pid tells only in the pid namespace that numbered
        // it (in another, the same number is someone else, or nobody, while the maker runs on:
        // taking its leaf for a leftover kills a live sandbox). A leaf made in this namespace
        // is stale when its pid is gone (a lock is not asked for: anyone who can read the dir
        // could hold one and keep a dead run's processes alive). A leaf made in another is
        // stale only when its maker's lock on every dir of it can be taken: the kernel dropped
        // it when the maker ended.
        let here = own_pidns();
        let mut removed = Vec::new();
        let mut first_err = None;
        for (name, owner) in names {
            let mut locks = Vec::new();
            let ours = owner.pidns.is_none_or(|ns| ns == here);
            if ours {
                if pid_alive(owner.pid) {
                    continue;
                }
            } else {
                let mut held = false;
                for p in &self.parents {
                    match lock_leaf_dir(&p.dir.join(&name)) {
                        Ok(l) => locks.push(l),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(_) => held = true,
                    }
                }
                if held || locks.is_empty() {
                    continue;
                }
            }
            let mut leaf = Leaf {
                version: self.version,
                dirs: self
                    .parents
                    .iter()
                    .map(|p| Parent {
                        controllers: p.controllers.clone(),
                        dir: p.dir.join(&name),
                    })
                    .filter(|p| p.dir.is_dir())
                    .collect(),
                limits: None,
                plain: self.plain,
                removed: false,
                locks,
            };
            let dirs: Vec<PathBuf> = leaf.dirs.iter().map(|d| d.dir.clone()).collect();
            let killed = leaf.kill();
            let r = leaf.remove_dirs().and(killed);
            leaf.removed = true;
            match r {
                Ok(()) => removed.extend(dirs),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    pub(super) fn check_layout(&self) -> Result<(), Error> {
        if self.version == Version::V1 {
            let have: BTreeSet<String> = self
                .parents
                .iter()
                .flat_map(|p| p.controllers.iter().cloned())
                .collect();
            let miss = missing(&NEEDED, &have);
            if !miss.is_empty() {
                return Err(Error::detail(
                    Op::Detect,
                    None,
                    format!("no cgroup v1 hierarchy given for {}", miss.join(", ")),
                ));
            }
        }
        if self.parents.is_empty() {
            return Err(Error::detail(
                Op::Detect,
                None,
                "no parent directory".into(),
            ));
        }
        Ok(())
    }

    /// Make sure `dir`'s `cgroup.subtree_control` enables every needed controller.
    pub(super) fn enable_controllers(&self, dir: &Path) -> Result<(), Error> {
        let path = dir.join("cgroup.subtree_control");
        let enabled = if self.plain && !path.exists() {
            BTreeSet::new()
        } else {
            read_controllers(&path)?
        };
        let miss = missing(&NEEDED, &enabled);
        if miss.is_empty() {
            return Ok(());
        }
        let value: Vec<String> = miss.iter().map(|c| format!("+{c}")).collect();
        write_file(&path, &value.join(" "), self.plain)
    }

    pub(super) fn prepare_parent(&self) -> Result<(), Error> {
        let parent = &self.parents[0].dir;
        match &self.prepare {
            Prepare::Nothing => Ok(()),
            Prepare::Root { root } => {
                self.enable_controllers(root)?;
                mkdir_exist_ok(parent)?;
                self.enable_controllers(parent)
            }
            Prepare::Delegated => {
                let sc = parent.join("cgroup.subtree_control");
                if (sc.exists() || !self.plain)
                    && missing(&NEEDED, &read_controllers(&sc)?).is_empty()
                {
                    return Ok(());
                }
                let sup = parent.join(SUPERVISOR_GROUP);
                mkdir_exist_ok(&sup)?;
                // Every process of our cgroup (this one, and whoever started us inside the
                // scope) must leave it before it may enable controllers. A process forked
                // meanwhile makes the write fail with EBUSY: move again.
                let mut last = None;
                for _ in 0..20 {
                    for pid in read_procs(&parent.join("cgroup.procs")) {
                        match write_file(&sup.join("cgroup.procs"), &pid.to_string(), self.plain) {
                            Ok(()) => {}
                            Err(e) if e.errno == Some(libc::ESRCH) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    match self.enable_controllers(parent) {
                        Ok(()) => return Ok(()),
                        Err(e) if e.errno == Some(libc::EBUSY) => last = Some(e),
                        Err(e) => return Err(e),
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(last.unwrap_or_else(|| {
                    Error::detail(Op::Write, Some(&sc), "processes keep appearing".into())
                }))
            }
        }
    }

    pub(super) fn mkdir_leaf(&self, limits: Limits) -> Result<Leaf, Error> {
        let pid = std::process::id();
        let pidns = own_pidns();
        'names: for _ in 0..1000 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            // The pid namespace in the name, so that a sandbox-run in another one (a
            // container sharing this cgroup tree, a CI step under `unshare --pid`) does not
            // judge this leaf by a pid it cannot see (remove_stale).
            let name = match pidns {
                0 => format!("{}{pid}-{n}", self.leaf_prefix),
                ns => format!("{}{pid}-{n}-{ns}", self.leaf_prefix),
            };
            let mut leaf = Leaf {
                version: self.version,
                dirs: Vec::new(),
                limits: Some(limits),
                plain: self.plain,
                removed: false,
                locks: Vec::new(),
            };
            for p in &self.parents {
                let dir = p.dir.join(&name);
                match fs::create_dir(&dir) {
                    Ok(()) => {
                        // Locked before anything is written or moved in. A remover in another
                        // pid namespace may have locked it first, between the mkdir and here,
                        // taking it for a leftover: then take the next name.
                        if !self.plain {
                            match lock_leaf_dir(&dir) {
                                Ok(l) => leaf.locks.push(l),
                                Err(_) => {
                                    leaf.dirs.push(Parent {
                                        controllers: p.controllers.clone(),
                                        dir,
                                    });
                                    continue 'names;
                                }
                            }
                        }
                        leaf.dirs.push(Parent {
                            controllers: p.controllers.clone(),
                            dir,
                        })
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        // Not ours (a leftover with a reused pid): take the next name. The
                        // dirs made so far are removed when `leaf` drops.
                        continue 'names;
                    }
                    Err(e) => {
                        let mut err = Error::io(Op::Mkdir, &dir, &e);
                        if self.version == Version::V1
                            && euid() != 0
                            && matches!(errno_of(&e), libc::EACCES | libc::EPERM)
                        {
                            err = err.with_hint(HINT_V1_ROOTLESS);
                        }
                        return Err(err);
                    }
                }
            }
            return Ok(leaf);
        }
        Err(Error::detail(
            Op::Mkdir,
            Some(&self.parents[0].dir),
            "no free leaf name".into(),
        ))
    }
}

/// Child side (stage 2, cgroup v1, as root, single-threaded): move the calling process into
/// the leaf by writing `0` into each `tasks` file of [`Leaf::self_join_files`]. Stage 2 does
/// it while it is still uid 0 on the host (opening a `tasks` file needs it: the files are
/// root's, mode 0644; the kernel then checks the opener's euid), and before it forks
/// anything: right after its namespaces when it stays uid 0 there (a root-owned repo), else
/// before them (see `stage2::run`).
///
/// Why not the supervisor writing stage 2's pid into `cgroup.procs`, as on v2: any write of a
/// pid, or of `0` to `cgroup.procs`, takes the global `cgroup_threadgroup_rwsem` for writing,
/// and the first such write after a quiet spell waits for an RCU grace period (10-15 ms per
/// run on this 2-core VM, the largest single cost of a run). The kernel skips that lock for a
/// thread moving itself through `tasks` (`0`: "the current thread, which cannot exit or exec
/// under us"), and for a single-threaded process moving its only thread moves the process.
pub fn join_self(tasks: &[PathBuf]) -> Result<(), crate::layers::StepError> {
    use crate::layers::{Step, StepError};
    for t in tasks {
        let fail = |e: io::Error| StepError::new(Step::Cgroup, errno_of(&e));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(t)
            .map_err(fail)?;
        f.write_all(b"0").map_err(fail)?;
    }
    Ok(())
}
