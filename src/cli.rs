//! The command line, as clap definitions only. See DESIGN.md section 2.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "sandbox-run",
    version,
    about = "Run a command behind a deny-by-default policy gate, confined by the kernel.",
    long_about = None,
    disable_help_subcommand = true
)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Gate the command, then run it in the sandbox (the default: `sandbox-run --profile P -- CMD`).
    Run(Box<RunArgs>),
    /// Run the policy gate on a command and print the verdict; runs nothing.
    Check(CheckArgs),
    /// Run each validation command of a gene, each in a fresh sandbox, fail-fast; every command
    /// is gated first and one denial means nothing runs.
    Validate(ValidateArgs),
    /// What this kernel and user allow, what each shipped profile would lose, and how to fix it.
    ///
    /// Exit 0 when every shipped profile can run with every layer, else 1 (each missing layer
    /// is a FAIL line); `advice` lines (host hardening the sandbox already covers, such as
    /// dev.tty.legacy_tiocsti=1) are printed and leave the exit code 0.
    Doctor {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Print the README's host requirements table (generated from the same checks).
        #[arg(long, hide = true)]
        requirements_md: bool,
    },
    /// Print (making it when missing) the directory kept as `$HOME` for PROFILE under
    /// `--home persist` or `[filesystem] home = "persist"`, so credentials can be put there once.
    Home {
        /// Profile name or path to a .toml file.
        profile: String,
        /// Copy these files and directories (e.g. `~/.claude ~/.claude.json`) into the kept
        /// home, each under its own name, following no link on either side: whatever an
        /// earlier run left in the way (a link, a FIFO) is replaced, never written through.
        #[arg(long, value_name = "PATH", num_args = 1..)]
        seed: Vec<PathBuf>,
        /// Root only: the kept home of this user (name or uid), as a run of a repo the user
        /// owns uses it; seeded copies are given to that user.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
    },
    /// Run a command like `run` and write a profile that extends the given one and adds only
    /// what the run was refused (each entry with the refusal it answers).
    ///
    /// Run it again (with the same `--profile BASE`, which then runs under what it learned, or
    /// with `--profile` naming the learned profile): it updates that file in place, adding only
    /// what is new, until the command passes. Nothing the host boundary forbids (credential
    /// files, a whole home, code-loading variables, programs the repo chose) is ever written.
    /// The exit status is the command's. `SANDBOX_RUN_LEARN=1` in sandbox-run's environment
    /// makes `run` a `learn` (a CI workflow's audit; see docs/github-actions.md).
    Learn(Box<LearnArgs>),
    /// List the profiles, or show one fully resolved as TOML.
    Profiles {
        #[command(subcommand)]
        action: Option<ProfilesAction>,
    },
    /// The changesets kept for review: list, show, diff, apply or drop them.
    Changes {
        #[command(subcommand)]
        action: ChangesAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum ChangesAction {
    /// One line each: ID, when, repo, profile, entries accepted and refused, bytes.
    List,
    /// Every entry of a kept changeset: what happened to it, its size, why it was refused.
    Show {
        id: String,
        /// The manifest as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A unified diff of the accepted entries against the repo as it is now.
    Diff { id: String },
    /// Apply the accepted entries, all or nothing, as the repo's owner; refused when the repo
    /// changed at any of their paths since. The kept changeset is removed once applied.
    Apply { id: String },
    /// Throw a kept changeset away.
    Drop { id: String },
}

#[derive(Debug, Subcommand)]
pub enum ProfilesAction {
    /// Every profile reachable by name, and where it comes from.
    List,
    /// The resolved profile (extends followed, defaults filled in), as TOML.
    Show {
        /// Profile name or path to a .toml file.
        name: String,
        /// Follow each list entry and each value with a comment naming the profile of the
        /// `extends` chain it came from (`# ci (built in)`, a file's path, or `# default`).
        #[arg(long)]
        resolved: bool,
    },
}

/// What every command that names a command to gate takes.
#[derive(Debug, Args)]
pub struct Target {
    /// Profile name (looked up in $SANDBOX_RUN_PROFILE_PATH, ~/.config/sandbox-run/profiles,
    /// /etc/sandbox-run/profiles, then the built-in ones) or path to a .toml file.
    #[arg(long, value_name = "NAME|PATH")]
    pub profile: String,
    /// The repository root (default: the git top level above the current directory, else the
    /// current directory). A path with a symlink on the way is refused: pass the resolved one.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// The command as one string, split like a POSIX shell splits words (quotes, backslashes),
    /// but never run through a shell.
    #[arg(long, value_name = "STRING", conflicts_with = "argv")]
    pub command: Option<String>,
    /// Allow NAME for this one command, beside the profile's own programs (repeatable): a
    /// bare name, found through PATH and checked as the profile's programs are (refused inside
    /// the repo or in a world-writable place); every other rule of the gate still applies.
    #[arg(long = "allow-program", value_name = "NAME")]
    pub allow_program: Vec<String>,
    /// The program and its arguments, after `--`.
    #[arg(
        last = true,
        value_name = "PROGRAM [ARGS]...",
        required_unless_present = "command"
    )]
    pub argv: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print the verdict as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetArg {
    /// A new network namespace with only loopback.
    None,
    /// A new network namespace whose only way out is an allow-list proxy.
    Filtered,
    /// The host's network (warned).
    Host,
}

/// A layer a profile can require, for `--without`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WithoutArg {
    /// The cgroup: memory, CPU and process-count caps, the whole-tree kill.
    Cgroup,
    /// Landlock's filesystem (and TCP port) scope.
    Landlock,
    /// The seccomp syscall filter.
    Seccomp,
    /// The namespaces and with them the new root (then landlock is required).
    Namespaces,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChangesArg {
    /// Every accepted change reaches the repo, or none does (read-write profiles' default).
    Apply,
    /// Nothing touches the repo: the changes are stored for review under an ID.
    Keep,
    /// Thrown away (copy-on-write profiles' default).
    Discard,
}

impl ChangesArg {
    pub fn mode(self) -> crate::changes::back::Mode {
        match self {
            ChangesArg::Apply => crate::changes::back::Mode::Apply,
            ChangesArg::Keep => crate::changes::back::Mode::Keep,
            ChangesArg::Discard => crate::changes::back::Mode::Discard,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HomeArg {
    /// A private tmpfs, gone after the run.
    Tmp,
    /// A directory sandbox-run keeps per user and profile (`sandbox-run home PROFILE`).
    Persist,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: Target,
    /// Wall-clock limit (`90s`, `5m`; above 0); then SIGTERM to every process of the sandbox.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, allow_hyphen_values = true)]
    pub timeout: Option<crate::units::Duration>,
    /// After SIGTERM, how long until SIGKILL to everything left (default 5s).
    #[arg(long, value_name = "DURATION", value_parser = parse_grace, allow_hyphen_values = true)]
    pub kill_grace: Option<crate::units::Duration>,
    /// Memory cap of the whole sandbox (`512M`, `2G`); swap is 0.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<crate::units::Size>,
    /// CPU cap in CPUs, fractions allowed (`0.5`).
    #[arg(long, value_name = "N", value_parser = parse_cpus)]
    pub cpus: Option<f64>,
    /// Cap on processes and threads of the whole sandbox.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub pids: Option<u64>,
    /// Run without LAYER when this host or user cannot give it (repeatable): it is then
    /// listed under `degraded` in the report, as for a profile that marks it best-effort.
    /// Where the host has the layer, it is used as always.
    #[arg(long = "without", value_enum, value_name = "LAYER")]
    pub without: Vec<WithoutArg>,
    /// Write the JSON report to FILE, or to stdout with `-` (the command's stdout then goes to
    /// stderr).
    #[arg(long, value_name = "FILE|-")]
    pub report: Option<String>,
    /// Keep the last 64 KiB of stdout and stderr in the report (always on when the profile
    /// says so, as `validate` does). The streams still pass through.
    #[arg(long)]
    pub capture: bool,
    /// Print how long each setup step took (to stderr).
    #[arg(long)]
    pub timings: bool,
    /// Name every path the command looks up (in the report's `denials` and with `-v`): each
    /// path call then goes past the supervisor, which costs a round trip per call.
    #[arg(long)]
    pub observe: bool,
    /// Network: `none` (only loopback), `filtered` (only through the allow-list proxy) or
    /// `host` (overrides the profile).
    #[arg(long, value_enum)]
    pub net: Option<NetArg>,
    /// Add a host to the proxy's allow-list (repeatable): `api.example.com` (ports 443 and
    /// 80), `*.example.org` (subdomains), `example.net:8443`, `127.0.0.1:8787` (an address
    /// only as written; a loopback address or `localhost` with a port also appears on the
    /// sandbox's own loopback, relayed to the host's). On a profile without network this
    /// switches to `filtered`.
    #[arg(long = "allow-host", value_name = "PATTERN")]
    pub allow_host: Vec<String>,
    /// `$HOME`: `tmp` (gone after the run) or `persist` (kept per user and profile; overrides
    /// the profile).
    #[arg(long, value_enum)]
    pub home: Option<HomeArg>,
    /// Set a variable in the command's environment (repeatable). Code-loading variables such as
    /// NODE_OPTIONS or LD_PRELOAD are refused.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub env: Vec<(String, String)>,
    /// Pass this variable from the caller's environment (repeatable). A secret-looking name is
    /// an error (use --pass-env), a code-loading one too.
    #[arg(long = "keep-env", value_name = "KEY")]
    pub keep_env: Vec<String>,
    /// Pass the caller's value of NAME (repeatable), even when it looks like a secret: the
    /// value goes by name, never on a command line. Code-loading names (LD_*, NODE_OPTIONS,
    /// BASH_ENV...) are refused.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Read NAME=VALUE lines (values literal; `#` comments and blank lines skipped) as if each
    /// were an --env (repeatable; --env wins). The file must be the caller's own and
    /// unreadable by other users (chmod 600).
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<PathBuf>,
    /// Feed the command's stdin from FILE, or from sandbox-run's own stdin with `-` (never a
    /// terminal), through a pipe. Default: /dev/null.
    #[arg(long, value_name = "FILE|-")]
    pub stdin: Option<String>,
    /// A CA bundle (PEM) to trust inside, beside the system roots: it joins the sandbox's
    /// bundle (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT;
    /// NODE_EXTRA_CA_CERTS for Node). Outside the repo, not writable by other users.
    #[arg(long = "ca-certs", value_name = "FILE")]
    pub ca_certs: Option<PathBuf>,
    #[command(flatten)]
    pub secrets: SecretArgs,
    /// What becomes of the run's writes to the repo: `apply` (all or nothing; the default of
    /// read-write profiles), `keep` (stored for review: `sandbox-run changes`), `discard` (the
    /// default of copy-on-write profiles).
    #[arg(long, value_enum, value_name = "apply|keep|discard")]
    pub changes: Option<ChangesArg>,
    /// Run on the repo with the kept changeset ID laid over it, copy-on-write: the repo is not
    /// touched and the run's own writes are thrown away.
    #[arg(long = "with-changes", value_name = "ID")]
    pub with_changes: Option<String>,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// `--secret` and `--secret-file`, for `run` and `validate`.
#[derive(Debug, Args, Default)]
pub struct SecretArgs {
    /// Keep the caller's value of NAME outside the sandbox (repeatable): inside, NAME holds a
    /// placeholder of the same shape, which the proxy replaces by the value in requests to
    /// the HOSTs (written as in --allow-host, no wildcards; they join the allow-list and
    /// imply --net filtered). The value comes from the environment or --secret-file.
    #[arg(long = "secret", value_name = "NAME=HOST[,HOST...]")]
    pub secret: Vec<String>,
    /// Read the values of secrets from NAME=VALUE lines (`#` comments and blank lines
    /// skipped); the file must be the caller's own and unreadable by other users (chmod 600).
    #[arg(long = "secret-file", value_name = "FILE")]
    pub secret_file: Vec<PathBuf>,
}

impl SecretArgs {
    pub fn asked(&self) -> crate::secrets::Asked {
        crate::secrets::Asked {
            flags: self.secret.clone(),
            files: self.secret_file.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct LearnArgs {
    /// The learned profile to write or update (default: the `--profile` itself when it is a
    /// learned one, else `BASE-learned.toml` in ~/.config/sandbox-run/profiles, used as
    /// `--profile BASE-learned`). Never inside the repo, which the command can write; a file
    /// learn did not write is never overwritten.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Profile name or path to a .toml file.
    #[arg(long, value_name = "NAME|PATH")]
    pub profile: String,
    /// The gene: `{"type": "Gene", "id": ..., "validation": ["npm test", ...]}`.
    #[arg(long, value_name = "GENE.json")]
    pub gene: std::path::PathBuf,
    /// Write the ValidationReport to FILE, or to stdout with `-`.
    #[arg(long, value_name = "FILE|-")]
    pub report: Option<String>,
    /// The repository root (default: the git top level above the current directory). A path
    /// with a symlink on the way is refused: pass the resolved one.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Wall-clock limit for each command (default: the profile's; above 0).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, allow_hyphen_values = true)]
    pub timeout: Option<crate::units::Duration>,
    /// Run without LAYER when this host or user cannot give it (repeatable; see `run`).
    #[arg(long = "without", value_enum, value_name = "LAYER")]
    pub without: Vec<WithoutArg>,
    #[command(flatten)]
    pub secrets: SecretArgs,
    /// Name every path the command looks up (in the report's `denials` and with `-v`): each
    /// path call then goes past the supervisor, which costs a round trip per call.
    #[arg(long)]
    pub observe: bool,
    /// What becomes of the run's writes to the repo: `apply` (all or nothing; the default of
    /// read-write profiles), `keep` (stored for review: `sandbox-run changes`), `discard` (the
    /// default of copy-on-write profiles).
    #[arg(long, value_enum, value_name = "apply|keep|discard")]
    pub changes: Option<ChangesArg>,
    /// Run on the repo with the kept changeset ID laid over it, copy-on-write: the repo is not
    /// touched and the run's own writes are thrown away.
    #[arg(long = "with-changes", value_name = "ID")]
    pub with_changes: Option<String>,
}

fn parse_cpus(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1024.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a CPU count above 0 (fractions allowed)"
        )),
    }
}

/// A duration that is not negative. (`allow_hyphen_values` brings `-5s` here instead of clap
/// taking it for a flag.)
fn parse_grace(s: &str) -> Result<crate::units::Duration, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!(
            "{s:?} is negative (expected 0 or more, e.g. 5s, 500ms)"
        ));
    }
    s.parse()
}

/// A timeout: above 0 (`0` would kill the command before it starts; no timeout is not an
/// option, the profile's is the default).
fn parse_timeout(s: &str) -> Result<crate::units::Duration, String> {
    let why = |what: &str| format!("{s:?} is {what} (expected a timeout above 0, e.g. 90s, 5m)");
    if s.trim_start().starts_with('-') {
        return Err(why("negative"));
    }
    let d: crate::units::Duration = s.parse()?;
    if d.0.is_zero() {
        return Err(why("0"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_above_zero_and_never_negative() {
        for bad in ["0", "0s", "0ms", "-5s", "-1", " -0.5m", "0.0001s"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_timeout("90s").unwrap().0.as_secs(), 90);
        assert_eq!(parse_timeout("1ms").unwrap().0.as_millis(), 1);
        assert!(parse_grace("-5s").is_err());
        assert!(parse_grace("0s").unwrap().0.is_zero());
    }
}
