//! The filesystem classifier: is a path the command failed on (or looked up, with
//! `--observe`) a refusal the sandbox caused, and of which sort? Judged against the plan's
//! view (its mount operations) and its landlock rules, and against the host, where the path
//! is looked at without following a link or triggering an automount.
//!
//! - `hidden`: not in the sandbox's view, but on the host: `[filesystem] extra_ro` (or
//!   `extra_rw` for a write) of that very path.
//! - `read_only`: in the view on a read-only bind, written or created: `extra_rw`.
//! - `landlock`: in the view, outside what landlock gives for that access.
//! - `never`: the host boundary keeps it out whatever the profile says (a home itself, its
//!   credentials, as [`crate::toolchain::classify`] refuses them for every bind; a socket or
//!   device of the host; a file the host keeps private; a system directory written; git's
//!   protected configuration).
//!
//! A path that is not on the host either is no refusal: it fails the same way outside.

use super::{Access, Kind, Patch, PathSeen, Refusal};
use crate::layers::landlock::Spec;
use crate::layers::mounts::Op;
use std::path::{Path, PathBuf};

/// What the host has at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostEntry {
    /// A regular file or a directory (else a socket, device, fifo or link).
    pub plain: bool,
    /// Others may read it (mode `o+r`): the host does not keep it private.
    pub world_readable: bool,
}

/// The sandbox's view, from the plan.
pub struct View<'a> {
    /// `false`: no new root, the command saw the host's tree (landlock alone confines it).
    pub namespaces: bool,
    /// The command shared the host's network namespace (`--net host`, or no namespaces):
    /// the host's abstract unix sockets were in its reach but for landlock's scope.
    pub host_netns: bool,
    pub mounts: &'a [Op],
    pub landlock: Option<&'a Spec>,
    /// Every home directory on the host (the caller's, root's, the users').
    pub homes: &'a [PathBuf],
    /// The repo, as the sandbox sees it.
    pub repo: &'a Path,
}

/// System directories: shared with the host read-only, never written by a sandbox.
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/boot", "/proc",
    "/sys", "/dev", "/run",
];

/// The sandbox's own kernel filesystems: what the command sees there is not the host's.
const OWN: &[&str] = &["/proc", "/sys", "/dev"];

