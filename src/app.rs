//! The commands: turn parsed flags into work and an exit code.

use crate::cli::{CheckArgs, Cli, Command, NetArg, ProfilesAction, RunArgs, Target, ValidateArgs};
use crate::exit::EXIT_SANDBOX_ERROR;
use crate::launcher::Start;
use crate::layers::channel::Phase;
use crate::policy::{self, Input};
use crate::profile::{Loader, Profile, Requirement};
use crate::report;
use crate::workspace::Workspace;
use std::ffi::OsString;

/// A failure of sandbox-run itself: one line for stderr and the exit code.
#[derive(Debug)]
pub struct Fail {
    pub code: i32,
    pub msg: String,
}

impl Fail {
    pub fn usage(msg: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_SANDBOX_ERROR,
            msg: msg.into(),
        }
    }
}

/// When `main` began: `--timings` starts there (the command line, the profile and the gate come
/// before the plan).
pub static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

pub fn run(cli: Cli) -> Result<i32, Fail> {
    if !matches!(cli.command, Command::Run(_) | Command::Validate(_)) {
        crate::supervisor::unblock_relayed();
        // These only print: a closed pipe (`sandbox-run doctor --json | head`) ends them
        // quietly, as it ends any filter, instead of panicking in println!.
        // SAFETY: restoring the default disposition of one signal.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let verbose = if cli.quiet { 0 } else { cli.verbose };
    match cli.command {
        Command::Run(args) => run_command(*args, verbose),
        Command::Check(args) => check(args),
        Command::Validate(args) => validate_command(args, verbose),
        Command::Doctor {
            json,
            requirements_md,
        } => Ok(doctor(json, requirements_md)),
        Command::Home {
            profile,
            seed,
            user,
        } => home_command(&profile, &seed, user.as_deref(), verbose, cli.quiet),
        Command::Profiles { action } => profiles(action.unwrap_or(ProfilesAction::List)),
        Command::Changes { action } => crate::changes::command::run(action).map_err(Fail::usage),
    }
}

fn load_profile(name: &str) -> Result<Profile, Fail> {
    Loader::from_env().load(name).map_err(|e| Fail::usage(e.0))
}

/// The profile, with the layers the caller waived by `--without` made best-effort.
fn load_profile_without(name: &str, without: &[crate::cli::WithoutArg]) -> Result<Profile, Fail> {
    use crate::cli::WithoutArg as W;
    let mut p = load_profile(name)?;
    for w in without {
        p.accept_without(match w {
            W::Cgroup => "cgroup",
            W::Landlock => "landlock",
            W::Seccomp => "seccomp",
            W::Namespaces => "namespaces",
        });
    }
    Ok(p)
}

/// The PATH the sandbox will use: the profile's, else the caller's.
pub fn sandbox_path(p: &Profile) -> OsString {
    crate::plan::sandbox_path_from(p, std::env::var("PATH").ok().as_deref())
}

/// `--repo DIR`, else the git top level above the current directory, else that directory.
fn workspace(repo: Option<&std::path::Path>) -> Result<Workspace, Fail> {
    let cwd =
        std::env::current_dir().map_err(|e| Fail::usage(format!("current directory: {e}")))?;
    let ws = Workspace::find(repo, &cwd).map_err(Fail::usage)?;
    if let Some(n) = ws.notice() {
        tracing::warn!("{n}");
    }
    Ok(ws)
}

fn gate(target: &Target, profile: &Profile) -> Result<(policy::Verdict, Workspace), Fail> {
    let ws = workspace(target.repo.as_deref())?;
    Ok((gate_in(target, profile, &ws), ws))
}

fn gate_in(target: &Target, profile: &Profile, ws: &Workspace) -> policy::Verdict {
    let path = sandbox_path(profile);
    let ctx = policy::Context {
        repo: &ws.repo,
        cwd: &ws.cwd,
        path: &path,
    };
    let input = match &target.command {
        Some(c) => Input::Command(c),
        None => Input::Argv(&target.argv),
    };
    policy::gate(&input, &profile.gate, &ctx)
}

fn check(args: CheckArgs) -> Result<i32, Fail> {
    let profile = load_profile(&args.target.profile)?;
    let (v, _) = gate(&args.target, &profile)?;
    if args.json {
        let json = serde_json::json!({
            "allowed": v.allowed(),
            "outcome": v.outcome,
            "rule": v.rule,
            "word": v.word,
            "program": v.program,
            "reason": v.reason,
            "argv": v.argv,
            "profile": profile.name,
        });
        println!("{json}");
    } else {
        println!("{}", verdict_line(&v));
    }
    Ok(v.exit_code())
}

/// `allowed: ...`, `denied by rule R: ...` or `not found (rule R): ...`, on one line, with the
/// resolved program when there is one.
pub fn verdict_line(v: &policy::Verdict) -> String {
    match &v.program {
        _ if v.allowed() => v.reason.clone(),
        Some(p) => format!("{} [program {}]", v.reason, p.display()),
        None => v.reason.clone(),
    }
}

/// `sandbox-run home PROFILE`: the caller's kept home for PROFILE, made when missing.
fn home_command(
    name: &str,
    seed: &[std::path::PathBuf],
    user: Option<&str>,
    verbose: u8,
    quiet: bool,
) -> Result<i32, Fail> {
    let p = load_profile(name)?;
    let me = nix::unistd::geteuid().as_raw();
    let (uid, gid) = match user {
        Some(u) => crate::home::seed::user_ids(u).map_err(Fail::usage)?,
        None => (me, nix::unistd::getegid().as_raw()),
    };
    if uid != me && me != 0 {
        return Err(Fail::usage(
            "home --user: only root may make or seed another user's kept home",
        ));
    }
    let (base, below) = crate::home::location(
        uid,
        me,
        |k| std::env::var(k).ok(),
        crate::state::passwd_home(uid),
        &p.name,
    )
    .map_err(Fail::usage)?;
    let dir = crate::home::ensure(&base, &below, uid, gid).map_err(Fail::usage)?;
    if !seed.is_empty() {
        let cwd = std::env::current_dir().map_err(|e| Fail::usage(format!("seed: cwd: {e}")))?;
        let done = crate::home::seed::seed(&dir, seed, &cwd, verbose > 0, &mut |l| {
            eprintln!("sandbox-run: {l}")
        })
        .map_err(Fail::usage)?;
        if !quiet {
            eprintln!("sandbox-run: {}", done.summary(&dir));
        }
    }
    println!("{}", dir.display());
    Ok(0)
}

fn profiles(action: ProfilesAction) -> Result<i32, Fail> {
    let loader = Loader::from_env();
    match action {
        ProfilesAction::List => {
            for (name, src) in loader.list() {
                let desc = loader
                    .load(&name)
                    .map(|p| p.description)
                    .unwrap_or_else(|e| format!("(invalid: {e})"));
                println!("{name:<14} {src:<40} {desc}");
            }
        }
        ProfilesAction::Show { name } => {
            let p = loader.load(&name).map_err(|e| Fail::usage(e.0))?;
            print!("{}", p.to_toml());
        }
    }
    Ok(0)
}

fn run_command(args: RunArgs, verbose: u8) -> Result<i32, Fail> {
    let mut rep = Reporter::new(
        args.report.clone(),
        &args.target.profile,
        args.target.repo.clone(),
    );
    rep.commands = vec![command_text(&args.target)];
    rep.argv = args
        .target
        .argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let r = run_in(args, verbose, &mut rep);
    if let Err(fail) = &r {
        rep.failed(fail);
    }
    r
}

fn run_in(args: RunArgs, verbose: u8, rep: &mut Reporter) -> Result<i32, Fail> {
    let ws = workspace(args.target.repo.as_deref())?;
    // Before anything else happens: a report path that cannot be created costs nothing yet.
    rep.open(&ws)?;
    if verbose > 0 {
        eprintln!("sandbox-run: {}", crate::explain::repo_line(&ws));
    }
    let profile = load_profile_without(&args.target.profile, &args.without)?;
    rep.profile = profile.name.clone();
    let v = gate_in(&args.target, &profile, &ws);
    rep.argv = v.argv.clone();
    let cmd = command_text(&args.target);
    if !v.allowed() {
        eprintln!("sandbox-run: {}", verdict_line(&v));
        rep.write(vec![report::gated(&cmd, &v)], None)?;
        return Ok(v.exit_code());
    }
    let mut env = Vec::new();
    for f in &args.env_file {
        let euid = nix::unistd::geteuid().as_raw();
        env.extend(crate::layers::env::read_env_file(f, euid, &ws.repo).map_err(Fail::usage)?);
    }
    env.extend(args.env.iter().cloned());
    // Before anything copies the environment: each secret's value into the vault, and its
    // placeholder in its place.
    let env_names: Vec<String> = env.iter().map(|(k, _)| k.clone()).collect();
    let set_names: Vec<String> = profile.env.set.keys().cloned().collect();
    let secrets = crate::secrets::load(
        &profile.secrets,
        &args.secrets.asked(),
        &crate::secrets::Others {
            pass_env: &args.pass_env,
            keep_env: &args.keep_env,
            env: &env_names,
            profile_set: &set_names,
        },
        nix::unistd::geteuid().as_raw(),
        &ws.repo,
    )
    .map_err(Fail::usage)?;
    let stdin = match &args.stdin {
        Some(s) => Some(std::sync::Arc::new(
            stdin_source(s, &ws.repo).map_err(Fail::usage)?,
        )),
        None => None,
    };
    let runner = Runner {
        timings: args.timings,
        verbose,
        profile: &profile,
        ws: &ws,
        overrides: crate::plan::Overrides {
            net: args.net.map(|n| match n {
                NetArg::None => crate::profile::NetMode::None,
                NetArg::Filtered => crate::profile::NetMode::Filtered,
                NetArg::Host => crate::profile::NetMode::Host,
            }),
            allow_hosts: args.allow_host.clone(),
            memory: args.memory,
            cpus: args.cpus,
            pids: args.pids,
            env,
            keep_env: args.keep_env.clone(),
            home: args.home.map(|h| match h {
                crate::cli::HomeArg::Tmp => crate::profile::HomeMode::Tmp,
                crate::cli::HomeArg::Persist => crate::profile::HomeMode::Persist,
            }),
            pass_env: args.pass_env.clone(),
            ca_certs: args.ca_certs.clone(),
            secrets,
            stdin_pipe: stdin.is_some(),
            keep_paths: rep.keep_paths(&ws),
            carry: None,
            changes: args.changes.map(crate::cli::ChangesArg::mode),
            with_changes: with_changes(args.with_changes.as_deref(), &ws)?,
        },
        options: crate::supervisor::Options {
            timeout: args.timeout.unwrap_or(profile.limits.timeout).0,
            kill_grace: args.kill_grace.unwrap_or(profile.limits.kill_grace).0,
            capture: args.report.is_some() && (args.capture || profile.report.capture),
            stdout_to_stderr: args.report.as_deref() == Some("-"),
            output_cap: profile.limits.output.0,
            stdin,
        },
    };
    // A failure to set up the sandbox: the report says so ([`Reporter::failed`]).
    let (result, sandbox) = runner.execute(&cmd, &v)?;
    let code = result.exit_code;
    rep.write(vec![result], Some(sandbox))?;
    Ok(code)
}

/// The `--report` of one `run` or `validate`. The file is created before anything runs and
/// written once at the end; when the command fails first (exit 125: a bad profile, a missing
/// repo, a malformed gene, a required layer missing, a bad flag), [`Reporter::failed`] writes
/// a report with status `sandbox_error` and the error line. Every exit leaves a valid report.
pub struct Reporter {
    dest: Option<String>,
    started: std::time::SystemTime,
    /// The profile's name once loaded; before, what `--profile` said.
    profile: String,
    /// `--repo` as given, for a report written before the repo was found.
    repo_flag: Option<std::path::PathBuf>,
    /// The repo, once found.
    repo: Option<std::path::PathBuf>,
    gene_id: Option<String>,
    commands: Vec<String>,
    /// The words of the failing command, for a failure's report.
    argv: Vec<String>,
    sink: Option<ReportSink>,
    /// The report path itself was refused: nothing can be written.
    refused: bool,
    written: bool,
}

impl Reporter {
    pub fn new(dest: Option<String>, profile: &str, repo_flag: Option<std::path::PathBuf>) -> Self {
        Reporter {
            dest,
            started: std::time::SystemTime::now(),
            profile: profile.to_string(),
            repo_flag,
            repo: None,
            gene_id: None,
            commands: Vec::new(),
            argv: Vec::new(),
            sink: None,
            refused: false,
            written: false,
        }
    }

    /// Create the report file now, before anything runs: no link inside `ws.repo` followed.
    fn open(&mut self, ws: &Workspace) -> Result<(), Fail> {
        self.repo = Some(ws.repo.clone());
        match ReportSink::open(self.dest.as_deref(), &ws.repo) {
            Ok(sink) => {
                self.sink = sink;
                Ok(())
            }
            Err(fail) => {
                self.refused = true;
                Err(fail)
            }
        }
    }

    /// The report file's path in the repo, for the copy-back to leave alone.
    fn keep_paths(&self, ws: &Workspace) -> Vec<std::path::PathBuf> {
        self.sink
            .as_ref()
            .map(|s| s.in_repo(ws))
            .unwrap_or_default()
    }

    /// The report with these results; nothing without `--report`.
    fn write(
        &mut self,
        results: Vec<report::CommandResult>,
        sandbox: Option<report::Sandbox>,
    ) -> Result<(), Fail> {
        self.written = true;
        if self.sink.is_none() {
            return Ok(());
        }
        let r = self.report(results, sandbox);
        match &mut self.sink {
            Some(sink) => sink.write(&r),
            None => Ok(()),
        }
    }

    /// After `fail`: unless a report was written already (or its path was the failure), one
    /// whose result has status `sandbox_error` and the error line. Problems writing it are
    /// one more line on stderr; the exit code stays the failure's.
    pub fn failed(&mut self, fail: &Fail) {
        if self.dest.is_none() || self.written || self.refused {
            return;
        }
        if self.sink.is_none() {
            // The failure came before the repo was found, so which links the repo controls is
            // unknown: follow none at all on the way to the report.
            let root = std::path::Path::new("/");
            match ReportSink::open(self.dest.as_deref(), root) {
                Ok(sink) => self.sink = sink,
                Err(e) => {
                    eprintln!("sandbox-run: {}", e.msg);
                    return;
                }
            }
        }
        let cmd = self.commands.first().cloned().unwrap_or_default();
        let line = fail.msg.replace('\n', " ");
        let result = report::sandbox_failed(&cmd, &self.argv, &line);
        if let Err(e) = self.write(vec![result], None) {
            eprintln!("sandbox-run: {}", e.msg);
        }
    }

    fn report(
        &self,
        results: Vec<report::CommandResult>,
        sandbox: Option<report::Sandbox>,
    ) -> report::Report {
        let repo = match (&self.repo, &self.repo_flag) {
            (Some(r), _) => r.clone(),
            (None, flag) => {
                let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
                match flag {
                    Some(f) => crate::hostfs::lexical(&cwd, f),
                    None => cwd,
                }
            }
        };
        report::Report {
            kind: "ValidationReport",
            schema: report::SCHEMA,
            id: report::new_id(self.started),
            gene_id: self.gene_id.clone(),
            profile: if self.profile.is_empty() {
                "(none)".into()
            } else {
                self.profile.clone()
            },
            repo: repo.display().to_string(),
            commands: self.commands.clone(),
            ok: !results.is_empty() && results.iter().all(|r| r.ok),
            results,
            sandbox,
            env_fingerprint: report::Fingerprint::probe(),
            started_at: crate::units::iso8601(self.started),
            finished_at: crate::units::iso8601(std::time::SystemTime::now()),
        }
    }
}

/// A flag problem clap found (exit 125) in a `run` or `validate` command line that names
/// `--report`: that report too says `sandbox_error` and the error line. `args` is the whole
/// command line (with `run` inserted where it was implied); the flags are read as written,
/// since clap could not parse them.
pub fn usage_error_report(args: &[OsString], msg: &str) {
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let global = ["-v", "-vv", "-vvv", "--verbose", "-q", "--quiet"];
    let Some(at) = words.iter().position(|w| !global.contains(&w.as_str())) else {
        return;
    };
    if !matches!(words[at].as_str(), "run" | "validate") {
        return;
    }
    let flags_end = words.iter().position(|w| w == "--").unwrap_or(words.len());
    let flags = &words[at + 1..flags_end];
    let value = |name: &str| -> Option<String> {
        let eq = format!("{name}=");
        let mut found = None;
        for (i, w) in flags.iter().enumerate() {
            if w == name {
                found = flags.get(i + 1).cloned();
            } else if let Some(v) = w.strip_prefix(&eq) {
                found = Some(v.to_string());
            }
        }
        found.filter(|v| !v.is_empty())
    };
    let Some(dest) = value("--report") else {
        return;
    };
    let repo_flag = value("--repo").map(std::path::PathBuf::from);
    let mut rep = Reporter::new(
        Some(dest),
        &value("--profile").unwrap_or_default(),
        repo_flag.clone(),
    );
    let argv: Vec<String> = words.get(flags_end + 1..).unwrap_or_default().to_vec();
    rep.commands = match value("--command") {
        Some(c) => vec![c],
        None if !argv.is_empty() => vec![argv.join(" ")],
        None => Vec::new(),
    };
    rep.argv = argv;
    if let Ok(ws) = workspace(repo_flag.as_deref()) {
        if rep.open(&ws).is_err() {
            // The report path is refused: clap's message is the one the caller needs first.
            return;
        }
    }
    rep.failed(&Fail::usage(msg));
}

/// Where the report goes: stdout, or a file created before anything runs (DESIGN.md section
/// 3: no link inside the repo followed, see [`crate::hostfs::create_report`]) and written
/// through the same open file at the end, whatever the command did to the path meanwhile.
enum ReportSink {
    Stdout,
    File { dest: String, file: std::fs::File },
}

impl ReportSink {
    /// `--report DEST`, opened now; `None` without the flag.
    fn open(dest: Option<&str>, repo: &std::path::Path) -> Result<Option<ReportSink>, Fail> {
        let Some(dest) = dest else { return Ok(None) };
        if dest == "-" {
            return Ok(Some(ReportSink::Stdout));
        }
        let fail = |why: String| Fail::usage(format!("report {dest}: {why}"));
        let last = std::path::Path::new(dest).components().next_back();
        if dest.ends_with('/') || !matches!(last, Some(std::path::Component::Normal(_))) {
            return Err(fail("not a file name".into()));
        }
        let cwd = std::env::current_dir().map_err(|e| fail(format!("current directory: {e}")))?;
        let file = crate::hostfs::create_report(std::path::Path::new(dest), &cwd, repo)
            .map_err(|e| fail(report_open_error(&e)))?;
        Ok(Some(ReportSink::File {
            dest: dest.to_string(),
            file,
        }))
    }

    /// The report file's path in the repo, if it lies there: the copy-back of a read-write
    /// repo leaves it and its directories alone ([`crate::layers::overlay`]).
    fn in_repo(&self, ws: &Workspace) -> Vec<std::path::PathBuf> {
        use std::os::fd::AsRawFd;
        let ReportSink::File { file, .. } = self else {
            return Vec::new();
        };
        // Where the file opened at the start really is: the path as written may reach the
        // repo through a link of the caller's outside it.
        let at = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()));
        at.ok()
            .and_then(|at| {
                at.strip_prefix(&ws.repo)
                    .ok()
                    .map(|r| vec![r.to_path_buf()])
            })
            .unwrap_or_default()
    }

    fn write(&mut self, r: &report::Report) -> Result<(), Fail> {
        use std::io::{Seek, Write};
        let json =
            serde_json::to_string_pretty(r).map_err(|e| Fail::usage(format!("report: {e}")))?;
        match self {
            ReportSink::Stdout => writeln!(std::io::stdout(), "{json}")
                .map_err(|e| Fail::usage(format!("report -: {e}"))),
            ReportSink::File { dest, file } => {
                let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
                // In a writable repo the command could write into the file meanwhile (it is
                // the same inode): start from empty.
                let r = if regular {
                    file.set_len(0)
                        .and_then(|()| file.rewind())
                        .and_then(|()| writeln!(file, "{json}"))
                } else {
                    writeln!(file, "{json}")
                };
                r.map_err(|e| Fail::usage(format!("report {dest}: {e}")))
            }
        }
    }
}

