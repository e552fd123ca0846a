//! The filesystem: a fresh root on tmpfs, built from an ordered list of mount operations.
//!
//! Parent side ([`plan`]): inspects the host (which paths exist, files or directories) and
//! produces the list of [`Op`]s, ordered so that every mount's parent is mounted first.
//!
//! Child side ([`build_root`]): runs in pid 1 of the new pid namespace, inside the new mount
//! namespace, with the capabilities of the new user namespace. Like bubblewrap it first pivots
//! onto a scratch tmpfs so the host's tree is reachable as `/oldroot` (even paths that the new
//! tree hides, such as a repo under `/tmp`), builds the new tree under `/newroot`, then pivots
//! into it and detaches the host's tree.

use crate::layers::{Step, StepError};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use serde::{Deserialize, Serialize};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One step of building the new root. Paths are absolute: sources on the host, targets in
/// the new root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Bind a host file or directory (recursively), read-only or read-write; never suid/dev.
    /// An `optional` bind whose source the sandbox's user cannot reach is skipped (a toolchain
    /// under /root when root runs a repo owned by someone else: that user could not run it
    /// outside the sandbox either).
    Bind {
        src: PathBuf,
        dst: PathBuf,
        ro: bool,
        optional: bool,
    },
    /// A symlink at `dst` to `target`, a resolved host path inside a read-only bind made at its
    /// own path (merged /usr: `/bin` -> `/usr/bin`): the same file as a bind, without a mount.
    /// Bound as [`Op::Bind`] (read-only) instead when `dst` is not on the root tmpfs.
    Symlink { target: PathBuf, dst: PathBuf },
    /// A private tmpfs.
    Tmpfs { dst: PathBuf, size: u64, mode: u32 },
    /// Copy-on-write view of `lower`: writes land on a tmpfs of `size` bytes and vanish with
    /// the sandbox; or, when `kept`, on the run's disk layer ([`scratch`]), which stage 2
    /// copies back to `lower` after the run ([`crate::layers::overlay`]); or, with `carry`
    /// (a gene's later commands), on the disk layer filled from and saved to that directory.
    Overlay {
        lower: PathBuf,
        dst: PathBuf,
        size: u64,
        #[serde(default)]
        kept: bool,
        #[serde(default)]
        carry: Option<PathBuf>,
        /// A kept layer's root in the way back: 0 the repo, 1.. a git dir outside it, each
        /// with its own upper and work dirs on the run's disk layer ([`upper_name`]).
        #[serde(default)]
        root: usize,
        /// Layers laid over `lower`, upper-most first (`--with-changes`: a kept changeset's
        /// tree).
        #[serde(default)]
        above: Vec<PathBuf>,
        /// The upper and work dirs are on the run's disk layer ([`scratch`]), which stage 2
        /// holds and watches (the repo's layer, kept, carried or not), rather than on a tmpfs
        /// of this overlay's own.
        #[serde(default)]
        disk: bool,
    },
    /// A fresh procfs for the new pid namespace.
    Proc { dst: PathBuf },
    /// A minimal /dev: null, zero, full, random, urandom, tty, shm, and pts when asked.
    Dev {
        dst: PathBuf,
        pts: bool,
        shm_size: u64,
    },
    /// A git dir (at the same path inside) shown as a view ([`crate::layers::git`]): a tmpfs
    /// of `size` bytes with its work dirs bound read-write, its work files copied (and copied
    /// back after the run), everything else bound read-only. Read-write repo modes only.
    /// `layer`: the dir lies in the kept overlay of this repo, and its work dirs are taken
    /// from there, so what git writes counts against the disk cap and is copied back with the
    /// rest.
    GitView {
        dir: PathBuf,
        size: u64,
        #[serde(default)]
        layer: Option<PathBuf>,
        /// The kept layer's root `layer` is ([`Op::Overlay`]'s `root`).
        #[serde(default)]
        root: usize,
    },
    /// `repo/rel` bound read-only onto itself, opened without following a link and bound by
    /// fd (a `.git` file, a hooks path, a `protect` entry); created as an empty directory
    /// first when `create` and missing.
    RepoRo {
        repo: PathBuf,
        rel: PathBuf,
        create: bool,
    },
}

impl Op {
    /// Where the operation mounts in the new root.
    pub fn dst(&self) -> PathBuf {
        match self {
            Op::Bind { dst, .. }
            | Op::Symlink { dst, .. }
            | Op::Tmpfs { dst, .. }
            | Op::Overlay { dst, .. }
            | Op::Proc { dst }
            | Op::Dev { dst, .. } => dst.clone(),
            Op::GitView { dir, .. } => dir.clone(),
            Op::RepoRo { repo, rel, .. } => repo.join(rel),
        }
    }
}

/// How the repo is mounted (the profile's `filesystem.repo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepoMode {
    /// Copy-on-write overlay on tmpfs; writes vanish at the end of the run.
    Overlay,
    /// Read-write (minus the `protect` paths).
    Rw,
    /// Read-only.
    Ro,
}

/// What the filesystem layer needs to know (from the profile and the host).
pub struct Input<'a> {
    pub repo: &'a Path,
    pub repo_mode: RepoMode,
    /// What the read-write mode does about git (views, pins); `None` in the other modes.
    pub git: Option<&'a crate::layers::git::Found>,
    pub system_ro: &'a [PathBuf],
    pub extra_ro: &'a [PathBuf],
    pub extra_rw: &'a [PathBuf],
    pub toolchains: &'a [PathBuf],
    /// Credential paths inside the binds, covered after them ([`crate::toolchain::Hide::op`]).
    pub hide: &'a [Op],
    pub sys: &'a [PathBuf],
    pub home: &'a Path,
    /// A kept home ([`crate::home`]), bound read-write at `home` instead of a tmpfs.
    pub home_from: Option<&'a Path>,
    /// Modes other than read-write: git dirs outside the repo (a linked worktree's common
    /// dir), shown as the repo is: read-only, or copy-on-write.
    pub git_outside: &'a [PathBuf],
    pub tmp_size: u64,
    /// `[limits] disk`: the read-write repo becomes a kept overlay of this size; the
    /// copy-on-write repo's layer takes this size too.
    pub disk: Option<u64>,
    /// A gene's carried layer for the copy-on-write repo ([`Op::Overlay`]'s `carry`).
    pub carry: Option<&'a Path>,
    /// Trees laid over host directories copy-on-write ([`Op::Overlay`]'s `above`), each with
    /// the directory it goes over.
    pub with_changes: &'a [(PathBuf, PathBuf)],
    pub dev_pts: bool,
}

