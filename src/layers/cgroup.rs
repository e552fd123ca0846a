//! The cgroup layer: memory, CPU and pids caps for one run, whole-tree kill, usage read back.
//!
//! **Supervisor side only.** Nothing here runs in the sandboxed child. The supervisor creates
//! and limits one leaf per run *before* the workload runs any code of its own, moves stage 2
//! in with [`Leaf::add`] while stage 2 is still held (or has it born inside with
//! `clone3(CLONE_INTO_CGROUP)` and [`Leaf::open_v2`]; on cgroup v1 as root stage 2 moves itself
//! with [`join_self`] once the supervisor, which made the leaf meanwhile, says it is ready),
//! and after the run kills whatever is left
//! ([`Leaf::kill`]), reads the usage ([`Leaf::usage`]) and removes the leaf ([`Leaf::remove`]).
//! A [`Leaf`] that is dropped without `remove` kills and removes itself, so no error path
//! leaves a process or a directory behind.
//!
//! cgroupfs files are written directly (no cgroups-rs, see DESIGN.md section 4). Every group
//! this module creates is named with the prefix `sandbox-run`, so leftovers are recognisable:
//!
//! | host | parent of the leaves | leaf |
//! |---|---|---|
//! | cgroup v2, root | `<cgroup2 mount>/sandbox-run` (created; controllers enabled in the mount root's and its own `cgroup.subtree_control`; it never holds a process) | `sandbox-run/run-<pid>-<n>` |
//! | cgroup v2, delegated subtree (rootless: `systemd-run --user --scope -p Delegate=yes`; or root in a container whose cgroup namespace root holds processes) | the caller's own cgroup: its processes first move into `<own>/sandbox-run-supervisor` (no internal processes), then the controllers are enabled in `<own>/cgroup.subtree_control` | `<own>/sandbox-run-<pid>-<n>` |
//! | cgroup v1 / hybrid (memory, cpu, pids; cpuacct and freezer when mounted) | `<hierarchy>/<our cgroup in it>` for each hierarchy | `sandbox-run-<pid>-<n>` in each |
//!
//! [`Host::detect`] only looks (it changes nothing, so `doctor` may call it); the parents are
//! prepared (created, controllers enabled) by [`Host::create_leaf`], idempotently.
//!
//! Limits: v2 `memory.max`, `memory.swap.max` = 0 (when the file exists), `cpu.max`
//! (`<round(cpus * 100000)> 100000`, at least 1000), `pids.max`. v1 `memory.limit_in_bytes`,
//! then `memory.memsw.limit_in_bytes` equal to it (no swap; when swap accounting is off,
//! `memory.swappiness` 0 instead), `memory.oom_control` kept at `oom_kill_disable 0`,
//! `cpu.cfs_quota_us` (against the period of every new group, 100000), `pids.max`.

use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The prefix of every group this module creates.
pub const PREFIX: &str = "sandbox-run";
/// The `cpu.max` / `cpu.cfs_period_us` period, in microseconds.
pub const CPU_PERIOD_US: u64 = 100_000;
/// The smallest CPU quota the kernel accepts, in microseconds (1 ms).
pub const CPU_QUOTA_MIN_US: u64 = 1_000;
/// The group (cgroup v2, delegated subtree) that holds the caller's own processes, so that
/// the caller's cgroup itself holds none and may enable controllers for its children.
pub const SUPERVISOR_GROUP: &str = "sandbox-run-supervisor";
/// The parent group of the leaves under the cgroup2 mount root (cgroup v2 as root).
pub const ROOT_PARENT: &str = "sandbox-run";

/// Controllers every host must provide.
const NEEDED: [&str; 3] = ["memory", "cpu", "pids"];
/// How long `kill` and `remove` wait for a leaf to drain.
const DRAIN: Duration = Duration::from_secs(2);
/// One round of `kill`: signal, then wait this long before signalling again.
const ROUND: Duration = Duration::from_millis(100);

const HINT_DELEGATE: &str = "run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...', or have root delegate a cgroup v2 subtree to this user (chown the directory and its cgroup.procs, cgroup.subtree_control and cgroup.threads)";
const HINT_V1_ROOTLESS: &str = "cgroup v1 cannot be delegated safely: run sandbox-run as root, or boot with systemd.unified_cgroup_hierarchy=1 (pure cgroup v2) and run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...'";
const HINT_READ_ONLY: &str = "the cgroup filesystem is read-only here (a container without a writable cgroup mount): give it a private cgroup namespace with a writable, delegated /sys/fs/cgroup, or use a profile with layers.cgroup = \"best-effort\"";
const HINT_USER_CONTROLLERS: &str = "systemd delegates only some controllers to users: add /etc/systemd/system/user@.service.d/delegate.conf with '[Service]' and 'Delegate=cpu memory pids', then log in again";

static COUNTER: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// Limits, usage, version

/// The caps of one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// Memory cap in bytes (swap is forbidden on top of it).
    pub memory_max: u64,
    /// CPU cap in CPUs, fractional (`0.5` is half of one CPU), > 0.
    pub cpus: f64,
    /// Maximum number of processes and threads, >= 1.
    pub pids_max: u64,
}

impl Limits {
    /// The CPU quota per [`CPU_PERIOD_US`]: `round(cpus * period)`, at least [`CPU_QUOTA_MIN_US`].
    pub fn cpu_quota_us(&self) -> u64 {
        let q = (self.cpus * CPU_PERIOD_US as f64).round();
        if q.is_finite() && q > 0.0 {
            // `as` saturates at u64::MAX for huge values.
            (q as u64).max(CPU_QUOTA_MIN_US)
        } else {
            CPU_QUOTA_MIN_US
        }
    }

    /// The cgroup v2 `cpu.max` value: `"<quota> <period>"`, e.g. `"50000 100000"` for 0.5.
    pub fn cpu_max(&self) -> String {
        format!("{} {}", self.cpu_quota_us(), CPU_PERIOD_US)
    }

    fn check(&self) -> Result<(), Error> {
        let bad = |what: &str| {
            Err(Error::detail(
                Op::Limits,
                None,
                format!("invalid limits: {what}"),
            ))
        };
        if !(self.cpus.is_finite() && self.cpus > 0.0) {
            return bad(&format!("cpus must be a number above 0, not {}", self.cpus));
        }
        if self.memory_max == 0 {
            return bad("memory_max must be above 0");
        }
        if self.pids_max == 0 {
            return bad("pids_max must be at least 1");
        }
        Ok(())
    }
}

/// What the run cost, read back from the leaf after it ended (before [`Leaf::remove`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Peak memory in bytes (`memory.peak`, Linux 5.19+; v1 `memory.max_usage_in_bytes`).
    pub peak_memory_bytes: Option<u64>,
    /// CPU time in user mode, microseconds.
    pub cpu_user_usec: Option<u64>,
    /// CPU time in kernel mode, microseconds.
    pub cpu_system_usec: Option<u64>,
    /// Processes killed by the OOM killer inside the leaf.
    pub oom_kills: u64,
    /// Forks that failed because `pids.max` was hit.
    pub pids_max_hits: u64,
}

/// The cgroup version in use. Serializes as the number `1` or `2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "u8")]
pub enum Version {
    /// Legacy per-controller hierarchies (also "hybrid" hosts).
    V1,
    /// The unified hierarchy.
    V2,
}

