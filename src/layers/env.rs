//! The workload's environment: built from an allow-list, never inherited.
//!
//! Runs in the supervisor (pure). Variables that change what code a program loads
//! (`NODE_OPTIONS`, `LD_PRELOAD`, `PYTHONPATH`, `BASH_ENV`, npm's `npm_config_*`...) and
//! anything that looks like a secret never pass, whatever the profile says. A caller's explicit
//! `--env NAME=VALUE` may pass a secret-looking name (the caller is trusted and chose to), but
//! never a code-loading one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Exact names that inject code, configuration or a host socket into the workload.
const NEVER_EXACT: &[&str] = &[
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_REPL_EXTERNAL_MODULE",
    "NODE_EXTRA_CA_CERTS",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONINSPECT",
    "PYTHONBREAKPOINT",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    "GEM_PATH",
    "GLIBC_TUNABLES",
    "GCONV_PATH",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "RES_OPTIONS",
    "NLSPATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "SSH_AUTH_SOCK",
    "SSH_ASKPASS",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    "MANPAGER",
    "HOME",
    "TMPDIR",
    "PWD",
    "OLDPWD",
    "USER",
    "LOGNAME",
    "SHELL",
];

/// Set by the sandbox itself; a caller's value is replaced, not "removed".
const REPLACED: &[&str] = &[
    "HOME", "TMPDIR", "PWD", "OLDPWD", "USER", "LOGNAME", "SHELL", "PATH",
];

/// Prefixes (case-insensitive) of variables that never pass.
const NEVER_PREFIX: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_",
    "NPM_CONFIG_",
    "YARN_",
    "PNPM_",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "PYTHONWARN",
    "NODE_V8_",
    "BASH_FUNC_",
    "MALLOC_",
    "LESS",
];

/// Substrings (case-insensitive) that make a name look like a secret.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
    "AUTH",
    "SESSION",
    "COOKIE",
    "SIGNING",
    "_PAT",
    "_KEY",
];

/// Why a variable was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Changes what code runs (`NODE_OPTIONS`, `LD_PRELOAD`...): never passes.
    Injection,
    /// Looks like a credential: passes only by the caller's explicit `--env`.
    Secret,
}

/// Is this name one that must not reach the workload?
pub fn refusal(name: &str) -> Option<Refusal> {
    let up = name.to_ascii_uppercase();
    if NEVER_EXACT.contains(&up.as_str()) || NEVER_PREFIX.iter().any(|p| up.starts_with(p)) {
        return Some(Refusal::Injection);
    }
    if SECRET_WORDS.iter().any(|w| up.contains(w)) {
        return Some(Refusal::Secret);
    }
    None
}

/// Why a caller's variable did not reach the workload (reported by name, never by value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Looks like a credential ([`Refusal::Secret`]).
    Secret,
    /// Changes what code a program loads ([`Refusal::Injection`]).
    LoadsCode,
    /// Harmless, but not on the keep list (profile `env.keep`, `--keep-env`).
    NotKept,
}

impl Why {
    /// The words of the `-v` line.
    pub fn words(self) -> &'static str {
        match self {
            Why::Secret => "removed as secret-looking",
            Why::LoadsCode => "removed as code-loading",
            Why::NotKept => "dropped, not on the keep list",
        }
    }
}

/// One caller variable held back, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    pub name: String,
    pub why: Why,
}

/// What the workload gets, and the names that were held back (for the report; never values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Built {
    pub vars: BTreeMap<String, String>,
    /// Secret-looking and code-loading names (the report's `env_removed`).
    pub removed: Vec<String>,
    /// Every caller variable that did not pass, with why: `removed`, and the harmless ones
    /// not on the keep list. Names the sandbox sets itself (`HOME`, `PATH`...) or that the
    /// profile or `--env` set are replaced, not dropped.
    pub dropped: Vec<Dropped>,
}

/// Every spelling of the proxy variables is replaced under `--net filtered`.
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "FTP_PROXY",
];

