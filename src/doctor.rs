//! `sandbox-run doctor`: what this kernel and this user allow, and how to fix what they do not.
//!
//! Every fact is probed for real where that is safe (user and mount namespaces, overlayfs in a
//! user namespace, the foreign-architecture syscall paths are tried in a forked child that
//! changes nothing outside itself); the rest is read from /proc and /sys. Then each shipped
//! profile is judged against the facts. The README's "Host requirements" table is generated
//! from the same list of checks (`doctor --requirements-md`), so the two cannot drift apart.

use crate::layers::cgroup;
use crate::profile::{Profile, Requirement, BUILTIN};
use serde::Serialize;

/// What a check's finding means for the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Nothing to do.
    Ok,
    /// Worth fixing on the host, but no profile loses a layer over it: the sandbox already
    /// covers it (TIOCSTI is refused by the seccomp filter) or only a report field or the
    /// way a tree is killed depends on it. Printed; the exit code stays 0.
    Advice,
    /// A layer is missing: some profile cannot run with every layer. Exit 1.
    Fail,
}

/// The checks whose failure takes a layer away from a profile (see [`judge`]); any other
/// check that fails is advice.
const LAYER_CHECKS: &[&str] = &["userns", "overlay", "landlock", "seccomp", "cgroup"];

/// One probed fact.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable key: `userns`, `landlock`, ...
    pub key: &'static str,
    pub ok: bool,
    /// `ok`, `advice` (printed, exit 0) or `fail` (a layer is missing, exit 1).
    pub severity: Severity,
    /// What was found, in words.
    pub found: String,
    /// The command or setting that fixes it, when not ok.
    pub fix: Option<String>,
    /// When there is more than one way: each fix that works on this host, safest first
    /// (`fix` then lists them all on one line).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixes: Vec<String>,
}

/// What doctor says about one profile.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileVerdict {
    pub profile: String,
    /// Every layer the profile asks for is available.
    pub full: bool,
    /// Runs at all (no required layer is missing).
    pub runs: bool,
    pub missing_required: Vec<&'static str>,
    pub degraded: Vec<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    pub checks: Vec<Check>,
    pub landlock_abi: u8,
    pub profiles: Vec<ProfileVerdict>,
}

/// The requirement behind each check, for the README table: key, what it is, why.
pub const REQUIREMENTS: &[(&str, &str, &str)] = &[
    ("userns", "unprivileged user namespaces", "every namespace, the new root and uid mapping are built in one; rootless needs them"),
    ("overlay", "overlayfs inside a user namespace (Linux 5.11+)", "the `validate` profile's copy-on-write repo"),
    ("landlock", "landlock (Linux 5.13+, in the `lsm=` list)", "the filesystem scope; ABI 3 adds truncate, 4 TCP ports, 5 device ioctl, 6 signal and abstract-socket scoping"),
    ("seccomp", "seccomp filters (CONFIG_SECCOMP_FILTER)", "the syscall allow-list"),
    ("i386", "i386 syscall emulation", "not needed; when on, the filter kills `int 0x80` (a foreign architecture)"),
    ("x32", "x32 syscall ABI", "not needed; when on, the filter kills x32 numbers (seccompiler does not check them)"),
    ("cgroup", "a cgroup to create leaves in: as root any cgroup v1/v2 host, rootless a delegated cgroup v2 subtree, or a systemd user manager that gives sandbox-run one (pure cgroup v2)", "memory, CPU and pids caps and the whole-tree kill"),
    ("cgroup.kill", "`cgroup.kill` (Linux 5.14+) on cgroup v2", "one-write kill of the whole tree (else freezer and a SIGKILL loop)"),
    ("memory.peak", "`memory.peak` (Linux 5.19+) on cgroup v2", "peak memory in the report"),
    ("tiocsti", "`dev.tty.legacy_tiocsti=0`", "defence in depth: TIOCSTI is also denied by the seccomp filter"),
];

fn check(key: &'static str, ok: bool, found: impl Into<String>, fix: Option<String>) -> Check {
    let severity = match (ok, LAYER_CHECKS.contains(&key)) {
        (true, _) => Severity::Ok,
        (false, true) => Severity::Fail,
        (false, false) => Severity::Advice,
    };
    Check {
        key,
        ok,
        severity,
        found: found.into(),
        fix: if ok { None } else { fix },
        fixes: Vec::new(),
    }
}

