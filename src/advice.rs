//! Fixes that work on the host at hand, safest first, for a layer a profile requires but this
//! host or user cannot give (today: the cgroup).
//!
//! A generic fix that fails here is worse than none: on a hybrid host without systemd as
//! init, "reboot into cgroup v2 and use systemd-run" does nothing, and `systemd-run --user`
//! without a reachable user manager says "Failed to connect to bus". So each fix is offered
//! only where the facts probed here say it would work ([`Facts::probe`]), and the last one,
//! which always works, is written out literally: a three-line profile that marks the layer
//! best-effort, as a shell command that writes it, and the `--profile` to rerun with.
//!
//! Order: every layer without root (a delegated cgroup v2 subtree), every layer after a
//! reboot (again without root), every layer as root, then fewer layers.

use crate::layers::cgroup::{self, Remedy};
use crate::profile::{Loader, Profile};
use std::path::{Path, PathBuf};

/// What decides which fixes can work here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The caller is root (euid 0).
    pub root: bool,
    pub uid: u32,
    /// systemd is the init system (`/run/systemd/system` is a directory, as sd_booted(3)
    /// checks): only then does `systemd.unified_cgroup_hierarchy=1` on the kernel command
    /// line change anything.
    pub systemd_booted: bool,
    /// The kernel has cgroup v2 (`cgroup2` in /proc/filesystems).
    pub kernel_cgroup2: bool,
    /// A systemd user manager answers on this user's runtime dir (its private socket or the
    /// user bus accepts a connection). `Some("")` when `$XDG_RUNTIME_DIR` already points
    /// there, `Some("XDG_RUNTIME_DIR=/run/user/UID ")` when systemd-run needs it set.
    pub user_manager: Option<String>,
    /// The caller's profile directory (`~/.config/sandbox-run/profiles`).
    pub profile_dir: Option<PathBuf>,
    /// `sudo` is on PATH and the caller is in a group that usually may use it
    /// ([`sudo_usable`]): only then does advice say `sudo`, else "as root".
    pub sudo: bool,
}

impl Facts {
    /// Probe this host. Reads a few files and tries to connect to two unix sockets; changes
    /// nothing.
    pub fn probe() -> Facts {
        let uid = nix::unistd::geteuid().as_raw();
        let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        Facts {
            root: uid == 0,
            uid,
            systemd_booted: Path::new("/run/systemd/system").is_dir(),
            kernel_cgroup2: filesystems
                .lines()
                .any(|l| l.split_whitespace().last() == Some("cgroup2")),
            user_manager: user_manager(uid),
            profile_dir: Loader::user_dir(),
            sudo: sudo_usable(),
        }
    }
}

/// Does a systemd user manager answer for `uid`? (See [`Facts::user_manager`].)
fn user_manager(uid: u32) -> Option<String> {
    let env = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let default = PathBuf::from(format!("/run/user/{uid}"));
    let dir = env.clone().unwrap_or_else(|| default.clone());
    let answers = ["systemd/private", "bus"]
        .iter()
        .any(|s| socket_answers(&dir.join(s)));
    if !answers {
        return None;
    }
    Some(if env.is_some() {
        String::new()
    } else {
        format!("XDG_RUNTIME_DIR={} ", sh_quote(&default.to_string_lossy()))
    })
}

/// Could the caller use sudo: an executable `sudo` in an absolute PATH entry, and the caller
/// in the `sudo`, `wheel` or `admin` group (where distributions grant it; sudoers itself is
/// root's to read). A guess that errs towards "as root", which is always right.
fn sudo_usable() -> bool {
    use std::os::unix::fs::PermissionsExt;
    let on_path = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            d.is_absolute()
                && std::fs::metadata(d.join("sudo"))
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    });
    if !on_path {
        return false;
    }
    let mine = nix::unistd::getgroups().unwrap_or_default();
    let egid = nix::unistd::getegid();
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    groups.lines().any(|l| {
        let f: Vec<&str> = l.split(':').collect();
        f.len() >= 3
            && ["sudo", "wheel", "admin"].contains(&f[0])
            && f[2]
                .parse()
                .is_ok_and(|g: u32| egid.as_raw() == g || mine.iter().any(|m| m.as_raw() == g))
    })
}

/// A unix stream socket at `path` accepts a connection (without blocking: a full backlog
/// counts as answering).
fn socket_answers(path: &Path) -> bool {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let Ok(addr) = UnixAddr::new(path) else {
        return false;
    };
    let Ok(fd) = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    ) else {
        return false;
    };
    use std::os::fd::AsRawFd;
    matches!(
        connect(fd.as_raw_fd(), &addr),
        Ok(()) | Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINPROGRESS)
    )
}

