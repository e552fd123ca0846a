//! Which file-command entries a sandboxed step hands to the runner's unsandboxed steps: only
//! those the workflow author listed, never one the step chose.
//!
//! Any name a later host program reads can be code (`TAR_OPTIONS=--checkpoint-action=exec=`
//! for the tar of actions/cache, `GNUMAKEFLAGS=--eval=`, make's `RM`, `APT_CONFIG`...), so no
//! list of bad names closes this channel. The workflow's `env:` names the ones it wants:
//!
//! ```yaml
//! env:
//!   SANDBOX_RUN_EXPORT_ENV: VERSION,TAG          # GITHUB_ENV names
//!   SANDBOX_RUN_EXPORT_PATH: /opt/tool/bin       # GITHUB_PATH directories
//! ```
//!
//! read from sandbox-run's own environment (the runner's, for this step), never from what a
//! step wrote: both names begin `SANDBOX_RUN_`, which never reach the runner from a sandboxed
//! step ([`never`]), listed or not. Everything else stays for the later sandboxed steps of the
//! job ([`super::job`]).

use super::Reason;

/// The workflow's list of `GITHUB_ENV` names that may reach unsandboxed steps.
pub const EXPORT_ENV: &str = "SANDBOX_RUN_EXPORT_ENV";
/// The workflow's list of `GITHUB_PATH` directories that may reach unsandboxed steps.
pub const EXPORT_PATH: &str = "SANDBOX_RUN_EXPORT_PATH";

/// The names sandbox-run or the runner take their own configuration from, beyond the
/// prefixes in [`never`]: where profiles, state and homes are, the temporary directory, the
/// user's bus.
const OWN_CONFIG: &[&str] = &[
    "HOME",
    "TMPDIR",
    "RUSTUP_HOME",
    "DBUS_SESSION_BUS_ADDRESS",
    "SHELL",
    "USER",
    "LOGNAME",
];

/// What the workflow listed (from the caller's environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lists {
    pub env: Vec<String>,
    pub path: Vec<String>,
}

impl Lists {
    /// The lists in `caller` (the runner's environment for this step): names or directories
    /// separated by commas, spaces or newlines; `EXPORT_PATH` also by `:`.
    pub fn from(caller: &[(String, String)]) -> Lists {
        let get = |k: &str| {
            caller
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or("")
        };
        let split = |v: &str, colon: bool| -> Vec<String> {
            v.split(|c: char| c == ',' || c.is_whitespace() || (colon && c == ':'))
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        Lists {
            env: split(get(EXPORT_ENV), false),
            path: split(get(EXPORT_PATH), true),
        }
    }
}

/// Why a `GITHUB_ENV` name never reaches unsandboxed steps, listed or not: sandbox-run's
/// own (`SANDBOX_RUN_*`, the export lists included), what makes a program load code
/// (`LD_*` and the env layer's list), the runner's (`GITHUB_*`, `RUNNER_*`, `ACTIONS_*`),
/// `PATH` (`GITHUB_PATH`'s job), and the names sandbox-run takes its configuration from
/// (`HOME`, `XDG_*`, `TMPDIR`...). Case-insensitive.
pub fn never(name: &str) -> Option<Reason> {
    let up = name.to_ascii_uppercase();
    if up == "PATH" {
        return Some(Reason::Path);
    }
    if ["GITHUB_", "RUNNER_", "ACTIONS_"]
        .iter()
        .any(|p| up.starts_with(p))
    {
        return Some(Reason::RunnerName);
    }
    if up.starts_with("SANDBOX_RUN") || up.starts_with("XDG_") || OWN_CONFIG.contains(&up.as_str())
    {
        return Some(Reason::OwnConfig);
    }
    let injection =
        crate::layers::env::refusal(name) == Some(crate::layers::env::Refusal::Injection);
    if injection || up.starts_with("LD_") {
        return Some(Reason::LoadsCode);
    }
    None
}

/// Why a well-formed `GITHUB_ENV` entry does not reach the runner, if it does not.
pub fn env_reason(lists: &Lists, name: &str) -> Option<Reason> {
    if let Some(r) = never(name) {
        return Some(r);
    }
    match lists.env.iter().any(|n| n == name) {
        true => None,
        false => Some(Reason::NotListed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lists(env: &str, path: &str) -> Lists {
        Lists::from(&[
            (EXPORT_ENV.to_string(), env.to_string()),
            (EXPORT_PATH.to_string(), path.to_string()),
        ])
    }

    #[test]
    fn the_lists_are_split_on_commas_and_spaces() {
        let l = lists(" VERSION, TAG\nOTHER,,", "/opt/a/bin:/opt/b/bin, /opt/c");
        assert_eq!(l.env, ["VERSION", "TAG", "OTHER"]);
        assert_eq!(l.path, ["/opt/a/bin", "/opt/b/bin", "/opt/c"]);
        assert_eq!(Lists::from(&[]), Lists::default());
    }

    #[test]
    fn only_listed_names_pass_and_some_never_do() {
        let l = lists(
            "VERSION,TAR_OPTIONS,LD_PRELOAD,SANDBOX_RUN_EXPORT_ENV,SANDBOX_RUN_PROFILE_PATH,HOME,XDG_CONFIG_HOME,PATH,GITHUB_EVENT_PATH,BASH_ENV,RUNNER_TEMP,ACTIONS_CACHE_URL,TMPDIR,version",
            "",
        );
        for (name, want) in [
            ("VERSION", None),
            ("version", None),
            ("TAR_OPTIONS", None),
            ("TAG", Some(Reason::NotListed)),
            ("GNUMAKEFLAGS", Some(Reason::NotListed)),
            ("RM", Some(Reason::NotListed)),
            ("Version", Some(Reason::NotListed)),
            ("LD_PRELOAD", Some(Reason::LoadsCode)),
            ("ld_audit", Some(Reason::LoadsCode)),
            ("BASH_ENV", Some(Reason::LoadsCode)),
            ("NODE_OPTIONS", Some(Reason::LoadsCode)),
            ("SANDBOX_RUN_EXPORT_ENV", Some(Reason::OwnConfig)),
            ("SANDBOX_RUN_EXPORT_PATH", Some(Reason::OwnConfig)),
            ("SANDBOX_RUN_PROFILE_PATH", Some(Reason::OwnConfig)),
            ("sandbox_run_bin", Some(Reason::OwnConfig)),
            ("HOME", Some(Reason::OwnConfig)),
            ("XDG_CONFIG_HOME", Some(Reason::OwnConfig)),
            ("XDG_STATE_HOME", Some(Reason::OwnConfig)),
            ("TMPDIR", Some(Reason::OwnConfig)),
            ("PATH", Some(Reason::Path)),
            ("Path", Some(Reason::Path)),
            ("GITHUB_EVENT_PATH", Some(Reason::RunnerName)),
            ("RUNNER_TEMP", Some(Reason::RunnerName)),
            ("ACTIONS_CACHE_URL", Some(Reason::RunnerName)),
        ] {
            assert_eq!(env_reason(&l, name), want, "{name}");
        }
        // nothing listed: nothing passes
        assert_eq!(
            env_reason(&Lists::default(), "VERSION"),
            Some(Reason::NotListed)
        );
    }
}
