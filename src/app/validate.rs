//! `sandbox-run validate --gene FILE`: gate every command of the gene first, then run them
//! in order, each in a fresh sandbox, fail-fast, into one report.

use super::report_sink::Reporter;
use super::resolve::{load_profile_without, sandbox_path, verdict_line, with_changes, workspace};
use super::runner::Runner;
use super::Fail;
use crate::cli::ValidateArgs;
use crate::policy::{self, Input};
use crate::report;

/// `validate --gene FILE`: gate every command first (one denial and nothing runs, as the
/// seed's promotion audit), then run them in order, each in a fresh sandbox, fail-fast.
pub(super) fn validate_command(args: ValidateArgs, verbose: u8) -> Result<i32, Fail> {
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
        if verbose > 0 {
            eprintln!("sandbox-run: {}", crate::explain::repo_line(&ws));
        }
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
        allowed_programs: &[],
        overrides: crate::plan::Overrides {
            observe: args.observe,
            keep_paths: rep.keep_paths(&ws),
            carry,
            secrets,
            changes: args.changes.map(crate::cli::ChangesArg::mode),
            with_changes: with_changes(args.with_changes.as_deref(), &ws)?,
            ..Default::default()
        },
        options: crate::supervisor::Options {
            verbose: verbose > 0,
            timeout: args.timeout.unwrap_or(profile.limits.timeout).0,
            kill_grace: profile.limits.kill_grace.0,
            capture: true,
            stdout_to_stderr: args.report.as_deref() == Some("-"),
            output_cap: profile.limits.output.0,
            stdin: None,
            live: None,
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
                results.push(report::sandbox_failed(cmd, &v.argv, &fail.line()));
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