/// The device nodes bound from the host into the new /dev.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The ordered mount operations, and the repo-relative paths that could not be protected
/// because they do not exist (nothing to protect there).
pub fn plan(i: &Input) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    // A dangling symlink (an /etc/resolv.conf pointing into an absent /run) is skipped too.
    let exists = |p: &Path| crate::canon::exists(p);
    // Sources are resolved here, on the host: in the child an absolute symlink such as
    // /etc/localtime -> /usr/share/zoneinfo/UTC would resolve against the scratch root.
    let real = |p: &Path| crate::canon::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let bind = |p: &Path, ro, optional| Op::Bind {
        src: real(p),
        dst: p.to_path_buf(),
        ro,
        optional,
    };
    for p in i.system_ro {
        if exists(p) {
            ops.push(bind(p, true, false));
        }
    }
    let system = ops.len();
    for p in i.extra_ro.iter().chain(i.sys) {
        if exists(p) {
            ops.push(bind(p, true, false));
        }
    }
    for p in i.toolchains {
        if exists(p) {
            ops.push(bind(p, true, true));
        }
    }
    for p in i.extra_rw {
        if !exists(p) {
            return Err(format!(
                "filesystem.extra_rw: {} does not exist",
                p.display()
            ));
        }
        ops.push(bind(p, false, false));
    }
    ops.push(Op::Tmpfs {
        dst: "/tmp".into(),
        size: i.tmp_size,
        mode: 0o1777,
    });
    if let Some(src) = i.home_from {
        ops.push(Op::Bind {
            src: src.to_path_buf(),
            dst: i.home.to_path_buf(),
            ro: false,
            optional: false,
        });
    } else if i.home != Path::new("/tmp") {
        ops.push(Op::Tmpfs {
            dst: i.home.to_path_buf(),
            size: i.tmp_size,
            mode: 0o700,
        });
    }
    let repo = i.repo.to_path_buf();
    let ro = i.repo_mode == RepoMode::Ro;
    let above = |d: &Path| -> Vec<PathBuf> {
        i.with_changes
            .iter()
            .filter(|(over, _)| over == d)
            .map(|(_, tree)| tree.clone())
            .collect()
    };
    let layered = match i.repo_mode {
        RepoMode::Overlay => Some(false),
        RepoMode::Rw if i.disk.is_some() => Some(true),
        _ => None,
    };
    match layered {
        Some(kept) => {
            let s = repo.to_string_lossy();
            if s.contains([',', ':', '\\']) {
                return Err(format!(
                    "filesystem: the repo path {s:?} contains ',', ':' or '\\', which overlayfs cannot take; {}",
                    if kept { "set [limits] disk = \"off\" in the profile" } else { "use repo = \"ro\" or \"rw\"" }
                ));
            }
            ops.push(Op::Overlay {
                lower: repo.clone(),
                dst: repo.clone(),
                size: i.disk.unwrap_or(i.tmp_size),
                kept,
                carry: if kept {
                    None
                } else {
                    i.carry.map(Path::to_path_buf)
                },
                root: 0,
                above: above(&repo),
                disk: true,
            });
        }
        None => ops.push(bind(&repo, ro, false)),
    }
    for d in i.git_outside {
        ops.push(match i.repo_mode {
            RepoMode::Overlay => Op::Overlay {
                lower: real(d),
                dst: d.clone(),
                size: i.tmp_size,
                kept: false,
                carry: None,
                root: 0,
                above: above(d),
                disk: false,
            },
            _ => bind(d, true, false),
        });
    }
    if let (false, Some(git)) = (ro, i.git) {
        let layered = layered == Some(true);
        // With a kept layer, a git dir outside the repo (a linked worktree's common dir) gets
        // one of its own: nothing of the run reaches a host path but through the way back.
        let mut outside = 0;
        for d in &git.dirs {
            let (layer, root) = match (layered, d.starts_with(&repo)) {
                (false, _) => (None, 0),
                (true, true) => (Some(repo.clone()), 0),
                (true, false) => {
                    outside += 1;
                    ops.push(Op::Overlay {
                        lower: real(d),
                        dst: d.clone(),
                        size: i.disk.unwrap_or(i.tmp_size),
                        kept: true,
                        carry: None,
                        root: outside,
                        above: Vec::new(),
                        disk: true,
                    });
                    (Some(d.clone()), outside)
                }
            };
            ops.push(Op::GitView {
                dir: d.clone(),
                size: i.tmp_size,
                layer,
                root,
            });
        }
        for (rel, create) in git
            .pins
            .iter()
            .map(|p| (p, false))
            .chain(git.create.iter().map(|p| (p, true)))
        {
            ops.push(Op::RepoRo {
                repo: repo.clone(),
                rel: rel.clone(),
                create,
            });
        }
    }
    ops.extend(i.hide.iter().cloned());
    ops.push(Op::Proc {
        dst: "/proc".into(),
    });
    ops.push(Op::Dev {
        dst: "/dev".into(),
        pts: i.dev_pts,
        shm_size: i.tmp_size,
    });
    system_links(&mut ops, system);
    // Parents before children; among equals keep the order above (later wins, as in bwrap).
    ops.sort_by_key(|op| op.dst().components().count());
    Ok(ops)
}