/// Why the report file could not be created, in the words of the host boundary's rules.
fn report_open_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "a symlink inside the repo is on the way (not followed)".into(),
        Some(libc::EXDEV) => "leaves the repo by `..` inside it (not followed)".into(),
        Some(libc::ENXIO) => "a FIFO with no reader".into(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_string()
        }
    }
}

/// Removes a run's scratch dir when dropped.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::plan::remove_scratch(&self.0);
    }
}

/// Runs allowed commands, each in a fresh sandbox: shared by `run` and `validate`.
struct Runner<'a> {
    /// Print the setup timings after each run.
    timings: bool,
    /// `-v`: say what the sandbox did; `-vv`: the timings too.
    verbose: u8,
    profile: &'a Profile,
    ws: &'a Workspace,
    overrides: crate::plan::Overrides,
    options: crate::supervisor::Options,
}

impl Runner<'_> {
    fn execute(
        &self,
        cmd: &str,
        v: &policy::Verdict,
    ) -> Result<(report::CommandResult, report::Sandbox), Fail> {
        let path = sandbox_path(self.profile);
        let found = policy::found_path(v, &path, &self.ws.cwd).ok_or_else(|| {
            Fail::usage(format!(
                "{}: changed since the gate checked it",
                v.argv.first().map(String::as_str).unwrap_or("")
            ))
        })?;
        let t0 = std::time::Instant::now();
        let host = crate::plan::Host::probe();
        let mut plan = crate::plan::build(self.profile, self.ws, v, &found, &self.overrides, &host)
            .map_err(Fail::usage)?;
        // A run without namespaces has a scratch dir on the host, a read-write repo without
        // .git a placeholder: gone when we return, however.
        let _scratch = plan.scratch.clone().map(Scratch);
        let _placeholder = match &plan.git_placeholder {
            Some(repo) => {
                Some(crate::layers::git::Placeholder::make(repo, plan.ids).map_err(Fail::usage)?)
            }
            None => None,
        };
        // A large disk cap: the repo's layer on disk, in a dir of this run's (gone when we return).
        let _layer = crate::plan::prepare_layer_dir(&mut plan, host.kernel).map_err(Fail::usage)?;
        if plan.repo_mode != crate::profile::RepoMode::Ro {
            crate::workspace::warn_foreign_owner(
                &self.ws.repo,
                plan.ids.uid,
                plan.git_placeholder.is_some(),
                crate::workspace::OWNER_SCAN_BEFORE,
            );
        }
        let planned = t0.elapsed();
        let limits = self.cgroup_limits();
        // On cgroup v2 stage 2 is born in its leaf, which must exist before the fork. On v1 as
        // root stage 2 moves itself in, so the leaf is made (and the host's cgroups looked at)
        // after the fork, beside stage 2's namespace setup (`supervisor::run` calls `make`).
        let late = nix::unistd::geteuid().is_root() && crate::layers::cgroup::Host::v1_only();
        let mut leaf = None;
        if !late {
            let made =
                crate::layers::cgroup::Host::detect().and_then(|h| self.cgroup_leaf(&h, &limits));
            leaf = self.cgroup_or_degraded(made).map_err(Fail::usage)?;
            if leaf.is_none() {
                plan.degraded.push("cgroup".into());
            }
        }
        plan.cgroup_self_join = late;
        let cgrouped = t0.elapsed() - planned;
        // (after the measurement: printing is not the cgroup's time)
        if self.verbose > 0 {
            for line in crate::explain::plan_lines(&plan, crate::layers::landlock::kernel_abi()) {
                eprintln!("sandbox-run: {line}");
            }
            if !late {
                self.say_cgroup(leaf.as_ref(), &limits);
            }
        }
        for d in &plan.degraded {
            self.warn_degraded(d);
        }
        let mut make = || {
            let made =
                crate::layers::cgroup::Host::detect().and_then(|h| self.cgroup_leaf(&h, &limits));
            let made = self.cgroup_or_degraded(made)?;
            if self.verbose > 0 {
                self.say_cgroup(made.as_ref(), &limits);
            }
            if made.is_none() {
                self.warn_degraded("cgroup");
            }
            Ok(made)
        };
        let make: Option<crate::supervisor::MakeLeaf> = match late {
            true => Some(&mut make),
            false => None,
        };
        let finished =
            crate::supervisor::run(&plan, &self.options, &mut leaf, make).map_err(Fail::usage)?;
        if late && leaf.is_none() {
            plan.degraded.push("cgroup".into());
        }
        let cgroup = leaf.as_ref().map(|l| report::CgroupInForce {
            version: l.version().number(),
            memory_max: limits.memory_max,
            cpu_max: limits.cpu_max(),
            pids_max: limits.pids_max,
        });
        let t1 = std::time::Instant::now();
        if let Some(leaf) = leaf {
            if let Err(e) = leaf.remove() {
                eprintln!("sandbox-run: {e}");
            }
        }
        if self.timings || self.verbose > 1 {
            eprintln!(
                "sandbox-run: {}",
                timings_line(
                    STARTED.get().map_or(std::time::Duration::ZERO, |s| t0 - *s),
                    planned,
                    cgrouped,
                    &finished,
                    t1.elapsed()
                )
            );
        }
        let oom_kills = finished.usage.as_ref().map_or(0, |u| u.oom_kills);
        let error = match (&finished.failure, finished.lost) {
            (Some(e), _) => Some(crate::supervisor::failure_line(e, &plan)),
            // The OOM line below says what happened.
            (None, Some(lost)) if oom_kills == 0 => Some(lost.line()),
            _ => None,
        };
        if let Some(e) = &error {
            eprintln!("sandbox-run: {e}");
        }
        if oom_kills > 0 {
            eprintln!(
                "sandbox-run: out of memory: the kernel killed {oom_kills} process{} at the {} memory cap{}",
                if oom_kills == 1 { "" } else { "es" },
                crate::units::Size(limits.memory_max),
                match finished.lost {
                    Some(lost) => format!(" ({})", lost.line()),
                    None => String::new(),
                }
            );
        }
        if finished.timed_out {
            eprintln!(
                "sandbox-run: timed out after {}: the sandbox was torn down",
                crate::units::Duration(self.options.timeout)
            );
        }
        if let Some(c) = &finished.disk_stopped {
            eprintln!("{}", crate::layers::disk::stopped_line(c, &plan.mounts));
        }
        let mut result = report::ran(cmd, &plan, &finished, self.options.capture, error);
        // A command that failed after refused lookups is told which host it wanted.
        let filtered = plan.net == crate::profile::NetMode::Filtered;
        let named = crate::net::dns::refusal_line(&finished.dns_refused, &plan.profile, filtered);
        if let Some(line) = named.filter(|_| result.exit_code != 0) {
            eprintln!("{line}");
        }
        result.repo_changes = self.way_back(cmd, &plan, &finished);
        let full_at_end = result.repo_changes.as_ref().is_some_and(|c| c.disk_full);
        let hit = finished.disk_stopped.is_some() || full_at_end;
        if hit && !result.limits_hit.contains(&"disk") {
            result.limits_hit.push("disk");
        }
        if finished.disk_full {
            if let Some(cap) = crate::layers::overlay::disk_size(&plan.mounts) {
                eprintln!(
                    "sandbox-run: disk: the command filled the repo's layer, {} ([limits] disk): its writes past that failed with ENOSPC",
                    crate::units::Size(cap)
                );
            }
        }
        // The sandbox is gone: what the step left for the runner, filtered.
        result.file_commands = plan
            .file_commands
            .as_ref()
            .map(crate::changes::actions::apply);
        if !result.ok && plan.repo_mode != crate::profile::RepoMode::Ro {
            // a file it could not write may be why: look deeper than before the run
            crate::workspace::warn_foreign_owner(
                &self.ws.repo,
                plan.ids.uid,
                plan.git_placeholder.is_some(),
                crate::workspace::OWNER_SCAN_AFTER_FAILURE,
            );
        }
        Ok((result, report::sandbox(&plan, &finished, cgroup)))
    }

    /// A run with a kept layer: what became of its writes to the repo ([`crate::changes`]).
    fn way_back(
        &self,
        cmd: &str,
        plan: &crate::plan::Plan,
        f: &crate::supervisor::Finished,
    ) -> Option<crate::changes::back::RepoChanges> {
        use crate::changes::back::{Mode, RepoChanges};
        if !crate::layers::overlay::kept(&plan.mounts) {
            return None;
        }
        if let Some(o) = &f.disk_stopped {
            // past its cap: nothing of it is applied (the line above said so)
            return Some(RepoChanges {
                disk_used_bytes: o.count.bytes,
                disk_used_files: o.count.files,
                disk_full: true,
                applied: Some(crate::changes::Applied::None),
                error: Some("the command went past [limits] disk".into()),
                ..RepoChanges::default()
            });
        }
        let Some(layer) = &f.layer else {
            // The sandbox never handed its layer over: it failed to start, or its init died.
            if f.failure.is_none() && f.disk_stopped.is_none() {
                eprintln!("sandbox-run: repo: the sandbox ended before it handed its changes over; nothing was applied");
            }
            return Some(RepoChanges {
                applied: Some(crate::changes::Applied::None),
                error: Some("the sandbox ended before it handed its changes over".into()),
                ..RepoChanges::default()
            });
        };
        let mode = self.overrides.changes.unwrap_or(Mode::Apply);
        let meta = crate::changes::back::Meta {
            profile: self.profile.name.clone(),
            command: cmd.to_string(),
        };
        let from_plan = crate::changes::back::FromPlan {
            layer_dir: plan.layer_dir.as_deref(),
            keep_paths: &plan.keep_paths,
            mounts: &plan.mounts,
            ids: plan.ids,
        };
        Some(crate::changes::back::run(&from_plan, layer, mode, &meta))
    }

    fn cgroup_limits(&self) -> crate::layers::cgroup::Limits {
        let (l, o) = (&self.profile.limits, &self.overrides);
        crate::layers::cgroup::Limits {
            memory_max: o.memory.unwrap_or(l.memory).0,
            cpus: o.cpus.unwrap_or(l.cpus),
            pids_max: o.pids.unwrap_or(l.pids),
        }
    }

    /// This run's cgroup leaf on `host`, limited before anything runs in it. Leaves of earlier
    /// runs whose sandbox-run was killed are removed first.
    fn cgroup_leaf(
        &self,
        host: &crate::layers::cgroup::Host,
        limits: &crate::layers::cgroup::Limits,
    ) -> Result<crate::layers::cgroup::Leaf, crate::layers::cgroup::Error> {
        if let Err(e) = host.remove_stale() {
            tracing::warn!("{e}");
        }
        host.create_leaf(limits)
    }

    /// The leaf, or what its absence means for this profile: a refusal (the line to print,
    /// exit 125) when the layer is required, `None` (run degraded) when best-effort.
    fn cgroup_or_degraded(
        &self,
        r: Result<crate::layers::cgroup::Leaf, crate::layers::cgroup::Error>,
    ) -> Result<Option<crate::layers::cgroup::Leaf>, String> {
        match r {
            Ok(leaf) => Ok(Some(leaf)),
            Err(e) => match self.profile.layers.cgroup {
                Requirement::Required => {
                    let facts = crate::advice::Facts::probe();
                    Err(crate::advice::cgroup_refusal(&e, self.profile, &facts))
                }
                Requirement::BestEffort => {
                    tracing::debug!("{e}");
                    Ok(None)
                }
            },
        }
    }

    /// `-v`: the cgroup in force.
    fn say_cgroup(
        &self,
        leaf: Option<&crate::layers::cgroup::Leaf>,
        limits: &crate::layers::cgroup::Limits,
    ) {
        match leaf {
            Some(l) => eprintln!(
                "sandbox-run: cgroup v{}: memory {}, cpus {}, pids {}",
                l.version().number(),
                crate::units::Size(limits.memory_max),
                limits.cpus,
                limits.pids_max
            ),
            None => eprintln!("sandbox-run: cgroup: none (degraded)"),
        }
    }

    fn warn_degraded(&self, layer: &str) {
        if self.profile.without.iter().any(|w| w == layer) {
            let flag = if layer == "filesystem" {
                "namespaces"
            } else {
                layer
            };
            tracing::warn!("degraded: running without the {layer} layer (--without {flag})");
        } else {
            tracing::warn!(
                "degraded: running without the {layer} layer (profile {} marks it best-effort)",
                self.profile.name
            );
        }
    }
}

