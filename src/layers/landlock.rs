//! Landlock: the filesystem scope, TCP ports and IPC scoping of the workload.
//!
//! Runs in the sandboxed child, after the new root is in place (landlock rules bind to inodes,
//! so the paths are opened after the mounts) and before seccomp. The child is a freshly
//! exec'd, single-threaded stage 2, so building the ruleset may allocate.
//!
//! We ask for everything the running kernel's ABI offers (capped at what the landlock crate
//! knows: its access sets give the rights) and make the system calls ourselves, so a kernel
//! without landlock is an error, never a silent no-op (the crate's best-effort mode would
//! return `Ok` with `NotEnforced` there).

use crate::layers::{Step, StepError};
use landlock::{Access, AccessFs, AccessNet, BitFlags, Scope, ABI};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What the workload may touch, by path inside the new root.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    /// List only (the root directory, whose entries are all mount points we chose).
    pub list: Vec<PathBuf>,
    /// Read and execute: system directories, toolchains.
    pub read_exec: Vec<PathBuf>,
    /// Read only, no execute: `/proc`, parts of `/sys`.
    pub read_only: Vec<PathBuf>,
    /// Everything: the repo (unless read-only), `/tmp`, `$HOME`, `/dev/shm`.
    pub read_write: Vec<PathBuf>,
    /// Device nodes that may be opened for reading and writing (`/dev/null`, ...).
    pub devices: Vec<PathBuf>,
    /// Device nodes on which ioctl is allowed too (`/dev/tty`, `/dev/pts`).
    pub tty_devices: Vec<PathBuf>,
    /// TCP ports the workload may connect to; `None` leaves TCP connect unrestricted.
    pub tcp_connect: Option<Vec<u16>>,
    /// TCP ports the workload may bind; `None` leaves TCP bind unrestricted.
    pub tcp_bind: Option<Vec<u16>>,
    /// Scope abstract unix sockets and signals to the sandbox (ABI 6).
    pub scope: bool,
}