fn sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Run `f` in a forked child and return its exit code (or 128 + signal). The child may
/// unshare namespaces and mount: it changes nothing outside itself.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: doctor runs single-threaded (no other thread was started), so the child may run
    // ordinary code; it leaves with _exit and never returns into our stack.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let code = f();
            // SAFETY: end the child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => match nix::sys::wait::waitpid(child, None)
        {
            Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => c,
            Ok(nix::sys::wait::WaitStatus::Signaled(_, s, _)) => 128 + s as i32,
            _ => 255,
        },
        Err(_) => 255,
    }
}

fn errno_of(e: nix::Error) -> i32 {
    (e as i32).clamp(1, 125)
}

/// unshare a user (and mount) namespace and map our ids, as stage 2 does.
fn try_userns(with_overlay: bool) -> i32 {
    use nix::sched::CloneFlags;
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    if let Err(e) = nix::sched::unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS) {
        return errno_of(e);
    }
    let maps = [
        ("/proc/self/setgroups", "deny".to_string()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (p, v) in maps {
        if std::fs::write(p, v).is_err() {
            return libc::EPERM;
        }
    }
    if !with_overlay {
        return 0;
    }
    use nix::mount::{mount, MsFlags};
    let none: Option<&str> = None;
    if let Err(e) = mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none) {
        return errno_of(e);
    }
    if let Err(e) = mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::empty(),
        Some("size=1m"),
    ) {
        return errno_of(e);
    }
    for d in ["/tmp/l", "/tmp/u", "/tmp/w", "/tmp/m"] {
        if std::fs::create_dir(d).is_err() {
            return libc::EIO;
        }
    }
    let opts = "lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w";
    let with = format!("{opts},userxattr");
    match mount(
        Some("overlay"),
        "/tmp/m",
        Some("overlay"),
        MsFlags::empty(),
        Some(with.as_str()),
    )
    .or_else(|_| {
        mount(
            Some("overlay"),
            "/tmp/m",
            Some("overlay"),
            MsFlags::empty(),
            Some(opts),
        )
    }) {
        Ok(()) => 0,
        Err(e) => errno_of(e),
    }
}

#[cfg(target_arch = "x86_64")]
fn foreign_paths() -> (bool, bool) {
    // The i386 gate: getpid (20) through int 0x80 returns our pid when emulation is on.
    let i386 = in_child(|| {
        let ret: i32;
        // SAFETY: i386 getpid touches no memory; r8-r11 may be clobbered on this path.
        unsafe {
            std::arch::asm!("int 0x80", inlateout("eax") 20i32 => ret,
                lateout("r8") _, lateout("r9") _, lateout("r10") _, lateout("r11") _, options(nostack));
        }
        i32::from(ret != std::process::id() as i32)
    }) == 0;
    // x32 getpid (39 | 0x40000000): ENOSYS unless the kernel has the x32 ABI enabled.
    // SAFETY: a raw syscall that touches no memory.
    let x32 = unsafe { libc::syscall(39 | 0x4000_0000) } > 0;
    (i386, x32)
}

#[cfg(not(target_arch = "x86_64"))]
fn foreign_paths() -> (bool, bool) {
    (false, false)
}