/// Classify one path seen. `host` looks a path up on the host (`None`: nothing there, or it
/// cannot be looked at). Pure but for `host`.
pub fn classify(
    view: &View,
    seen: &PathSeen,
    host: &dyn Fn(&Path) -> Option<HostEntry>,
) -> Option<Refusal> {
    if seen.path.as_os_str().as_encoded_bytes().starts_with(b"@") {
        // an abstract name: only a connect can be refused (by landlock's scope)
        return match seen.access {
            Access::Socket => abstract_socket(view, seen, host),
            _ => None,
        };
    }
    if !seen.path.is_absolute() || matches!(seen.errno, Some(libc::EMFILE | libc::EFBIG)) {
        return None;
    }
    let ioctl;
    let seen = match device_ioctl(view, seen) {
        Some(s) => {
            ioctl = s;
            &ioctl
        }
        None => seen,
    };
    // A shell's `cannot create` names an existing file it opened to overwrite: a write of it.
    let overwrite;
    let seen = match seen.access == Access::Create
        && seen.errno != Some(libc::EROFS)
        && host(&seen.path).is_some_and(|e| e.plain)
    {
        true => {
            overwrite = PathSeen {
                access: Access::Write,
                ..seen.clone()
            };
            &overwrite
        }
        false => seen,
    };
    let path = &seen.path;
    // Binding a unix socket creates its file: judged, like a create, by the directory it
    // goes in.
    let creates = matches!(seen.access, Access::Create | Access::Bind);
    // What must exist on the host for this to be a refusal: the path, or for a create, the
    // directory it goes in.
    let probe: &Path = match creates {
        true => path.parent()?,
        false => path,
    };
    let op = if view.namespaces {
        covering(view.mounts, path)
    } else {
        None
    };
    if view.namespaces {
        // A directory on the way to a mount point is in the view (the repo's parents, /etc
        // above its bound files).
        if view
            .mounts
            .iter()
            .any(|o| o.dst() != *path && o.dst().starts_with(path))
        {
            return None;
        }
        match op {
            // A tree of the sandbox's own (its home, /tmp): a lookup `--observe` saw there may
            // have found what the command made itself; only a failure the command named
            // counts. A tmpfs of mode 0 covers a credential path: said below.
            Some(Op::Tmpfs { dst, mode, .. })
                if dst != Path::new("/") && *mode != 0 && seen.errno.is_none() =>
            {
                return None
            }
            Some(Op::Dev {
                dst, pts: false, ..
            }) if is_pty(dst, path) => {
                return Some(dev_pts(seen));
            }
            _ => {}
        }
        if seen.errno.is_none() && probe_only(view.repo, path) {
            return None;
        }
    }
    let entry = host(probe)?;
    // The sandbox's own procfs and /dev are in its view too (a path missing there is not the
    // host's to lend).
    let visible = !view.namespaces
        || op.is_some_and(|op| {
            shows_host(op) || op.dst() == *path || matches!(op, Op::Proc { .. } | Op::Dev { .. })
        });
    let errno = seen.errno;
    let writes = creates || matches!(seen.access, Access::Write | Access::Truncate);
    let sub = if !visible {
        match errno {
            None | Some(libc::ENOENT) | Some(libc::EACCES) => "hidden",
            _ => return None,
        }
    } else if matches!(errno, Some(libc::EROFS)) || (errno.is_none() && writes && read_only(op)) {
        "read_only"
    } else if matches!(errno, None | Some(libc::EACCES | libc::EPERM))
        && view
            .landlock
            .is_some_and(|l| !landlock_allows(l, path, seen.access))
    {
        "landlock"
    } else {
        return None;
    };
    // The path the fix names: the file itself, or for a create the directory it goes in.
    let target = match creates {
        true => probe.to_path_buf(),
        false => path.clone(),
    };
    let never = never_why(view, seen, &target, entry, op, sub, writes);
    // Under /sys the profile's own list binds it (`[filesystem] sys`).
    if sub == "hidden" && never.is_none() && !writes && target.starts_with("/sys") {
        return Some(Refusal {
            kind: Kind::Filesystem,
            sub: sub.into(),
            what: format!("{} ({})", crate::visible::path(path), seen.access.as_str()),
            rule: "not in the sandbox's view".into(),
            fix: format!(
                "[filesystem] sys = {{ add = [\"{}\"] }}",
                crate::visible::path(&target)
            ),
            patch: Some(Patch::Sys(target)),
            count: seen.count.max(1),
        });
    }
    let (rule, fix, patch) = {
        let rule = match sub {
            "hidden" => "not in the sandbox's view".to_string(),
            "read_only" => "bound read-only".to_string(),
            _ => format!("outside landlock's {} rules", seen.access.as_str()),
        };
        match never {
            Some(why) => (rule, format!("never: {why}"), None),
            None if writes => (
                rule,
                format!(
                    "[filesystem] extra_rw = {{ add = [\"{}\"] }}",
                    crate::visible::path(&target)
                ),
                Some(Patch::ExtraRw(target.clone())),
            ),
            None => (
                rule,
                format!(
                    "[filesystem] extra_ro = {{ add = [\"{}\"] }}",
                    crate::visible::path(&target)
                ),
                Some(Patch::ExtraRo(target.clone())),
            ),
        }
    };
    Some(Refusal {
        kind: Kind::Filesystem,
        sub: sub.into(),
        what: format!("{} ({})", crate::visible::path(path), seen.access.as_str()),
        rule,
        fix,
        patch,
        count: seen.count.max(1),
    })
}

/// A lookup `--observe` saw that tools make to learn about their surroundings and cope
/// without, not judged unless the command named it failing: a path beside the repo, under
/// one of the directories that hold it (below `/`: cargo, git, npm and linters look upward
/// for `.cargo/config.toml`, `Cargo.toml`, `.npmrc`, `.eslintrc`; a result must not depend
/// on where the repo is checked out), and the machine's facts under /sys (the sandbox shows
/// only the CPU topology there).
fn probe_only(repo: &Path, path: &Path) -> bool {
    let beside_repo = repo
        .ancestors()
        .skip(1)
        .filter(|a| *a != Path::new("/"))
        .any(|a| path.starts_with(a));
    beside_repo || path.starts_with("/sys")
}

