//! Profile + command-line overrides + host facts -> one validated [`Plan`].
//!
//! Everything that can be decided before anything runs is decided here, in the supervisor:
//! which ids, which mounts, which landlock rules, which environment, which layers are in force
//! and which are degraded. Stage 2 receives the plan as JSON and only executes it.

use crate::layers::{env, git, landlock, mounts, ns, ns::Ids, rlimits, seccomp};
use crate::policy::Verdict;
use crate::profile::{HomeMode, NetMode, Profile, RepoMode, Requirement};
use crate::toolchain;
use crate::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub profile: String,
    /// The words of the command, as gated.
    pub argv: Vec<String>,
    /// What `execve` runs: argv[0] as found in the sandbox's PATH.
    pub program: PathBuf,
    pub env: Vec<(String, String)>,
    /// Names of caller variables held back (never their values).
    pub env_removed: Vec<String>,
    /// Every caller variable that did not pass, and why (`-v` and the report).
    #[serde(default)]
    pub env_dropped: Vec<env::Dropped>,
    /// Names passed by `--pass-env` and `[env] pass` (never their values).
    #[serde(default)]
    pub env_passed: Vec<String>,
    /// The workload's stdin is stage 2's own, the pipe the supervisor feeds after the plan
    /// (`--stdin`); else /dev/null.
    #[serde(default)]
    pub stdin_pipe: bool,
    pub repo: PathBuf,
    pub repo_mode: RepoMode,
    pub cwd: PathBuf,
    pub ids: Ids,
    /// A root workload's uid and gid inside its user namespace (`[process] uid_inside`).
    #[serde(default)]
    pub root_inside: u32,
    /// Why these ids (`-v`).
    #[serde(default)]
    pub ids_why: String,
    /// The sandbox's own namespaces and new root. `false` only when the profile marks
    /// namespaces best-effort and this host has no user namespaces for the caller: the
    /// workload then runs in the host's namespaces, confined by landlock, seccomp, rlimits,
    /// no capabilities and the cgroup, with a private scratch dir for `$HOME` and `$TMPDIR`.
    pub namespaces: bool,
    /// That scratch dir (holding `home` and `tmp`), created by [`build`] for a run without
    /// namespaces; the caller removes it after the run ([`remove_scratch`]).
    pub scratch: Option<PathBuf>,
    /// A large `[limits] disk`: the host directory that holds the kept layer's upper and work
    /// dirs instead of a tmpfs ([`crate::state::LayerDir`], made by the caller after
    /// [`build`]).
    #[serde(default)]
    pub layer_dir: Option<PathBuf>,
    pub home: PathBuf,
    /// `home = "persist"`: the host directory kept as `$HOME` ([`crate::home`]).
    #[serde(default)]
    pub home_kept: Option<PathBuf>,
    /// What pid 1 writes as `$HOME/.gitconfig` (the caller's git identity only).
    #[serde(default)]
    pub gitconfig: Option<String>,
    pub hostname: String,
    pub net: NetMode,
    /// The proxy's allow-list under `--net filtered`: the profile's, then `--allow-host`'s
    /// and the secrets' hosts.
    #[serde(default)]
    pub network_allow: Vec<String>,
    /// The run's secrets by name, with the hosts each goes to (never a value: those stay in
    /// the supervisor's vault, [`crate::net::vault`]). Not empty: pid 1 waits for the run's CA
    /// to join the trust bundle before it starts the workload.
    #[serde(default)]
    pub secrets: Vec<(String, Vec<String>)>,
    /// The files whose CAs joined the sandbox's trust bundle ([`crate::trust`]).
    #[serde(default)]
    pub ca_certs: Vec<crate::trust::Source>,
    /// The trust bundle's files, made before the fork; the supervisor appends the run's CA.
    #[serde(skip)]
    pub trust: Option<std::sync::Arc<crate::trust::Bundle>>,
    /// The secrets themselves, for the supervisor's proxy: their values are in the vault,
    /// which no forked process inherits.
    #[serde(skip)]
    pub secret_set: std::sync::Arc<crate::net::secret::Secrets>,
    pub mounts: Vec<mounts::Op>,
    /// `None`: landlock is best-effort and the kernel lacks it.
    pub landlock: Option<landlock::Spec>,
    pub landlock_min_abi: u8,
    pub seccomp: bool,
    /// What the seccomp filters decide per run (see [`plan_seccomp`]).
    #[serde(default)]
    pub seccomp_options: seccomp::Options,
    pub rlimits: rlimits::Limits,
    /// The supervisor's pid: stage 2 exits at once if its parent is already someone else.
    pub supervisor_pid: i32,
    /// Layers that are best-effort and missing on this host.
    pub degraded: Vec<String>,
    /// The repo that gets an empty `.git` for this run, a read-write repo that had none
    /// ([`git::Found::placeholder`]): the caller makes and holds a [`git::Placeholder`].
    #[serde(default)]
    pub git_placeholder: Option<PathBuf>,
    /// cgroup v1 as root: stage 2 moves itself into the leaf
    /// ([`crate::layers::cgroup::join_self`]), whose `tasks` files the supervisor sends on
    /// stage 2's stdin once it has made the leaf, while stage 2 starts (see
    /// [`crate::launcher`]). False otherwise (v2: born in the leaf, or moved by the supervisor).
    #[serde(default)]
    pub cgroup_self_join: bool,
    /// Repo-relative paths the copy-back leaves alone ([`Overrides::keep_paths`]).
    #[serde(default)]
    pub keep_paths: Vec<PathBuf>,
    /// GitHub Actions' file commands, brought back after the run by the caller
    /// ([`crate::changes::actions::apply`]), which removes their directory.
    #[serde(skip)]
    pub file_commands: Option<crate::changes::actions::Setup>,
}

