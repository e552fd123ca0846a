//! The commands: turn parsed flags into work and an exit code. This file only dispatches;
//! each command is a room of its own below (`run`, `validate`, `check`, `doctor`, `home`,
//! `profiles`, `changes`), built from the shared pieces:
//! [`resolve`] (profile, workspace, gate), [`report_sink`] (the `--report`) and `runner`
//! (one command in a fresh sandbox).

mod changes;
mod check;
mod doctor;
mod home;
mod learn;
mod learn_summary;
mod live;
mod profiles;
pub mod report_sink;
pub mod resolve;
mod run;
mod runner;
mod validate;

pub use report_sink::usage_error_report;

use crate::cli::{Cli, Command, ProfilesAction};
use crate::exit::EXIT_SANDBOX_ERROR;

/// A failure of sandbox-run itself: one line for stderr and the exit code, and at most one
/// more line saying what to do, when the first cannot say it briefly.
#[derive(Debug)]
pub struct Fail {
    pub code: i32,
    pub msg: String,
    pub hint: Option<String>,
}

impl Fail {
    pub fn usage(msg: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_SANDBOX_ERROR,
            msg: msg.into(),
            hint: None,
        }
    }

    /// Both lines as one, for a report's `error`.
    pub fn line(&self) -> String {
        match &self.hint {
            Some(h) => format!("{}; {h}", self.msg),
            None => self.msg.clone(),
        }
    }
}

/// When `main` began: `--timings` starts there (the command line, the profile and the gate come
/// before the plan).
pub static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

pub fn run(cli: Cli) -> Result<i32, Fail> {
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Validate(_) | Command::Learn(_)
    ) {
        crate::supervisor::unblock_relayed();
        // These only print: a closed pipe (`sandbox-run doctor --json | head`) ends them
        // quietly, as it ends any filter, instead of panicking in println!.
        // SAFETY: restoring the default disposition of one signal.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let verbose = if cli.quiet { 0 } else { cli.verbose };
    match cli.command {
        // `SANDBOX_RUN_LEARN=1` in sandbox-run's own environment: a workflow's audit run.
        Command::Run(args) if learn::switched_on()? => learn::learn_command(
            crate::cli::LearnArgs {
                out: None,
                run: *args,
            },
            verbose,
        ),
        Command::Run(args) => run::run_command(*args, verbose),
        Command::Check(args) => check::check(args),
        Command::Learn(args) => learn::learn_command(*args, verbose),
        Command::Validate(args) => validate::validate_command(args, verbose),
        Command::Doctor {
            json,
            requirements_md,
        } => Ok(doctor::doctor(json, requirements_md)),
        Command::Home {
            profile,
            seed,
            user,
        } => home::home_command(&profile, &seed, user.as_deref(), verbose, cli.quiet),
        Command::Profiles { action } => profiles::profiles(action.unwrap_or(ProfilesAction::List)),
        Command::Changes { action } => changes::run(action).map_err(Fail::usage),
    }
}