/// The system entries (the first `n` ops, read-only binds) that are links into a directory
/// bound read-only at its own path (merged /usr: `/bin` -> `usr/bin`; `/etc/localtime` ->
/// `/usr/share/zoneinfo/...`) become that link ([`Op::Symlink`]): the same file, without a
/// mount, which costs pid 1 a mount at start and the kernel a teardown at the end. Not when an
/// op mounts below the entry: a mount point is never reached through a link.
fn system_links(ops: &mut [Op], n: usize) {
    // Paths bound read-only at their own path, always (not a toolchain's optional bind); one
    // that a resolved, existing path lies strictly under is a directory.
    let dirs: Vec<PathBuf> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Bind {
                src,
                dst,
                ro: true,
                optional: false,
            } if src == dst => Some(dst.clone()),
            _ => None,
        })
        .collect();
    let dsts: Vec<PathBuf> = ops.iter().map(Op::dst).collect();
    for op in ops.iter_mut().take(n) {
        let Op::Bind { src, dst, .. } = op else {
            continue;
        };
        if src == dst {
            continue;
        }
        let inside = dirs.iter().any(|d| src.starts_with(d) && src != d);
        let below = dsts.iter().any(|d| d.starts_with(&*dst) && d != dst);
        if inside && !below {
            *op = Op::Symlink {
                target: src.clone(),
                dst: dst.clone(),
            };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------------

const BASE: &str = "/tmp";
const OLD: &str = "/oldroot";
const NEW: &str = "/newroot";

fn under(prefix: &str, p: &Path) -> PathBuf {
    Path::new(prefix).join(p.strip_prefix("/").unwrap_or(p))
}

fn err(step: Step) -> impl Fn(nix::Error) -> StepError {
    move |e| StepError::new(step, e as i32)
}

fn io_err(step: Step) -> impl Fn(std::io::Error) -> StepError {
    move |e| StepError::new(step, e.raw_os_error().unwrap_or(libc::EIO))
}

/// Where the run's disk layer is mounted in the scratch root, with `upper` and `work` in it.
const DISK: &str = "/ovl/disk";
/// Where the kept overlay is mounted in the scratch root (and bound from into the new root).
const MERGED: &str = "/ovl/merged";

/// The upper and work dirs of a kept layer's root on the disk layer: `upper` and `work` for
/// the repo, `upper-N` and `work-N` for the git dir outside it that is root N.
pub fn upper_name(root: usize) -> String {
    match root {
        0 => "upper".into(),
        n => format!("upper-{n}"),
    }
}

fn work_name(root: usize) -> String {
    match root {
        0 => "work".into(),
        n => format!("work-{n}"),
    }
}

/// Where a kept layer's root is mounted in the scratch root, for the git views to take their
/// work dirs from.
fn merged_path(root: usize) -> PathBuf {
    match root {
        0 => PathBuf::from(MERGED),
        n => PathBuf::from(format!("{MERGED}-{n}")),
    }
}

/// The scratch tmpfs [`build_root`] pivots onto, whose `/newroot` becomes the new root (bound
/// onto itself: mount points and links only, 1 MiB leaves room for long link targets), and,
/// for a kept overlay, the run's disk layer:
/// a tmpfs of `disk` bytes (and a file per 4 KiB) in it. Made by stage 2 before it forks
/// pid 1, in the mount namespace they share, so that stage 2 keeps the disk layer (the fd
/// returned) once pid 1's pivots have detached the scratch root, and hands it to the
/// supervisor's way back ([`crate::changes`]) when the sandbox is gone.
///
/// With `on_disk` (a large cap, [`crate::layers::disk`]), the disk layer is that host
/// directory instead, bound in: the bytes written go to disk, not to memory, and the cap is a
/// budget the supervisor watches.
pub fn scratch(
    disk: Option<u64>,
    on_disk: Option<&Path>,
) -> Result<Option<std::os::fd::OwnedFd>, StepError> {
    // Opened before the scratch tmpfs covers BASE (the dir may lie under the host's /tmp),
    // without following a link (its path is canonical), and it must be ours (stage 2 runs as
    // the sandbox's user here, who owns it).
    let on_disk = match on_disk {
        Some(dir) => {
            let t = crate::hostfs::Tree::open(dir).map_err(io_err(Step::MountOverlay))?;
            let st = crate::fsops::fstat(t.raw_fd()).map_err(io_err(Step::MountOverlay))?;
            if st.st_uid != nix::unistd::geteuid().as_raw() || st.st_mode & 0o077 != 0 {
                return Err(StepError::new(Step::MountOverlay, libc::EPERM));
            }
            Some(t)
        }
        None => None,
    };
    mount(
        Some("tmpfs"),
        BASE,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=1m"),
    )
    .map_err(err(Step::MountRoot))?;
    for d in ["oldroot", "newroot", "ovl"] {
        std::fs::create_dir(Path::new(BASE).join(d)).map_err(io_err(Step::MountRoot))?;
    }
    let Some(size) = disk else {
        return Ok(None);
    };
    let at = under(BASE, Path::new(DISK));
    std::fs::create_dir(&at).map_err(io_err(Step::MountOverlay))?;
    if let Some(dir) = on_disk {
        // `upper` and `work` are there already (made by the supervisor, for this user)
        let none: Option<&str> = None;
        let src = format!("/proc/self/fd/{}", dir.raw_fd());
        mount(Some(src.as_str()), &at, none, MsFlags::MS_BIND, none)
            .map_err(err(Step::MountOverlay))?;
        let dir = std::fs::File::open(&at).map_err(io_err(Step::MountOverlay))?;
        return Ok(Some(dir.into()));
    }
    let opts = format!(
        "size={size},nr_inodes={},mode=0755",
        (size / 4096).max(1024)
    );
    mount(
        Some("tmpfs"),
        &at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(opts.as_str()),
    )
    .map_err(err(Step::MountOverlay))?;
    for d in ["upper", "work"] {
        std::fs::create_dir(at.join(d)).map_err(io_err(Step::MountOverlay))?;
    }
    let dir = std::fs::File::open(&at).map_err(io_err(Step::MountOverlay))?;
    Ok(Some(dir.into()))
}

/// Build the new root from `ops` and switch into it. Runs in pid 1 of the sandbox, in the
/// mount namespace stage 2 made (`/` private, so nothing here reaches the host's tree) and
/// prepared ([`scratch`]).
///
/// In two parts, so that one `mount_setattr` makes most of it read-only: first what is
/// read-only and has nothing mounted above it (the system binds, the links of
/// [`Op::Symlink`]), with the mount points of the rest that lie on the root tmpfs; then the
/// root tmpfs and those binds are made read-only, nosuid and nodev at once, recursively; then
/// the rest in order (each read-only bind among it made so on its own).
pub fn build_root(ops: &[Op], cwd: &Path) -> Result<(), StepError> {
    let none: Option<&str> = None;
    // 1. Onto the scratch tmpfs, so the host's tree stays reachable under /oldroot.
    nix::unistd::pivot_root(BASE, &Path::new(BASE).join("oldroot"))
        .map_err(err(Step::PivotRoot))?;
    nix::unistd::chdir("/").map_err(err(Step::Chdir))?;

    // 2. The new root itself, for mount points and links: its directory on the scratch tmpfs
    //    bound onto itself, as bubblewrap does (a mount of its own, sealed apart from the
    //    scratch root; one tmpfs less to make and to tear down).
    mount(Some(NEW), NEW, none, MsFlags::MS_BIND, none).map_err(err(Step::MountRoot))?;
    let mut b = Build::new()?;
    b.writable = ops
        .iter()
        .filter(|op| matches!(op, Op::Bind { ro: false, .. } | Op::Overlay { .. }))
        .map(Op::dst)
        .collect();
    let dsts: Vec<PathBuf> = ops.iter().map(Op::dst).collect();
    let places = Places::new(ops, &dsts);
    // A link with a mount planned below it (added after `plan`) is bound instead: a mount
    // point is never reached through a link.
    let ops: Vec<Op> = ops
        .iter()
        .zip(&dsts)
        .map(|(op, at)| match op {
            Op::Symlink { target, dst } if places.below.contains(at.as_path()) => Op::Bind {
                src: target.clone(),
                dst: dst.clone(),
                ro: true,
                optional: false,
            },
            op => op.clone(),
        })
        .collect();
    let ops = ops.as_slice();
    let first = first_part(ops, &dsts, &places);
    for (n, op) in ops.iter().enumerate().filter(|(n, _)| first[*n]) {
        apply(op, n, &mut b, true).map_err(|e| e.at(n))?;
    }
    for (n, op) in ops.iter().enumerate().filter(|(n, _)| !first[*n]) {
        if !places.above(&dsts[n]) {
            early_mount_point(op).map_err(|e| e.at(n))?;
        }
    }
    let sealed = b.seal()?;
    for (n, op) in ops.iter().enumerate().filter(|(n, _)| !first[*n]) {
        apply(op, n, &mut b, false).map_err(|e| e.at(n))?;
    }
    drop(b);

    // 3. Into the new root; the scratch tmpfs and the host's tree are detached.
    nix::unistd::chdir(NEW).map_err(err(Step::Chdir))?;
    nix::unistd::pivot_root(".", ".").map_err(err(Step::PivotRoot))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(err(Step::PivotRoot))?;
    nix::unistd::chdir("/").map_err(err(Step::Chdir))?;
    // The root tmpfs: nothing may be created or changed there. Already so when sealed.
    if !sealed {
        mount(
            none,
            "/",
            none,
            MsFlags::MS_REMOUNT
                | MsFlags::MS_BIND
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV,
            none,
        )
        .map_err(err(Step::MountRemountRo))?;
    }
    nix::unistd::chdir(cwd).map_err(err(Step::Chdir))?;
    Ok(())
}

/// Where the ops of [`build_root`] mount, for the questions it asks of each (a hash lookup per
/// ancestor, not a comparison with every other op).
struct Places<'a> {
    /// Each place: how many ops mount there, and whether all of them are read-only.
    at: std::collections::HashMap<&'a Path, (usize, bool)>,
    /// Every place with an op strictly below it.
    below: std::collections::HashSet<&'a Path>,
}

impl<'a> Places<'a> {
    fn new(ops: &[Op], dsts: &'a [PathBuf]) -> Places<'a> {
        let mut at = std::collections::HashMap::new();
        let mut below = std::collections::HashSet::new();
        for (op, d) in ops.iter().zip(dsts) {
            let e = at.entry(d.as_path()).or_insert((0, true));
            e.0 += 1;
            e.1 &= read_only(op);
            below.extend(d.ancestors().skip(1));
        }
        Places { at, below }
    }

    /// Whether an op mounts strictly above `dst` (at one of its ancestors).
    fn above(&self, dst: &Path) -> bool {
        dst.ancestors().skip(1).any(|a| self.at.contains_key(a))
    }
}

/// A read-only bind or a link: what [`Build::seal`] makes read-only with the root.
fn read_only(op: &Op) -> bool {
    matches!(op, Op::Bind { ro: true, .. } | Op::Symlink { .. })
}

/// Which ops go in the first part of [`build_root`]: read-only ones (a read-only bind, a link)
/// with no other op above their place, nor at it but read-only ones.
fn first_part(ops: &[Op], dsts: &[PathBuf], places: &Places) -> Vec<bool> {
    ops.iter()
        .zip(dsts)
        .map(|(op, d)| {
            read_only(op)
                && !places.above(d)
                && places
                    .at
                    .get(d.as_path())
                    .is_some_and(|&(_, all_ro)| all_ro)
        })
        .collect()
}

/// The mount point of an op of the second part whose place is on the root tmpfs, made before
/// that tmpfs is read-only.
fn early_mount_point(op: &Op) -> Result<(), StepError> {
    match op {
        Op::Bind {
            src, dst, optional, ..
        } => {
            let src = under(OLD, src);
            if *optional && std::fs::metadata(&src).is_err() {
                return Ok(());
            }
            mount_point(&under(NEW, dst), !src.is_dir(), Step::MountBind)
        }
        // It makes its own place, or is bound where another op made one.
        Op::Symlink { .. } => Ok(()),
        Op::RepoRo { .. } => Ok(()),
        Op::Tmpfs { dst, .. } => mount_point(&under(NEW, dst), false, Step::MountTmpfs),
        Op::Overlay { dst, .. } => mount_point(&under(NEW, dst), false, Step::MountOverlay),
        Op::Proc { dst } => mount_point(&under(NEW, dst), false, Step::MountProc),
        Op::Dev { dst, .. } => mount_point(&under(NEW, dst), false, Step::MountDev),
        Op::GitView { dir, .. } => mount_point(&under(NEW, dir), false, Step::GitView),
    }
}

/// What [`build_root`] keeps between ops.
struct Build {
    /// The device of the new root's tmpfs: links are made only on it.
    dev: u64,
    /// Binds of the first part, made read-only by [`Build::seal`].
    unsealed: Vec<PathBuf>,
    /// The directory of the new root the last link went into, opened, and whether it is on
    /// the root tmpfs.
    dir: Option<(PathBuf, std::os::fd::OwnedFd, bool)>,
    /// Where read-write binds and overlays go (a kept home, a read-write repo): what the
    /// command, or its last run, may have filled with links.
    writable: Vec<PathBuf>,
}

impl Build {
    fn new() -> Result<Build, StepError> {
        let root = std::fs::metadata(NEW).map_err(io_err(Step::MountRoot))?;
        Ok(Build {
            dev: std::os::unix::fs::MetadataExt::dev(&root),
            unsealed: Vec::new(),
            dir: None,
            writable: Vec::new(),
        })
    }

    /// The deepest writable place strictly above `dst`, and `dst` relative to it.
    fn beneath_writable(&self, dst: &Path) -> Option<(PathBuf, PathBuf)> {
        self.writable
            .iter()
            .filter(|w| dst != w.as_path())
            .filter_map(|w| Some((w.clone(), dst.strip_prefix(w).ok()?.to_path_buf())))
            .max_by_key(|(w, _)| w.components().count())
    }

    /// The root tmpfs and the binds of the first part: read-only, nosuid, nodev, with every
    /// mount below them, in one call. Whether the root tmpfs is read-only now (not on kernels
    /// before 5.12, where each bind is remounted instead and the root at the end).
    fn seal(&mut self) -> Result<bool, StepError> {
        use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
        self.dir = None;
        let attr = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        match crate::sys::mount_setattr_recursive(Path::new(NEW), attr) {
            Ok(()) => Ok(true),
            Err(libc::ENOSYS) => {
                for dst in &self.unsealed {
                    remount(dst, true)?;
                }
                Ok(false)
            }
            Err(e) => Err(StepError::new(Step::MountRemountRo, e)),
        }
    }

    /// The directory `parent` (a path in the new root) opened, made when missing; `None` when
    /// it cannot be made or is not on the root tmpfs.
    fn dir_on_root(&mut self, parent: &Path) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        if self.dir.as_ref().map(|d| d.0.as_path()) != Some(parent) {
            self.dir = None;
            let at = under(NEW, parent);
            std::fs::create_dir_all(&at).ok()?;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(&at)
                .ok()?;
            let on_root = f.metadata().ok()?.dev() == self.dev;
            self.dir = Some((parent.to_path_buf(), f.into(), on_root));
        }
        match &self.dir {
            Some((_, fd, true)) => Some(fd.as_fd()),
            _ => None,
        }
    }
}

/// [`Op::Symlink`]: the link `dst` (in the new root) to `target`. `Ok(false)`, with nothing
/// made, when `dst` cannot be made on the root tmpfs.
fn link_in(target: &Path, dst: &Path, b: &mut Build) -> Result<bool, StepError> {
    use std::os::fd::AsRawFd;
    let (Some(parent), Some(name)) = (dst.parent(), dst.file_name()) else {
        return Ok(false);
    };
    let (Ok(name), Ok(target)) = (
        std::ffi::CString::new(name.as_bytes()),
        std::ffi::CString::new(target.as_os_str().as_bytes()),
    ) else {
        return Ok(false);
    };
    let Some(dir) = b.dir_on_root(parent) else {
        return Ok(false);
    };
    // SAFETY: symlinkat in a directory fd with NUL-terminated strings.
    Ok(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) } == 0)
}

