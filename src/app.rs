//! The commands: turn parsed flags into work and an exit code.

use crate::cli::{CheckArgs, Cli, Command, NetArg, ProfilesAction, RunArgs, Target, ValidateArgs};
use crate::policy::{self, Input};
use crate::profile::{Loader, Profile, Requirement};
use crate::report;
use crate::workspace::Workspace;
use std::ffi::OsString;

/// Exit code for failures of sandbox-run itself (bad flag, bad profile, unusable host).
pub const EXIT_SANDBOX_ERROR: i32 = 125;

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

pub fn run(cli: Cli) -> Result<i32, Fail> {
    if !matches!(cli.command, Command::Run(_) | Command::Validate(_)) {
        crate::supervisor::unblock_relayed();
        // These only print: a closed pipe (`sandbox-run doctor --json | head`) ends them
        // quietly, as it ends any filter, instead of panicking in println!.
        // SAFETY: restoring the default disposition of one signal.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command {
        Command::Run(args) => run_command(args),
        Command::Check(args) => check(args),
        Command::Validate(args) => validate_command(args),
        Command::Doctor {
            json,
            requirements_md,
        } => Ok(doctor(json, requirements_md)),
        Command::Profiles { action } => profiles(action.unwrap_or(ProfilesAction::List)),
    }
}

fn load_profile(name: &str) -> Result<Profile, Fail> {
    Loader::from_env().load(name).map_err(|e| Fail::usage(e.0))
}

/// The PATH the sandbox will use: the profile's, else the caller's.
pub fn sandbox_path(p: &Profile) -> OsString {
    sandbox_path_from(p, std::env::var("PATH").ok().as_deref())
}

/// [`sandbox_path`] given the caller's PATH.
pub fn sandbox_path_from(p: &Profile, caller: Option<&str>) -> OsString {
    match (&p.env.path, caller) {
        (Some(path), _) => path.into(),
        (None, Some(c)) if !c.is_empty() => c.into(),
        _ => "/usr/local/bin:/usr/bin:/bin".into(),
    }
}

