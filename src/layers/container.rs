//! Inside a container: which of its settings refused a step of the sandbox, and what to change.
//!
//! A CI runner's container (Docker's defaults, a Kubernetes pod) refuses some steps for reasons
//! of its own, not the kernel's: its seccomp profile refuses `unshare` and `mount` without
//! CAP_SYS_ADMIN, and its masked `/proc` paths and read-only `/proc/sys` make the kernel refuse
//! the sandbox a `/proc` of its own and the write of its per-user limits. The generic advice
//! (sysctls) changes nothing there; the line must name the container's setting. Checked in
//! `scripts/container-test`, which runs each case in a real container; docs/containers.md gives
//! the settings in full.
//!
//! Supervisor side only: read after a step failed, from /proc/self (the supervisor and stage 2
//! run under the same filter and the same mounts).

use crate::layers::Step;

/// What decides the hint, read from this process and the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// This process runs under a seccomp filter (`Seccomp: 2` in /proc/self/status).
    pub seccomp_filtered: bool,
    /// A sysctl refuses user namespaces outright (`user.max_user_namespaces=0`,
    /// `kernel.unprivileged_userns_clone=0`) or AppArmor restricts them: then that, not the
    /// container's filter, is the likely cause, and the generic advice stands.
    pub sysctl_refuses: bool,
}

impl Facts {
    pub fn probe() -> Facts {
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
        let status = read("/proc/self/status").unwrap_or_default();
        let is = |p: &str, v: &str| read(p).is_ok_and(|s| s == v);
        Facts {
            seccomp_filtered: seccomp_mode(&status) == Some(2),
            sysctl_refuses: is("/proc/sys/user/max_user_namespaces", "0")
                || is("/proc/sys/kernel/unprivileged_userns_clone", "0")
                || is(
                    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                    "1",
                ),
        }
    }
}

/// The `Seccomp:` field of a /proc/PID/status text: 0 none, 1 strict, 2 filter.
fn seccomp_mode(status: &str) -> Option<u8> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The seccomp filter of a container refused a new user namespace.
pub const SECCOMP: &str = " (this process runs under a seccomp filter, as in a container: Docker's default profile and containerd's (Kubernetes' RuntimeDefault) refuse unshare, clone of namespaces and mount without CAP_SYS_ADMIN; give the container a profile that allows them (docker run --security-opt seccomp=FILE; Kubernetes: seccompProfile type Localhost; docs/containers.md makes one from Docker's), or rerun with --without namespaces (landlock and seccomp only, reported degraded; as root, the repo must then belong to an unprivileged user or the profile set process.uid))";

/// The container's masked /proc or read-only /proc/sys refused the sandbox's /proc or limits.
pub const PROC: &str = " (this container masks parts of /proc or mounts /proc/sys read-only, as Docker, containerd and Kubernetes do by default, and the kernel then refuses the sandbox a /proc of its own: run the container with --security-opt systempaths=unconfined (Docker; Podman: --security-opt unmask=ALL), or in Kubernetes with securityContext.procMount: Unmasked (it needs hostUsers: false); see docs/containers.md)";

/// The hint for `step` failing with `errno`, when a container's setting is the likely cause;
/// `None` keeps the step's generic advice.
pub fn hint(step: Step, errno: i32, facts: Facts) -> Option<&'static str> {
    match (step, errno) {
        (Step::UnshareUser, libc::EPERM) if facts.seccomp_filtered && !facts.sysctl_refuses => {
            Some(SECCOMP)
        }
        // The write of the lowered per-user limits, on a read-only /proc/sys.
        (Step::UserLimits, libc::EROFS) => Some(PROC),
        // mount_too_revealing: a fresh proc needs the caller's /proc fully visible.
        (Step::MountProc, libc::EPERM) => Some(PROC),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seccomp_mode_is_read_from_the_status_text() {
        let status = "Name:\tsh\nNoNewPrivs:\t0\nSeccomp:\t2\nSeccomp_filters:\t1\n";
        assert_eq!(seccomp_mode(status), Some(2));
        assert_eq!(seccomp_mode("Seccomp:\t0\n"), Some(0));
        assert_eq!(seccomp_mode("Name:\tsh\n"), None);
    }

    #[test]
    fn a_refused_userns_names_the_container_profile_only_under_a_filter() {
        let filtered = Facts {
            seccomp_filtered: true,
            sysctl_refuses: false,
        };
        let h = hint(Step::UnshareUser, libc::EPERM, filtered).unwrap();
        assert!(h.contains("--security-opt seccomp=FILE"), "{h}");
        assert!(h.contains("seccompProfile type Localhost"), "{h}");
        assert!(h.contains("--without namespaces"), "{h}");
        // No filter, or a sysctl that refuses them anyway: the generic advice.
        assert_eq!(hint(Step::UnshareUser, libc::EPERM, Facts::default()), None);
        let sysctl = Facts {
            sysctl_refuses: true,
            ..filtered
        };
        assert_eq!(hint(Step::UnshareUser, libc::EPERM, sysctl), None);
        // ENOSPC is the max_user_namespaces count, never a filter.
        assert_eq!(hint(Step::UnshareUser, libc::ENOSPC, filtered), None);
    }

    #[test]
    fn a_covered_proc_names_the_setting_that_unmasks_it() {
        for (step, errno) in [
            (Step::UserLimits, libc::EROFS),
            (Step::MountProc, libc::EPERM),
        ] {
            let h = hint(step, errno, Facts::default()).unwrap();
            assert!(h.contains("systempaths=unconfined"), "{h}");
            assert!(h.contains("procMount: Unmasked"), "{h}");
        }
        assert_eq!(hint(Step::MountProc, libc::ENOENT, Facts::default()), None);
    }

    #[test]
    fn hints_are_one_line() {
        assert!(!SECCOMP.contains('\n') && !PROC.contains('\n'));
    }
}