/// Create the mount point for `dst` in the new root: a directory, or an empty file when the
/// source is a file. Parents that already exist (inside a read-only bind) are left alone.
fn mount_point(dst: &Path, file: bool, step: Step) -> Result<(), StepError> {
    // Made directly (one call), its parents only when missing; something already there is
    // left as it is (EEXIST comes before EROFS).
    let make = || match file {
        // An empty file, in one call and with no file opened (nor closed: a close defers its
        // release to the task's return); a link already there is EEXIST, not followed.
        true => {
            let c = std::ffi::CString::new(dst.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: mknod of a regular file at a NUL-terminated path.
            match unsafe { libc::mknod(c.as_ptr(), libc::S_IFREG | 0o644, 0) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }
        false => std::fs::create_dir(dst),
    };
    let exists = |e: &std::io::Error| e.kind() == std::io::ErrorKind::AlreadyExists;
    match make() {
        Ok(()) => Ok(()),
        Err(e) if exists(&e) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent).map_err(io_err(step))?;
            }
            match make() {
                Err(e) if !exists(&e) => Err(io_err(step)(e)),
                _ => Ok(()),
            }
        }
        Err(e) => Err(io_err(step)(e)),
    }
}

/// One op. `first`: in the first part of [`build_root`], whose binds [`Build::seal`] makes
/// read-only later, all at once.
fn apply(op: &Op, n: usize, b: &mut Build, first: bool) -> Result<(), StepError> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let bind_ro = |b: &mut Build, src: &Path, dst: &Path, ro: bool| -> Result<(), StepError> {
        if let Some((root, rel)) = b.beneath_writable(dst) {
            return bind_beneath(src, &root, &rel, ro);
        }
        let src = under(OLD, src);
        let dst = under(NEW, dst);
        mount_point(&dst, !src.is_dir(), Step::MountBind)?;
        if first && ro {
            mount_rbind(&src, &dst)?;
            b.unsealed.push(dst);
            Ok(())
        } else {
            bind(&src, &dst, ro)
        }
    };
    match op {
        Op::Bind {
            src,
            dst,
            ro,
            optional,
        } => {
            if *optional && std::fs::metadata(under(OLD, src)).is_err() {
                return Ok(());
            }
            bind_ro(b, src, dst, *ro)
        }
        Op::Symlink { target, dst } => match link_in(target, dst, b)? {
            true => Ok(()),
            false => bind_ro(b, target, dst, true),
        },
        Op::Tmpfs { dst, size, mode } => {
            let dst = under(NEW, dst);
            mount_point(&dst, false, Step::MountTmpfs)?;
            let opts = format!("size={size},mode={mode:o}");
            mount(
                Some("tmpfs"),
                &dst,
                Some("tmpfs"),
                nosuid,
                Some(opts.as_str()),
            )
            .map_err(err(Step::MountTmpfs))
        }
        Op::Overlay {
            lower,
            dst,
            size,
            kept,
            carry: _,
            root,
            above,
            disk,
        } => {
            // upper and work on their own sized tmpfs, outside the new tree (kept or carried:
            // the run's disk layer, made by `scratch`)
            let scratch = if *disk {
                let disk = PathBuf::from(DISK);
                if *root > 0 {
                    for d in [upper_name(*root), work_name(*root)] {
                        std::fs::create_dir(disk.join(d)).map_err(io_err(Step::MountOverlay))?;
                    }
                }
                disk
            } else {
                let scratch = Path::new("/ovl").join(n.to_string());
                std::fs::create_dir(&scratch).map_err(io_err(Step::MountOverlay))?;
                let opts = format!("size={size},mode=0755");
                mount(
                    Some("tmpfs"),
                    &scratch,
                    Some("tmpfs"),
                    nosuid,
                    Some(opts.as_str()),
                )
                .map_err(err(Step::MountOverlay))?;
                for d in ["upper", "work"] {
                    std::fs::create_dir(scratch.join(d)).map_err(io_err(Step::MountOverlay))?;
                }
                scratch
            };
            // the upper dir's root must look like the lower one (owner, mode) or git and
            // friends see a different directory
            let (upper, work) = match *disk {
                true => (upper_name(*root), work_name(*root)),
                false => ("upper".to_string(), "work".to_string()),
            };
            copy_owner_mode(&under(OLD, lower), &scratch.join(&upper))?;
            let dst = under(NEW, dst);
            mount_point(&dst, false, Step::MountOverlay)?;
            // kept: mounted in the scratch root first, where the git views take their work
            // dirs from (in the new root, views of outer git dirs cover inner ones)
            let at = if *kept {
                let at = merged_path(*root);
                std::fs::create_dir(&at).map_err(io_err(Step::MountOverlay))?;
                at
            } else {
                dst.clone()
            };
            let lowers: Vec<String> = above
                .iter()
                .chain([lower])
                .map(|l| under(OLD, l).display().to_string())
                .collect();
            let base = format!(
                "lowerdir={},upperdir={},workdir={}",
                lowers.join(":"),
                scratch.join(&upper).display(),
                scratch.join(&work).display()
            );
            // Inside a user namespace overlayfs keeps its metadata in user.* xattrs.
            let with_userxattr = format!("{base},userxattr");
            mount(
                Some("overlay"),
                &at,
                Some("overlay"),
                nosuid,
                Some(with_userxattr.as_str()),
            )
            .or_else(|_| {
                mount(
                    Some("overlay"),
                    &at,
                    Some("overlay"),
                    nosuid,
                    Some(base.as_str()),
                )
            })
            .map_err(err(Step::MountOverlay))?;
            if *kept {
                bind(&at, &dst, false)?;
            }
            Ok(())
        }
        Op::Proc { dst } => build_proc(&under(NEW, dst)),
        Op::GitView {
            dir,
            size,
            layer,
            root,
        } => git_view(dir, *size, layer.as_deref(), *root, n),
        Op::RepoRo { repo, rel, create } => repo_ro(repo, rel, *create),
        Op::Dev { dst, pts, shm_size } => build_dev(&under(NEW, dst), *pts, *shm_size),
    }
}