/// `s` as one shell word.
pub fn sh_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./=:,+@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The profile that runs `profile` here without the cgroup layer: its name, its file, and
/// the three lines in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BestEffortProfile {
    pub name: String,
    pub file: PathBuf,
    pub lines: [String; 3],
}

impl BestEffortProfile {
    /// For `profile`, in `dir` (the caller's profile directory, else the current one).
    pub fn new(profile: &Profile, dir: Option<&Path>) -> BestEffortProfile {
        // A profile given by path is extended by its resolved path; a named one by its name
        // (a name found in the same directory resolves as it did for the original).
        let by_path = profile.name.contains('/') || profile.name.ends_with(".toml");
        let (parent, stem) = if by_path {
            let src = profile
                .sources
                .first()
                .cloned()
                .unwrap_or(profile.name.clone());
            let stem = Path::new(&src)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "profile".into());
            (src, stem)
        } else {
            (profile.name.clone(), profile.name.clone())
        };
        let name = format!("{stem}-no-cgroup");
        let file = match dir {
            Some(d) => d.join(format!("{name}.toml")),
            None => PathBuf::from(format!("./{name}.toml")),
        };
        let extends = toml::Value::String(parent).to_string();
        BestEffortProfile {
            // Not in the user's directory: the profile is named by its path.
            name: if dir.is_some() {
                name
            } else {
                file.display().to_string()
            },
            file,
            lines: [
                format!("extends = {extends}"),
                "[layers]".into(),
                "cgroup = \"best-effort\"".into(),
            ],
        }
    }

    /// The shell command that writes the file.
    pub fn write_command(&self) -> String {
        let lines: Vec<String> = self.lines.iter().map(|l| sh_quote(l)).collect();
        let file = sh_quote(&self.file.to_string_lossy());
        let mkdir = match self.file.parent() {
            Some(d) if d != Path::new(".") && !d.as_os_str().is_empty() => {
                format!("mkdir -p {} && ", sh_quote(&d.to_string_lossy()))
            }
            _ => String::new(),
        };
        format!("{mkdir}printf '%s\\n' {} > {file}", lines.join(" "))
    }

    /// One line: what it costs, the command that writes it, the flag to rerun with.
    pub fn fix(&self, profile: &str) -> String {
        format!(
            "run profile {profile} without the cgroup layer (no memory, CPU or process-count caps; the timeout and rlimits still apply): rerun with --without cgroup, or for every run write a profile that marks it best-effort: {}, then rerun with --profile {}",
            self.write_command(),
            sh_quote(&self.name)
        )
    }
}

/// The fixes for a cgroup failure `err`, safest first. `profiles` are those that require
/// the cgroup layer and so cannot run: each gets its own best-effort profile, last.
pub fn cgroup_fixes(err: &cgroup::Error, facts: &Facts, profiles: &[&Profile]) -> Vec<String> {
    const DELEGATED: &str =
        "run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...'";
    let mut out = Vec::new();
    let remedy = err.remedy();
    match remedy {
        Remedy::DelegateV2 => {
            if let Some(env) = &facts.user_manager {
                out.push(format!(
                    "every layer, without root: your systemd user manager answers, so run under a cgroup it delegates: {env}systemd-run --user --scope -p Delegate=yes sandbox-run ..."
                ));
            }
            out.push(format!(
                "every layer, without root: have root delegate a cgroup v2 subtree to uid {} (chown the directory and its cgroup.procs, cgroup.subtree_control and cgroup.threads) and run sandbox-run from inside it",
                facts.uid
            ));
        }
        Remedy::UserControllers => out.push(format!(
            "every layer, without root: have root add /etc/systemd/system/user@.service.d/delegate.conf with '[Service]' and 'Delegate=cpu memory pids', then log in again and {DELEGATED}"
        )),
        Remedy::V1Rootless => {
            if facts.systemd_booted && facts.kernel_cgroup2 {
                out.push(format!(
                    "every layer, without root: reboot with systemd.unified_cgroup_hierarchy=1 on the kernel command line (pure cgroup v2), then, in a login session, {DELEGATED}"
                ));
            }
        }
        Remedy::ReadOnly | Remedy::Other => {
            if let Some(h) = &err.hint {
                out.push(h.clone());
            }
        }
    }
    if !facts.root && remedy != Remedy::ReadOnly {
        out.push(if facts.sudo {
            "every layer, as root: sudo sandbox-run ... (the command itself runs as the repo's owner)"
                .into()
        } else {
            "every layer, as root: run sandbox-run ... as root (the command itself runs as the repo's owner)"
                .into()
        });
    }
    for p in profiles {
        out.push(BestEffortProfile::new(p, facts.profile_dir.as_deref()).fix(&p.name));
    }
    out
}

/// The fixes on one line: `1) ...; 2) ...`.
pub fn numbered(fixes: &[String]) -> String {
    let n: Vec<String> = fixes
        .iter()
        .enumerate()
        .map(|(i, f)| format!("{}) {f}", i + 1))
        .collect();
    n.join("; ")
}