/// `--net filtered`: the proxy variables name the sandbox's proxy at `url`, whatever the
/// caller, the profile or `--env` said; loopback goes direct. Returns whether a given value
/// was replaced.
pub fn set_proxy(vars: &mut BTreeMap<String, String>, url: &str) -> bool {
    let before = vars.len();
    vars.retain(|k, _| !PROXY_VARS.iter().any(|p| k.eq_ignore_ascii_case(p)));
    let replaced = vars.len() != before;
    for k in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
        vars.insert(k.into(), url.into());
    }
    for k in ["NO_PROXY", "no_proxy"] {
        vars.insert(k.into(), "localhost,127.0.0.1,::1".into());
    }
    replaced
}

/// Inputs of [`build`]: everything comes in as data, so the function is pure.
pub struct Inputs<'a> {
    /// The caller's environment.
    pub caller: &'a [(String, String)],
    /// Profile `env.keep` plus `--keep-env`.
    pub keep: &'a [String],
    /// Profile `env.set`.
    pub set: &'a BTreeMap<String, String>,
    /// `--env NAME=VALUE` from the caller.
    pub explicit: &'a [(String, String)],
    /// The PATH inside the sandbox.
    pub path: &'a str,
    /// Set by the sandbox itself.
    pub home: &'a str,
    pub tmp: &'a str,
    pub user: &'a str,
}

/// Build the environment. Errors name a variable that can never be set.
pub fn build(i: &Inputs) -> Result<Built, String> {
    let mut vars = BTreeMap::new();
    let mut removed = Vec::new();
    let mut dropped = Vec::new();
    for (k, v) in i.caller {
        if k == "PATH" {
            continue;
        }
        // An entry ending in `*` keeps every name it starts (`GITHUB_*`).
        let kept = i.keep.iter().any(|x| match x.strip_suffix('*') {
            Some(prefix) => k.starts_with(prefix),
            None => x == k,
        });
        let refused = refusal(k);
        if kept && refused.is_none() {
            vars.insert(k.clone(), v.clone());
        } else if !REPLACED.contains(&k.as_str()) {
            let why = match refused {
                Some(Refusal::Secret) => Why::Secret,
                Some(Refusal::Injection) => Why::LoadsCode,
                None => Why::NotKept,
            };
            if refused.is_some() {
                removed.push(k.clone());
            }
            dropped.push(Dropped {
                name: k.clone(),
                why,
            });
        }
    }
    for (k, v) in i.set {
        if let Some(r) = refusal(k) {
            return Err(format!(
                "env: the profile sets {k}, which is never passed ({})",
                why(r)
            ));
        }
        vars.insert(k.clone(), v.clone());
    }
    for (k, v) in i.explicit {
        if k.is_empty() || k.contains('=') || k.bytes().any(|b| b == 0) || v.bytes().any(|b| b == 0)
        {
            return Err(format!("--env {k:?}: not a valid NAME=VALUE"));
        }
        if refusal(k) == Some(Refusal::Injection) {
            return Err(format!(
                "--env {k}: never passed to a sandboxed command ({})",
                why(Refusal::Injection)
            ));
        }
        vars.insert(k.clone(), v.clone());
        removed.retain(|r| r != k);
    }
    vars.insert("PATH".into(), i.path.to_string());
    vars.insert("HOME".into(), i.home.to_string());
    vars.insert("TMPDIR".into(), i.tmp.to_string());
    vars.insert("USER".into(), i.user.to_string());
    vars.insert("LOGNAME".into(), i.user.to_string());
    removed.sort();
    removed.dedup();
    // A name the profile or `--env` set is replaced, not dropped.
    dropped.retain(|d| !vars.contains_key(&d.name));
    dropped.sort_by(|a, b| (a.why, &a.name).cmp(&(b.why, &b.name)));
    dropped.dedup();
    Ok(Built {
        vars,
        removed,
        dropped,
    })
}

