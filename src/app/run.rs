//! `sandbox-run run`: resolve (workspace, report, profile, gate), then the environment,
//! secrets and stdin the flags name, then one run in a fresh sandbox, then the report.

use super::report_sink::Reporter;
use super::resolve::{
    allow_programs, command_text, gate_in, load_profile_without, verdict_line, with_changes,
    workspace,
};
use super::runner::Runner;
use super::Fail;
use crate::cli::{NetArg, RunArgs};
use crate::report;

pub(super) fn run_command(args: RunArgs, verbose: u8) -> Result<i32, Fail> {
    run_collect(args, verbose, false).map(|(code, _)| code)
}

/// `run`, and `learn` with `observe` (every path lookup seen): the exit code and what the
/// sandbox refused the command (the report's `denials`).
pub(super) fn run_collect(
    args: RunArgs,
    verbose: u8,
    observe: bool,
) -> Result<(i32, Vec<crate::denials::Refusal>), Fail> {
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
    let r = run_in(args, verbose, observe, &mut rep);
    if let Err(fail) = &r {
        rep.failed(fail);
    }
    r
}

fn run_in(
    args: RunArgs,
    verbose: u8,
    observe: bool,
    rep: &mut Reporter,
) -> Result<(i32, Vec<crate::denials::Refusal>), Fail> {
    let ws = workspace(args.target.repo.as_deref())?;
    // Before anything else happens: a report path that cannot be created costs nothing yet.
    rep.open(&ws)?;
    let mut profile = load_profile_without(&args.target.profile, &args.without)?;
    allow_programs(&mut profile, &args.target.allow_program)?;
    rep.profile = profile.name.clone();
    rep.allowed_programs = args.target.allow_program.clone();

    let v = gate_in(&args.target, &profile, &ws);
    rep.argv = v.argv.clone();
    let cmd = command_text(&args.target);
    if !v.allowed() {
        if verbose > 0 {
            eprintln!("sandbox-run: {}", crate::explain::repo_line(&ws));
        }
        eprintln!("sandbox-run: {}", verdict_line(&v));
        let result = report::gated(&cmd, &v);
        let denials = result.denials.clone();
        rep.write(vec![result], None)?;
        return Ok((v.exit_code(), denials));
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
        allowed_programs: &args.target.allow_program,
        overrides: crate::plan::Overrides {
            observe: observe || args.observe,
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
            verbose: verbose > 0,
            timeout: args.timeout.unwrap_or(profile.limits.timeout).0,
            kill_grace: args.kill_grace.unwrap_or(profile.limits.kill_grace).0,
            capture: args.report.is_some() && (args.capture || profile.report.capture),
            stdout_to_stderr: args.report.as_deref() == Some("-"),
            output_cap: profile.limits.output.0,
            stdin,
            live: None,
        },
    };
    // A failure to set up the sandbox: the report says so ([`Reporter::failed`]).
    let (result, sandbox) = runner.execute(&cmd, &v)?;
    let code = result.exit_code;
    let denials = result.denials.clone();
    rep.write(vec![result], Some(sandbox))?;
    Ok((code, denials))
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
