//! Ubuntu's AppArmor restriction on unprivileged user namespaces, and the way out of it.
//!
//! Ubuntu 23.10 and later set `kernel.apparmor_restrict_unprivileged_userns=1`: a process
//! without `CAP_SYS_ADMIN` that no AppArmor profile names may still `unshare` a user
//! namespace, but gets no capability in it (writing its `uid_map` or mounting fails with
//! EPERM), or cannot make one at all. A profile that names the binary and allows `userns`
//! lifts it: the package ships one (`packaging/apparmor/sandbox-run`, installed as
//! `/etc/apparmor.d/sandbox-run` where the host's AppArmor reads it). Profiles attach by path,
//! so a binary elsewhere (cargo install, npm) needs its own: [`hint`] writes the command.
//!
//! Everything is read from files (the sysctl, this process's label, the loaded profiles),
//! under a root directory that the unit tests replace. Reads only; changes nothing.

use std::path::{Path, PathBuf};

/// The sysctl, 1 when the restriction is on.
pub const RESTRICT: &str = "proc/sys/kernel/apparmor_restrict_unprivileged_userns";
/// The names of the loaded profiles, one `NAME (MODE)` a line (readable by root only).
pub const PROFILES: &str = "sys/kernel/security/apparmor/profiles";
/// This process's label: `unconfined`, or `NAME (MODE)`. The first is the LSM-specific file
/// (Linux 5.8+), the second the shared one, which another LSM may own.
pub const LABEL: &[&str] = &["proc/self/attr/apparmor/current", "proc/self/attr/current"];
/// Where the package puts the profile, and its name.
pub const SHIPPED_PATH: &str = "/usr/bin/sandbox-run";
pub const SHIPPED_NAME: &str = "sandbox-run";

/// What decides whether the restriction stops this binary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The sysctl reads 1.
    pub restricted: bool,
    /// Root (euid 0): the restriction spares callers with CAP_SYS_ADMIN.
    pub root: bool,
    /// This process's AppArmor label, when AppArmor owns the file (`None` without AppArmor).
    pub label: Option<String>,
    /// The names of the loaded profiles (`None` when unreadable, as for every user but root).
    pub loaded: Option<Vec<String>>,
    /// This binary.
    pub exe: PathBuf,
    /// The profile file for this binary exists in /etc/apparmor.d (installed, maybe not loaded).
    pub installed: bool,
}

impl Facts {
    /// This host and process.
    pub fn probe() -> Facts {
        let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
        Facts::read_under(Path::new("/"), exe, nix::unistd::geteuid().is_root())
    }

    /// Read the files under `root` (`/` on a real host).
    pub fn read_under(root: &Path, exe: PathBuf, is_root: bool) -> Facts {
        let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
        let restricted = read(RESTRICT).is_some_and(|s| s.trim() == "1");
        // The shared attr file holds another LSM's label when AppArmor is not the one
        // (SELinux's `system_u:...`): take it only from AppArmor's own file, or when it
        // looks like AppArmor's (`unconfined` or `NAME (MODE)`).
        let label = LABEL.iter().enumerate().find_map(|(i, p)| {
            let l = read(p)?.trim_end_matches(['\n', '\0']).trim().to_string();
            let apparmor_like = l == "unconfined" || l.ends_with(')');
            (!l.is_empty() && (i == 0 || apparmor_like)).then_some(l)
        });
        let loaded = read(PROFILES).map(|s| {
            s.lines()
                .map(|l| strip_mode(l).to_string())
                .filter(|l| !l.is_empty())
                .collect()
        });
        let file = Path::new("etc/apparmor.d").join(profile_for(&exe).0);
        Facts {
            restricted,
            root: is_root,
            label,
            loaded,
            installed: root.join(file).is_file(),
            exe,
        }
    }

    /// The profile this process runs under, if any (`None` when unconfined).
    pub fn profile(&self) -> Option<&str> {
        let l = self.label.as_deref()?;
        (l != "unconfined").then(|| strip_mode(l))
    }

    /// The restriction applies to this process: on, not root, and no profile names us.
    pub fn stops_us(&self) -> bool {
        self.restricted && !self.root && self.profile().is_none()
    }

    /// What doctor adds to its user-namespace finding: the profile in force, loaded or not.
    pub fn describe(&self) -> String {
        let (file, name) = profile_for(&self.exe);
        let mut s = match self.profile() {
            Some(p) => format!("AppArmor profile {p} applies to this process"),
            None => format!("no AppArmor profile applies to {}", self.exe.display()),
        };
        match &self.loaded {
            Some(names) if names.contains(&name) => s += &format!(" (profile {name} is loaded)"),
            Some(_) => s += &format!(" (profile {name} is not loaded)"),
            None => {}
        }
        if self.installed {
            s += &format!("; /etc/apparmor.d/{file} is installed");
        }
        s
    }
}