/// A git dir's view: built on its own sized tmpfs in the scratch root (which nothing else
/// sees), then moved, by fd, onto the git dir's place in the new root. Its source is the host's
/// git dir, or, for a dir in the kept overlay of the repo `layer`, the same dir in the overlay
/// as mounted in the scratch root, where no other view covers a part of it.
fn git_view(
    dir: &Path,
    size: u64,
    layer: Option<&Path>,
    root: usize,
    n: usize,
) -> Result<(), StepError> {
    let e = |errno: i32| StepError::new(Step::GitView, errno);
    let scratch = Path::new("/ovl").join(n.to_string());
    std::fs::create_dir(&scratch).map_err(io_err(Step::GitView))?;
    let opts = format!("size={size},mode=0755");
    mount(
        Some("tmpfs"),
        &scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(opts.as_str()),
    )
    .map_err(err(Step::GitView))?;
    let src = match layer.map(|repo| dir.strip_prefix(repo)) {
        Some(Ok(rel)) => merged_path(root).join(rel),
        Some(Err(_)) => return Err(e(libc::EINVAL)),
        None => under(OLD, dir),
    };
    crate::layers::git::build_view(&src, &scratch, size).map_err(e)?;
    let dst = under(NEW, dir);
    mount_point(&dst, false, Step::GitView)?;
    let target = crate::hostfs::Dir::open_no_links(&dst).map_err(io_err(Step::GitView))?;
    let from = crate::hostfs::Dir::open_no_links(&scratch).map_err(io_err(Step::GitView))?;
    crate::sys::move_mount_fd(from.fd().as_raw_fd(), target.fd().as_raw_fd()).map_err(e)
}