/// What the `run` command line adds to the profile.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--observe`: every path lookup of the command goes past the supervisor, which names
    /// each filesystem refusal exactly (each path call costs a round trip).
    pub observe: bool,
    pub net: Option<NetMode>,
    /// `--allow-host`: added to the profile's list.
    pub allow_hosts: Vec<String>,
    pub memory: Option<crate::units::Size>,
    pub cpus: Option<f64>,
    pub pids: Option<u64>,
    pub env: Vec<(String, String)>,
    pub keep_env: Vec<String>,
    /// `--home`: overrides the profile's `[filesystem] home`.
    pub home: Option<HomeMode>,
    /// `--pass-env`.
    pub pass_env: Vec<String>,
    /// `--ca-certs`.
    pub ca_certs: Option<PathBuf>,
    /// `--secret`, `--secret-file` and the profile's `[secrets]`, loaded
    /// ([`crate::secrets::load`]).
    pub secrets: crate::secrets::Loaded,
    /// `--stdin`: the supervisor feeds the workload's stdin.
    pub stdin_pipe: bool,
    /// Repo-relative paths the copy-back of a read-write repo leaves alone (the report file).
    pub keep_paths: Vec<PathBuf>,
    /// A gene's carried layer: the copy-on-write repo's changes, saved here after each command
    /// and put back before the next ([`crate::layers::overlay::Carry`]).
    pub carry: Option<PathBuf>,
    /// `--changes`: what becomes of the run's writes to the repo.
    pub changes: Option<crate::changes::back::Mode>,
    /// `--with-changes`: a kept changeset's trees, each with the host directory it is laid
    /// over copy-on-write (the repo, a git dir outside it).
    pub with_changes: Vec<(PathBuf, PathBuf)>,
}

/// Facts about the host the plan depends on; probed once, replaceable in tests.
#[derive(Debug, Clone)]
pub struct Host {
    pub euid: u32,
    pub egid: u32,
    pub landlock_abi: u8,
    pub seccomp: bool,
    pub env: Vec<(String, String)>,
    /// The kernel's version (major, minor).
    pub kernel: (u32, u32),
}

impl Host {
    pub fn probe() -> Host {
        // SAFETY: prctl(PR_GET_SECCOMP) only reads this process's seccomp mode.
        let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP) } >= 0;
        Host {
            euid: nix::unistd::geteuid().as_raw(),
            egid: nix::unistd::getegid().as_raw(),
            landlock_abi: landlock::kernel_abi(),
            seccomp,
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            kernel: kernel_version(),
        }
    }

    fn var(&self, k: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// (major, minor) of the running kernel; (0, 0) when unreadable.
pub fn kernel_version() -> (u32, u32) {
    let u = nix::sys::utsname::uname();
    let release = u
        .as_ref()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0))
}

/// The repo's mode for this run: the profile's, changed by `--changes` (keeping or applying
/// a copy-on-write profile's writes makes its repo read-write, through the layer) and
/// `--with-changes` (always copy-on-write: the run's writes are thrown away).
fn repo_mode_for(profile: RepoMode, o: &Overrides) -> Result<RepoMode, String> {
    use crate::changes::back::Mode;
    if !o.with_changes.is_empty() {
        return match o.changes {
            Some(Mode::Apply | Mode::Keep) => Err("--with-changes runs on a copy-on-write view of the repo whose writes are thrown away: --changes apply or keep cannot go with it".into()),
            _ => Ok(RepoMode::Overlay),
        };
    }
    Ok(match (profile, o.changes) {
        (RepoMode::Overlay | RepoMode::Ro, Some(Mode::Apply | Mode::Keep)) => RepoMode::Rw,
        (mode, _) => mode,
    })
}

/// The read-write repo's disk cap, where the kernel can keep it: the copy-on-write layer
/// needs overlayfs to mark a directory removed and made anew (an "opaque" directory) in a
/// `user.*` extended attribute of the tmpfs under it, which tmpfs has since Linux 6.6. Before
/// that, `rm -r dir && mkdir dir` would fail inside with EIO, so the repo is bound as it is and
/// the report lists `disk` under `degraded`. (A cap larger than
/// [`crate::layers::disk::IN_MEMORY_MAX`] puts the layer on disk, where the filesystem can
/// hold it, else on that tmpfs: the tmpfs must be able to stand in.)
/// The first kernel whose tmpfs takes the `user.*` extended attributes that overlayfs needs
/// in a user namespace to mark a directory replaced whole.
pub const LAYER_KERNEL: (u32, u32) = (6, 6);

fn disk_cap(
    profile: &Profile,
    mode: RepoMode,
    host: &Host,
    degraded: &mut Vec<String>,
) -> Option<u64> {
    let cap = profile.limits.disk.0?;
    if mode == RepoMode::Rw && host.kernel < LAYER_KERNEL {
        degraded.push("disk".into());
        return None;
    }
    Some(cap)
}