fn gate(target: &Target, profile: &Profile) -> Result<(policy::Verdict, Workspace), Fail> {
    let cwd =
        std::env::current_dir().map_err(|e| Fail::usage(format!("current directory: {e}")))?;
    let ws = Workspace::find(target.repo.as_deref(), &cwd).map_err(Fail::usage)?;
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
    let verdict = policy::gate(&input, &profile.gate, &ctx);
    Ok((verdict, ws))
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

fn profiles(action: ProfilesAction) -> Result<i32, Fail> {
    let loader = Loader::from_env();
    match action {
        ProfilesAction::List => {
            for (name, src) in loader.list() {
                let desc = loader
                    .load(&name)
                    .map(|p| p.description)
                    .unwrap_or_else(|e| format!("(invalid: {e})"));
                println!("{name:<12} {src:<40} {desc}");
            }
        }
        ProfilesAction::Show { name } => {
            let p = loader.load(&name).map_err(|e| Fail::usage(e.0))?;
            print!("{}", p.to_toml());
        }
    }
    Ok(0)
}

fn run_command(args: RunArgs) -> Result<i32, Fail> {
    let started = std::time::SystemTime::now();
    let profile = load_profile(&args.target.profile)?;
    let (v, ws) = gate(&args.target, &profile)?;
    // Before anything else happens: a report path that cannot be created costs nothing yet.
    let mut sink = ReportSink::open(args.report.as_deref(), &ws)?;
    let cmd = command_text(&args.target);
    if !v.allowed() {
        eprintln!("sandbox-run: {}", verdict_line(&v));
        if let Some(sink) = &mut sink {
            let results = vec![report::gated(&cmd, &v)];
            sink.write(&new_report(
                started,
                &profile,
                &ws,
                None,
                vec![cmd],
                results,
                None,
            ))?;
        }
        return Ok(v.exit_code());
    }
    let runner = Runner {
        timings: args.timings,
        profile: &profile,
        ws: &ws,
        overrides: crate::plan::Overrides {
            net: args.net.map(|n| match n {
                NetArg::None => crate::profile::NetMode::None,
                NetArg::Host => crate::profile::NetMode::Host,
            }),
            memory: args.memory,
            cpus: args.cpus,
            pids: args.pids,
            env: args.env.clone(),
            keep_env: args.keep_env.clone(),
        },
        options: crate::supervisor::Options {
            timeout: args.timeout.unwrap_or(profile.limits.timeout).0,
            kill_grace: args.kill_grace.unwrap_or(profile.limits.kill_grace).0,
            capture: args.report.is_some() && (args.capture || profile.report.capture),
            stdout_to_stderr: args.report.as_deref() == Some("-"),
            output_cap: profile.limits.output.0,
        },
    };
    let (result, sandbox) = match runner.execute(&cmd, &v) {
        Ok(r) => r,
        Err(fail) => {
            // The report file exists since the start: it says what happened, never empty.
            if let Some(sink) = &mut sink {
                let results = vec![report::sandbox_failed(&cmd, &v.argv, &fail.msg)];
                let r = new_report(started, &profile, &ws, None, vec![cmd], results, None);
                if let Err(e) = sink.write(&r) {
                    eprintln!("sandbox-run: {}", e.msg);
                }
            }
            return Err(fail);
        }
    };
    let code = result.exit_code;
    if let Some(sink) = &mut sink {
        sink.write(&new_report(
            started,
            &profile,
            &ws,
            None,
            vec![cmd],
            vec![result],
            Some(sandbox),
        ))?;
    }
    Ok(code)
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
    fn open(dest: Option<&str>, ws: &Workspace) -> Result<Option<ReportSink>, Fail> {
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
        let file = crate::hostfs::create_report(std::path::Path::new(dest), &cwd, &ws.repo)
            .map_err(|e| fail(report_open_error(&e)))?;
        Ok(Some(ReportSink::File {
            dest: dest.to_string(),
            file,
        }))
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

/// Removes a run's placeholder `.git` when dropped.
struct Placeholder(std::path::PathBuf);

impl Drop for Placeholder {
    fn drop(&mut self) {
        crate::layers::git::remove_placeholder(&self.0);
    }
}

/// Runs allowed commands, each in a fresh sandbox: shared by `run` and `validate`.
struct Runner<'a> {
    /// Print the setup timings after each run.
    timings: bool,
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
        let _placeholder = plan.git_placeholder.clone().map(Placeholder);
        let planned = t0.elapsed();
        let limits = self.cgroup_limits();
        let leaf = match self.cgroup_leaf(&limits) {
            Ok(leaf) => Some(leaf),
            Err(e) => match self.profile.layers.cgroup {
                Requirement::Required => {
                    let facts = crate::advice::Facts::probe();
                    return Err(Fail::usage(crate::advice::cgroup_refusal(
                        &e,
                        self.profile,
                        &facts,
                    )));
                }
                Requirement::BestEffort => {
                    tracing::debug!("{e}");
                    plan.degraded.push("cgroup".into());
                    None
                }
            },
        };
        if let Some(leaf) = &leaf {
            plan.cgroup_join = leaf.self_join_files();
        }
        let cgrouped = t0.elapsed() - planned;
        for d in &plan.degraded {
            tracing::warn!(
                "degraded: running without the {d} layer (profile {} marks it best-effort)",
                self.profile.name
            );
        }
        let finished =
            crate::supervisor::run(&plan, &self.options, leaf.as_ref()).map_err(Fail::usage)?;
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
        if self.timings {
            eprintln!(
                "sandbox-run: {}",
                timings_line(planned, cgrouped, &finished, t1.elapsed(), t0.elapsed())
            );
        }
        let error = finished
            .failure
            .as_ref()
            .map(|e| crate::supervisor::failure_line(e, &plan));
        if let Some(e) = &error {
            eprintln!("sandbox-run: {e}");
        }
        if finished.timed_out {
            eprintln!(
                "sandbox-run: timed out after {}: the sandbox was torn down",
                crate::units::Duration(self.options.timeout)
            );
        }
        let result = report::ran(cmd, &plan, &finished, self.options.capture, error);
        Ok((result, report::sandbox(&plan, &finished, cgroup)))
    }

    fn cgroup_limits(&self) -> crate::layers::cgroup::Limits {
        let (l, o) = (&self.profile.limits, &self.overrides);
        crate::layers::cgroup::Limits {
            memory_max: o.memory.unwrap_or(l.memory).0,
            cpus: o.cpus.unwrap_or(l.cpus),
            pids_max: o.pids.unwrap_or(l.pids),
        }
    }

    /// This run's cgroup leaf, limited before anything runs in it. Leaves of earlier runs
    /// whose sandbox-run was killed are removed first.
    fn cgroup_leaf(
        &self,
        limits: &crate::layers::cgroup::Limits,
    ) -> Result<crate::layers::cgroup::Leaf, crate::layers::cgroup::Error> {
        let host = crate::layers::cgroup::Host::detect()?;
        if let Err(e) = host.remove_stale() {
            tracing::warn!("{e}");
        }
        host.create_leaf(limits)
    }
}

fn new_report(
    started: std::time::SystemTime,
    profile: &Profile,
    ws: &Workspace,
    gene_id: Option<String>,
    commands: Vec<String>,
    results: Vec<report::CommandResult>,
    sandbox: Option<report::Sandbox>,
) -> report::Report {
    report::Report {
        kind: "ValidationReport",
        schema: report::SCHEMA,
        id: report::new_id(started),
        gene_id,
        profile: profile.name.clone(),
        repo: ws.repo.display().to_string(),
        commands,
        ok: !results.is_empty() && results.iter().all(|r| r.ok),
        results,
        sandbox,
        env_fingerprint: report::Fingerprint::probe(),
        started_at: report::iso8601(started),
        finished_at: report::iso8601(std::time::SystemTime::now()),
    }
}

/// `validate --gene FILE`: gate every command first (one denial and nothing runs, as the
/// seed's promotion audit), then run them in order, each in a fresh sandbox, fail-fast.
fn validate_command(args: ValidateArgs) -> Result<i32, Fail> {
    let started = std::time::SystemTime::now();
    let gene = crate::gene::Gene::load(&args.gene).map_err(Fail::usage)?;
    let profile = load_profile(&args.profile)?;
    let cwd =
        std::env::current_dir().map_err(|e| Fail::usage(format!("current directory: {e}")))?;
    let ws = Workspace::find(args.repo.as_deref(), &cwd).map_err(Fail::usage)?;
    // Before anything else happens: a report path that cannot be created costs nothing yet.
    let mut sink = ReportSink::open(args.report.as_deref(), &ws)?;
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
    let mut finish = |results: Vec<report::CommandResult>, sandbox| -> Result<(), Fail> {
        let Some(sink) = &mut sink else {
            return Ok(());
        };
        let r = new_report(
            started,
            &profile,
            &ws,
            Some(gene.id.clone()),
            gene.validation.clone(),
            results,
            sandbox,
        );
        sink.write(&r)
    };
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
        finish(denied, None)?;
        return Ok(code);
    }
    let runner = Runner {
        timings: false,
        profile: &profile,
        ws: &ws,
        overrides: crate::plan::Overrides::default(),
        options: crate::supervisor::Options {
            timeout: args.timeout.unwrap_or(profile.limits.timeout).0,
            kill_grace: profile.limits.kill_grace.0,
            capture: true,
            stdout_to_stderr: args.report.as_deref() == Some("-"),
            output_cap: profile.limits.output.0,
        },
    };
    let mut results = Vec::new();
    let mut sandbox = None;
    let mut code = 0;
    for (cmd, v) in gene.validation.iter().zip(&verdicts) {
        let (result, sb) = match runner.execute(cmd, v) {
            Ok(r) => r,
            Err(fail) => {
                // The report file exists since the start: it says what happened, never empty.
                results.push(report::sandbox_failed(cmd, &v.argv, &fail.msg));
                if let Err(e) = finish(results, sandbox) {
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
    finish(results, sandbox)?;
    Ok(code)
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
    plan: std::time::Duration,
    cgroup: std::time::Duration,
    f: &crate::supervisor::Finished,
    teardown: std::time::Duration,
    total: std::time::Duration,
) -> String {
    let ms = |d: std::time::Duration| format!("{:.2}ms", d.as_secs_f64() * 1000.0);
    let mut parts = vec![
        format!("plan {}", ms(plan)),
        format!("cgroup {}", ms(cgroup)),
    ];
    let mut last = std::time::Duration::ZERO;
    for (phase, at) in &f.timings {
        parts.push(format!("{} {}", phase.name(), ms(at.saturating_sub(last))));
        last = *at;
    }
    parts.push(format!(
        "workload {}",
        ms(f.spawned_to_end.saturating_sub(last))
    ));
    parts.push(format!("cgroup removal {}", ms(teardown)));
    format!("timings: {}; total {}", parts.join(", "), ms(total))
}