/// `repo/rel` read-only onto itself, by fd, no link followed (created empty when asked).
fn repo_ro(repo: &Path, rel: &Path, create: bool) -> Result<(), StepError> {
    let e = |errno: i32| StepError::new(Step::MountBind, errno);
    let root =
        crate::hostfs::Dir::open_no_links(&under(NEW, repo)).map_err(io_err(Step::MountBind))?;
    let open = || root.open_at(rel, libc::O_PATH | libc::O_NOFOLLOW, 0);
    let fd = match open() {
        Err(x) if create && x.raw_os_error() == Some(libc::ENOENT) => {
            let mut at = PathBuf::new();
            for c in rel.components() {
                at.push(c);
                match root.kind(&at) {
                    Ok(Some(crate::hostfs::Kind::Dir)) => continue,
                    Ok(None) => {}
                    _ => return Err(e(libc::ELOOP)),
                }
                let parent = root
                    .open_at(
                        at.parent().unwrap_or(Path::new("")),
                        libc::O_PATH | libc::O_DIRECTORY,
                        0,
                    )
                    .map_err(io_err(Step::MountBind))?;
                let name = std::ffi::CString::new(at.file_name().unwrap_or_default().as_bytes())
                    .map_err(|_| e(libc::EINVAL))?;
                // SAFETY: mkdirat in a directory fd opened without links, a plain name.
                if unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755) } != 0 {
                    return Err(StepError::last(Step::MountBind));
                }
            }
            open().map_err(io_err(Step::MountBind))?
        }
        r => r.map_err(io_err(Step::MountBind))?,
    };
    // A link is never bound (nor followed): only a directory or a regular file.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of our fd into a zeroed stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(StepError::last(Step::MountBind));
    }
    if !matches!(st.st_mode & libc::S_IFMT, libc::S_IFDIR | libc::S_IFREG) {
        return Err(e(libc::ELOOP));
    }
    crate::layers::git::bind_fd(&fd, &fd, true).map_err(e)
}