fn why(r: Refusal) -> &'static str {
    match r {
        Refusal::Injection => "it changes what code the command loads",
        Refusal::Secret => "it looks like a secret",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Vec<(String, String)> {
        [
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
            ("TERM", "xterm"),
            ("NODE_OPTIONS", "--require=/tmp/evil.js"),
            ("LD_PRELOAD", "/tmp/evil.so"),
            ("LD_AUDIT", "x"),
            ("ld_library_path", "x"),
            ("PYTHONPATH", "/tmp"),
            ("GITHUB_TOKEN", "ghp_secret"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
            ("npm_config_script_shell", "/tmp/sh"),
            ("GIT_CONFIG_COUNT", "1"),
            ("BASH_ENV", "/tmp/x"),
            ("RANDOM_THING", "y"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn inputs<'a>(
        c: &'a [(String, String)],
        keep: &'a [String],
        set: &'a BTreeMap<String, String>,
        explicit: &'a [(String, String)],
    ) -> Inputs<'a> {
        Inputs {
            caller: c,
            keep,
            set,
            explicit,
            path: "/usr/bin:/bin",
            home: "/home/u",
            tmp: "/tmp",
            user: "u",
        }
    }

    #[test]
    fn allow_list_and_never_list() {
        let c = caller();
        // a profile that tries to keep the dangerous ones gets nothing of them
        let keep: Vec<String> = [
            "LANG",
            "NODE_OPTIONS",
            "LD_PRELOAD",
            "GITHUB_TOKEN",
            "PYTHONPATH",
        ]
        .map(String::from)
        .to_vec();
        let b = build(&inputs(&c, &keep, &BTreeMap::new(), &[])).unwrap();
        let names: Vec<&str> = b.vars.keys().map(String::as_str).collect();
        assert_eq!(names, ["HOME", "LANG", "LOGNAME", "PATH", "TMPDIR", "USER"]);
        assert_eq!(b.vars["PATH"], "/usr/bin:/bin");
        for k in [
            "NODE_OPTIONS",
            "LD_PRELOAD",
            "LD_AUDIT",
            "ld_library_path",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "npm_config_script_shell",
            "GIT_CONFIG_COUNT",
            "BASH_ENV",
            "PYTHONPATH",
        ] {
            assert!(
                b.removed.iter().any(|r| r == k),
                "{k} not reported as removed: {:?}",
                b.removed
            );
        }
        // not on the allow-list and not dangerous: simply absent, not "removed"
        assert!(!b.removed.iter().any(|r| r == "RANDOM_THING" || r == "TERM"));
        // but listed as dropped, each with its reason
        let why = |n: &str| b.dropped.iter().find(|d| d.name == n).map(|d| d.why);
        assert_eq!(why("RANDOM_THING"), Some(Why::NotKept));
        assert_eq!(why("TERM"), Some(Why::NotKept));
        assert_eq!(why("GITHUB_TOKEN"), Some(Why::Secret));
        assert_eq!(why("LD_PRELOAD"), Some(Why::LoadsCode));
        // kept, replaced by the sandbox or PATH: not dropped
        assert_eq!(why("LANG"), None);
        assert_eq!(why("PATH"), None);
    }

    #[test]
    fn a_name_the_profile_or_the_caller_sets_is_replaced_not_dropped() {
        let c = caller();
        let mut set = BTreeMap::new();
        set.insert("RANDOM_THING".to_string(), "z".to_string());
        let ex = vec![("GITHUB_TOKEN".to_string(), "t".to_string())];
        let b = build(&inputs(&c, &[], &set, &ex)).unwrap();
        assert!(!b.dropped.iter().any(|d| d.name == "RANDOM_THING"));
        assert!(!b.dropped.iter().any(|d| d.name == "GITHUB_TOKEN"));
        assert!(b.dropped.iter().any(|d| d.name == "TERM"));
    }

    #[test]
    fn explicit_env_may_pass_secrets_but_never_injection() {
        let c = caller();
        let ex = vec![("ANTHROPIC_API_KEY".to_string(), "sk".to_string())];
        let b = build(&inputs(&c, &[], &BTreeMap::new(), &ex)).unwrap();
        assert_eq!(b.vars["ANTHROPIC_API_KEY"], "sk");
        for bad in [
            "NODE_OPTIONS",
            "LD_PRELOAD",
            "Ld_Audit",
            "BASH_ENV",
            "npm_config_node_options",
            "GIT_SSH_COMMAND",
        ] {
            let ex = vec![(bad.to_string(), "x".to_string())];
            let e = build(&inputs(&c, &[], &BTreeMap::new(), &ex)).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        let mut set = BTreeMap::new();
        set.insert("LD_PRELOAD".to_string(), "x".to_string());
        assert!(build(&inputs(&c, &[], &set, &[])).is_err());
    }
}