/// `validate --gene FILE`: gate every command first (one denial and nothing runs, as the
/// seed's promotion audit), then run them in order, each in a fresh sandbox, fail-fast.
fn validate_command(args: ValidateArgs, verbose: u8) -> Result<i32, Fail> {
    let mut rep = Reporter::new(args.report.clone(), &args.profile, args.repo.clone());
    let r = validate_in(args, verbose, &mut rep);
    if let Err(fail) = &r {
        rep.failed(fail);
    }
    r
}

fn validate_in(args: ValidateArgs, verbose: u8, rep: &mut Reporter) -> Result<i32, Fail> {
    let ws = workspace(args.repo.as_deref())?;
    // Before anything else happens: a report path that cannot be created costs nothing yet.
    rep.open(&ws)?;
    if verbose > 0 {
        eprintln!("sandbox-run: {}", crate::explain::repo_line(&ws));
    }
    let gene = crate::gene::Gene::load(&args.gene).map_err(Fail::usage)?;
    rep.gene_id = Some(gene.id.clone());
    rep.commands = gene.validation.clone();
    let profile = load_profile_without(&args.profile, &args.without)?;
    rep.profile = profile.name.clone();
    // Before anything copies the environment (see run_in).
    let set_names: Vec<String> = profile.env.set.keys().cloned().collect();
    let secrets = crate::secrets::load(
        &profile.secrets,
        &args.secrets.asked(),
        &crate::secrets::Others {
            pass_env: &[],
            keep_env: &[],
            env: &[],
            profile_set: &set_names,
        },
        nix::unistd::geteuid().as_raw(),
        &ws.repo,
    )
    .map_err(Fail::usage)?;
    let path = sandbox_path(&profile);
    let ctx = policy::Context {
        repo: &ws.repo,
        cwd: &ws.cwd,
        path: &path,
    };
    let verdicts: Vec<policy::Verdict> = gene
        .validation
        .iter()
        .map(|c| policy::gate(&Input::Command(c), &profile.gate, &ctx))
        .collect();
    let denied: Vec<report::CommandResult> = gene
        .validation
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| !v.allowed())
        .map(|(c, v)| {
            eprintln!("sandbox-run: {c:?}: {}", verdict_line(v));
            report::gated(c, v)
        })
        .collect();
    if let Some(first) = denied.first() {
        let code = first.exit_code;
        eprintln!(
            "sandbox-run: gene {}: {} of {} commands denied; nothing ran",
            gene.id,
            denied.len(),
            gene.validation.len()
        );
        rep.write(denied, None)?;
        return Ok(code);
    }
    // One workspace for the whole gene: with a copy-on-write repo, what a command writes (a
    // build's output) is carried to the next command's sandbox, and thrown away at the end.
    // It is saved between commands in a private dir of sandbox-run's state, owned by the user
    // the sandbox runs as (who must reach it), removed at the end, or by the next gene when
    // this one is killed ([`crate::state::RunDir`]).
    let carry_dir = if profile.filesystem.repo == crate::profile::RepoMode::Overlay
        && gene.validation.len() > 1
    {
        let (ids, _) =
            crate::plan::run_as(&profile, &ws, &crate::plan::Host::probe()).map_err(Fail::usage)?;
        Some(crate::state::RunDir::make(ids, "gene", "gene layer dir").map_err(Fail::usage)?)
    } else {
        None
    };
    let carry = match &carry_dir {
        Some(run) => Some(run.subdir("layer").map_err(Fail::usage)?),
        None => None,
    };
    let runner = Runner {
        timings: false,
        verbose,
        profile: &profile,
        ws: &ws,
        overrides: crate::plan::Overrides {
            keep_paths: rep.keep_paths(&ws),
            carry,
            secrets,
            changes: args.changes.map(crate::cli::ChangesArg::mode),
            with_changes: with_changes(args.with_changes.as_deref(), &ws)?,
            ..Default::default()
        },
        options: crate::supervisor::Options {
            timeout: args.timeout.unwrap_or(profile.limits.timeout).0,
            kill_grace: profile.limits.kill_grace.0,
            capture: true,
            stdout_to_stderr: args.report.as_deref() == Some("-"),
            output_cap: profile.limits.output.0,
            stdin: None,
        },
    };
    let mut results = Vec::new();
    let mut sandbox = None;
    let mut code = 0;
    for (cmd, v) in gene.validation.iter().zip(&verdicts) {
        let (result, sb) = match runner.execute(cmd, v) {
            Ok(r) => r,
            Err(fail) => {
                // The commands that ran, then this one's failure.
                results.push(report::sandbox_failed(cmd, &v.argv, &fail.msg));
                if let Err(e) = rep.write(results, sandbox) {
                    eprintln!("sandbox-run: {}", e.msg);
                }
                return Err(fail);
            }
        };
        sandbox = Some(sb);
        let ok = result.ok;
        code = result.exit_code;
        results.push(result);
        if !ok {
            break;
        }
    }
    // Stopped early: the rest did not run, and the report says so.
    let ran = results.len();
    if ran < gene.validation.len() {
        let last = &results[ran - 1];
        eprintln!(
            "sandbox-run: gene {}: command {ran} of {} failed ({:?}: {}); {} not run",
            gene.id,
            gene.validation.len(),
            last.cmd,
            outcome_words(last),
            gene.validation.len() - ran
        );
        for (cmd, v) in gene.validation.iter().zip(&verdicts).skip(ran) {
            results.push(report::skipped(cmd, &v.argv));
        }
    }
    rep.write(results, sandbox)?;
    Ok(code)
}