/// `/dev/ptmx` or a path under `/dev/pts` of the sandbox's own /dev.
fn is_pty(dev: &Path, path: &Path) -> bool {
    path == dev.join("ptmx") || path.starts_with(dev.join("pts"))
}

/// A pseudo-terminal the sandbox's /dev does not have: `dev_pts = true` gives it its own.
fn dev_pts(seen: &PathSeen) -> Refusal {
    Refusal {
        kind: Kind::Filesystem,
        sub: "hidden".into(),
        what: format!(
            "{} ({})",
            crate::visible::path(&seen.path),
            seen.access.as_str()
        ),
        rule: "the sandbox's /dev has no pseudo-terminals".into(),
        fix: "[filesystem] dev_pts = true (the sandbox's own, never the host's)".into(),
        patch: Some(Patch::DevPts(true)),
        count: seen.count.max(1),
    }
}

/// Why no profile may allow it, if so.
fn never_why(
    view: &View,
    seen: &PathSeen,
    target: &Path,
    entry: HostEntry,
    op: Option<&Op>,
    sub: &str,
    writes: bool,
) -> Option<String> {
    if sub == "landlock" && seen.access == Access::Ioctl {
        return Some(
            "landlock allows ioctl only on the sandbox's terminals (/dev/tty, /dev/pts); its other devices are only read and written"
                .into(),
        );
    }
    if sub == "landlock" && OWN.iter().any(|d| target.starts_with(d)) {
        return Some(format!(
            "the sandbox's own {} is read-only to the command",
            OWN.iter().find(|d| target.starts_with(d)).unwrap_or(&"")
        ));
    }
    if target.starts_with("/sys/fs/cgroup") {
        return Some(
            "the host's cgroup files describe the host's cgroup, not the sandbox's (its limits are in the report)"
                .into(),
        );
    }
    if writes && SYSTEM.iter().any(|d| target.starts_with(d)) {
        return Some("a system directory is shared with the host read-only".into());
    }
    // the plan's own rule for extra_ro and extra_rw: what it refuses is never
    if let Some(why) = crate::toolchain::never_bound(target, view.homes) {
        return Some(format!("the host boundary keeps it out ({why})"));
    }
    if let Some(op) = op {
        if covers_on_purpose(op) {
            return Some("a credential path the sandbox covers".into());
        }
        if matches!(op, Op::GitView { .. } | Op::RepoRo { .. }) && writes {
            return Some("git's configuration and the protected paths stay read-only".into());
        }
    }
    if !entry.plain {
        return Some("a socket, device or fifo of the host is never bound".into());
    }
    if !entry.world_readable && !writes {
        return Some("the host keeps it private (not readable by others)".into());
    }
    None
}

/// The mount operation whose target holds `path` (the deepest).
fn covering<'a>(ops: &'a [Op], path: &Path) -> Option<&'a Op> {
    ops.iter()
        .filter(|op| path.starts_with(op.dst()))
        .max_by_key(|op| op.dst().components().count())
}

/// Does the operation show the host's files at its target (a bind, the repo), rather than a
/// tree of the sandbox's own (a tmpfs, procfs, /dev)?
fn shows_host(op: &Op) -> bool {
    match op {
        Op::Bind { src, .. } => src != Path::new("/dev/null"),
        Op::Tmpfs { .. } | Op::Proc { .. } | Op::Dev { .. } => false,
        Op::Symlink { .. } | Op::Overlay { .. } | Op::GitView { .. } | Op::RepoRo { .. } => true,
    }
}

fn read_only(op: Option<&Op>) -> bool {
    matches!(
        op,
        Some(Op::Bind { ro: true, .. } | Op::Symlink { .. } | Op::RepoRo { .. })
    )
}

/// A credential path covered in the new root ([`crate::toolchain::Hide`]): `/dev/null` bound
/// on it, or an empty tmpfs of mode 0.
fn covers_on_purpose(op: &Op) -> bool {
    match op {
        Op::Bind { src, .. } => src == Path::new("/dev/null"),
        Op::Tmpfs { mode, .. } => *mode == 0,
        _ => false,
    }
}

