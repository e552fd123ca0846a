//! Landlock: the filesystem scope, TCP ports and IPC scoping of the workload.
//!
//! Runs in the sandboxed child, after the new root is in place (landlock rules bind to inodes,
//! so the paths are opened after the mounts) and before seccomp. The child is a freshly
//! exec'd, single-threaded stage 2, so building the ruleset may allocate.
//!
//! We ask for everything the running kernel's ABI offers (capped at what the crate knows)
//! and then check what was really enforced: the crate's best-effort mode returns `Ok` with
//! `NotEnforced` on a kernel without landlock, which must never pass silently.

use crate::layers::{Step, StepError};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
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

/// The errno of the io::Error somewhere in the crate's error chain (EINVAL if none).
fn step(e: impl std::error::Error + 'static, s: Step) -> StepError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = cur {
        if let Some(n) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
        {
            return StepError::new(s, n);
        }
        cur = err.source();
    }
    StepError::new(s, libc::EINVAL)
}

/// `path` opened with O_PATH, unless it is missing or a symlink.
fn open_nofollow(path: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    (!f.metadata().ok()?.file_type().is_symlink()).then_some(f)
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

/// Restrict the calling process. `min_abi` is the profile's minimum; below it, or without
/// landlock at all, this fails with ENOSYS/EOPNOTSUPP so a required layer fails closed (the
/// caller decides whether "not available" is fatal before calling).
pub fn apply(spec: &Spec, min_abi: u8) -> Result<Applied, StepError> {
    let kabi = kernel_abi();
    if kabi == 0 || kabi < min_abi {
        return Err(StepError::new(Step::LandlockAbi, libc::EOPNOTSUPP));
    }
    let abi = ABI::from(kabi as i32);
    let fs_all = AccessFs::from_all(abi);
    let read_exec = AccessFs::from_read(abi);
    let read_only = read_exec & !AccessFs::Execute;
    let dev_rw =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::from_file(abi) & AccessFs::Truncate;
    let tty = dev_rw | (AccessFs::from_file(abi) & AccessFs::IoctlDev);

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(fs_all)
        .map_err(|e| step(e, Step::LandlockRuleset))?;
    if kabi >= 4 {
        let mut net = BitFlags::<AccessNet>::empty();
        if spec.tcp_connect.is_some() {
            net |= AccessNet::ConnectTcp;
        }
        if spec.tcp_bind.is_some() {
            net |= AccessNet::BindTcp;
        }
        if !net.is_empty() {
            ruleset = ruleset
                .handle_access(net)
                .map_err(|e| step(e, Step::LandlockRuleset))?;
        }
    }
    if kabi >= 6 && spec.scope {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| step(e, Step::LandlockRuleset))?;
    }
    let mut created = ruleset
        .create()
        .map_err(|e| step(e, Step::LandlockRuleset))?;

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
            // Directories-only rights on a file are an error: trim them to what a file can have.
            let access = if p.is_dir() {
                access
            } else {
                access & AccessFs::from_file(abi)
            };
            let rule = if access == fs_all {
                // Full rights never follow a symlink: a link swapped in would grant its target.
                let Some(fd) = open_nofollow(p) else { continue };
                created.add_rule(PathBeneath::new(fd, access))
            } else {
                // A path that does not exist in the new root was skipped by the mounts too.
                let Ok(fd) = PathFd::new(p) else { continue };
                created.add_rule(PathBeneath::new(fd, access))
            };
            created = rule.map_err(|e| step(e, Step::LandlockRule))?;
        }
    }
    if kabi >= 4 {
        for (ports, access) in [
            (&spec.tcp_connect, AccessNet::ConnectTcp),
            (&spec.tcp_bind, AccessNet::BindTcp),
        ] {
            for &port in ports.iter().flatten() {
                created = created
                    .add_rule(NetPort::new(port, access))
                    .map_err(|e| step(e, Step::LandlockRule))?;
            }
        }
    }
    let status = created
        .restrict_self()
        .map_err(|e| step(e, Step::LandlockRestrict))?;
    let status = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
        // Never accept a silent no-op: the kernel said it has landlock, so this is a failure.
        RulesetStatus::NotEnforced => {
            return Err(StepError::new(Step::LandlockRestrict, libc::EOPNOTSUPP))
        }
    };
    Ok(Applied {
        abi: kabi,
        status: status.to_string(),
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