/// How a command ended, in a few words: `exit 2`, `timeout`, `signal 9`...
fn outcome_words(r: &report::CommandResult) -> String {
    match (r.status, r.signal) {
        (report::Status::Failed, _) => format!("exit {}", r.exit_code),
        (report::Status::Signaled, Some(sig)) => format!("signal {sig}"),
        (s, _) => serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(|x| x.replace('_', " ")))
            .unwrap_or_default(),
    }
}

/// `--stdin FILE|-`: what the supervisor copies into the workload's stdin pipe. Never a
/// terminal: sandbox-run's own stdin when it is one (`-`), or a FILE that is one (/dev/tty),
/// would let the command read what the user types. Errors are one line.
fn stdin_source(arg: &str, repo: &std::path::Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let file = if arg == "-" {
        // SAFETY: isatty on fd 0 only queries it.
        if unsafe { libc::isatty(0) } == 1 {
            return Err(concat!(
                "--stdin -: sandbox-run's stdin is a terminal; the command never reads the ",
                "caller's terminal (pipe or redirect the input instead)"
            )
            .into());
        }
        let fd = std::os::fd::AsFd::as_fd(&std::io::stdin())
            .try_clone_to_owned()
            .map_err(|e| format!("--stdin -: {e}"))?;
        std::fs::File::from(fd)
    } else {
        // O_NONBLOCK: a FIFO without a writer must not hang the open (cleared below). In the
        // repo, no link beneath it is followed (see open_caller_file).
        let flags = libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC;
        let f = crate::layers::env::open_caller_file(std::path::Path::new(arg), repo, flags)
            .map_err(|e| format!("--stdin {arg}: {e}"))?;
        if f.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(format!("--stdin {arg}: a directory"));
        }
        // SAFETY: isatty on our own open fd.
        if unsafe { libc::isatty(f.as_raw_fd()) } == 1 {
            return Err(format!(
                "--stdin {arg}: a terminal; the command never reads the caller's terminal"
            ));
        }
        // SAFETY: fcntl on our own open fd, flags read then written back without O_NONBLOCK.
        unsafe {
            let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
        f
    };
    Ok(file)
}