fn copy_owner_mode(from: &Path, to: &Path) -> Result<(), StepError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = std::fs::metadata(from).map_err(io_err(Step::MountOverlay))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(m.mode() & 0o7777))
        .map_err(io_err(Step::MountOverlay))?;
    // Fails harmlessly (EINVAL/EPERM) when the owner is not mapped in the namespace.
    let _ = std::os::unix::fs::chown(to, Some(m.uid()), Some(m.gid()));
    Ok(())
}

/// A bind below a writable place (`root`): its mount point made and mounted onto by fd,
/// never reached through a link the command left there (see
/// [`crate::hostfs::mount_point_beneath`]); the source, a host path, is opened as `mount`
/// would.
fn bind_beneath(src: &Path, root: &Path, rel: &Path, ro: bool) -> Result<(), StepError> {
    use std::os::unix::fs::OpenOptionsExt;
    let src = under(OLD, src);
    let from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(&src)
        .map_err(io_err(Step::MountBind))?;
    let target = crate::hostfs::mount_point_beneath(
        &under(NEW, root),
        rel,
        !from.metadata().map_err(io_err(Step::MountBind))?.is_dir(),
    )
    .map_err(io_err(Step::MountBind))?;
    crate::layers::git::bind_fd(&from.into(), &target, ro)
        .map_err(|e| StepError::new(Step::MountBind, e))
}

/// Recursive bind, as the source is (see [`bind`]).
fn mount_rbind(src: &Path, dst: &Path) -> Result<(), StepError> {
    let none: Option<&str> = None;
    mount(
        Some(src),
        dst,
        none,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        none,
    )
    .map_err(err(Step::MountBind))
}

/// Recursive bind, then read-only (recursively) when asked, never suid or device nodes.
fn bind(src: &Path, dst: &Path, ro: bool) -> Result<(), StepError> {
    mount_rbind(src, dst)?;
    seal_one(dst, ro)
}

/// The bind at `dst` and every mount below it: nosuid, nodev, and read-only when asked.
fn seal_one(dst: &Path, ro: bool) -> Result<(), StepError> {
    let mut attr = crate::sys::MOUNT_ATTR_NOSUID | crate::sys::MOUNT_ATTR_NODEV;
    if ro {
        attr |= crate::sys::MOUNT_ATTR_RDONLY;
    }
    match crate::sys::mount_setattr_recursive(dst, attr) {
        Ok(()) => Ok(()),
        Err(libc::ENOSYS) => remount(dst, ro),
        Err(e) => Err(StepError::new(Step::MountRemountRo, e)),
    }
}

/// Kernels before 5.12 (no mount_setattr): remount the top mount at `dst` nosuid, nodev, and
/// read-only when asked. Keep the flags the kernel locked (a user namespace may not clear
/// them) and add ours.
fn remount(dst: &Path, ro: bool) -> Result<(), StepError> {
    let none: Option<&str> = None;
    let locked =
        crate::sys::mount_flags(dst).map_err(|e| StepError::new(Step::MountRemountRo, e))?;
    let mut flags =
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | locked;
    if ro {
        flags |= MsFlags::MS_RDONLY;
    }
    mount(none, dst, none, flags, none).map_err(err(Step::MountRemountRo))
}

/// Parts of procfs that reach the kernel as a whole, not this pid namespace: read-only, as
/// bubblewrap does. A workload that is uid 0 (a root-owned repo run as root) passes the
/// permission checks of most sysctls, capabilities or not (`kernel.core_pattern`!).
pub const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus"];

/// Files of procfs that describe the whole kernel and that only uid 0 may read (a workload that
/// is uid 0 inside passes that check without any capability): hidden behind `/dev/null`, as
/// container runtimes do (runc's masked paths). Directories among them get an empty read-only
/// tmpfs.
pub const PROC_MASKED: &[&str] = &[
    "kcore",
    "kpageflags",
    "kpagecount",
    "kpagecgroup",
    "slabinfo",
    "vmallocinfo",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "config.gz",
    "kallsyms",
    "modules",
    "pagetypeinfo",
    "acpi",
    "scsi",
    "asound",
];

/// The directories among [`PROC_MASKED`].
const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi", "asound"];

fn build_proc(dst: &Path) -> Result<(), StepError> {
    mount_point(dst, false, Step::MountProc)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), dst, Some("proc"), flags, None::<&str>).map_err(err(Step::MountProc))?;
    // Each entry is mounted over as it is, without a stat first: an entry this kernel lacks
    // fails the mount's own lookup (ENOENT) and is skipped.
    for name in PROC_READ_ONLY {
        let p = dst.join(name);
        match mount_rbind(&p, &p) {
            Err(e) if e.errno == libc::ENOENT => continue,
            r => r?,
        }
        seal_one(&p, true)?;
    }
    let null = Path::new(OLD).join("dev/null");
    for name in PROC_MASKED {
        let p = dst.join(name);
        // A directory gets the empty tmpfs, a file /dev/null; an entry of the other kind than
        // expected fails with ENOTDIR and gets the other.
        let dir = PROC_MASKED_DIRS.contains(name);
        match mask(&p, dir, &null) {
            Ok(()) | Err(nix::Error::ENOENT) => {}
            Err(nix::Error::ENOTDIR) => mask(&p, !dir, &null).map_err(err(Step::MountProc))?,
            Err(e) => return Err(err(Step::MountProc)(e)),
        }
    }
    Ok(())
}

/// A procfs entry hidden: a directory behind an empty read-only tmpfs, a file behind
/// `/dev/null` (`null`).
fn mask(p: &Path, dir: bool, null: &Path) -> nix::Result<()> {
    let none = None::<&str>;
    if dir {
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount(
            Some("tmpfs"),
            p,
            Some("tmpfs"),
            flags | MsFlags::MS_RDONLY,
            Some("size=0,mode=0555"),
        )
    } else {
        mount(Some(null), p, none, MsFlags::MS_BIND, none)
    }
}