/// Probe everything.
pub fn diagnose() -> Diagnosis {
    let root = nix::unistd::geteuid().is_root();
    let mut checks = Vec::new();

    let max_ns = sysctl("/proc/sys/user/max_user_namespaces");
    let clone = sysctl("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let userns = in_child(|| try_userns(false));
    let mut found = format!("unshare(CLONE_NEWUSER) as uid {}: ", nix::unistd::geteuid());
    found += &if userns == 0 {
        "works".to_string()
    } else {
        std::io::Error::from_raw_os_error(userns).to_string()
    };
    found += &format!(
        "; user.max_user_namespaces={}",
        max_ns.as_deref().unwrap_or("?")
    );
    if let Some(c) = &clone {
        found += &format!(", kernel.unprivileged_userns_clone={c}");
    }
    if let Some(a) = &apparmor {
        found += &format!(", kernel.apparmor_restrict_unprivileged_userns={a}");
    }
    let aa = crate::apparmor::Facts::probe();
    if aa.restricted {
        found += &format!("; {}", aa.describe());
    }
    let fix = if max_ns.as_deref() == Some("0") {
        "sysctl -w user.max_user_namespaces=15000".into()
    } else if clone.as_deref() == Some("0") {
        "sysctl -w kernel.unprivileged_userns_clone=1".into()
    } else if let Some(h) = crate::apparmor::hint(&aa) {
        h
    } else {
        "inside a container: allow unshare/clone of user namespaces in its seccomp and AppArmor profiles".into()
    };
    checks.push(check("userns", userns == 0, found, Some(fix)));

    let overlay = if userns == 0 {
        in_child(|| try_userns(true))
    } else {
        userns
    };
    let found = if overlay == 0 {
        "mounted inside a user namespace".to_string()
    } else {
        std::io::Error::from_raw_os_error(overlay).to_string()
    };
    checks.push(check(
        "overlay",
        overlay == 0,
        found,
        Some("Linux 5.11+ with CONFIG_OVERLAY_FS; or use filesystem.repo = \"ro\"/\"rw\"".into()),
    ));

    let abi = crate::layers::landlock::kernel_abi();
    // SAFETY: LANDLOCK_CREATE_RULESET_ERRATA (2) only returns a bitmask; reads no memory.
    let errata = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            2u32,
        )
    };
    let mut found = if abi == 0 {
        "not available".to_string()
    } else {
        format!("ABI {abi}")
    };
    if abi > 0 {
        let missing = crate::layers::landlock::missing_at(
            abi,
            &crate::layers::landlock::Spec {
                tcp_connect: Some(vec![]),
                scope: true,
                ..Default::default()
            },
        );
        if !missing.is_empty() {
            found += &format!(" (no {})", missing.join(", no "));
        }
        if errata >= 0 {
            found += &format!(", errata {errata:#x}");
        }
    }
    checks.push(check("landlock", abi > 0, found, Some("Linux 5.13+ with landlock in the lsm= boot parameter (e.g. lsm=landlock,lockdown,yama,apparmor,bpf)".into())));

    // SAFETY: PR_GET_SECCOMP reads this process's mode.
    let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP) } >= 0;
    checks.push(check(
        "seccomp",
        seccomp,
        if seccomp { "available" } else { "not built in" },
        Some("a kernel with CONFIG_SECCOMP_FILTER".into()),
    ));
    let (i386, x32) = foreign_paths();
    checks.push(check(
        "i386",
        true,
        if i386 {
            "enabled: int 0x80 works outside the sandbox (the filter kills it inside)"
        } else {
            "disabled"
        },
        None,
    ));
    checks.push(check(
        "x32",
        true,
        if x32 {
            "enabled (the filter kills x32 numbers inside)"
        } else {
            "disabled"
        },
        None,
    ));

    let detected = cgroup::Host::detect();
    // Nothing delegated to this user, but each run asks systemd --user for a delegated scope.
    let scope_from = match &detected {
        Err(e) if e.remedy() == cgroup::Remedy::DelegateV2 && !root => {
            cgroup::user_manager_answers()
                .map_err(|why| tracing::debug!("no systemd --user to ask: {why}"))
                .ok()
        }
        _ => None,
    };
    match detected {
        Err(_) if scope_from.is_some() => checks.push(check(
            "cgroup",
            true,
            format!(
                "cgroup v2, nothing delegated to this user: each run asks systemd --user (at {}) for a delegated scope",
                scope_from.as_deref().unwrap_or(std::path::Path::new("?")).display()
            ),
            None,
        )),
        Ok(h) => {
            let v2 = h.version() == cgroup::Version::V2;
            checks.push(check("cgroup", true, h.describe(), None));
            let parent = h.leaf_parents().first().map(|p| p.to_path_buf());
            // Whether the kernel gives `f` in a cgroup like the run's leaf. The leaf's parent
            // may not exist yet (root's first run makes `/sys/fs/cgroup/sandbox-run`) and the
            // root cgroup has neither file: then a sibling of the parent (`system.slice`, ...)
            // tells.
            let has = |f: &str| {
                parent.as_ref().is_some_and(|p| {
                    p.join(f).exists()
                        || p.parent().is_some_and(|pp| {
                            pp.join(f).exists()
                                || std::fs::read_dir(pp).is_ok_and(|d| {
                                    d.flatten().any(|e| e.path().join(f).exists())
                                })
                        })
                })
            };
            if v2 {
                let kill = has("cgroup.kill");
                checks.push(check(
                    "cgroup.kill",
                    kill,
                    if kill {
                        "present"
                    } else {
                        "absent: kill by freezer and SIGKILL loop"
                    },
                    Some("Linux 5.14+".into()),
                ));
                let peak = has("memory.peak");
                checks.push(check(
                    "memory.peak",
                    peak,
                    if peak {
                        "present"
                    } else {
                        "absent: no peak memory in reports"
                    },
                    Some("Linux 5.19+".into()),
                ));
            } else {
                checks.push(check(
                    "cgroup.kill",
                    true,
                    "cgroup v1: kill by freezer and SIGKILL loop",
                    None,
                ));
                checks.push(check(
                    "memory.peak",
                    true,
                    "cgroup v1: memory.max_usage_in_bytes",
                    None,
                ));
            }
        }
        Err(e) => {
            // What works here, safest first; last, for each shipped profile that requires
            // the cgroup, the profile that runs it without.
            let needy: Vec<Profile> = BUILTIN
                .iter()
                .filter_map(|(name, _)| crate::profile::Loader { dirs: vec![] }.load(name).ok())
                .filter(|p| p.layers.cgroup == Requirement::Required)
                .collect();
            let needy: Vec<&Profile> = needy.iter().collect();
            let facts = crate::advice::Facts::probe();
            let mut fixes = crate::advice::cgroup_fixes(&e, &facts, &needy);
            if root && e.hint.is_none() {
                fixes.insert(
                    0,
                    "mount cgroup2 at /sys/fs/cgroup (or the memory, cpu and pids v1 controllers)"
                        .into(),
                );
            }
            let mut c = check(
                "cgroup",
                false,
                e.without_hint().to_string(),
                Some(crate::advice::numbered(&fixes)),
            );
            c.fixes = fixes;
            checks.push(c);
        }
    }

    let tiocsti = sysctl("/proc/sys/dev/tty/legacy_tiocsti");
    let legacy = tiocsti.as_deref() == Some("1");
    checks.push(check(
        "tiocsti",
        !legacy,
        match tiocsti.as_deref() {
            Some("1") => "dev.tty.legacy_tiocsti=1: TIOCSTI works on this host (denied inside by the filter)",
            Some(_) => "dev.tty.legacy_tiocsti=0",
            None => "no legacy_tiocsti switch (kernel before 6.2): TIOCSTI works (denied inside by the filter)",
        },
        Some("sysctl -w dev.tty.legacy_tiocsti=0".into()),
    ));

    let ok = |k: &str| checks.iter().any(|c| c.key == k && c.ok);
    let profiles = BUILTIN
        .iter()
        .filter_map(|(name, _)| crate::profile::Loader { dirs: vec![] }.load(name).ok())
        .map(|p| judge(&p, ok("userns"), ok("overlay"), abi, seccomp, ok("cgroup")))
        .collect();
    Diagnosis {
        checks,
        landlock_abi: abi,
        profiles,
    }
}