impl Version {
    /// `1` or `2`.
    pub fn number(self) -> u8 {
        match self {
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }
}

impl From<Version> for u8 {
    fn from(v: Version) -> u8 {
        v.number()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// The step of the cgroup layer that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Finding a place where this caller may create groups.
    Detect,
    /// Checking the requested limits.
    Limits,
    /// Creating a group.
    Mkdir,
    /// Reading a control file.
    Read,
    /// Writing a control file.
    Write,
    /// Opening a group directory.
    Open,
    /// Killing the processes of a leaf.
    Kill,
    /// Removing a group.
    Rmdir,
}

impl Op {
    /// The word the user reads: `write`, `mkdir`...
    pub fn name(self) -> &'static str {
        match self {
            Op::Detect => "detect",
            Op::Limits => "limits",
            Op::Mkdir => "mkdir",
            Op::Read => "read",
            Op::Write => "write",
            Op::Open => "open",
            Op::Kill => "kill",
            Op::Rmdir => "rmdir",
        }
    }
}

/// A cgroup layer failure. Its `Display` is one line: the step, the path, the errno or what
/// is wrong, and how to fix it where there is a fix, e.g.
/// `cgroup: write /sys/fs/cgroup/x/memory.max: Permission denied; to fix: run under ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The step that failed.
    pub op: Op,
    /// The file or directory it failed on.
    pub path: Option<PathBuf>,
    /// The errno, when a system call failed.
    pub errno: Option<i32>,
    /// What is wrong, when it is more than an errno.
    pub detail: Option<String>,
    /// How to fix it, when there is a known fix.
    pub hint: Option<String>,
}

impl Error {
    fn detail(op: Op, path: Option<&Path>, detail: String) -> Error {
        Error {
            op,
            path: path.map(Path::to_path_buf),
            errno: None,
            detail: Some(detail),
            hint: None,
        }
    }

    fn io(op: Op, path: &Path, e: &io::Error) -> Error {
        let errno = e.raw_os_error();
        let hint = match errno {
            Some(libc::EROFS) => Some(HINT_READ_ONLY.to_string()),
            Some(libc::EACCES | libc::EPERM) if euid() != 0 => Some(HINT_DELEGATE.to_string()),
            Some(libc::EINVAL) if path.ends_with("cgroup.subtree_control") => Some(
                "the cpu controller cannot be enabled while realtime processes run outside the root cgroup (cgroup v2): move them to the root cgroup or stop them".to_string(),
            ),
            Some(libc::EBUSY) if path.ends_with("cgroup.subtree_control") => Some(format!(
                "{} holds processes, and a cgroup v2 group with processes cannot enable controllers for its children (no internal processes rule)",
                path.parent().unwrap_or(path).display()
            )),
            _ => None,
        };
        Error {
            op,
            path: Some(path.to_path_buf()),
            errno,
            detail: if errno.is_none() {
                Some(e.to_string())
            } else {
                None
            },
            hint,
        }
    }

    fn with_hint(mut self, hint: impl Into<String>) -> Error {
        self.hint = Some(hint.into());
        self
    }

    /// Which kind of fix this failure calls for (`crate::advice` turns it into the steps that
    /// work on the host at hand).
    pub fn remedy(&self) -> Remedy {
        match self.hint.as_deref() {
            Some(HINT_DELEGATE) => Remedy::DelegateV2,
            Some(HINT_USER_CONTROLLERS) => Remedy::UserControllers,
            Some(HINT_V1_ROOTLESS) => Remedy::V1Rootless,
            Some(HINT_READ_ONLY) => Remedy::ReadOnly,
            _ => Remedy::Other,
        }
    }

    /// The same failure without its fix (for callers that give their own).
    pub fn without_hint(&self) -> Error {
        Error {
            hint: None,
            ..self.clone()
        }
    }
}

/// What kind of fix a cgroup failure calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remedy {
    /// cgroup v2 has the controllers, but no subtree is delegated to this uid.
    DelegateV2,
    /// A delegated cgroup v2 subtree lacks controllers (systemd delegates only some).
    UserControllers,
    /// Not root, and the controllers are on cgroup v1 (v1 or hybrid host): v1 cannot be
    /// delegated safely.
    V1Rootless,
    /// The cgroup filesystem is mounted read-only.
    ReadOnly,
    /// Anything else (see the error's own hint, if any).
    Other,
}

/// `Permission denied`, without std's ` (os error 13)`.
fn strerror(errno: i32) -> String {
    let s = io::Error::from_raw_os_error(errno).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "cgroup: {}", self.op.name())?;
        if let Some(p) = &self.path {
            write!(f, " {}", p.display())?;
        }
        if let Some(e) = self.errno {
            write!(f, ": {}", strerror(e))?;
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; to fix: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

// ---------------------------------------------------------------------------------------------
// /proc/self/mountinfo and /proc/self/cgroup

/// One cgroup or cgroup2 mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// The group of the hierarchy mounted there (`/` unless a subtree is bind-mounted).
    root: String,
    mount_point: PathBuf,
    v2: bool,
    read_only: bool,
    /// v1: the superblock options (controller names among them); v2: empty.
    options: Vec<String>,
}

/// Undo mountinfo's octal escapes (`\040` is a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup and cgroup2 mounts, in mount order, a mount point shadowed by a later mount on
/// the same point dropped.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out: Vec<Mount> = Vec::new();
    for line in text.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT MOUNT_OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split_whitespace().collect();
        let r: Vec<&str> = right.split_whitespace().collect();
        if l.len() < 6 || r.is_empty() {
            continue;
        }
        let mount_point = PathBuf::from(unescape(l[4]));
        // Whatever was mounted last on a mount point hides what was there before.
        out.retain(|m| m.mount_point != mount_point);
        let v2 = match r[0] {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        let super_opts: Vec<String> = r
            .get(2)
            .map(|s| s.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        let read_only = l[5].split(',').any(|o| o == "ro") || super_opts.iter().any(|o| o == "ro");
        out.push(Mount {
            root: unescape(l[3]),
            mount_point,
            v2,
            read_only,
            options: if v2 { Vec::new() } else { super_opts },
        });
    }
    out
}

/// One line of `/proc/self/cgroup`: `ID:CONTROLLERS:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    id: u32,
    /// v1: the hierarchy's controllers (`cpu,cpuacct` gives two; `name=systemd` one);
    /// v2 (id 0): empty.
    controllers: Vec<String>,
    path: String,
}

fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(3, ':');
            let id = it.next()?.parse().ok()?;
            let controllers = it
                .next()?
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            let path = it.next()?.trim_end_matches(" (deleted)").to_string();
            Some(Membership {
                id,
                controllers,
                path,
            })
        })
        .collect()
}

/// [`Host::v1_only`] on a text of `/proc/self/cgroup`.
fn v1_only_in(proc_self_cgroup: &str) -> bool {
    let own = parse_proc_cgroup(proc_self_cgroup);
    NEEDED.iter().all(|c| {
        own.iter()
            .any(|m| m.id != 0 && m.controllers.iter().any(|x| x == c))
    })
}