/// `NAME (MODE)` → `NAME`.
fn strip_mode(l: &str) -> &str {
    let l = l.trim();
    match l.rfind(" (") {
        Some(i) if l.ends_with(')') => &l[..i],
        _ => l,
    }
}

/// The file name in /etc/apparmor.d and the profile name for a binary at `exe`: the shipped
/// ones for /usr/bin/sandbox-run, else AppArmor's convention (the path, `/` as `.`: the file
/// `home.u..cargo.bin.sandbox-run`, the profile named by the path itself).
pub fn profile_for(exe: &Path) -> (String, String) {
    let p = exe.to_string_lossy();
    if p == SHIPPED_PATH {
        return (SHIPPED_NAME.into(), SHIPPED_NAME.into());
    }
    (p.trim_start_matches('/').replace('/', "."), p.into_owned())
}

/// The profile's text for a binary at `exe`, as shipped, on as few lines as it takes.
pub fn profile_lines(exe: &Path) -> Vec<String> {
    let (_, name) = profile_for(exe);
    let head = if name == SHIPPED_NAME {
        format!("profile {name} {SHIPPED_PATH} flags=(unconfined) {{")
    } else {
        format!("profile {name} flags=(unconfined) {{")
    };
    vec![
        "abi <abi/4.0>,".into(),
        "include <tunables/global>".into(),
        head,
        "  userns,".into(),
        "}".into(),
    ]
}