/// What was enforced, for the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Applied {
    /// The ABI used: the kernel's, capped at what this build knows.
    pub abi: u8,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`.
    pub status: String,
    /// Protections the kernel's ABI could not give (e.g. `tcp` below ABI 4).
    pub missing: Vec<String>,
}

/// The landlock ABI version of the running kernel: 0 when landlock is absent or disabled.
pub fn kernel_abi() -> u8 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns
    // the ABI version (or an error); it reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, /* LANDLOCK_CREATE_RULESET_VERSION */
        )
    };
    if v < 0 {
        0
    } else {
        v.min(u8::MAX as libc::c_long) as u8
    }
}

/// What a given ABI cannot do, in words the report uses.
pub fn missing_at(abi: u8, spec: &Spec) -> Vec<String> {
    let mut m = Vec::new();
    if abi < 2 {
        m.push("refer (cross-directory rename/link)".to_string());
    }
    if abi < 3 {
        m.push("truncate".to_string());
    }
    if abi < 4 && (spec.tcp_connect.is_some() || spec.tcp_bind.is_some()) {
        m.push("tcp".to_string());
    }
    if abi < 5 {
        m.push("ioctl on devices".to_string());
    }
    if abi < 6 && spec.scope {
        m.push("signal and abstract unix socket scoping".to_string());
    }
    m
}

/// `root` minus `protected`, as landlock rules. Landlock only grants, and a right granted on a
/// directory holds for everything beneath it, so a protected path is carved out by granting
/// read-write on each sibling along the way to it instead of on their common parent; the
/// parents on the way, and the protected paths, get read-only (`ro`). Symlinks get no rule
/// of their own (they resolve to somewhere else, which rules elsewhere decide).
pub fn carve(root: &Path, protected: &[PathBuf], rw: &mut Vec<PathBuf>, ro: &mut Vec<PathBuf>) {
    if !protected.iter().any(|p| p.starts_with(root)) {
        rw.push(root.to_path_buf());
        return;
    }
    ro.push(root.to_path_buf());
    if protected.iter().any(|p| p == root) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink()))
        .map(|e| e.path())
        .collect();
    children.sort();
    for c in children {
        carve(&c, protected, rw, ro);
    }
}

/// `struct landlock_ruleset_attr` (ABI 6 layout; older kernels accept it with the newer
/// fields zero).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed, as in the kernel's uapi).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `struct landlock_net_port_attr`.
#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
const LANDLOCK_RULE_NET_PORT: libc::c_int = 2;

/// `landlock_add_rule` on prepared data.
fn add_rule<T>(ruleset: &OwnedFd, kind: libc::c_int, attr: &T) -> Result<(), StepError> {
    // SAFETY: `attr` is the uapi struct for `kind`, alive for the call; the kernel copies it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            kind,
            attr as *const T,
            0u32,
        )
    };
    if rc != 0 {
        return Err(StepError::last(Step::LandlockRule));
    }
    Ok(())
}

/// `path` opened with `O_PATH` (one path walk), and whether it is a directory. `None` when it
/// is missing (a path that does not exist in the new root was skipped by the mounts too) or,
/// with `nofollow`, a symlink.
fn open_rule_path(path: &Path, nofollow: bool) -> Option<(File, bool)> {
    let flags = libc::O_PATH | if nofollow { libc::O_NOFOLLOW } else { 0 };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .ok()?;
    let t = f.metadata().ok()?.file_type();
    (!t.is_symlink()).then_some((f, t.is_dir()))
}

/// Restrict the calling process. `min_abi` is the profile's minimum; below it, or without
/// landlock at all, this fails with ENOSYS/EOPNOTSUPP so a required layer fails closed (the
/// caller decides whether "not available" is fatal before calling).
///
/// The rights are the crate's access sets for the kernel's ABI (capped at what the crate
/// knows); the system calls are made here, on prepared data: per rule, one `O_PATH` open (the
/// only path walk), one `fstat` on it, `landlock_add_rule` and `close`. (The crate's path
/// rules cost a second walk of the path and a second `fstat` each, ~50 rules per run.)
pub fn apply(spec: &Spec, min_abi: u8) -> Result<Applied, StepError> {
    let kabi = kernel_abi();
    if kabi == 0 || kabi < min_abi {
        return Err(StepError::new(Step::LandlockAbi, libc::EOPNOTSUPP));
    }
    let abi = ABI::from(kabi as i32);
    let fs_all = AccessFs::from_all(abi);
    let file_rights = AccessFs::from_file(abi);
    let read_exec = AccessFs::from_read(abi);
    let read_only = read_exec & !AccessFs::Execute;
    let dev_rw = AccessFs::ReadFile | AccessFs::WriteFile | file_rights & AccessFs::Truncate;
    let tty = dev_rw | (file_rights & AccessFs::IoctlDev);

    let mut net = BitFlags::<AccessNet>::empty();
    if kabi >= 4 {
        if spec.tcp_connect.is_some() {
            net |= AccessNet::ConnectTcp;
        }
        if spec.tcp_bind.is_some() {
            net |= AccessNet::BindTcp;
        }
    }
    let attr = RulesetAttr {
        handled_access_fs: fs_all.bits(),
        handled_access_net: net.bits(),
        scoped: if kabi >= 6 && spec.scope {
            Scope::from_all(abi).bits()
        } else {
            0
        },
    };
    // SAFETY: `attr` is a landlock_ruleset_attr of the size given, alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(StepError::last(Step::LandlockRuleset));
    }
    // SAFETY: a new fd (close-on-exec, as the kernel makes it) that nothing else owns.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };

    let groups: [(&Vec<PathBuf>, BitFlags<AccessFs>); 6] = [
        (&spec.list, AccessFs::ReadDir.into()),
        (&spec.read_exec, read_exec),
        (&spec.read_only, read_only),
        (&spec.read_write, fs_all),
        (&spec.devices, dev_rw),
        (&spec.tty_devices, tty),
    ];
    for (paths, access) in groups {
        for p in paths {
            // Full rights never follow a symlink: a link swapped in would grant its target.
            let Some((f, is_dir)) = open_rule_path(p, access == fs_all) else {
                continue;
            };
            // Directories-only rights on a file are an error: trim them to what a file can have.
            let access = if is_dir { access } else { access & file_rights };
            let rule = PathBeneathAttr {
                allowed_access: access.bits(),
                parent_fd: f.as_raw_fd(),
            };
            add_rule(&ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule)?;
        }
    }
    if kabi >= 4 {
        for (ports, access) in [
            (&spec.tcp_connect, AccessNet::ConnectTcp),
            (&spec.tcp_bind, AccessNet::BindTcp),
        ] {
            for &port in ports.iter().flatten() {
                let rule = NetPortAttr {
                    allowed_access: BitFlags::from(access).bits(),
                    port: port as u64,
                };
                add_rule(&ruleset, LANDLOCK_RULE_NET_PORT, &rule)?;
            }
        }
    }
    // SAFETY: prctl and landlock_restrict_self with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(StepError::last(Step::LandlockRestrict));
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0 {
            return Err(StepError::last(Step::LandlockRestrict));
        }
    }
    // Every right asked for is one this ABI has (the sets above are the ABI's own), and the
    // kernel took the ruleset: fully enforced, what the crate reported in this case too.
    Ok(Applied {
        abi: kabi,
        status: "fully_enforced".to_string(),
        missing: missing_at(kabi, spec),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carve_grants_everything_but_the_protected_paths_and_their_parents() {
        let root = std::env::temp_dir().join(format!("sandbox-run-carve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in [".git/hooks", ".git/objects", "src"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join(".git/config"), "").unwrap();
        std::fs::write(root.join("package.json"), "{}").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        let protected = [root.join(".git/hooks"), root.join(".git/config")];
        let (mut rw, mut ro) = (Vec::new(), Vec::new());
        carve(&root, &protected, &mut rw, &mut ro);
        let rel = |v: &[PathBuf]| -> Vec<String> {
            v.iter()
                .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
                .collect()
        };
        assert_eq!(rel(&rw), [".git/objects", "package.json", "src"]);
        assert_eq!(rel(&ro), ["", ".git", ".git/config", ".git/hooks"]);

        // Nothing protected under it: the whole tree, one rule.
        let (mut rw, mut ro) = (Vec::new(), Vec::new());
        carve(&root, &[PathBuf::from("/elsewhere")], &mut rw, &mut ro);
        assert_eq!((rw, ro), (vec![root.clone()], vec![]));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