/// For a plan with a kept layer whose cap is larger than
/// [`crate::layers::disk::IN_MEMORY_MAX`]: make its layer directory and name it in the plan
/// (the caller keeps the returned guard for the run). When it cannot be made, the layer stays
/// on a tmpfs (one line on stderr) where the kernel's tmpfs takes user xattrs (`kernel` at
/// least [`LAYER_KERNEL`]); before that there is no other place for it: an error.
pub fn prepare_layer_dir(
    plan: &mut Plan,
    kernel: (u32, u32),
) -> Result<Option<crate::state::LayerDir>, String> {
    let big = crate::layers::overlay::disk_size(&plan.mounts)
        .is_some_and(|s| s > crate::layers::disk::IN_MEMORY_MAX);
    if !plan.namespaces || !crate::layers::overlay::kept(&plan.mounts) || !big {
        return Ok(None);
    }
    let made = crate::state::LayerDir::make(plan.ids, &plan.repo).and_then(|dir| {
        crate::layers::disk::holds_an_upper(&dir.disk)
            .map_err(|why| format!("repo layer dir {}: {why}", dir.disk.display()))?;
        Ok(dir)
    });
    match made {
        Ok(dir) => {
            plan.layer_dir = Some(dir.disk.clone());
            // No call of the workload's grows a file past the budget left (see layers::disk).
            if let Some(cap) = crate::layers::overlay::disk_size(&plan.mounts) {
                plan.rlimits.fsize = plan
                    .rlimits
                    .fsize
                    .min(crate::layers::disk::first_fsize(cap));
                plan.rlimits.disk_budget = true;
            }
            Ok(Some(dir))
        }
        // The plan has the tmpfs layer to fall back on only where tmpfs takes user xattrs.
        Err(e) if kernel >= LAYER_KERNEL => {
            eprintln!("sandbox-run: {e}: the repo's layer is kept in memory instead (it counts against [limits] memory)");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Build the plan for an allowed command. Errors are one line for exit 125.
pub fn build(
    profile: &Profile,
    ws: &Workspace,
    verdict: &Verdict,
    found: &Path,
    o: &Overrides,
    host: &Host,
) -> Result<Plan, String> {
    // Paths canonicalized while planning are resolved once each (crate::canon).
    let _canon = crate::canon::Scope::begin();
    let mut degraded = Vec::new();
    let (ids, ids_why) = run_as(profile, ws, host)?;
    let (net, network_allow) = plan_network(&profile.network, o)?;
    // The caller's own bundles are honoured where there is a network to use them on.
    let ca_sources = crate::trust::sources(
        o.ca_certs.as_deref(),
        &host.env,
        net != NetMode::None,
        &ws.repo,
        host.euid,
    )?;
    // Asked (by trying, in a forked child) only when the profile can do without them.
    let namespaces = match profile.layers.namespaces {
        Requirement::Required => true,
        Requirement::BestEffort => ns::available(ids).is_ok(),
    };
    let (user, mut home) = user_and_home(ids, host);
    let home_kept = match o.home.unwrap_or(profile.filesystem.home) {
        HomeMode::Tmp => None,
        HomeMode::Persist => {
            let (base, below) = crate::home::location(
                ids.uid,
                host.euid,
                |k| host.var(k).map(String::from),
                crate::state::passwd_home(ids.uid),
                &profile.name,
            )?;
            Some(crate::home::ensure(&base, &below, ids.uid, ids.gid)?)
        }
    };
    let path = sandbox_path_from(profile, host.var("PATH"));

    // Landlock: required means the kernel must have it at the profile's minimum ABI.
    let min_abi = profile.layers.landlock_min_abi;
    let landlock_ok = host.landlock_abi >= min_abi.max(1);
    if !landlock_ok {
        let why = if host.landlock_abi == 0 {
            "landlock is not available on this kernel (needs Linux 5.13+ with landlock in the lsm= boot list)".to_string()
        } else {
            format!(
                "landlock ABI {} is older than the profile's landlock_min_abi {min_abi}",
                host.landlock_abi
            )
        };
        match profile.layers.landlock {
            Requirement::Required => {
                return Err(format!(
                    "landlock: required by profile {}: {why}",
                    profile.name
                ))
            }
            Requirement::BestEffort => degraded.push("landlock".to_string()),
        }
    }
    if !host.seccomp {
        match profile.layers.seccomp {
            Requirement::Required => {
                return Err(format!("seccomp: required by profile {}: this kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER)", profile.name))
            }
            Requirement::BestEffort => degraded.push("seccomp".to_string()),
        }
    }

    let fs = &profile.filesystem;
    let mut repo_mode = repo_mode_for(fs.repo, o)?;
    if !namespaces {
        if o.changes.is_some() || !o.with_changes.is_empty() {
            return Err(format!("--changes and --with-changes need the repo's copy-on-write layer, which needs the sandbox's own namespaces; this host gives none (profile {} marks namespaces best-effort){}", profile.name, ns::fix()));
        }
        let why = format!("profile {} marks namespaces best-effort", profile.name);
        if profile.layers.filesystem == Requirement::Required {
            return Err(format!("namespaces: {why}, but its filesystem layer (the new root, which needs them) is required{}", ns::fix()));
        }
        if !landlock_ok {
            return Err(format!("namespaces: {why}, but without landlock as well nothing would confine the filesystem{}", ns::fix()));
        }
        if ids.uid == 0 {
            return Err(format!("namespaces: {why}, but without a user namespace the command would run as root on the host: give the repo to an unprivileged owner or set process.uid in the profile{}", ns::fix()));
        }
        degraded.push("namespaces".to_string());
        degraded.push("filesystem".to_string());
        // The disk cap is a copy-on-write layer: no mount namespace, no cap.
        if repo_mode == RepoMode::Rw && profile.limits.disk.0.is_some() {
            degraded.push("disk".to_string());
        }
        // No copy-on-write without a mount namespace: writes fail instead of vanishing.
        if repo_mode == RepoMode::Overlay {
            repo_mode = RepoMode::Ro;
        }
    }
    let system_ro = expand_globs(&fs.system_ro);
    let extra_ro = env_paths(&fs.extra_ro, host, "extra_ro")?;
    let extra_rw = env_paths(&fs.extra_rw, host, "extra_rw")?;
    // Never a home, its credentials or anything above them, whatever the profile says (the
    // same rule names such a refusal `never`).
    let caller_home = host.var("HOME").map(Path::new);
    let homes = toolchain::homes(
        &caller_home
            .into_iter()
            .chain([home.as_path()])
            .collect::<Vec<_>>(),
    );
    for (key, list) in [("extra_ro", &extra_ro), ("extra_rw", &extra_rw)] {
        for p in list {
            // the path as named and as the bind will resolve it (a link, a `..`)
            let real = crate::canon::canonicalize(p).ok();
            let never = [Some(p.as_path()), real.as_deref()]
                .into_iter()
                .flatten()
                .find_map(|q| toolchain::never_bound(q, &homes));
            if let Some(why) = never {
                return Err(format!(
                    "filesystem.{key}: {} is never bound into a sandbox: {why}; bind the files a program needs instead",
                    p.display()
                ));
            }
        }
    }
    let toolchains = if fs.toolchains {
        let names: Vec<&str> = profile
            .gate
            .programs
            .iter()
            .chain(&profile.gate.wrapped)
            .map(String::as_str)
            .collect();
        let given: Vec<&Path> = host
            .var("HOME")
            .map(Path::new)
            .into_iter()
            .chain([home.as_path()])
            .collect();
        toolchain::discover(&toolchain::Input {
            names: &names,
            path: &path,
            repo: &ws.repo,
            system: &system_ro,
            homes: &toolchain::homes(&given),
            rustup_home: host.var("RUSTUP_HOME").map(Path::new),
        })
    } else {
        toolchain::Toolchains::default()
    };
    // Read-write: git's configuration surfaces stay read-only (layers::git); a layout that
    // cannot be made safe is refused here, before anything runs.
    let mut git = if repo_mode == RepoMode::Rw {
        Some(git::discover(
            &ws.repo,
            &fs.protect,
            &git_configs(host.var("HOME"), &home),
        )?)
    } else {
        None
    };
    // The other modes: the git dirs a linked worktree's `.git` file leads to lie outside the
    // repo; without them git inside finds no repository. Shown read-only (`ro`) or
    // copy-on-write (`overlay`), as the repo is.
    let git_outside: Vec<PathBuf> = if repo_mode == RepoMode::Rw {
        Vec::new()
    } else {
        git_dirs_outside(&ws.repo)
    };
    let disk = disk_cap(profile, repo_mode, host, &mut degraded);
    if repo_mode == RepoMode::Rw && namespaces && disk.is_none() {
        if let Some(m) = o
            .changes
            .filter(|m| *m != crate::changes::back::Mode::Apply)
        {
            return Err(format!(
                "--changes {}: the repo's writes would land on it directly: {}",
                if m == crate::changes::back::Mode::Keep {
                    "keep"
                } else {
                    "discard"
                },
                if profile.limits.disk.0.is_none() {
                    format!(
                        "profile {} sets [limits] disk = \"off\"; set a size",
                        profile.name
                    )
                } else {
                    "the copy-on-write layer needs Linux 6.6 or later here".to_string()
                }
            ));
        }
    }
    // Behind the layer, a `.git` the command makes in a repo without one is refused on the way
    // back: no placeholder needs to sit in the host's repo for the run (which another user
    // could hold, or a run's end remove under another's pin).
    if repo_mode == RepoMode::Rw && namespaces && disk.is_some() {
        if let Some(g) = git.as_mut().filter(|g| g.placeholder) {
            g.placeholder = false;
            g.pins.retain(|p| p != Path::new(".git"));
        }
    }
    let mut ops = if !namespaces {
        Vec::new()
    } else {
        mounts::plan(&mounts::Input {
            repo: &ws.repo,
            repo_mode,
            git: git.as_ref(),
            system_ro: &system_ro,
            extra_ro: &extra_ro,
            extra_rw: &extra_rw,
            toolchains: &toolchains.binds,
            hide: &toolchains.hide_ops(),
            sys: &fs.sys,
            home: &home,
            home_from: home_kept.as_deref(),
            git_outside: &git_outside,
            tmp_size: fs.tmp_size.0,
            disk,
            carry: o.carry.as_deref(),
            with_changes: &o.with_changes,
            dev_pts: fs.dev_pts,
        })?
    };

    if net == NetMode::Filtered && !namespaces {
        return Err(format!("network: filtered needs the sandbox's own network namespace, and this host gives none (profile {} marks namespaces best-effort){}", profile.name, ns::fix()));
    }
    // The trust bundle (`--ca-certs`, the caller's bundles, the run's CA): bound read-only
    // at fixed paths inside (or, without a new root, read where it is), and named by the
    // usual variables.
    let trust =
        crate::trust::make(ids, &ca_sources, !o.secrets.is_empty())?.map(std::sync::Arc::new);
    let ca_paths: Option<(PathBuf, Option<PathBuf>)> = trust.as_ref().map(|b| {
        let extra = b.has_extra;
        match namespaces {
            true => (
                PathBuf::from(env::CA_INSIDE),
                extra.then(|| PathBuf::from(env::CA_EXTRA_INSIDE)),
            ),
            false => (b.full.clone(), extra.then(|| b.extra.clone())),
        }
    });
    if let (Some(b), true) = (&trust, namespaces) {
        for (src, dst) in [(&b.full, env::CA_INSIDE), (&b.extra, env::CA_EXTRA_INSIDE)] {
            ops.push(mounts::Op::Bind {
                src: src.clone(),
                dst: dst.into(),
                ro: true,
                optional: false,
            });
        }
        ops.sort_by_key(|op| op.dst().components().count());
    }
    let scratch = if namespaces {
        None
    } else {
        let dir = make_scratch(ids)?;
        home = home_kept.clone().unwrap_or_else(|| dir.join("home"));
        Some(dir)
    };
    let ports = port_rules_apply(namespaces, net);
    let tmp = scratch
        .as_ref()
        .map_or_else(|| PathBuf::from("/tmp"), |d| d.join("tmp"));
    let mut landlock = landlock_ok.then(|| {
        let existing = |v: &[PathBuf]| {
            v.iter()
                .filter(|p| crate::canon::exists(p))
                .cloned()
                .collect::<Vec<_>>()
        };
        let mut read_exec = existing(&system_ro);
        read_exec.extend(toolchains.binds.iter().cloned());
        // With a new root the credentials in these trees are covered by mounts; without one,
        // landlock leaves them out.
        if !namespaces && !toolchains.hides.is_empty() {
            read_exec = toolchain::carve(&read_exec, &toolchains.hides);
        }
        read_exec.extend(existing(&extra_ro));
        // Inside the new root /tmp, $HOME and /dev/shm are private tmpfs mounts; without it
        // they would be the host's, and the run gets its scratch dir instead.
        let mut read_write = match &scratch {
            None => vec![
                PathBuf::from("/tmp"),
                home.clone(),
                PathBuf::from("/dev/shm"),
            ],
            Some(dir) => vec![dir.clone(), home.clone()],
        };
        read_write.extend(extra_rw.iter().cloned());
        // The views of git dirs outside the repo (a linked worktree's common dir).
        if namespaces {
            if let Some(g) = &git {
                read_write.extend(g.dirs.iter().filter(|d| !d.starts_with(&ws.repo)).cloned());
            }
        }
        match repo_mode {
            RepoMode::Ro => read_exec.extend(git_outside.iter().cloned()),
            RepoMode::Overlay if namespaces => read_write.extend(git_outside.iter().cloned()),
            _ => {}
        }
        match repo_mode {
            RepoMode::Ro => read_exec.push(ws.repo.clone()),
            RepoMode::Rw | RepoMode::Overlay if namespaces => read_write.push(ws.repo.clone()),
            // The protected paths are read-only bind mounts in the new root; without it,
            // landlock carves them out (and `.git` itself, so nothing new appears in it).
            RepoMode::Rw | RepoMode::Overlay => {
                let mut protected = vec![ws.repo.join(".git")];
                if let Some(g) = &git {
                    protected.extend(g.pins.iter().map(|p| ws.repo.join(p)));
                    protected.extend(g.dirs.iter().filter(|d| d.starts_with(&ws.repo)).cloned());
                }
                protected.dedup();
                landlock::carve(&ws.repo, &protected, &mut read_write, &mut read_exec);
            }
        }
        let mut read_only = vec![PathBuf::from("/proc")];
        read_only.extend(existing(&fs.sys));
        if let Some((full, extra)) = &ca_paths {
            read_only.push(full.clone());
            read_only.extend(extra.iter().cloned());
        }
        let n = &profile.network;
        landlock::Spec {
            list: vec![PathBuf::from("/")],
            read_exec,
            read_only,
            read_write,
            devices: mounts::DEVICES
                .iter()
                .filter(|d| **d != "tty")
                .map(|d| Path::new("/dev").join(d))
                .collect(),
            tty_devices: ["/dev/tty", "/dev/pts", "/dev/ptmx"]
                .iter()
                .map(PathBuf::from)
                .collect(),
            tcp_connect: match (ports, net) {
                (false, _) => None,
                (true, NetMode::Host) if n.tcp_connect.is_empty() => None,
                (true, _) => Some(n.tcp_connect.clone()),
            },
            tcp_bind: ports.then(|| n.tcp_bind.clone()),
            scope: true,
        }
    });

    let mut ca_vars: Vec<(String, String)> = Vec::new();
    if let Some((full, extra)) = &ca_paths {
        for k in env::CA_VARS {
            ca_vars.push((k.to_string(), full.to_string_lossy().into_owned()));
        }
        if let Some(extra) = extra {
            ca_vars.push((
                env::CA_EXTRA_VAR.to_string(),
                extra.to_string_lossy().into_owned(),
            ));
        }
    }
    // Inside, a secret's name holds its placeholder, whatever else the profile passes.
    ca_vars.extend(o.secrets.env());
    // `[filesystem] file_commands`: what earlier sandboxed steps of the job kept for the later
    // ones, given to the workload only (never to sandbox-run's own configuration).
    let job = match fs.file_commands {
        true => crate::changes::actions::job::Job::open(&host.env, host.euid, ids),
        false => Ok(None),
    };
    let job = match job {
        Ok(j) => j,
        Err(e) => {
            if let Some(dir) = &scratch {
                remove_scratch(dir);
            }
            return Err(e);
        }
    };
    let caller_env = job.as_ref().map(|j| j.kept.caller_env(&host.env));
    let built = env::build(&env::Inputs {
        caller: caller_env.as_deref().unwrap_or(&host.env),
        keep: &profile.env.keep,
        drop: &profile.env.drop,
        keep_flag: &o.keep_env,
        pass: &profile.env.pass,
        pass_flag: &o.pass_env,
        set: &profile.env.set,
        explicit: &o.env,
        path: &path.to_string_lossy(),
        home: &home.to_string_lossy(),
        tmp: &tmp.to_string_lossy(),
        user: &user,
        sandbox: &ca_vars,
    });
    let mut built = match built {
        Ok(b) => b,
        Err(e) => {
            if let Some(dir) = &scratch {
                remove_scratch(dir);
            }
            return Err(e);
        }
    };
    if net == NetMode::Filtered {
        let url = format!("http://127.0.0.1:{}", crate::net::proxy::PORT);
        if env::set_proxy(&mut built.vars, &url) {
            tracing::warn!("network: the proxy variables point at the sandbox's proxy under --net filtered; the values given were replaced");
        }
    }
    if net == NetMode::None && namespaces {
        env::no_fetch_retries(&mut built.vars);
    }
    if let Some(j) = &job {
        let inside = j.kept.workload_path(&path.to_string_lossy(), &host.env);
        built.vars.insert("PATH".into(), inside);
    }
    // `[filesystem] file_commands`: private copies, `$RUNNER_TEMP`'s entries read-only.
    let file_commands = match fs.file_commands {
        false => None,
        true => {
            let input = crate::changes::actions::Input {
                caller: &host.env,
                namespaces,
                ids,
                repo: &ws.repo,
                home_kept: home_kept.as_deref(),
                scratch: scratch.as_deref(),
                job: job.as_ref(),
            };
            let r = crate::changes::actions::prepare(
                &input,
                &mut ops,
                landlock.as_mut(),
                &mut built.vars,
            );
            match r {
                Ok(s) => s,
                Err(e) => {
                    if let Some(dir) = &scratch {
                        remove_scratch(dir);
                    }
                    return Err(e);
                }
            }
        }
    };
    // A secret's name holds its placeholder, whatever else passed it: not "passed".
    let secret_names = o.secrets.planned();
    built
        .passed
        .retain(|n| !secret_names.iter().any(|(s, _)| s == n));
    for name in &built.unset {
        tracing::warn!("--pass-env {name}: not set in the caller's environment; not passed");
    }
    // Made by the caller, which holds it for the run ([`git::Placeholder`]).
    let git_placeholder = match &git {
        Some(g) if g.placeholder => Some(ws.repo.clone()),
        _ => None,
    };

    Ok(Plan {
        profile: profile.name.clone(),
        argv: verdict.argv.clone(),
        program: found.to_path_buf(),
        env: built.vars.into_iter().collect(),
        env_removed: built.removed,
        env_dropped: built.dropped,
        env_passed: built.passed,
        stdin_pipe: o.stdin_pipe,
        repo: ws.repo.clone(),
        repo_mode,
        cwd: ws.cwd.clone(),
        ids,
        ids_why: match (ids.uid, namespaces, profile.process.uid_inside) {
            (0, true, n) if n != 0 => {
                format!("{ids_why}; uid {n} inside (process.uid_inside), root on the host")
            }
            _ => ids_why,
        },
        root_inside: profile.process.uid_inside,
        namespaces,
        scratch,
        layer_dir: None,
        home,
        home_kept,
        gitconfig: crate::home::gitconfig_text(&crate::home::git_identity(
            host.var("HOME"),
            host.var("XDG_CONFIG_HOME"),
        )),
        hostname: profile.process.hostname.clone(),
        net,
        network_allow,
        secrets: o.secrets.planned(),
        ca_certs: ca_sources,
        trust,
        secret_set: o.secrets.secrets.clone(),
        mounts: ops,
        landlock,
        landlock_min_abi: min_abi,
        seccomp: host.seccomp,
        seccomp_options: seccomp::Options {
            observe: o.observe,
            ..plan_seccomp(ports, &profile.network)
        },
        rlimits: rlimits::Limits {
            nofile: profile.limits.nofile,
            fsize: profile.limits.fsize.0,
            disk_budget: false,
        },
        supervisor_pid: std::process::id() as i32,
        degraded,
        git_placeholder,
        cgroup_self_join: false,
        keep_paths: o.keep_paths.clone(),
        file_commands,
    })
}

/// The PATH the sandbox will use: the profile's, else `caller` (the caller's PATH), else the
/// system directories.
pub fn sandbox_path_from(p: &Profile, caller: Option<&str>) -> std::ffi::OsString {
    match (&p.env.path, caller) {
        (Some(path), _) => path.into(),
        (None, Some(c)) if !c.is_empty() => c.into(),
        _ => "/usr/local/bin:/usr/bin:/bin".into(),
    }
}

/// `system_ro` with each entry whose last component holds a `*` (`/etc/java-*`) replaced by
/// the host's matching entries, sorted; other entries as they are. Only the last component
/// is a pattern: the directory listed is a system one the profile names, never the repo.
pub fn expand_globs(list: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in list {
        let (Some(parent), Some(pattern)) = (p.parent(), p.file_name().and_then(|n| n.to_str()))
        else {
            out.push(p.clone());
            continue;
        };
        if !pattern.contains('*') {
            out.push(p.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(parent)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| glob_match(pattern, n))
            })
            .map(|e| parent.join(e.file_name()))
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// The git dirs outside `repo` that its `.git` file leads to (a linked worktree's common dir,
/// which holds its private one), outermost only; none when the layout is one the read-write
/// modes would refuse ([`git::discover`]): git then fails inside as it would have.
fn git_dirs_outside(repo: &Path) -> Vec<PathBuf> {
    // Only a `.git` file leads outside; a `.git` directory's git dirs (its own, its
    // submodules') all lie inside it. One look (no link followed) instead of the whole scan.
    let dot_git = crate::hostfs::Dir::open(repo).and_then(|r| r.kind(Path::new(".git")));
    if !matches!(dot_git, Ok(Some(crate::hostfs::Kind::File))) {
        return Vec::new();
    }
    let Ok(found) = git::discover(repo, &[], &[]) else {
        return Vec::new();
    };
    let outside: Vec<PathBuf> = found
        .dirs
        .into_iter()
        .filter(|d| !d.starts_with(repo))
        .collect();
    outside
        .iter()
        .filter(|d| !outside.iter().any(|o| o != *d && d.starts_with(o)))
        .cloned()
        .collect()
}

/// `extra_ro`/`extra_rw` with each `$NAME` entry replaced by the caller's value of NAME (an
/// unset or empty one drops the entry: `$RUNNER_TEMP` outside a runner). The value must be
/// an absolute path of at least two components and without `..`, so `/`, `/tmp` or `/home`
/// are never bound whole because a variable said so.
fn env_paths(list: &[PathBuf], host: &Host, key: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in list {
        let Some(name) = crate::profile::env_path_name(p) else {
            out.push(p.clone());
            continue;
        };
        let Some(v) = host.var(name).filter(|v| !v.is_empty()) else {
            continue;
        };
        let v = PathBuf::from(v);
        let normal = v
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .count();
        let dots = v
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
        if !v.is_absolute() || normal < 2 || dots {
            return Err(format!(
                "filesystem.{key}: ${name} is {:?}, not an absolute path of two components or more without '..'",
                v.display()
            ));
        }
        out.push(v);
    }
    Ok(out)
}

/// Does `name` match `pattern`, where `*` stands for any run of characters (none included)?
/// A leading `.` is matched only by a leading `.` in the pattern, as in the shell.
fn glob_match(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return name == pattern;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// The host's git config files whose `core.hooksPath` the next host git would follow: the
/// system one, and the global ones of the caller and of the workload's user (root running a
/// user's repo: both may run git there next).
fn git_configs(caller_home: Option<&str>, user_home: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("/etc/gitconfig")];
    let mut homes = vec![user_home.to_path_buf()];
    if let Some(h) = caller_home.filter(|h| h.starts_with('/')) {
        homes.push(PathBuf::from(h));
    }
    homes.dedup();
    for h in homes {
        out.push(h.join(".gitconfig"));
        out.push(h.join(".config/git/config"));
    }
    if let Ok(x) = std::env::var("XDG_CONFIG_HOME") {
        if x.starts_with('/') {
            out.push(Path::new(&x).join("git/config"));
        }
    }
    out
}

/// Do the port rules apply: landlock's TCP `bind`/`connect` port lists and seccomp's refusal
/// of `listen`? They guard the host's network, so only where the workload shares it: `--net
/// host`, or a run without namespaces (best-effort, on a host without user namespaces), which
/// stays in the host's network namespace whatever the mode says. A sandbox with its own
/// network namespace (`none`, and every other mode that is not `host`) has only its own
/// loopback and whatever the sandbox itself routes out of it: bind, listen and connect there
/// are allowed on any port, ephemeral ones included (test servers on 127.0.0.1:0).
pub fn port_rules_apply(namespaces: bool, net: NetMode) -> bool {
    !namespaces || net == NetMode::Host
}

/// The network mode and allow-list of a run: `--net`, else the profile's mode;
/// `--allow-host` adds to the profile's list and switches a profile without network to
/// `filtered`. Every pattern is checked here (exit 125 on a bad one).
pub fn plan_network(
    n: &crate::profile::Network,
    o: &Overrides,
) -> Result<(NetMode, Vec<String>), String> {
    let secret_hosts = o.secrets.hosts();
    let mode = match (o.net, o.allow_hosts.is_empty() && secret_hosts.is_empty()) {
        (Some(m), _) => m,
        (None, false) if n.mode == NetMode::None => NetMode::Filtered,
        (None, _) => n.mode,
    };
    let m = if mode == NetMode::Host {
        "host"
    } else {
        "none"
    };
    if mode != NetMode::Filtered && !o.allow_hosts.is_empty() {
        return Err(format!(
            "--allow-host: the network mode is {m}, which has no allow-list; use --net filtered"
        ));
    }
    if mode != NetMode::Filtered && !secret_hosts.is_empty() {
        return Err(format!(
            "--secret: the network mode is {m}, which has no proxy to put a secret into requests; use --net filtered"
        ));
    }
    let mut allow = n.allow.clone();
    for h in o.allow_hosts.iter().chain(&secret_hosts) {
        if !allow.contains(h) {
            allow.push(h.clone());
        }
    }
    let list =
        crate::net::allow::AllowList::parse(&allow).map_err(|e| format!("--allow-host: {e}"))?;
    if mode == NetMode::Filtered {
        crate::net::proxy::check_loopback_ports(&list).map_err(|e| format!("--allow-host: {e}"))?;
    }
    if mode != NetMode::Filtered {
        allow.clear();
    }
    Ok((mode, allow))
}

/// `listen` is refused when the port rules apply ([`port_rules_apply`]) and no TCP port may
/// be bound: `listen` on an unbound socket autobinds an ephemeral port without passing
/// landlock's bind hook, and would accept host connections despite `tcp_bind = []`. With
/// ports listed in `tcp_bind`, the profile means the command to serve on the host: `listen`
/// stays allowed (an autobound port is then the remaining openness of host mode).
pub fn plan_seccomp(ports: bool, network: &crate::profile::Network) -> seccomp::Options {
    seccomp::Options {
        deny_listen: ports && network.tcp_bind.is_empty(),
        // every refusal named by the supervisor (seccomp user notification)
        notify: true,
        observe: false,
    }
}

/// The private dir of a run without namespaces: `DIR/home` and `DIR/tmp` in a fresh 0700
/// directory under `$TMPDIR` (or /tmp), owned by the workload's user.
fn make_scratch(ids: Ids) -> Result<PathBuf, String> {
    let template = std::env::temp_dir().join("sandbox-run-XXXXXX");
    let dir = nix::unistd::mkdtemp(&template)
        .map_err(|e| format!("scratch dir {}: {}", template.display(), e.desc()))?;
    let made = (|| {
        for sub in ["home", "tmp"] {
            std::fs::create_dir(dir.join(sub))?;
        }
        if nix::unistd::geteuid().as_raw() != ids.uid {
            let (u, g) = (Some(ids.uid), Some(ids.gid));
            for p in [dir.clone(), dir.join("home"), dir.join("tmp")] {
                std::os::unix::fs::lchown(&p, u, g)?;
            }
        }
        Ok::<(), std::io::Error>(())
    })();
    match made {
        Ok(()) => Ok(dir),
        Err(e) => {
            remove_scratch(&dir);
            Err(format!("scratch dir {}: {e}", dir.display()))
        }
    }
}

/// Remove a run's scratch dir and everything the command left in it, even directories it made
/// unreadable (their modes are restored first); symlinks are removed, never followed.
pub fn remove_scratch(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fn open_up(d: &Path) {
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700));
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&e.path());
            }
        }
    }
    if std::fs::remove_dir_all(dir).is_err() {
        open_up(dir);
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::warn!("scratch dir {}: {e}", dir.display());
        }
    }
}