/// When the restriction stops this binary: one clause that says so and how to lift it (no
/// trailing period, no newline). `None` when it does not apply.
pub fn hint(f: &Facts) -> Option<String> {
    if !f.restricted || f.root {
        return None;
    }
    let knob = "kernel.apparmor_restrict_unprivileged_userns=1";
    if let Some(p) = f.profile() {
        return Some(format!(
            "{knob} and this process runs under AppArmor profile {p}, which must allow user namespaces: add 'userns,' to it (for the shipped profile: in /etc/apparmor.d/local/sandbox-run) and reload it with apparmor_parser -r"
        ));
    }
    let (file, _) = profile_for(&f.exe);
    let target = format!("/etc/apparmor.d/{file}");
    if f.installed {
        return Some(format!(
            "{knob} (Ubuntu's AppArmor restriction on user namespaces) and the profile {target} that lifts it for {} is not loaded: as root, apparmor_parser -r {target}",
            f.exe.display()
        ));
    }
    let mut s = format!(
        "{knob}: Ubuntu's AppArmor lets no program without a profile use user namespaces, and none names {}",
        f.exe.display()
    );
    if f.exe == Path::new(SHIPPED_PATH) {
        s += ": install the .deb, which installs and loads /etc/apparmor.d/sandbox-run (if it was installed before AppArmor: dpkg -i it again), or";
    } else {
        s += " (profiles attach by path; the .deb's covers /usr/bin/sandbox-run only):";
    }
    let plain = f
        .exe
        .to_string_lossy()
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._+-".contains(&b));
    if plain && f.exe.is_absolute() {
        let lines: Vec<String> = profile_lines(&f.exe)
            .iter()
            .map(|l| format!("'{l}'"))
            .collect();
        s += &format!(
            " as root, printf '%s\\n' {} > {target} && apparmor_parser -r {target}",
            lines.join(" ")
        );
    } else {
        s += &format!(
            " as root, copy packaging/apparmor/sandbox-run to {target} with {SHIPPED_PATH} on its profile line changed to this binary's path, then apparmor_parser -r {target}"
        );
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory laid out like / with the given files.
    fn host(files: &[(&str, &str)]) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("sbx-apparmor-{}-{n}", std::process::id()));
        for (p, text) in files {
            let p = d.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        d
    }

    const USR: &str = "/usr/bin/sandbox-run";

    #[test]
    fn ubuntu_without_the_profile_names_the_deb_and_the_command() {
        let d = host(&[
            (RESTRICT, "1\n"),
            (LABEL[0], "unconfined\n"),
            (
                PROFILES,
                "unprivileged_userns (enforce)\nbwrap (unconfined)\n",
            ),
        ]);
        let f = Facts::read_under(&d, USR.into(), false);
        assert!(f.restricted && f.stops_us() && !f.installed, "{f:?}");
        assert_eq!(
            f.loaded.as_ref().unwrap(),
            &["unprivileged_userns", "bwrap"]
        );
        let h = hint(&f).unwrap();
        assert!(
            h.starts_with("kernel.apparmor_restrict_unprivileged_userns=1: "),
            "{h}"
        );
        assert!(h.contains("install the .deb"), "{h}");
        assert!(h.ends_with(
            "as root, printf '%s\\n' 'abi <abi/4.0>,' 'include <tunables/global>' 'profile sandbox-run /usr/bin/sandbox-run flags=(unconfined) {' '  userns,' '}' > /etc/apparmor.d/sandbox-run && apparmor_parser -r /etc/apparmor.d/sandbox-run"
        ), "{h}");
        assert!(!h.contains('\n') && !h.contains("sudo"), "{h}");
        assert_eq!(
            f.describe(),
            "no AppArmor profile applies to /usr/bin/sandbox-run (profile sandbox-run is not loaded)"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_one_line_profile_is_the_shipped_one() {
        let shipped = include_str!("../packaging/apparmor/sandbox-run");
        let rules: Vec<&str> = shipped
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .filter(|l| !l.contains("include if exists"))
            .collect();
        assert_eq!(rules, profile_lines(Path::new(USR)));
    }

    #[test]
    fn installed_but_not_loaded_says_load_it() {
        let d = host(&[
            (RESTRICT, "1"),
            (LABEL[0], "unconfined"),
            ("etc/apparmor.d/sandbox-run", "profile"),
        ]);
        let f = Facts::read_under(&d, USR.into(), false);
        assert!(f.installed && f.loaded.is_none());
        let h = hint(&f).unwrap();
        assert!(
            h.ends_with("is not loaded: as root, apparmor_parser -r /etc/apparmor.d/sandbox-run"),
            "{h}"
        );
        assert_eq!(
            f.describe(),
            "no AppArmor profile applies to /usr/bin/sandbox-run; /etc/apparmor.d/sandbox-run is installed"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_binary_elsewhere_gets_a_profile_of_its_own_path() {
        let d = host(&[(RESTRICT, "1"), (LABEL[1], "unconfined")]);
        let exe = PathBuf::from("/home/u/.cargo/bin/sandbox-run");
        let f = Facts::read_under(&d, exe.clone(), false);
        let h = hint(&f).unwrap();
        assert!(
            h.contains("the .deb's covers /usr/bin/sandbox-run only"),
            "{h}"
        );
        assert!(h.ends_with(
            "'profile /home/u/.cargo/bin/sandbox-run flags=(unconfined) {' '  userns,' '}' > /etc/apparmor.d/home.u..cargo.bin.sandbox-run && apparmor_parser -r /etc/apparmor.d/home.u..cargo.bin.sandbox-run"
        ), "{h}");
        // A path a shell or AppArmor would read otherwise: words, not a command.
        let f = Facts::read_under(&d, "/opt/my tools/sandbox-run".into(), false);
        let h = hint(&f).unwrap();
        assert!(h.contains("copy packaging/apparmor/sandbox-run to "), "{h}");
        assert!(!h.contains("printf"), "{h}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn no_hint_without_the_restriction_as_root_or_with_another_lsm() {
        let d = host(&[(RESTRICT, "0"), (LABEL[0], "unconfined")]);
        assert_eq!(hint(&Facts::read_under(&d, USR.into(), false)), None);
        let d2 = host(&[(RESTRICT, "1"), (LABEL[0], "unconfined")]);
        let f = Facts::read_under(&d2, USR.into(), true);
        assert!(!f.stops_us());
        assert_eq!(hint(&f), None, "root is spared by the kernel");
        // No sysctl at all (not Ubuntu, or no AppArmor): nothing to say.
        let d3 = host(&[]);
        let f = Facts::read_under(&d3, USR.into(), false);
        assert!(!f.restricted && f.label.is_none() && f.loaded.is_none());
        assert_eq!(hint(&f), None);
        // SELinux owns the shared attr file: not a label of ours.
        let d4 = host(&[(LABEL[1], "unconfined_u:unconfined_r:unconfined_t:s0\0")]);
        assert_eq!(Facts::read_under(&d4, USR.into(), false).label, None);
        for d in [d, d2, d3, d4] {
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[test]
    fn a_profile_in_force_is_named_and_must_allow_userns() {
        let d = host(&[
            (RESTRICT, "1"),
            (LABEL[0], "sandbox-run (unconfined)\n"),
            (PROFILES, "sandbox-run (unconfined)\n"),
        ]);
        let f = Facts::read_under(&d, USR.into(), false);
        assert_eq!(f.profile(), Some("sandbox-run"));
        assert!(!f.stops_us());
        assert_eq!(
            f.describe(),
            "AppArmor profile sandbox-run applies to this process (profile sandbox-run is loaded)"
        );
        let h = hint(&f).unwrap();
        assert!(h.contains("runs under AppArmor profile sandbox-run, which must allow user namespaces: add 'userns,'"), "{h}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