fn build_dev(dev: &Path, pts: bool, shm_size: u64) -> Result<(), StepError> {
    let nosuid = MsFlags::MS_NOSUID;
    mount_point(dev, false, Step::MountDev)?;
    mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        nosuid | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )
    .map_err(err(Step::MountDev))?;
    for name in DEVICES {
        let host = Path::new(OLD).join("dev").join(name);
        let node = dev.join(name);
        mount_point(&node, true, Step::MountDev)?;
        let none: Option<&str> = None;
        // No stat first: a node the host lacks fails the bind (ENOENT), and its mount point
        // goes again.
        match mount(Some(&host), &node, none, MsFlags::MS_BIND, none) {
            Err(nix::Error::ENOENT) => {
                std::fs::remove_file(&node).map_err(io_err(Step::MountDev))?
            }
            r => r.map_err(err(Step::MountDev))?,
        }
    }
    let link = |target: &str, name: &str| {
        std::os::unix::fs::symlink(target, dev.join(name)).map_err(io_err(Step::MountDev))
    };
    link("/proc/self/fd", "fd")?;
    link("/proc/self/fd/0", "stdin")?;
    link("/proc/self/fd/1", "stdout")?;
    link("/proc/self/fd/2", "stderr")?;
    let shm = dev.join("shm");
    mount_point(&shm, false, Step::MountDev)?;
    let opts = format!("size={shm_size},mode=1777");
    mount(
        Some("tmpfs"),
        &shm,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(opts.as_str()),
    )
    .map_err(err(Step::MountDev))?;
    if pts {
        let p = dev.join("pts");
        mount_point(&p, false, Step::MountDev)?;
        mount(
            Some("devpts"),
            &p,
            Some("devpts"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("newinstance,ptmxmode=0666,mode=620"),
        )
        .map_err(err(Step::MountDev))?;
        link("pts/ptmx", "ptmx")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(repo: &'a Path, mode: RepoMode, sys: &'a [PathBuf]) -> Input<'a> {
        Input {
            repo,
            repo_mode: mode,
            git: None,
            system_ro: sys,
            extra_ro: &[],
            extra_rw: &[],
            toolchains: &[],
            hide: &[],
            sys: &[],
            home: Path::new("/home/u"),
            home_from: None,
            git_outside: &[],
            tmp_size: 1 << 20,
            disk: None,
            carry: None,
            with_changes: &[],
            dev_pts: false,
        }
    }

    #[test]
    fn parents_are_mounted_before_children() {
        let sys = vec![
            PathBuf::from("/usr"),
            PathBuf::from("/etc/passwd"),
            PathBuf::from("/nonexistent-x"),
        ];
        // a repo under /tmp must come after the /tmp tmpfs, or the tmpfs would hide it
        let repo = Path::new("/tmp/work/repo");
        let ops = plan(&input(repo, RepoMode::Rw, &sys)).unwrap();
        let pos = |d: &str| ops.iter().position(|o| o.dst() == Path::new(d)).unwrap();
        assert!(pos("/tmp") < pos("/tmp/work/repo"));
        assert!(pos("/home/u") < ops.len());
        assert!(
            !ops.iter().any(|o| o.dst() == Path::new("/nonexistent-x")),
            "missing paths are skipped"
        );
        assert!(matches!(ops[pos("/usr")], Op::Bind { ro: true, .. }));
        assert!(matches!(
            ops[pos("/tmp/work/repo")],
            Op::Bind { ro: false, .. }
        ));
        let mut rw = input(repo, RepoMode::Rw, &sys);
        rw.disk = Some(8 << 20);
        let kept = plan(&rw).unwrap();
        assert!(kept.iter().any(|o| matches!(
            o,
            Op::Overlay { kept: true, size, .. } if *size == 8 << 20
        )));
        assert!(!kept
            .iter()
            .any(|o| matches!(o, Op::Bind { dst, .. } if dst == repo)));
        let ov = plan(&input(repo, RepoMode::Overlay, &sys)).unwrap();
        assert!(ov.iter().any(|o| matches!(o, Op::Overlay { .. })));
        assert!(plan(&input(Path::new("/a,b"), RepoMode::Overlay, &sys)).is_err());
    }

    #[test]
    fn links_into_a_read_only_dir_become_links() {
        let base = std::env::temp_dir().join(format!("sbx-mounts-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("usr/bin/sub/inner")).unwrap();
        std::fs::write(base.join("usr/bin/file"), "x").unwrap();
        std::os::unix::fs::symlink("usr/bin", base.join("bin")).unwrap();
        std::os::unix::fs::symlink("usr/bin/file", base.join("file")).unwrap();
        std::os::unix::fs::symlink("usr/bin/sub", base.join("sub")).unwrap();
        std::os::unix::fs::symlink("/nonexistent-sbx", base.join("away")).unwrap();
        let usr = base.join("usr");
        let link = |n: &str| base.join(n);
        let sys = vec![
            usr.clone(),
            link("bin"),
            link("file"),
            link("sub"),
            link("away"),
        ];
        // something is mounted below `sub`: it stays a bind
        let extra = vec![base.join("sub/inner")];
        let mut i = input(Path::new("/tmp/work/repo"), RepoMode::Rw, &sys);
        i.extra_ro = &extra;
        let ops = plan(&i).unwrap();
        let find = |d: &Path| ops.iter().find(|o| o.dst() == d).cloned();
        assert_eq!(
            find(&link("bin")),
            Some(Op::Symlink {
                target: usr.join("bin"),
                dst: link("bin")
            })
        );
        assert!(
            matches!(find(&link("file")), Some(Op::Symlink { target, .. }) if target == usr.join("bin/file"))
        );
        assert!(matches!(
            find(&link("sub")),
            Some(Op::Bind { ro: true, .. })
        ));
        assert!(find(&link("away")).is_none(), "a dangling link is skipped");
        assert!(matches!(find(&usr), Some(Op::Bind { ro: true, .. })));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn the_first_part_is_read_only_and_has_nothing_above_it() {
        let bind = |d: &str, ro| Op::Bind {
            src: d.into(),
            dst: d.into(),
            ro,
            optional: false,
        };
        let ops = vec![
            bind("/usr", true),
            Op::Symlink {
                target: "/usr/bin".into(),
                dst: "/bin".into(),
            },
            Op::Tmpfs {
                dst: "/tmp".into(),
                size: 1,
                mode: 0o1777,
            },
            bind("/data", false),
            bind("/data", true),
            bind("/etc/ssl/certs", true),
            bind("/tmp/ro", true),
            bind("/usr/share/x", true),
        ];
        let dsts: Vec<PathBuf> = ops.iter().map(Op::dst).collect();
        assert_eq!(
            first_part(&ops, &dsts, &Places::new(&ops, &dsts)),
            vec![true, true, false, false, false, true, false, false]
        );
    }
}