/// Who the workload runs as, and why: the caller; or, when the caller is root, the profile's
/// uid/gid, else the owner of the repo.
pub fn run_as(profile: &Profile, ws: &Workspace, host: &Host) -> Result<(Ids, String), String> {
    use std::os::unix::fs::MetadataExt;
    if host.euid != 0 {
        let ids = Ids {
            uid: host.euid,
            gid: host.egid,
        };
        return Ok((
            ids,
            "the caller (not root: a sandbox runs as its caller)".into(),
        ));
    }
    let meta =
        std::fs::metadata(&ws.repo).map_err(|e| format!("repo {}: {e}", ws.repo.display()))?;
    let uid = profile.process.uid.unwrap_or(meta.uid());
    let gid = profile
        .process
        .gid
        .unwrap_or(if profile.process.uid.is_some() {
            uid
        } else {
            meta.gid()
        });
    let why = match profile.process.uid {
        Some(_) => format!("the profile's process.uid (profile {})", profile.name),
        None if uid == 0 => "the repo's owner, root (the caller is root)".into(),
        None => "the repo's owner (the caller is root: a repo runs as its owner)".into(),
    };
    Ok((Ids { uid, gid }, why))
}

/// The user name and home directory inside. The caller's `$HOME` when running as the caller,
/// else the passwd entry (read from /etc/passwd: no NSS in a static binary), else a fixed one.
fn user_and_home(ids: Ids, host: &Host) -> (String, PathBuf) {
    let entry = std::fs::read_to_string("/etc/passwd").ok().and_then(|t| {
        t.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 6 && f[2].parse() == Ok(ids.uid))
                .then(|| (f[0].to_string(), f[5].to_string()))
        })
    });
    let name = entry
        .as_ref()
        .map(|e| e.0.clone())
        .unwrap_or_else(|| "sandbox".into());
    let good = |h: &str| h.starts_with('/') && h != "/" && !h.contains(':');
    let home = match (host.euid == ids.uid, host.var("HOME")) {
        (true, Some(h)) if good(h) => h.to_string(),
        _ => match entry {
            Some((_, h)) if good(&h) => h,
            _ => "/home/sandbox".into(),
        },
    };
    (name, PathBuf::from(home))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Network;

    #[test]
    fn listen_is_denied_only_with_the_host_network_and_no_bind_port() {
        let net = |tcp_bind: Vec<u16>| Network {
            mode: NetMode::None,
            allow: Vec::new(),
            tcp_connect: Vec::new(),
            tcp_bind,
        };
        let deny =
            |ns: bool, mode, n: &Network| plan_seccomp(port_rules_apply(ns, mode), n).deny_listen;
        assert!(deny(true, NetMode::Host, &net(vec![])));
        assert!(!deny(true, NetMode::Host, &net(vec![8080])));
        assert!(!deny(true, NetMode::None, &net(vec![])));
        assert!(!deny(true, NetMode::None, &net(vec![8080])));
        // no namespaces: the host's network whatever the mode says
        assert!(deny(false, NetMode::None, &net(vec![])));
        assert!(!deny(false, NetMode::None, &net(vec![8080])));
        // a plan from an older supervisor (no field) deserializes with the default
        let o: seccomp::Options = serde_json::from_str("{}").unwrap();
        assert!(!o.deny_listen);
    }

    #[test]
    fn globs_in_the_last_component() {
        for (pattern, name, want) in [
            ("java-*", "java-17-openjdk", true),
            ("java-*", "java-", true),
            ("java-*", "javax", false),
            ("java-*-openjdk", "java-21-openjdk", true),
            ("java-*-openjdk", "java-21-openjdk-x", false),
            ("*", ".hidden", false),
            ("*.conf", "a.conf", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("plain", "plain", true),
        ] {
            assert_eq!(glob_match(pattern, name), want, "{pattern} {name}");
        }
        let base = std::env::temp_dir().join(format!("sandbox-run-glob-{}", std::process::id()));
        for d in ["java-17-openjdk", "java-21-openjdk", "javascript"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let got = expand_globs(&[base.join("java-*"), PathBuf::from("/usr"), base.join("x-*")]);
        assert_eq!(
            got,
            [
                base.join("java-17-openjdk"),
                base.join("java-21-openjdk"),
                PathBuf::from("/usr")
            ]
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn port_rules_only_where_the_host_network_is_shared() {
        assert!(port_rules_apply(true, NetMode::Host));
        assert!(!port_rules_apply(true, NetMode::None));
        assert!(port_rules_apply(false, NetMode::Host));
        assert!(port_rules_apply(false, NetMode::None));
    }
}