/// `--with-changes ID`: the kept changeset's trees, each with the host directory it goes over.
/// It must have been kept from this repo.
fn with_changes(
    id: Option<&str>,
    ws: &Workspace,
) -> Result<Vec<(std::path::PathBuf, std::path::PathBuf)>, Fail> {
    let Some(id) = id else {
        return Ok(Vec::new());
    };
    let stored = crate::changes::store::open(id)
        .map_err(|e| Fail::usage(format!("--with-changes {id}: {e}")))?;
    let roots = stored.manifest.changeset.roots.clone();
    if roots.first() != Some(&ws.repo) {
        return Err(Fail::usage(format!(
            "--with-changes {id}: the changeset was kept from the repo {}, not {}",
            roots
                .first()
                .map(|r| r.display().to_string())
                .unwrap_or_default(),
            ws.repo.display()
        )));
    }
    Ok(roots.into_iter().zip(stored.trees).collect())
}

/// The command as the user wrote it: the `--command` string, or the argv joined by spaces.
fn command_text(t: &Target) -> String {
    match &t.command {
        Some(c) => c.clone(),
        None => t
            .argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn doctor(json: bool, requirements_md: bool) -> i32 {
    if requirements_md {
        print!("{}", crate::doctor::requirements_markdown());
        return 0;
    }
    let d = crate::doctor::diagnose();
    if json {
        println!("{}", serde_json::to_string_pretty(&d).unwrap_or_default());
        crate::doctor::exit_code(&d)
    } else {
        crate::doctor::print(&d)
    }
}

/// `--timings`: each setup step's own duration, then the whole.
fn timings_line(
    before: std::time::Duration,
    plan: std::time::Duration,
    cgroup: std::time::Duration,
    f: &crate::supervisor::Finished,
    teardown: std::time::Duration,
) -> String {
    let ms = |d: std::time::Duration| format!("{:.2}ms", d.as_secs_f64() * 1000.0);
    let mut parts = vec![
        format!("command line, profile, gate {}", ms(before)),
        format!("plan {}", ms(plan)),
        match f.leaf_made {
            // Made after the fork, on the other core: not on the path the total adds up.
            Some(beside) => format!(
                "cgroup {} (its leaf beside stage 2 {})",
                ms(cgroup),
                ms(beside)
            ),
            None => format!("cgroup {}", ms(cgroup)),
        },
    ];
    let mut last = std::time::Duration::ZERO;
    for (phase, at) in &f.timings {
        let name = match (phase, f.start) {
            (Phase::Stage2, Some(Start::Fork)) => "stage 2 started (fork)",
            (Phase::Stage2, Some(Start::ForkIntoCgroup)) => {
                "stage 2 started (fork into the cgroup)"
            }
            (Phase::Stage2, Some(Start::Exec)) => "stage 2 started (re-exec)",
            _ => phase.name(),
        };
        parts.push(format!("{name} {}", ms(at.saturating_sub(last))));
        last = *at;
    }
    parts.push(format!(
        "workload {}",
        ms(f.spawned_to_end.saturating_sub(last))
    ));
    parts.push(format!("cgroup removal {}", ms(teardown)));
    let total = before + plan + cgroup + f.spawned_to_end + teardown;
    format!("timings: {}; total {}", parts.join(", "), ms(total))
}