/// Can `p` run here, fully or degraded?
pub fn judge(
    p: &Profile,
    userns: bool,
    overlay: bool,
    abi: u8,
    seccomp: bool,
    cgroup: bool,
) -> ProfileVerdict {
    let l = &p.layers;
    let needs_overlay = p.filesystem.repo == crate::profile::RepoMode::Overlay;
    let layers: [(&'static str, Requirement, bool); 5] = [
        ("namespaces", l.namespaces, userns),
        (
            "filesystem",
            l.filesystem,
            userns && (overlay || !needs_overlay),
        ),
        ("landlock", l.landlock, abi >= l.landlock_min_abi.max(1)),
        ("seccomp", l.seccomp, seccomp),
        ("cgroup", l.cgroup, cgroup),
    ];
    let mut v = ProfileVerdict {
        profile: p.name.clone(),
        full: true,
        runs: true,
        missing_required: vec![],
        degraded: vec![],
    };
    for (name, req, have) in layers {
        if !have {
            v.full = false;
            match req {
                Requirement::Required => {
                    v.runs = false;
                    v.missing_required.push(name);
                }
                Requirement::BestEffort => v.degraded.push(name),
            }
        }
    }
    // Without namespaces a run is confined by landlock alone as far as files go: plan::build
    // refuses one that would have neither.
    if !userns && v.runs && abi < l.landlock_min_abi.max(1) {
        v.runs = false;
        v.missing_required.push("landlock");
    }
    v
}

/// Human output; the exit code: see [`exit_code`].
pub fn print(d: &Diagnosis) -> i32 {
    for c in &d.checks {
        let mark = match c.severity {
            Severity::Ok => "ok",
            Severity::Advice => "advice",
            Severity::Fail => "FAIL",
        };
        println!("{mark:<6} {:<12} {}", c.key, c.found);
        if !c.fixes.is_empty() {
            println!("       {:<12} fix, safest first:", "");
            for (i, f) in c.fixes.iter().enumerate() {
                println!("       {:<12} {}) {f}", "", i + 1);
            }
        } else if let Some(f) = &c.fix {
            println!("       {:<12} fix: {f}", "");
        }
    }
    println!();
    for p in &d.profiles {
        let state = if p.full {
            "runs with every layer".to_string()
        } else if p.runs {
            format!("runs degraded (without {})", p.degraded.join(", "))
        } else {
            format!("cannot run: requires {}", p.missing_required.join(", "))
        };
        println!("profile {:<14} {state}", p.profile);
    }
    let code = exit_code(d);
    println!(
        "{}",
        if code == 0 {
            "verdict: every shipped profile runs with every layer (exit 0)"
        } else {
            "verdict: a shipped profile cannot run with every layer (exit 1)"
        }
    );
    code
}

/// 0 when every shipped profile runs with every layer (no check is a FAIL), else 1: a script
/// that runs `sandbox-run doctor` as a gate stops on any line it prints as FAIL, and never on
/// advice.
pub fn exit_code(d: &Diagnosis) -> i32 {
    let failed = d.checks.iter().any(|c| c.severity == Severity::Fail);
    if !failed && d.profiles.iter().all(|p| p.full) {
        0
    } else {
        1
    }
}

/// The README's "Host requirements" table.
pub fn requirements_markdown() -> String {
    let mut s = String::from("| check | requirement | what it gives |\n|---|---|---|\n");
    for (key, what, why) in REQUIREMENTS {
        s += &format!("| `{key}` | {what} | {why} |\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(name: &str) -> Profile {
        crate::profile::Loader { dirs: vec![] }.load(name).unwrap()
    }

    #[test]
    fn a_failed_layer_check_or_degraded_profile_is_a_nonzero_exit_advice_is_not() {
        let full = |p: &str| ProfileVerdict {
            profile: p.into(),
            full: true,
            runs: true,
            missing_required: vec![],
            degraded: vec![],
        };
        let mut d = Diagnosis {
            checks: vec![check("seccomp", true, "available", None)],
            landlock_abi: 7,
            profiles: vec![full("validate")],
        };
        assert_eq!(exit_code(&d), 0);
        d.checks
            .push(check("tiocsti", false, "dev.tty.legacy_tiocsti=1", None));
        assert_eq!(d.checks[1].severity, Severity::Advice);
        assert_eq!(exit_code(&d), 0, "advice the filter already covers exits 0");
        for key in ["memory.peak", "cgroup.kill"] {
            assert_eq!(check(key, false, "absent", None).severity, Severity::Advice);
        }
        d.checks.push(check("cgroup", false, "no cgroup", None));
        assert_eq!(d.checks[2].severity, Severity::Fail);
        assert_eq!(exit_code(&d), 1, "a FAIL line exits 1");
        d.checks.truncate(1);
        d.profiles[0].full = false;
        assert_eq!(exit_code(&d), 1, "a degraded profile exits 1");
    }

    #[test]
    fn validate_needs_everything_and_ci_degrades() {
        let v = judge(&profile("validate"), true, true, 7, true, true);
        assert!(v.full && v.runs);
        let v = judge(&profile("validate"), true, true, 0, true, false);
        assert!(!v.runs);
        assert_eq!(v.missing_required, ["landlock", "cgroup"]);
        let v = judge(&profile("validate"), true, false, 7, true, true);
        assert_eq!(
            v.missing_required,
            ["filesystem"],
            "validate's overlay needs overlayfs in a userns"
        );
        let v = judge(&profile("ci"), true, false, 0, true, false);
        assert!(
            v.runs && !v.full,
            "ci's repo is rw: no overlay needed; landlock and cgroup are best-effort"
        );
        assert_eq!(v.degraded, ["landlock", "cgroup"]);
        assert!(!judge(&profile("ci"), false, true, 7, true, true).runs);
    }

    #[test]
    fn namespaces_degrade_only_with_landlock_and_a_best_effort_filesystem() {
        let mut p = profile("ci");
        p.layers.namespaces = Requirement::BestEffort;
        p.layers.filesystem = Requirement::BestEffort;
        let v = judge(&p, false, false, 7, true, true);
        assert!(v.runs && !v.full);
        assert_eq!(v.degraded, ["namespaces", "filesystem"]);
        let v = judge(&p, false, false, 0, true, true);
        assert!(
            !v.runs,
            "no namespaces and no landlock: nothing confines the files"
        );
        assert_eq!(v.missing_required, ["landlock"]);
        p.layers.filesystem = Requirement::Required;
        let v = judge(&p, false, true, 7, true, true);
        assert!(!v.runs);
        assert_eq!(v.missing_required, ["filesystem"]);
    }
}