/// A connect or bind to an abstract unix socket (`@name`, as `ss` and `/proc/net/unix`
/// write it), seen by `--observe`. Landlock's scope (ABI 6) refuses a connect to a listener
/// outside the sandbox; the listener's side is not seen, but every process of the sandbox is
/// gone after the run, so a name still bound on the host then (`host`) is an outside
/// listener's. With a network namespace of its own the host's names were never in reach
/// (not a landlock refusal), and without the scope nothing was refused.
fn abstract_socket(
    view: &View,
    seen: &PathSeen,
    host: &dyn Fn(&Path) -> Option<HostEntry>,
) -> Option<Refusal> {
    let scoped = view.landlock.is_some_and(|l| l.scope);
    if !scoped || !view.host_netns || !matches!(seen.errno, None | Some(libc::EPERM)) {
        return None;
    }
    host(&seen.path)?;
    Some(Refusal {
        kind: Kind::Filesystem,
        sub: "landlock".into(),
        what: format!(
            "{} ({})",
            crate::visible::path(&seen.path),
            seen.access.as_str()
        ),
        rule: "outside landlock's scope: an abstract unix socket of a process outside the sandbox".into(),
        fix: "never: abstract unix sockets are scoped to the sandbox; share a socket file in a directory given by extra_rw instead".into(),
        patch: None,
        count: seen.count.max(1),
    })
}

/// A device landlock lets the command open for reading and writing but gives no ioctl on,
/// that refused it `EACCES` (the sandbox's devices are mode 0666, so the permission bits did
/// not): what was refused is an ioctl on it (`stty -F /dev/null` gets `ENOTTY` outside).
fn device_ioctl(view: &View, seen: &PathSeen) -> Option<PathSeen> {
    let l = view.landlock?;
    let refused_open = seen.errno == Some(libc::EACCES)
        && matches!(seen.access, Access::Read | Access::Write)
        && l.devices.contains(&seen.path)
        && !landlock_allows(l, &seen.path, Access::Ioctl);
    refused_open.then(|| PathSeen {
        access: Access::Ioctl,
        ..seen.clone()
    })
}

/// Do the landlock rules give `access` on `path`?
fn landlock_allows(l: &Spec, path: &Path, access: Access) -> bool {
    let under = |v: &[PathBuf]| v.iter().any(|d| path.starts_with(d));
    match access {
        Access::Read | Access::Exec => {
            l.list.iter().any(|d| d == path)
                || under(&l.read_exec)
                || (access == Access::Read && under(&l.read_only))
                || under(&l.read_write)
                || under(&l.devices)
                || under(&l.tty_devices)
        }
        // Binding a socket needs MAKE_SOCK, given with the read-write trees only (a connect
        // is not landlock's, a host socket's refusal is judged by the view).
        Access::Write | Access::Create | Access::Socket | Access::Bind | Access::Truncate => {
            under(&l.read_write)
                || (matches!(access, Access::Write | Access::Truncate)
                    && (under(&l.devices) || under(&l.tty_devices)))
        }
        Access::Ioctl => under(&l.tty_devices),
    }
}

/// Looks at `path` on the host without following a link or triggering an automount
/// (`statx(AT_SYMLINK_NOFOLLOW|AT_NO_AUTOMOUNT)`): an NFS or autofs path does not hang the
/// caller for an answer. Called after the run, and with `-v` as paths are seen during it.
pub fn host_entry(path: &Path) -> Option<HostEntry> {
    use std::os::unix::ffi::OsStrExt;
    if path.as_os_str().as_bytes().starts_with(b"@") {
        return abstract_bound(path.as_os_str().as_bytes()).then_some(HostEntry {
            plain: false,
            world_readable: true,
        });
    }
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path that lives across the call and `st` is a valid
    // out-buffer of the size the kernel writes; the call keeps neither.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT | libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE | libc::STATX_MODE,
            &mut st,
        )
    };
    if rc != 0 {
        return None;
    }
    let fmt = u32::from(st.stx_mode) & libc::S_IFMT;
    Some(HostEntry {
        plain: fmt == libc::S_IFREG || fmt == libc::S_IFDIR,
        world_readable: u32::from(st.stx_mode) & 0o004 != 0,
    })
}