/// `path` (a cgroup path as in /proc/self/cgroup) relative to a mount of the group `root`;
/// `None` when it lies outside that mount.
fn relative(path: &str, root: &str) -> Option<PathBuf> {
    let rest = if root == "/" {
        path
    } else {
        let r = path.strip_prefix(root.trim_end_matches('/'))?;
        if !(r.is_empty() || r.starts_with('/')) {
            return None;
        }
        r
    };
    let rel = PathBuf::from(rest.trim_start_matches('/'));
    if rel.components().all(|c| matches!(c, Component::Normal(_))) {
        Some(rel)
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Small file helpers

/// `base/rel`, without a trailing `/` when `rel` is empty.
fn join(base: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no failure mode and touches no memory.
    unsafe { libc::geteuid() }
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// A control file or a /proc file, whole: one `read(2)` into a page-sized buffer, and one more
/// that returns 0. (`fs::read_to_string` also `statx`es the file for a size that procfs and
/// cgroupfs report as 0, then reads in 32-byte steps.)
fn read_text(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn read(path: &Path) -> Result<String, Error> {
    read_text(path).map_err(|e| Error::io(Op::Read, path, &e))
}

/// Controller names in a `cgroup.controllers` / `cgroup.subtree_control` file. (A `+` is
/// ignored, so plain-file trees that hold what was written read back the same.)
fn read_controllers(path: &Path) -> Result<BTreeSet<String>, Error> {
    Ok(read(path)?
        .split_whitespace()
        .map(|c| c.trim_start_matches('+').to_string())
        .collect())
}

/// The pids in a `cgroup.procs` file; a missing file is an empty group.
fn read_procs(path: &Path) -> Vec<i32> {
    read_text(path)
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `key value` lines (`memory.events`, `cpu.stat`, `pids.events`, `cpuacct.stat`...).
fn flat_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then_some(())?;
        it.next()?.parse().ok()
    })
}

fn read_u64(path: &Path) -> Option<u64> {
    read_text(path).ok()?.trim().parse().ok()
}

fn read_keyed(path: &Path, key: &str) -> Option<u64> {
    flat_keyed(&read_text(path).ok()?, key)
}

fn missing(needed: &[&str], have: &BTreeSet<String>) -> Vec<String> {
    needed
        .iter()
        .filter(|c| !have.contains(**c))
        .map(|c| c.to_string())
        .collect()
}

fn owner(path: &Path) -> Option<u32> {
    fs::metadata(path).ok().map(|m| m.uid())
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `pidfd_send_signal(2)` (Linux 5.1+).
fn pidfd_kill(fd: &OwnedFd) {
    // SAFETY: plain integer arguments and a null siginfo; the fd is ours and open.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

fn clk_tck() -> u64 {
    // SAFETY: sysconf takes an integer and returns one.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

// ---------------------------------------------------------------------------------------------
// Host

/// How the parent of the leaves is made ready (cgroup v2).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Prepare {
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
struct Parent {
    controllers: Vec<String>,
    dir: PathBuf,
}

/// Where this caller may create cgroups, found once per run with [`Host::detect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    version: Version,
    /// v2: one; v1: one per hierarchy (memory, cpu, pids, then cpuacct and freezer if mounted
    /// separately).
    parents: Vec<Parent>,
    /// The leaf name before `<pid>-<n>`.
    leaf_prefix: &'static str,
    prepare: Prepare,
    plain: bool,
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
                if let Some(pid) = leaf_owner(&name, self.leaf_prefix) {
                    if !pid_alive(pid) && entry.path().is_dir() {
                        names.insert(name);
                    }
                }
            }
        }
        let mut removed = Vec::new();
        let mut first_err = None;
        for name in names {
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

    fn check_layout(&self) -> Result<(), Error> {
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
    fn enable_controllers(&self, dir: &Path) -> Result<(), Error> {
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

    fn prepare_parent(&self) -> Result<(), Error> {
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

    fn mkdir_leaf(&self, limits: Limits) -> Result<Leaf, Error> {
        let pid = std::process::id();
        'names: for _ in 0..1000 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("{}{pid}-{n}", self.leaf_prefix);
            let mut leaf = Leaf {
                version: self.version,
                dirs: Vec::new(),
                limits: Some(limits),
                plain: self.plain,
                removed: false,
            };
            for p in &self.parents {
                let dir = p.dir.join(&name);
                match fs::create_dir(&dir) {
                    Ok(()) => leaf.dirs.push(Parent {
                        controllers: p.controllers.clone(),
                        dir,
                    }),
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

/// The pid in a leaf name `<prefix><pid>-<n>`.
fn leaf_owner(name: &str, prefix: &str) -> Option<i32> {
    let rest = name.strip_prefix(prefix)?;
    let (pid, n) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(pid) && digits(n)) {
        return None;
    }
    pid.parse().ok().filter(|p| *p > 0)
}

fn mkdir_exist_ok(dir: &Path) -> Result<(), Error> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(Op::Mkdir, dir, &e)),
    }
}

/// Write `value` in one `write(2)`, as cgroupfs wants it. `plain`: create the file if needed.
fn write_file(path: &Path, value: &str, plain: bool) -> Result<(), Error> {
    let mut o = fs::OpenOptions::new();
    // O_TRUNC is harmless on cgroupfs (shells use it) and right for plain files.
    o.write(true).truncate(true).custom_flags(libc::O_CLOEXEC);
    if plain {
        o.create(true);
    }
    let mut f = o.open(path).map_err(|e| Error::io(Op::Write, path, &e))?;
    match f.write(value.as_bytes()) {
        Ok(n) if n == value.len() => Ok(()),
        Ok(_) => Err(Error::detail(Op::Write, Some(path), "short write".into())),
        Err(e) => Err(Error::io(Op::Write, path, &e)),
    }
}

/// Why a cgroup version cannot be used.
struct Reason {
    text: String,
    hint: Option<&'static str>,
    /// The hierarchy has the controllers (the problem is access, not the host's setup).
    has_controllers: bool,
}

impl Reason {
    fn new(text: String, hint: Option<&'static str>) -> Reason {
        Reason {
            text,
            hint,
            has_controllers: false,
        }
    }
}

fn detect_v2(mounts: &[Mount], own: &[Membership], euid: u32) -> Result<Host, Reason> {
    let own_path = own
        .iter()
        .find(|m| m.id == 0 && m.controllers.is_empty())
        .map(|m| m.path.as_str());
    let candidates: Vec<&Mount> = mounts
        .iter()
        .filter(|m| m.v2 && relative(own_path.unwrap_or("/"), &m.root).is_some())
        .collect();
    let mount = candidates
        .iter()
        .find(|m| m.mount_point == Path::new("/sys/fs/cgroup"))
        .or_else(|| candidates.first())
        .copied()
        .ok_or_else(|| Reason::new("no cgroup2 mount".into(), None))?;
    let root = mount.mount_point.clone();
    let ctrl = read_controllers(&root.join("cgroup.controllers"))
        .map_err(|e| Reason::new(e.to_string(), None))?;
    let miss = missing(&NEEDED, &ctrl);
    if !miss.is_empty() {
        return Err(Reason::new(
            format!(
                "cgroup2 at {} lacks the {} controller(s) (on a hybrid host they are bound to cgroup v1)",
                root.display(),
                miss.join(", ")
            ),
            None,
        ));
    }
    if mount.read_only {
        return Err(Reason {
            text: format!("cgroup2 at {} is mounted read-only", root.display()),
            hint: Some(HINT_READ_ONLY),
            has_controllers: true,
        });
    }
    // The real root cgroup has no cgroup.events; the root of a cgroup namespace has one and,
    // unlike the real root, must hold no processes to enable controllers for its children.
    let real_root = !root.join("cgroup.events").exists();
    if euid == 0 {
        let enabled = read_controllers(&root.join("cgroup.subtree_control")).unwrap_or_default();
        let busy = !real_root && !read_procs(&root.join("cgroup.procs")).is_empty();
        if real_root || missing(&NEEDED, &enabled).is_empty() || !busy {
            return Ok(Host {
                version: Version::V2,
                parents: vec![Parent {
                    controllers: Vec::new(),
                    dir: root.join(ROOT_PARENT),
                }],
                leaf_prefix: "run-",
                prepare: Prepare::Root { root },
                plain: false,
            });
        }
    }
    // A delegated subtree: our own cgroup (or its parent, if we already moved into the
    // supervisor group).
    let Some(rel) = own_path.and_then(|p| relative(p, &mount.root)) else {
        return Err(Reason::new(
            "this process's cgroup v2 membership is not visible in /proc/self/cgroup".into(),
            Some(HINT_DELEGATE),
        ));
    };
    let mut own_dir = join(&root, &rel);
    if own_dir.file_name().is_some_and(|n| n == SUPERVISOR_GROUP) {
        own_dir.pop();
    }
    let denied = |text: String, hint: &'static str| Reason {
        text,
        hint: Some(hint),
        has_controllers: true,
    };
    if own_dir == root && real_root {
        return Err(denied(
            format!(
                "uid {euid} may not create groups under the root cgroup {}",
                root.display()
            ),
            HINT_DELEGATE,
        ));
    }
    for f in [
        own_dir.clone(),
        own_dir.join("cgroup.procs"),
        own_dir.join("cgroup.subtree_control"),
    ] {
        match owner(&f) {
            Some(uid) if uid == euid => {}
            Some(uid) => {
                return Err(denied(
                    format!(
                        "{} is owned by uid {uid}, not delegated to uid {euid}",
                        f.display()
                    ),
                    HINT_DELEGATE,
                ))
            }
            None => {
                return Err(denied(
                    format!("{} does not exist", f.display()),
                    HINT_DELEGATE,
                ))
            }
        }
    }
    let ctrl = read_controllers(&own_dir.join("cgroup.controllers"))
        .map_err(|e| denied(e.to_string(), HINT_DELEGATE))?;
    let miss = missing(&NEEDED, &ctrl);
    if !miss.is_empty() {
        return Err(denied(
            format!(
                "the delegated cgroup {} lacks the {} controller(s)",
                own_dir.display(),
                miss.join(", ")
            ),
            HINT_USER_CONTROLLERS,
        ));
    }
    Ok(Host {
        version: Version::V2,
        parents: vec![Parent {
            controllers: Vec::new(),
            dir: own_dir,
        }],
        leaf_prefix: "sandbox-run-",
        prepare: Prepare::Delegated,
        plain: false,
    })
}

fn detect_v1(mounts: &[Mount], own: &[Membership], euid: u32) -> Result<Host, Reason> {
    let mut parents: Vec<Parent> = Vec::new();
    let mut used: Vec<&Path> = Vec::new();
    for c in ["memory", "cpu", "pids", "cpuacct", "freezer"] {
        let required = NEEDED.contains(&c);
        let found = own
            .iter()
            .filter(|m| m.id != 0 && m.controllers.iter().any(|x| x == c))
            .find_map(|m| {
                mounts
                    .iter()
                    .filter(|mt| {
                        !mt.v2
                            && m.controllers
                                .iter()
                                .all(|x| mt.options.iter().any(|o| o == x))
                    })
                    .find_map(|mt| relative(&m.path, &mt.root).map(|rel| (m, mt, rel)))
            });
        let Some((m, mt, rel)) = found else {
            if required {
                return Err(Reason::new(
                    format!("no {c} hierarchy mounted for this process"),
                    None,
                ));
            }
            continue;
        };
        if used.contains(&mt.mount_point.as_path()) {
            continue; // co-mounted with an earlier controller (cpu,cpuacct)
        }
        if mt.read_only {
            return Err(Reason {
                text: format!("{} is mounted read-only", mt.mount_point.display()),
                hint: Some(HINT_READ_ONLY),
                has_controllers: true,
            });
        }
        let dir = join(&mt.mount_point, &rel);
        if !dir.is_dir() {
            if required {
                return Err(Reason::new(
                    format!("{} does not exist", dir.display()),
                    None,
                ));
            }
            continue;
        }
        if euid != 0 {
            for f in [dir.clone(), dir.join("cgroup.procs")] {
                if owner(&f) != Some(euid) {
                    if !required {
                        continue;
                    }
                    return Err(Reason {
                        text: format!("{} is not writable by uid {euid}", f.display()),
                        hint: Some(HINT_V1_ROOTLESS),
                        has_controllers: true,
                    });
                }
            }
        }
        used.push(&mt.mount_point);
        parents.push(Parent {
            controllers: m.controllers.clone(),
            dir,
        });
    }
    Ok(Host {
        version: Version::V1,
        parents,
        leaf_prefix: "sandbox-run-",
        prepare: Prepare::Nothing,
        plain: false,
    })
}

// ---------------------------------------------------------------------------------------------
// Leaf

/// This run's cgroup: one directory (v2) or one per hierarchy (v1). Dropping it without
/// [`Leaf::remove`] kills what is inside and removes it (errors ignored).
#[derive(Debug)]
pub struct Leaf {
    version: Version,
    dirs: Vec<Parent>,
    /// `None` for a stale leaf found by `remove_stale`.
    limits: Option<Limits>,
    plain: bool,
    removed: bool,
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

    fn dir_for(&self, controller: &str) -> Option<&Path> {
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
    fn sigkill_members(&self) {
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
    fn wait_state(&self, path: &Path, done: impl Fn(&str) -> bool) {
        let until = Instant::now() + ROUND;
        while Instant::now() < until {
            if read_text(path).is_ok_and(|s| done(&s)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Wait until no process is left, or `until`.
    fn wait_empty(&self, until: Instant) -> bool {
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
    fn remove_dirs(&self) -> Result<(), Error> {
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
    fn write_limits(&self) -> Result<(), Error> {
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
fn v1_cpu(d: &Path) -> (Option<u64>, Option<u64>) {
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

#[cfg(test)]
mod tests {
    //! Parsing and file-format tests on a fake cgroupfs LAYOUT (plain files in a temp dir).
    //! They do not replace the kernel tests in `tests/cgroup_layer.rs`.
    use super::*;

    /// A temp directory removed on drop, even when the test fails.
    struct Tmp(PathBuf);

    impl Tmp {
        fn new() -> Tmp {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "sandbox-run-cgroup-unit-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Tmp(p)
        }
        fn path(&self, rel: &str) -> PathBuf {
            self.0.join(rel)
        }
        /// Create `rel` with `content` (and its parent directories).
        fn file(&self, rel: &str, content: &str) {
            let p = self.path(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
        }
        fn dir(&self, rel: &str) {
            fs::create_dir_all(self.path(rel)).unwrap();
        }
        /// A mountinfo sample with `{R}` replaced by this directory.
        fn mountinfo(&self, sample: &str) -> String {
            sample.replace("{R}", &self.0.display().to_string())
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn text(p: &Path) -> String {
        fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    const LIMITS: Limits = Limits {
        memory_max: 64 << 20,
        cpus: 0.5,
        pids_max: 32,
    };

    /// This machine: hybrid, controllers on v1 (cpu and cpuacct mounted apart), an empty
    /// cgroup2 at `unified`.
    const HYBRID: &str = "\
24 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
31 23 0:28 / {R} rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {R}/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / {R}/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / {R}/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / {R}/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / {R}/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / {R}/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / {R}/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / {R}/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / {R}/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {R}/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n\
5:devices:/\n4:memory:/process_api/b34fb927\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n";

    /// Ubuntu 20.04 (systemd hybrid): cpu and cpuacct co-mounted, nsdelegate cgroup2.
    const UBUNTU_HYBRID: &str = "\
25 24 0:22 / {R} ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / {R}/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / {R}/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
31 25 0:28 / {R}/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
32 25 0:29 / {R}/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
35 25 0:32 / {R}/pids rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,pids
36 25 0:33 / {R}/freezer rw,nosuid,nodev,noexec,relatime shared:20 - cgroup cgroup rw,freezer
";
    const UBUNTU_HYBRID_CGROUP: &str = "12:freezer:/\n\
11:pids:/user.slice/user-1000.slice/session-2.scope\n\
6:memory:/user.slice/user-1000.slice/session-2.scope\n4:cpu,cpuacct:/user.slice\n\
1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n\
0::/user.slice/user-1000.slice/session-2.scope\n";

    /// Debian 12 / Ubuntu 22.04+ / Fedora: pure cgroup v2.
    const PURE_V2: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro
29 22 0:26 / {R} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    const ROOT_SESSION: &str = "0::/user.slice/user-0.slice/session-1.scope\n";
    const USER_SCOPE: &str =
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r9.scope\n";

    /// Docker with a private cgroup namespace: cgroup2 read-only, we are at its root.
    const DOCKER_V2: &str = "\
678 657 0:27 / {R} ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
";
    /// Podman (or docker --privileged): the same, writable.
    const CONTAINER_V2_RW: &str = "\
678 657 0:27 / {R} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
";
    /// Docker on a v1 host without cgroup namespace: the container's group bind-mounted.
    const DOCKER_V1: &str = "\
1190 1188 0:29 /docker/0123abcd {R}/memory ro,nosuid,nodev,noexec,relatime master:15 - cgroup cgroup rw,memory
1191 1188 0:30 /docker/0123abcd {R}/cpu,cpuacct ro,nosuid,nodev,noexec,relatime master:16 - cgroup cgroup rw,cpu,cpuacct
1192 1188 0:31 /docker/0123abcd {R}/pids ro,nosuid,nodev,noexec,relatime master:17 - cgroup cgroup rw,pids
";
    const DOCKER_V1_CGROUP: &str =
        "6:memory:/docker/0123abcd\n4:cpu,cpuacct:/docker/0123abcd\n3:pids:/docker/0123abcd\n0::/\n";

    const ALL_CONTROLLERS: &str = "cpuset cpu io memory hugetlb pids rdma misc\n";

    #[test]
    fn mountinfo_hybrid() {
        let m = parse_mountinfo(&HYBRID.replace("{R}", "/sys/fs/cgroup"));
        assert_eq!(m.len(), 10, "{m:?}");
        let mem = m
            .iter()
            .find(|x| x.mount_point == Path::new("/sys/fs/cgroup/memory"))
            .unwrap();
        assert!(!mem.v2 && !mem.read_only && mem.root == "/");
        assert!(mem.options.contains(&"memory".to_string()));
        let v2: Vec<_> = m.iter().filter(|x| x.v2).collect();
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].mount_point, Path::new("/sys/fs/cgroup/unified"));
    }

    #[test]
    fn mountinfo_pure_v2_container_and_escapes() {
        let m = parse_mountinfo(&PURE_V2.replace("{R}", "/sys/fs/cgroup"));
        assert_eq!(m.len(), 1);
        assert!(m[0].v2 && !m[0].read_only);
        let m = parse_mountinfo(&DOCKER_V2.replace("{R}", "/sys/fs/cgroup"));
        assert!(m[0].v2 && m[0].read_only, "{m:?}");
        let m = parse_mountinfo(&DOCKER_V1.replace("{R}", "/sys/fs/cgroup"));
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].root, "/docker/0123abcd");
        assert!(m[1].options.contains(&"cpuacct".into()));
        assert!(m.iter().all(|x| x.read_only));
        let m = parse_mountinfo(
            "40 31 0:37 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n\
             41 31 0:38 / /mnt/my\\040cg rw,relatime - tmpfs tmpfs rw\n\
             42 31 0:39 / /mnt/other rw - cgroup2 cgroup2 rw\n\
             garbage line\n",
        );
        // The tmpfs mounted over the first cgroup2 hides it.
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(unescape("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape("\\04"), "\\04");
    }

    #[test]
    fn v1_only_when_the_needed_controllers_are_on_v1() {
        let hybrid = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:cpu:/\n5:memory:/x\n0::/\n";
        assert!(v1_only_in(hybrid));
        // cpu co-mounted with cpuacct counts
        assert!(v1_only_in("3:cpu,cpuacct:/\n2:memory:/\n1:pids:/\n0::/\n"));
        // pure v2, or pids left to v2: not sure
        assert!(!v1_only_in("0::/user.slice\n"));
        assert!(!v1_only_in("6:cpu:/\n5:memory:/\n0::/\n"));
        assert!(!v1_only_in(""));
    }

    #[test]
    fn proc_cgroup_and_relative_paths() {
        let c = parse_proc_cgroup(UBUNTU_HYBRID_CGROUP);
        assert_eq!(c.len(), 6);
        assert_eq!(c[3].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(c[3].path, "/user.slice");
        assert_eq!(c[5].id, 0);
        assert!(c[5].controllers.is_empty());
        let c = parse_proc_cgroup("0::/a:b (deleted)\n");
        assert_eq!(c[0].path, "/a:b");

        assert_eq!(relative("/", "/"), Some(PathBuf::new()));
        assert_eq!(relative("/a/b", "/"), Some(PathBuf::from("a/b")));
        assert_eq!(relative("/docker/x", "/docker/x"), Some(PathBuf::new()));
        assert_eq!(
            relative("/docker/x/y", "/docker/x"),
            Some(PathBuf::from("y"))
        );
        assert_eq!(relative("/docker/xy", "/docker/x"), None);
        assert_eq!(relative("/other", "/docker/x"), None);
        // A cgroup namespace shows groups outside it with `..`.
        assert_eq!(relative("/../../user.slice", "/"), None);
    }

    #[test]
    fn cpu_max_values() {
        let l = |cpus| Limits { cpus, ..LIMITS };
        assert_eq!(l(0.5).cpu_max(), "50000 100000");
        assert_eq!(l(2.0).cpu_max(), "200000 100000");
        assert_eq!(l(1.0).cpu_max(), "100000 100000");
        assert_eq!(l(1.234567).cpu_quota_us(), 123457);
        assert_eq!(l(0.001).cpu_quota_us(), CPU_QUOTA_MIN_US);
        assert_eq!(l(0.0).cpu_quota_us(), CPU_QUOTA_MIN_US);
        assert!(l(f64::NAN).check().is_err());
        assert!(l(-1.0).check().is_err());
        assert!(l(0.0).check().is_err());
        assert!(Limits {
            pids_max: 0,
            ..LIMITS
        }
        .check()
        .is_err());
        assert!(Limits {
            memory_max: 0,
            ..LIMITS
        }
        .check()
        .is_err());
        assert!(LIMITS.check().is_ok());
    }

    fn hybrid_layout(t: &Tmp) {
        t.file("unified/cgroup.controllers", "hugetlb\n");
        for d in [
            "cpu",
            "cpuacct",
            "freezer",
            "pids",
            "memory/process_api/b34fb927",
        ] {
            t.dir(d);
        }
    }

    #[test]
    fn detect_hybrid_uses_v1_with_our_own_groups() {
        let t = Tmp::new();
        hybrid_layout(&t);
        let h = Host::detect_from(&t.mountinfo(HYBRID), HYBRID_CGROUP, 0).unwrap();
        assert_eq!(h.version(), Version::V1);
        assert_eq!(
            h.leaf_parents(),
            vec![
                t.path("memory/process_api/b34fb927"),
                t.path("cpu"),
                t.path("pids"),
                t.path("cpuacct"),
                t.path("freezer"),
            ]
        );
        assert!(
            h.describe()
                .starts_with("cgroup v1: leaves under memory in "),
            "{}",
            h.describe()
        );
    }

    #[test]
    fn detect_co_mounted_cpu_cpuacct_once() {
        let t = Tmp::new();
        t.file("unified/cgroup.controllers", "");
        let s = "user.slice/user-1000.slice/session-2.scope";
        for d in [
            format!("memory/{s}"),
            format!("pids/{s}"),
            "cpu,cpuacct/user.slice".into(),
            "freezer".into(),
        ] {
            t.dir(&d);
        }
        let h = Host::detect_from(&t.mountinfo(UBUNTU_HYBRID), UBUNTU_HYBRID_CGROUP, 0).unwrap();
        assert_eq!(h.version(), Version::V1);
        assert_eq!(h.parents.len(), 4, "{h:?}");
        assert_eq!(h.parents[1].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(h.parents[1].dir, t.path("cpu,cpuacct/user.slice"));
    }

    #[test]
    fn v1_rootless_is_a_clear_error() {
        let t = Tmp::new();
        t.file("unified/cgroup.controllers", "");
        let s = "user.slice/user-1000.slice/session-2.scope";
        for d in [
            format!("memory/{s}"),
            format!("pids/{s}"),
            "cpu,cpuacct/user.slice".into(),
        ] {
            t.dir(&d);
        }
        // Nobody owns a file as uid 4242.
        let e =
            Host::detect_from(&t.mountinfo(UBUNTU_HYBRID), UBUNTU_HYBRID_CGROUP, 4242).unwrap_err();
        let s = e.to_string();
        assert_eq!(e.op, Op::Detect);
        assert!(
            s.starts_with("cgroup: detect: no cgroup to be had: v2: cgroup2 at "),
            "{s}"
        );
        assert!(
            s.contains("lacks the memory, cpu, pids controller(s)"),
            "{s}"
        );
        assert!(s.contains("is not writable by uid 4242"), "{s}");
        assert!(
            s.contains("; to fix: cgroup v1 cannot be delegated safely"),
            "{s}"
        );
        assert!(!s.contains('\n'));
    }

    #[test]
    fn detect_nothing_mounted() {
        let e = Host::detect_from("", "0::/\n", 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cgroup: detect: no cgroup to be had: v2: no cgroup2 mount; v1: no memory hierarchy mounted for this process"
        );
    }

    #[test]
    fn detect_read_only_containers() {
        let t = Tmp::new();
        t.file("cgroup.controllers", "cpu memory pids\n");
        t.file("cgroup.events", "populated 1\nfrozen 0\n");
        let e = Host::detect_from(&t.mountinfo(DOCKER_V2), "0::/\n", 0).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("is mounted read-only"), "{s}");
        assert!(s.ends_with(&format!("; to fix: {HINT_READ_ONLY}")), "{s}");

        let t = Tmp::new();
        for d in ["memory", "cpu,cpuacct", "pids"] {
            t.dir(d);
        }
        let e = Host::detect_from(&t.mountinfo(DOCKER_V1), DOCKER_V1_CGROUP, 0).unwrap_err();
        assert!(
            e.to_string().contains("/memory is mounted read-only"),
            "{e}"
        );
    }

    #[test]
    fn v2_as_root_prepares_sandbox_run_parent() {
        let t = Tmp::new();
        t.file("cgroup.controllers", ALL_CONTROLLERS);
        t.file("cgroup.subtree_control", "memory pids\n");
        t.file("cgroup.procs", "1\n2\n");
        t.dir("user.slice/user-0.slice/session-1.scope");
        let h = Host::detect_from(&t.mountinfo(PURE_V2), ROOT_SESSION, 0)
            .unwrap()
            .with_plain_files();
        assert_eq!(h.version(), Version::V2);
        assert_eq!(h.prepare, Prepare::Root { root: t.0.clone() });
        assert_eq!(h.leaf_parents(), vec![t.path("sandbox-run")]);
        let leaf = h.create_leaf(&LIMITS).unwrap();
        // Only the missing controller is enabled at the root; all three in the parent.
        assert_eq!(text(&t.path("cgroup.subtree_control")), "+cpu");
        assert_eq!(
            text(&t.path("sandbox-run/cgroup.subtree_control")),
            "+memory +cpu +pids"
        );
        let d = leaf.path_v2().unwrap().to_path_buf();
        assert_eq!(d.parent().unwrap(), t.path("sandbox-run"));
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(leaf_owner(&name, "run-"), Some(std::process::id() as i32));
        assert_eq!(text(&d.join("memory.max")), (64u64 << 20).to_string());
        assert_eq!(text(&d.join("memory.swap.max")), "0");
        assert_eq!(text(&d.join("cpu.max")), "50000 100000");
        assert_eq!(text(&d.join("pids.max")), "32");
        leaf.add(4321).unwrap();
        assert_eq!(text(&d.join("cgroup.procs")), "4321");
        assert_eq!(leaf.procs(), vec![4321]);
        assert!(leaf.open_v2().is_ok());
        leaf.remove_dirs_for_test();
        assert!(!d.exists());
        // The parent stays for the next runs.
        assert!(t.path("sandbox-run").is_dir());
    }

    impl Leaf {
        /// `remove` without the kill: the plain-file `cgroup.procs` holds made-up pids.
        fn remove_dirs_for_test(mut self) {
            self.removed = true;
            self.remove_dirs().unwrap();
        }
    }

    #[test]
    fn v2_cpu_max_for_two_cpus() {
        let t = Tmp::new();
        let h = Host::v2_at(t.0.clone()).with_plain_files();
        let leaf = h
            .create_leaf(&Limits {
                cpus: 2.0,
                ..LIMITS
            })
            .unwrap();
        let d = leaf.path_v2().unwrap().to_path_buf();
        assert_eq!(text(&d.join("cpu.max")), "200000 100000");
        assert!(d
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("sandbox-run-{}-", std::process::id())));
        leaf.remove().unwrap();
        assert!(!d.exists());
    }

    /// The uid the fake delegated tree belongs to, and a uid it does not belong to.
    fn delegate(t: &Tmp, own: &str) -> (u32, u32) {
        let me = euid();
        if me != 0 {
            return (me, me + 1);
        }
        for f in [
            "",
            "/cgroup.procs",
            "/cgroup.subtree_control",
            "/cgroup.threads",
        ] {
            let p = t.path(&format!("{own}{f}"));
            std::os::unix::fs::chown(&p, Some(4242), Some(4242)).unwrap();
        }
        (4242, 4243)
    }

    const OWN: &str = "user.slice/user-1000.slice/user@1000.service/app.slice/run-r9.scope";

    fn user_scope_layout(t: &Tmp) {
        t.file("cgroup.controllers", ALL_CONTROLLERS);
        t.file("cgroup.subtree_control", "cpu memory pids\n");
        t.file(&format!("{OWN}/cgroup.controllers"), "cpu memory pids\n");
        t.file(&format!("{OWN}/cgroup.subtree_control"), "");
        t.file(&format!("{OWN}/cgroup.procs"), "1200\n1201\n");
        t.file(&format!("{OWN}/cgroup.threads"), "1200\n1201\n");
        t.file(&format!("{OWN}/cgroup.events"), "populated 1\nfrozen 0\n");
    }

    #[test]
    fn v2_rootless_delegated_scope() {
        let t = Tmp::new();
        user_scope_layout(&t);
        let (uid, _) = delegate(&t, OWN);
        let h = Host::detect_from(&t.mountinfo(PURE_V2), USER_SCOPE, uid)
            .unwrap()
            .with_plain_files();
        assert_eq!(h.prepare, Prepare::Delegated);
        assert_eq!(h.leaf_parents(), vec![t.path(OWN)]);
        assert!(h.describe().contains("(delegated subtree)"));
        let leaf = h.create_leaf(&LIMITS).unwrap();
        // Our scope's processes moved out (one write each; the plain file keeps the last),
        // then the controllers were enabled in the scope.
        assert_eq!(
            text(&t.path(&format!("{OWN}/{SUPERVISOR_GROUP}/cgroup.procs"))),
            "1201"
        );
        assert_eq!(
            text(&t.path(&format!("{OWN}/cgroup.subtree_control"))),
            "+memory +cpu +pids"
        );
        let d = leaf.path_v2().unwrap().to_path_buf();
        assert_eq!(d.parent().unwrap(), t.path(OWN));
        assert_eq!(text(&d.join("cpu.max")), "50000 100000");
        leaf.remove().unwrap();

        // Once we live in the supervisor group, the scope is still the parent.
        let moved = format!("0::/{OWN}/{SUPERVISOR_GROUP}\n");
        let h2 = Host::detect_from(&t.mountinfo(PURE_V2), &moved, uid).unwrap();
        assert_eq!(h2.leaf_parents(), vec![t.path(OWN)]);
    }

    #[test]
    fn v2_rootless_without_delegation_says_how() {
        let t = Tmp::new();
        user_scope_layout(&t);
        let (_, other) = delegate(&t, OWN);
        let e = Host::detect_from(&t.mountinfo(PURE_V2), USER_SCOPE, other).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("run-r9.scope is owned by uid"), "{s}");
        assert!(s.contains(&format!("not delegated to uid {other}")), "{s}");
        assert!(
            s.contains(
                "; to fix: run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...'"
            ),
            "{s}"
        );
        // Delegated, but without cpu.
        let (uid, _) = delegate(&t, OWN);
        t.file(&format!("{OWN}/cgroup.controllers"), "memory pids\n");
        let e = Host::detect_from(&t.mountinfo(PURE_V2), USER_SCOPE, uid).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("lacks the cpu controller(s)"), "{s}");
        assert!(s.contains("Delegate=cpu memory pids"), "{s}");
        // The root cgroup is never ours without root.
        let e = Host::detect_from(&t.mountinfo(PURE_V2), "0::/\n", uid).unwrap_err();
        assert!(
            e.to_string()
                .contains("may not create groups under the root cgroup"),
            "{e}"
        );
    }

    #[test]
    fn v2_container_root_with_busy_namespace_root_is_delegated() {
        let t = Tmp::new();
        t.file("cgroup.controllers", "cpu memory pids\n");
        t.file("cgroup.subtree_control", "");
        t.file("cgroup.procs", "1\n7\n");
        t.file("cgroup.events", "populated 1\nfrozen 0\n");
        let me = euid();
        let h = Host::detect_from(&t.mountinfo(CONTAINER_V2_RW), "0::/\n", me).unwrap();
        assert_eq!(h.prepare, Prepare::Delegated);
        assert_eq!(h.leaf_parents(), vec![t.0.as_path()]);
        // An idle namespace root (nothing in it) is used like the real root.
        if me == 0 {
            t.file("cgroup.procs", "");
            let h = Host::detect_from(&t.mountinfo(CONTAINER_V2_RW), "0::/\n", 0).unwrap();
            assert_eq!(h.leaf_parents(), vec![t.path("sandbox-run")]);
        }
    }

    #[test]
    fn v1_limit_files() {
        let t = Tmp::new();
        for d in ["memory", "cpu", "cpuacct", "pids", "freezer"] {
            t.dir(d);
        }
        let h = Host::v1_at([
            ("memory", t.path("memory")),
            ("cpu", t.path("cpu")),
            ("pids", t.path("pids")),
            ("cpuacct", t.path("cpuacct")),
            ("freezer", t.path("freezer")),
        ])
        .with_plain_files();
        let leaf = h.create_leaf(&LIMITS).unwrap();
        let p = leaf
            .paths()
            .iter()
            .map(|p| p.to_path_buf())
            .collect::<Vec<_>>();
        assert_eq!(p.len(), 5);
        assert!(leaf.path_v2().is_none());
        assert!(leaf.open_v2().is_err());
        let mem = (64u64 << 20).to_string();
        assert_eq!(text(&p[0].join("memory.limit_in_bytes")), mem);
        assert_eq!(text(&p[0].join("memory.memsw.limit_in_bytes")), mem);
        // The period of a new group is the kernel's 100 ms: not written.
        assert!(!p[1].join("cpu.cfs_period_us").exists());
        assert_eq!(text(&p[1].join("cpu.cfs_quota_us")), "50000");
        assert_eq!(text(&p[2].join("pids.max")), "32");
        assert!(!p[3].join("cpu.cfs_quota_us").exists());
        leaf.add(77).unwrap();
        for d in &p {
            assert_eq!(text(&d.join("cgroup.procs")), "77");
        }
        leaf.remove_dirs_for_test();
        assert!(p.iter().all(|d| !d.exists()));
    }

    #[test]
    fn v1_optional_files_follow_the_kernel() {
        let t = Tmp::new();
        // What the kernel would show in a fresh leaf without swap accounting, under a parent
        // that disabled the OOM killer.
        t.file("m/memory.limit_in_bytes", "9223372036854771712\n");
        t.file("m/memory.swappiness", "60\n");
        t.file(
            "m/memory.oom_control",
            "oom_kill_disable 1\nunder_oom 0\noom_kill 0\n",
        );
        t.file("c/cpu.cfs_period_us", "100000\n");
        t.file("c/cpu.cfs_quota_us", "-1\n");
        t.file("p/pids.max", "max\n");
        let mut leaf = Leaf {
            version: Version::V1,
            dirs: vec![
                Parent {
                    controllers: vec!["memory".into()],
                    dir: t.path("m"),
                },
                Parent {
                    controllers: vec!["cpu".into(), "cpuacct".into()],
                    dir: t.path("c"),
                },
                Parent {
                    controllers: vec!["pids".into()],
                    dir: t.path("p"),
                },
            ],
            limits: Some(Limits {
                cpus: 1.5,
                ..LIMITS
            }),
            plain: false,
            removed: true,
        };
        leaf.write_limits().unwrap();
        assert!(!t.path("m/memory.memsw.limit_in_bytes").exists());
        assert_eq!(text(&t.path("m/memory.swappiness")), "0");
        assert_eq!(text(&t.path("m/memory.oom_control")), "0");
        assert_eq!(text(&t.path("c/cpu.cfs_quota_us")), "150000");
        // v2 without swap accounting: no memory.swap.max is written.
        t.file("v2/memory.max", "max\n");
        t.file("v2/cpu.max", "max 100000\n");
        t.file("v2/pids.max", "max\n");
        leaf.version = Version::V2;
        leaf.dirs = vec![Parent {
            controllers: vec![],
            dir: t.path("v2"),
        }];
        leaf.write_limits().unwrap();
        assert!(!t.path("v2/memory.swap.max").exists());
        assert_eq!(text(&t.path("v2/cpu.max")), "150000 100000");
    }

    #[test]
    fn usage_v2_real_formats() {
        let t = Tmp::new();
        let leaf = Host::v2_at(t.0.clone())
            .with_plain_files()
            .create_leaf(&LIMITS)
            .unwrap();
        let d = leaf.path_v2().unwrap();
        assert_eq!(leaf.usage(), Usage::default());
        fs::write(d.join("memory.peak"), "66998272\n").unwrap();
        fs::write(
            d.join("cpu.stat"),
            "usage_usec 1012345\nuser_usec 1000000\nsystem_usec 12345\n\
             core_sched.force_idle_usec 0\nnr_periods 21\nnr_throttled 20\n\
             throttled_usec 987654\nnr_bursts 0\nburst_usec 0\n",
        )
        .unwrap();
        fs::write(
            d.join("memory.events"),
            "low 0\nhigh 0\nmax 153\noom 1\noom_kill 1\noom_group_kill 0\nsock_throttled 0\n",
        )
        .unwrap();
        fs::write(d.join("pids.events"), "max 3\n").unwrap();
        assert_eq!(
            leaf.usage(),
            Usage {
                peak_memory_bytes: Some(66998272),
                cpu_user_usec: Some(1_000_000),
                cpu_system_usec: Some(12345),
                oom_kills: 1,
                pids_max_hits: 3,
            }
        );
        let json = serde_json::to_string(&leaf.usage()).unwrap();
        assert_eq!(
            json,
            r#"{"peak_memory_bytes":66998272,"cpu_user_usec":1000000,"cpu_system_usec":12345,"oom_kills":1,"pids_max_hits":3}"#
        );
        assert_eq!(serde_json::to_string(&Version::V2).unwrap(), "2");
        leaf.remove().unwrap();
    }

    #[test]
    fn usage_v1_real_formats() {
        let t = Tmp::new();
        for d in ["memory", "cpu,cpuacct", "pids"] {
            t.dir(d);
        }
        let h = Host::v1_at([
            ("memory", t.path("memory")),
            ("cpu,cpuacct", t.path("cpu,cpuacct")),
            ("pids", t.path("pids")),
        ])
        .with_plain_files();
        let leaf = h.create_leaf(&LIMITS).unwrap();
        let p: Vec<PathBuf> = leaf.paths().iter().map(|p| p.to_path_buf()).collect();
        fs::write(p[0].join("memory.max_usage_in_bytes"), "67108864\n").unwrap();
        fs::write(
            p[0].join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        fs::write(p[1].join("cpuacct.stat"), "user 52\nsystem 7\n").unwrap();
        fs::write(p[2].join("pids.events"), "max 5\n").unwrap();
        let tick = 1_000_000 / clk_tck();
        assert_eq!(
            leaf.usage(),
            Usage {
                peak_memory_bytes: Some(67108864),
                cpu_user_usec: Some(52 * tick),
                cpu_system_usec: Some(7 * tick),
                oom_kills: 2,
                pids_max_hits: 5,
            }
        );
        // Nanosecond counters win over ticks.
        fs::write(p[1].join("cpuacct.usage_user"), "1002003004\n").unwrap();
        fs::write(p[1].join("cpuacct.usage_sys"), "5006007\n").unwrap();
        let u = leaf.usage();
        assert_eq!(
            (u.cpu_user_usec, u.cpu_system_usec),
            (Some(1002003), Some(5006))
        );
        leaf.remove().unwrap();
    }

    #[test]
    fn errors_read_as_one_line() {
        let p = Path::new("/sys/fs/cgroup/x/memory.max");
        let e = Error::io(Op::Write, p, &io::Error::from_raw_os_error(libc::EACCES));
        let s = e.to_string();
        assert!(
            s.starts_with("cgroup: write /sys/fs/cgroup/x/memory.max: Permission denied"),
            "{s}"
        );
        if euid() != 0 {
            assert!(s.contains("; to fix: run under 'systemd-run --user --scope -p Delegate=yes"));
        }
        let p = Path::new("/sys/fs/cgroup/a/cgroup.subtree_control");
        let s = Error::io(Op::Write, p, &io::Error::from_raw_os_error(libc::EBUSY)).to_string();
        assert_eq!(
            s,
            "cgroup: write /sys/fs/cgroup/a/cgroup.subtree_control: Device or resource busy; to fix: /sys/fs/cgroup/a holds processes, and a cgroup v2 group with processes cannot enable controllers for its children (no internal processes rule)"
        );
        let s = Error::io(
            Op::Mkdir,
            Path::new("/c/x"),
            &io::Error::from_raw_os_error(libc::EROFS),
        )
        .to_string();
        assert!(s.starts_with("cgroup: mkdir /c/x: Read-only file system; to fix: the cgroup filesystem is read-only"), "{s}");
        let e = Host::v2_at("/nonexistent")
            .create_leaf(&Limits {
                cpus: f64::NAN,
                ..LIMITS
            })
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cgroup: limits: invalid limits: cpus must be a number above 0, not NaN"
        );
        let e = Host::v1_at([("memory", PathBuf::from("/m"))])
            .create_leaf(&LIMITS)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cgroup: detect: no cgroup v1 hierarchy given for cpu, pids"
        );
    }

    #[test]
    fn failures_after_mkdir_leave_nothing() {
        // v1: the third hierarchy's parent is missing: the first two leaves go again.
        let t = Tmp::new();
        t.dir("memory");
        t.dir("cpu");
        let h = Host::v1_at([
            ("memory", t.path("memory")),
            ("cpu", t.path("cpu")),
            ("pids", t.path("pids")),
        ])
        .with_plain_files();
        let e = h.create_leaf(&LIMITS).unwrap_err();
        assert_eq!(e.op, Op::Mkdir);
        assert_eq!(e.errno, Some(libc::ENOENT));
        let s = e.to_string();
        assert!(
            s.starts_with(&format!(
                "cgroup: mkdir {}/sandbox-run-",
                t.path("pids").display()
            )),
            "{s}"
        );
        assert!(s.ends_with(": No such file or directory"), "{s}");
        assert!(names_in(&t.path("memory")).is_empty());
        assert!(names_in(&t.path("cpu")).is_empty());

        // v2 with kernel semantics on a plain directory: memory.max does not exist, so the
        // first limit write fails after the mkdir; the leaf goes again.
        let t = Tmp::new();
        let e = Host::v2_at(t.0.clone()).create_leaf(&LIMITS).unwrap_err();
        assert_eq!((e.op, e.errno), (Op::Write, Some(libc::ENOENT)));
        assert!(
            e.to_string()
                .contains("/memory.max: No such file or directory"),
            "{e}"
        );
        assert!(names_in(&t.0).is_empty(), "{:?}", names_in(&t.0));
    }

    #[test]
    fn stale_leaves() {
        assert_eq!(leaf_owner("sandbox-run-123-4", "sandbox-run-"), Some(123));
        assert_eq!(leaf_owner("run-123-4", "run-"), Some(123));
        assert_eq!(leaf_owner("sandbox-run-supervisor", "sandbox-run-"), None);
        assert_eq!(leaf_owner("sandbox-run-12x-4", "sandbox-run-"), None);
        assert_eq!(leaf_owner("sandbox-run-123-", "sandbox-run-"), None);
        assert_eq!(leaf_owner("sandbox-run-0-1", "sandbox-run-"), None);
        assert_eq!(leaf_owner("other-123-4", "sandbox-run-"), None);

        let t = Tmp::new();
        // No pid above pid_max (at most 2^22) exists.
        let dead = "sandbox-run-2147483000-0";
        let mine = format!("sandbox-run-{}-999", std::process::id());
        for d in [dead, mine.as_str(), SUPERVISOR_GROUP, "user-thing-1-2"] {
            t.dir(&format!("a/{d}"));
            t.dir(&format!("b/{d}"));
        }
        // A pids hierarchy without the stale leaf (it was never made there).
        t.dir("c");
        // The leftover of a run made when the caller was elsewhere in the first hierarchy:
        // still removed from the others.
        let moved = "sandbox-run-2147483001-0";
        t.dir(&format!("b/{moved}"));
        t.dir(&format!("c/{moved}"));
        let h = Host::v1_at([
            ("memory", t.path("a")),
            ("cpu,cpuacct", t.path("b")),
            ("pids", t.path("c")),
        ])
        .with_plain_files();
        let removed = h.remove_stale().unwrap();
        assert_eq!(
            removed,
            vec![
                t.path(&format!("a/{dead}")),
                t.path(&format!("b/{dead}")),
                t.path(&format!("b/{moved}")),
                t.path(&format!("c/{moved}")),
            ]
        );
        let left = vec![
            mine.clone(),
            SUPERVISOR_GROUP.to_string(),
            "user-thing-1-2".to_string(),
        ];
        let mut left_sorted = left.clone();
        left_sorted.sort();
        assert_eq!(names_in(&t.path("a")), left_sorted);
        assert_eq!(names_in(&t.path("b")), left_sorted);
    }
}