/// The fixes as one clause of a one-line error: `to fix, safest first: 1) ...; 2) ...`.
pub fn one_line(fixes: &[String]) -> String {
    format!("to fix, safest first: {}", numbered(fixes))
}

/// The refusal when `profile` requires the cgroup layer and `err` says there is none: two
/// short lines, what is missing and why it is fatal, then the quickest fix, the flag that
/// runs without the layer, and `doctor`, which lists every fix that works here (with the
/// profile to write) and the detection's details.
pub fn cgroup_refusal(err: &cgroup::Error, profile: &Profile, facts: &Facts) -> [String; 2] {
    let remedy = err.remedy();
    let why = match remedy {
        Remedy::V1Rootless => format!(
            "uid {} cannot have one here (the controllers are on cgroup v1, which is root's)",
            facts.uid
        ),
        Remedy::DelegateV2 => format!(
            "uid {} cannot have one here (cgroup v2 delegates no subtree to it)",
            facts.uid
        ),
        Remedy::UserControllers => format!(
            "uid {}'s delegated cgroup lacks the memory, cpu or pids controller",
            facts.uid
        ),
        Remedy::ReadOnly => "the cgroup filesystem is mounted read-only here".to_string(),
        Remedy::Other => err.without_hint().to_string(),
    };
    let first = format!(
        "profile {} requires the cgroup layer, but {why}",
        profile.name
    );
    let quick = match (remedy, &facts.user_manager) {
        (Remedy::DelegateV2, Some(env)) => format!(
            "{env}systemd-run --user --scope -p Delegate=yes sandbox-run ... (every layer), or "
        ),
        _ if facts.root || remedy == Remedy::ReadOnly => String::new(),
        _ if facts.sudo => "sudo sandbox-run ... (every layer), or ".into(),
        _ => "run it as root (every layer), or ".into(),
    };
    let second = format!(
        "to run: {quick}add --without cgroup (no memory, CPU or process caps); every fix: sandbox-run doctor"
    );
    [first, second]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate() -> Profile {
        Loader { dirs: vec![] }.load("validate").unwrap()
    }

    fn err(hint: &str) -> cgroup::Error {
        let mountinfo = "40 31 0:37 / /nonexistent-sbx/unified rw - cgroup2 cgroup2 rw\n";
        let mut e = cgroup::Host::detect_from(mountinfo, "0::/\n", 1001).unwrap_err();
        e.hint = Some(hint.into());
        e
    }

    /// A real hint constant, got from the error `detect_from` gives for a layout.
    fn v1_rootless() -> cgroup::Error {
        // one dir per call: the unit tests run in parallel threads of one process
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = std::env::temp_dir().join(format!("sbx-advice-{}-{n}", std::process::id()));
        for c in ["memory", "cpu", "pids"] {
            std::fs::create_dir_all(t.join(c)).unwrap();
        }
        let r = t.display();
        let mountinfo = format!(
            "35 31 0:32 / {r}/memory rw - cgroup cgroup rw,memory\n\
             32 31 0:29 / {r}/cpu rw - cgroup cgroup rw,cpu\n\
             39 31 0:36 / {r}/pids rw - cgroup cgroup rw,pids\n"
        );
        let e = cgroup::Host::detect_from(&mountinfo, "8:pids:/\n4:memory:/\n1:cpu:/\n", 4242)
            .unwrap_err();
        let _ = std::fs::remove_dir_all(&t);
        e
    }

    fn facts() -> Facts {
        Facts {
            root: false,
            uid: 1001,
            systemd_booted: false,
            kernel_cgroup2: true,
            user_manager: None,
            profile_dir: Some("/home/u/.config/sandbox-run/profiles".into()),
            sudo: true,
        }
    }

    #[test]
    fn hybrid_host_without_systemd_offers_root_then_the_profile() {
        let e = v1_rootless();
        assert_eq!(e.remedy(), Remedy::V1Rootless, "{e}");
        let f = cgroup_fixes(&e, &facts(), &[&validate()]);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("sudo sandbox-run"), "{f:?}");
        assert!(f[1].contains(
            "mkdir -p /home/u/.config/sandbox-run/profiles && printf '%s\\n' 'extends = \"validate\"' '[layers]' 'cgroup = \"best-effort\"' > /home/u/.config/sandbox-run/profiles/validate-no-cgroup.toml, then rerun with --profile validate-no-cgroup"
        ), "{f:?}");
        let all = f.join(" ");
        assert!(!all.contains("systemd"), "no systemd here: {all}");
    }

    #[test]
    fn reboot_only_where_systemd_is_init_and_the_kernel_has_cgroup2() {
        let e = v1_rootless();
        let mut fa = facts();
        fa.systemd_booted = true;
        let f = cgroup_fixes(&e, &fa, &[&validate()]);
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].contains("systemd.unified_cgroup_hierarchy=1"), "{f:?}");
        assert!(f[1].contains("sudo"), "{f:?}");
        fa.kernel_cgroup2 = false;
        let f = cgroup_fixes(&e, &fa, &[&validate()]);
        assert!(!f.join(" ").contains("unified_cgroup_hierarchy"), "{f:?}");
        // A user manager does not help on v1: its delegated subtree has no controllers.
        fa.kernel_cgroup2 = true;
        fa.systemd_booted = false;
        fa.user_manager = Some(String::new());
        let f = cgroup_fixes(&e, &fa, &[&validate()]);
        assert!(!f.join(" ").contains("systemd-run"), "{f:?}");
    }

    #[test]
    fn systemd_run_only_where_a_user_manager_answers() {
        let e = err("x");
        let mut e2 = e.clone();
        e2.hint = Some(
            "run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...', or have root delegate a cgroup v2 subtree to this user (chown the directory and its cgroup.procs, cgroup.subtree_control and cgroup.threads)".into(),
        );
        assert_eq!(e2.remedy(), Remedy::DelegateV2);
        let mut fa = facts();
        let f = cgroup_fixes(&e2, &fa, &[]);
        assert!(!f.join(" ").contains("systemd-run"), "{f:?}");
        fa.user_manager = Some("XDG_RUNTIME_DIR=/run/user/1001 ".into());
        let f = cgroup_fixes(&e2, &fa, &[]);
        assert!(
            f[0].ends_with(
                "XDG_RUNTIME_DIR=/run/user/1001 systemd-run --user --scope -p Delegate=yes sandbox-run ..."
            ),
            "{f:?}"
        );
        assert!(f.last().unwrap().contains("sudo"), "{f:?}");
        // As root: no "run as root".
        fa.root = true;
        assert!(!cgroup_fixes(&e2, &fa, &[]).join(" ").contains("sudo"));
    }

    #[test]
    fn no_sudo_where_the_caller_cannot_use_it() {
        let mut fa = facts();
        fa.sudo = false;
        let f = cgroup_fixes(&v1_rootless(), &fa, &[&validate()]);
        let all = f.join(" ");
        assert!(!all.contains("sudo"), "{all}");
        assert!(
            f[0].starts_with("every layer, as root: run sandbox-run ... as root"),
            "{f:?}"
        );
        // and the one flag that runs without the layer is named
        assert!(f[1].contains("rerun with --without cgroup"), "{f:?}");
    }

    #[test]
    fn a_profile_given_by_path_is_extended_by_its_path() {
        let mut p = validate();
        p.name = "./my prof.toml".into();
        p.sources = vec!["/srv/it's/my prof.toml".into()];
        let b = BestEffortProfile::new(&p, None);
        assert_eq!(b.name, "./my prof-no-cgroup.toml");
        assert_eq!(b.lines[0], r#"extends = "/srv/it's/my prof.toml""#);
        assert_eq!(
            b.write_command(),
            r#"printf '%s\n' 'extends = "/srv/it'\''s/my prof.toml"' '[layers]' 'cgroup = "best-effort"' > './my prof-no-cgroup.toml'"#
        );
        assert!(b
            .fix(&p.name)
            .ends_with("--profile './my prof-no-cgroup.toml'"));
    }

    #[test]
    fn a_user_manager_answers_only_on_a_listening_socket() {
        let d = std::env::temp_dir().join(format!("sbx-advice-sock-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let live = d.join("live");
        let _l = std::os::unix::net::UnixListener::bind(&live).unwrap();
        assert!(socket_answers(&live));
        // A socket file left by a manager that is gone: connect says ECONNREFUSED.
        let stale = d.join("stale");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(stale.exists() && !socket_answers(&stale));
        assert!(!socket_answers(&d.join("absent")));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_refusal_is_two_short_lines_and_a_pointer_to_doctor() {
        let e = v1_rootless();
        let [first, second] = cgroup_refusal(&e, &validate(), &facts());
        assert_eq!(
            first,
            "profile validate requires the cgroup layer, but uid 1001 cannot have one here (the controllers are on cgroup v1, which is root's)"
        );
        assert_eq!(
            second,
            "to run: sudo sandbox-run ... (every layer), or add --without cgroup (no memory, CPU or process caps); every fix: sandbox-run doctor"
        );
        let mut fa = facts();
        fa.sudo = false;
        let [_, second] = cgroup_refusal(&e, &validate(), &fa);
        assert!(
            second.starts_with("to run: run it as root (every layer), or add --without cgroup"),
            "{second}"
        );
        for line in cgroup_refusal(&e, &validate(), &fa) {
            assert!(line.len() <= 140 && !line.contains('\n'), "{line}");
        }
    }
}