/// Is the abstract unix socket `@name` bound in the caller's network namespace? Read from
/// `/proc/self/net/unix` (its last column is the name, `@` first for an abstract one; a
/// name with a space or newline does not match, and is then not named), line by line.
fn abstract_bound(name: &[u8]) -> bool {
    use std::io::BufRead;
    let Ok(f) = std::fs::File::open("/proc/self/net/unix") else {
        return false;
    };
    std::io::BufReader::new(f)
        .split(b'\n')
        .map_while(Result::ok)
        .any(|l| l.rsplit(|b| *b == b' ').next() == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(p: &str, ro: bool) -> Op {
        Op::Bind {
            src: p.into(),
            dst: p.into(),
            ro,
            optional: false,
        }
    }

    fn seen(p: &str, access: Access, errno: Option<i32>) -> PathSeen {
        PathSeen {
            path: p.into(),
            access,
            errno,
            count: 1,
        }
    }

    /// The host of the table: these exist, `/etc/shadow` private, the docker socket a socket.
    fn host(p: &Path) -> Option<HostEntry> {
        let plain = HostEntry {
            plain: true,
            world_readable: true,
        };
        match p.to_str()? {
            "/etc/shadow" => Some(HostEntry {
                world_readable: false,
                ..plain
            }),
            "/run/docker.sock" | "@outside" => Some(HostEntry {
                plain: false,
                world_readable: true,
            }),
            "/"
            | "/etc"
            | "/etc/hosts.extra"
            | "/usr"
            | "/usr/lib"
            | "/root"
            | "/root/.gitconfig"
            | "/root/.ssh"
            | "/root/.ssh/id_ed25519"
            | "/opt"
            | "/opt/tools"
            | "/opt/tools/cfg"
            | "/repo"
            | "/repo/.git/config"
            | "/proc"
            | "/proc/self"
            | "/proc/self/comm"
            | "/srv/data"
            | "/srv"
            | "/run" => Some(plain),
            _ => None,
        }
    }

    #[test]
    fn the_classifier_table() {
        use libc::{EACCES, ENOENT, EROFS};
        use Access::*;
        let mounts = vec![
            Op::Tmpfs {
                dst: "/".into(),
                size: 0,
                mode: 0o755,
            },
            bind("/usr", true),
            Op::Tmpfs {
                dst: "/root".into(),
                size: 0,
                mode: 0o700,
            },
            bind("/opt/tools", true),
            Op::Overlay {
                lower: "/repo".into(),
                dst: "/repo".into(),
                size: 0,
                kept: false,
                carry: None,
                root: 0,
                above: vec![],
                disk: false,
            },
            Op::RepoRo {
                repo: "/repo".into(),
                rel: ".git/config".into(),
                create: false,
            },
            Op::Proc {
                dst: "/proc".into(),
            },
        ];
        let spec = Spec {
            list: vec!["/".into()],
            read_exec: vec!["/usr".into(), "/opt/tools".into()],
            read_only: vec!["/proc".into()],
            read_write: vec!["/repo".into(), "/root".into(), "/tmp".into()],
            devices: vec![],
            tty_devices: vec![],
            tcp_connect: None,
            tcp_bind: None,
            scope: false,
        };
        let homes = vec![PathBuf::from("/root"), PathBuf::from("/home/u")];
        let view = View {
            namespaces: true,
            host_netns: false,
            mounts: &mounts,
            landlock: Some(&spec),
            homes: &homes,
            repo: Path::new("/repo"),
        };
        let c = |p: &str, a: Access, e: Option<i32>| {
            classify(&view, &seen(p, a, e), &host).map(|r| (r.sub, r.fix, r.patch))
        };
        let sub = |p: &str, a: Access, e: Option<i32>| c(p, a, e).map(|r| r.0);
        let never = |p: &str, a: Access, e: Option<i32>| {
            c(p, a, e).is_some_and(|r| r.1.starts_with("never: ") && r.2.is_none())
        };
        // hidden: on the host, not in the view; the patch names the file
        let h = c("/etc/hosts.extra", Read, Some(ENOENT)).unwrap();
        assert_eq!(h.0, "hidden");
        assert_eq!(h.2, Some(Patch::ExtraRo("/etc/hosts.extra".into())));
        assert_eq!(
            h.1,
            "[filesystem] extra_ro = { add = [\"/etc/hosts.extra\"] }"
        );
        assert_eq!(
            sub("/root/.gitconfig", Read, Some(ENOENT)).unwrap(),
            "hidden"
        );
        assert_eq!(sub("/srv/data", Read, None).unwrap(), "hidden");
        // a write to a hidden path: extra_rw
        assert_eq!(
            c("/srv/data", Write, Some(ENOENT)).unwrap().2,
            Some(Patch::ExtraRw("/srv/data".into()))
        );
        // not on the host either: the same failure outside
        assert_eq!(c("/etc/nothing", Read, Some(ENOENT)), None);
        assert_eq!(c("/nope/x", Create, Some(EROFS)), None);
        // in the view and missing: missing on the host too
        assert_eq!(c("/usr/lib/x", Read, Some(ENOENT)), None);
        // read_only: a create in a bound dir names the dir; system dirs never
        let r = c("/opt/tools/new", Create, Some(EROFS)).unwrap();
        assert_eq!(r.0, "read_only");
        assert_eq!(r.2, Some(Patch::ExtraRw("/opt/tools".into())));
        assert_eq!(sub("/usr/x", Create, Some(EROFS)).unwrap(), "read_only");
        assert!(never("/usr/x", Create, Some(EROFS)));
        assert!(never("/usr/lib", Write, None));
        // git's protected configuration
        assert!(never("/repo/.git/config", Write, Some(EROFS)));
        // landlock: visible, outside the rules for that access
        assert_eq!(
            sub("/proc/self/comm", Create, Some(EACCES)).unwrap(),
            "landlock"
        );
        assert!(never("/proc/self/comm", Create, Some(EACCES)));
        // allowed by landlock: a file mode, the same outside
        assert_eq!(c("/usr/lib", Read, Some(EACCES)), None);
        // credentials, a home, private files and host sockets: never
        assert!(
            never("/root/.ssh/id_ed25519", Read, Some(ENOENT)),
            "{:?}",
            c("/root/.ssh/id_ed25519", Read, Some(ENOENT))
        );
        // a mount point is in the view
        assert_eq!(c("/root", Read, None), None);
        assert!(never("/root", Create, Some(EROFS)));
        assert!(never("/etc/shadow", Read, Some(ENOENT)));
        assert!(never("/run/docker.sock", Socket, Some(ENOENT)));
        // an errno that is not a refusal of a path
        assert_eq!(c("/etc/hosts.extra", Read, Some(libc::EMFILE)), None);
        // a directory on the way to a mount point (the repo's parents) is in the view
        assert_eq!(c("/opt", Read, None), None);
        assert_eq!(c("/", Read, None), None);
        // the sandbox's own home: a lookup --observe saw may have found the command's own
        // file; a failure the command named counts
        assert_eq!(c("/root/.gitconfig", Read, None), None);
        assert_eq!(
            sub("/root/.gitconfig", Read, Some(ENOENT)).unwrap(),
            "hidden"
        );
        // the sandbox's own /dev without pseudo-terminals: dev_pts, never the host's
        let mut with_dev = mounts.clone();
        with_dev.push(Op::Dev {
            dst: "/dev".into(),
            pts: false,
            shm_size: 0,
        });
        let dev_view = View {
            mounts: &with_dev,
            ..view
        };
        let d = |p: &str| classify(&dev_view, &seen(p, Read, None), &host).map(|r| r.patch);
        assert_eq!(d("/dev/ptmx"), Some(Some(Patch::DevPts(true))));
        assert_eq!(d("/dev/pts/0"), Some(Some(Patch::DevPts(true))));
        assert_eq!(d("/dev/null"), None);
        // /sys: the profile's sys list; the host's cgroup files never
        let sys_host = |p: &Path| {
            p.starts_with("/sys").then_some(HostEntry {
                plain: true,
                world_readable: true,
            })
        };
        let y = |p: &str| classify(&view, &seen(p, Read, Some(ENOENT)), &sys_host);
        assert_eq!(
            y("/sys/class/net").unwrap().patch,
            Some(Patch::Sys("/sys/class/net".into()))
        );
        let cg = y("/sys/fs/cgroup/memory.max").unwrap();
        assert!(
            cg.fix.starts_with("never: ") && cg.patch.is_none(),
            "{cg:?}"
        );
        // what --observe saw looked up beside the repo, or a machine fact under /sys, is a
        // probe; named failing by the command, it counts
        let deep = View {
            repo: Path::new("/work/checkouts/repo"),
            ..view
        };
        let probe = |p: &str, e: Option<i32>| {
            classify(&deep, &seen(p, Read, e), &|q: &Path| {
                (q.starts_with("/work") || q.starts_with("/sys") || q.starts_with("/etc"))
                    .then_some(HostEntry {
                        plain: true,
                        world_readable: true,
                    })
            })
        };
        assert_eq!(probe("/work/checkouts/Cargo.toml", None), None);
        assert_eq!(probe("/work/.cargo/config.toml", None), None);
        assert!(probe("/work/.cargo/config.toml", Some(ENOENT)).is_some());
        assert_eq!(
            probe("/sys/kernel/mm/transparent_hugepage/enabled", None),
            None
        );
        assert!(probe("/etc/machine-id", None).is_some());
        // without namespaces: everything is in view, landlock decides
        let flat = View {
            namespaces: false,
            ..view
        };
        let f = |p: &str, a: Access, e: Option<i32>| {
            classify(&flat, &seen(p, a, e), &host).map(|r| r.sub)
        };
        assert_eq!(f("/srv/data", Read, Some(EACCES)).unwrap(), "landlock");
        assert_eq!(f("/etc/hosts.extra", Read, Some(ENOENT)), None);
        // without namespaces: an overwrite (`cannot create` of a file there) is a write of
        // the file; a truncate needs the read-write rules; a socket bound where nothing is
        // yet names the directory it goes in
        let w = classify(&flat, &seen("/srv/data", Create, Some(EACCES)), &host).unwrap();
        assert_eq!(w.what, "/srv/data (write)");
        assert_eq!(w.patch, Some(Patch::ExtraRw("/srv/data".into())));
        assert_eq!(f("/srv/data", Truncate, None).unwrap(), "landlock");
        assert_eq!(f("/repo/x", Truncate, None), None);
        let b = classify(&flat, &seen("/srv/sock", Bind, None), &host).unwrap();
        assert_eq!(b.what, "/srv/sock (unix socket bind)");
        // a connect to a socket that is not there fails the same outside
        assert_eq!(f("/srv/sock", Socket, None), None);
        assert_eq!(
            (b.sub.as_str(), b.patch),
            ("landlock", Some(Patch::ExtraRw("/srv".into())))
        );
        // EACCES on a device landlock gives read and write: an ioctl, never allowed; a
        // device with ioctl (a terminal) is not named
        let mut dev_spec = spec.clone();
        dev_spec.devices = vec!["/dev/null".into()];
        dev_spec.tty_devices = vec!["/dev/tty".into()];
        let dv = View {
            landlock: Some(&dev_spec),
            mounts: &with_dev,
            ..view
        };
        let dev_host = |p: &Path| {
            (p == Path::new("/dev/null")).then_some(HostEntry {
                plain: false,
                world_readable: true,
            })
        };
        let io = classify(&dv, &seen("/dev/null", Read, Some(EACCES)), &dev_host).unwrap();
        assert_eq!(io.what, "/dev/null (ioctl)");
        assert!(
            io.fix.starts_with("never: ") && io.patch.is_none(),
            "{io:?}"
        );
        assert_eq!(
            classify(&dv, &seen("/dev/null", Read, Some(ENOENT)), &dev_host),
            None
        );
        // an abstract socket still bound on the host after the run: scoped away, but only
        // where the host's names were in reach and landlock scopes them
        let scoped = Spec {
            scope: true,
            ..spec.clone()
        };
        let shared = View {
            host_netns: true,
            landlock: Some(&scoped),
            ..view
        };
        let a = |v: &View, name: &str| classify(v, &seen(name, Socket, None), &host);
        let r = a(&shared, "@outside").unwrap();
        assert_eq!(
            (r.sub.as_str(), r.what.as_str(), r.patch),
            ("landlock", "@outside (unix socket)", None)
        );
        assert_eq!(a(&shared, "@gone"), None);
        assert_eq!(
            a(
                &View {
                    host_netns: false,
                    ..shared
                },
                "@outside"
            ),
            None
        );
        assert_eq!(
            a(
                &View {
                    landlock: Some(&spec),
                    ..shared
                },
                "@outside"
            ),
            None
        );
    }
}
