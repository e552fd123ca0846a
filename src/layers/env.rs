//! The workload's environment: built from an allow-list, never inherited.
//!
//! Runs in the supervisor (pure). Variables that change what code a program loads
//! (`NODE_OPTIONS`, `LD_PRELOAD`, `PYTHONPATH`, `BASH_ENV`, npm's `npm_config_*`...) never pass,
//! whatever is asked: a caller who names one explicitly (`--env`, `--env-file`, `--keep-env`,
//! `--pass-env`, `[env] pass`) gets a one-line error. Secret-looking names pass only when the
//! caller names them: `--pass-env NAME` or `[env] pass` (the caller's value, by name, so it never
//! appears on a command line), or `--env`/`--env-file`; `--keep-env` of one is an error that
//! says to use `--pass-env`. A profile's `[env] keep` drops them (reported in `env_dropped`).
//! A profile's `[env] drop` holds back names its `keep` would pass (`keep = ["*"]` minus a
//! runner's internal `ACTIONS_*` tokens and service addresses).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Exact names that inject code, configuration or a host socket into the workload.
const NEVER_EXACT: &[&str] = &[
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_REPL_EXTERNAL_MODULE",
    "NODE_EXTRA_CA_CERTS",
    // Trust stores: a caller's would name a host path; `--ca-certs` sets these inside.
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
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

/// git's identity: who a commit is by. Not code-loading (unlike the other `GIT_*`, such as
/// `GIT_DIR`, `GIT_EXEC_PATH`, `GIT_SSH_COMMAND`, `GIT_CONFIG_*`), so they pass when kept.
const GIT_IDENTITY: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
];

/// Words of a name (split at `_`, `-` and `.`, case-insensitive) that make it look like a
/// secret. Whole words: `GITHUB_PATH` and `XDG_SESSION_TYPE` are not secrets, `NPM_TOKEN` is.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "TOKENS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWORDS",
    "PASSWD",
    "PASS",
    "PASSPHRASE",
    "KEY",
    "KEYS",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "CREDS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "COOKIES",
    "PAT",
    "DSN",
];

/// Endings of a word that make it look like a secret even when glued to another word
/// (`GHTOKEN`, `DBPASSWORD`); only long, unambiguous ones (`KEY` would catch `MONKEY`).
const SECRET_ENDINGS: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY"];

/// Does this name look like a credential? By whole words, see [`SECRET_WORDS`].
pub fn looks_secret(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    up.split(['_', '-', '.'])
        .filter(|w| !w.is_empty())
        .any(|w| SECRET_WORDS.contains(&w) || SECRET_ENDINGS.iter().any(|e| w.ends_with(e)))
}

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
    if GIT_IDENTITY.contains(&up.as_str()) {
        return None;
    }
    if NEVER_EXACT.contains(&up.as_str()) || NEVER_PREFIX.iter().any(|p| up.starts_with(p)) {
        return Some(Refusal::Injection);
    }
    if looks_secret(&up) {
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
    /// On the keep list, but held back by the profile's `env.drop` (a runner's internal
    /// tokens and service addresses: `ACTIONS_*` in `github-actions`).
    HeldBack,
}

impl Why {
    /// The words of the `-v` line.
    pub fn words(self) -> &'static str {
        match self {
            Why::Secret => "removed as secret-looking",
            Why::LoadsCode => "removed as code-loading",
            Why::NotKept => "dropped, not on the keep list",
            Why::HeldBack => "held back by the profile's [env] drop",
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
    /// The names passed by `--pass-env` and `[env] pass` (the report's `env_passed`).
    pub passed: Vec<String>,
    /// `--pass-env` names the caller's environment does not have (a warning each).
    pub unset: Vec<String>,
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

/// `--net none`: nothing outside answers, so a package manager's retries of a failed fetch
/// only delay the failure (measured: npm retries each fetch for 70 s, whether the lookup
/// failed or the connection; pip 9 s per package): none, unless the caller, the profile or
/// `--env` set them. npm then fails in under a second, naming the host it looked up.
pub fn no_fetch_retries(vars: &mut BTreeMap<String, String>) {
    for (k, v) in [("npm_config_fetch_retries", "0"), ("PIP_RETRIES", "0")] {
        if !vars.keys().any(|n| n.eq_ignore_ascii_case(k)) {
            vars.insert(k.into(), v.into());
        }
    }
}

/// Inputs of [`build`]: everything comes in as data, so the function is pure.
pub struct Inputs<'a> {
    /// The caller's environment.
    pub caller: &'a [(String, String)],
    /// Profile `env.keep`: names that look secret or load code are dropped (and reported).
    pub keep: &'a [String],
    /// Profile `env.drop`: names (an entry ending in `*`: every name it begins) that `keep`
    /// does not pass after all; `--keep-env`, `--pass-env` and `--env` still do.
    pub drop: &'a [String],
    /// `--keep-env`: as `keep`, but asking for a refused name is an error.
    pub keep_flag: &'a [String],
    /// Profile `env.pass` and `--pass-env`: the caller's value even when the name looks like
    /// a secret; a code-loading name is an error. A name the caller lacks is skipped
    /// (`--pass-env` ones are listed in [`Built::unset`]).
    pub pass: &'a [String],
    pub pass_flag: &'a [String],
    /// Profile `env.set`.
    pub set: &'a BTreeMap<String, String>,
    /// `--env-file` lines, then `--env NAME=VALUE`, from the caller (later wins).
    pub explicit: &'a [(String, String)],
    /// The PATH inside the sandbox.
    pub path: &'a str,
    /// Set by the sandbox itself.
    pub home: &'a str,
    pub tmp: &'a str,
    pub user: &'a str,
    /// Set by the sandbox itself after everything else (`--ca-certs`).
    pub sandbox: &'a [(String, String)],
}

/// Build the environment. Errors are one line naming a variable that can never be set.
pub fn build(i: &Inputs) -> Result<Built, String> {
    for k in i.keep_flag {
        match refusal(k) {
            Some(Refusal::Injection) => return Err(never(&format!("--keep-env {k}"))),
            Some(Refusal::Secret) => {
                return Err(format!(
                    "--keep-env {k}: it looks like a secret, which --keep-env does not pass; \
                     use --pass-env {k} (the value goes by name, never on a command line)"
                ))
            }
            None => {}
        }
    }
    for (flag, k) in i
        .pass
        .iter()
        .map(|k| ("[env] pass", k))
        .chain(i.pass_flag.iter().map(|k| ("--pass-env", k)))
    {
        if !valid_name(k) {
            return Err(format!("{flag} {k:?}: not a valid variable name"));
        }
        if refusal(k) == Some(Refusal::Injection) {
            return Err(never(&format!("{flag} {k}")));
        }
    }
    let mut vars = BTreeMap::new();
    let mut removed = Vec::new();
    let mut dropped = Vec::new();
    let mut passed = Vec::new();
    for (k, v) in i.caller {
        if k == "PATH" {
            continue;
        }
        // An entry ending in `*` keeps every name it starts (`GITHUB_*`).
        let matches = |x: &String| match x.strip_suffix('*') {
            Some(prefix) => k.starts_with(prefix),
            None => x == k,
        };
        let listed = i.keep.iter().chain(i.keep_flag).any(matches);
        let held = listed && i.drop.iter().any(matches) && !i.keep_flag.iter().any(matches);
        let kept = listed && !held;
        let pass = i.pass.iter().chain(i.pass_flag).any(|x| x == k);
        let refused = refusal(k);
        if pass && refused != Some(Refusal::Injection) && !REPLACED.contains(&k.as_str()) {
            vars.insert(k.clone(), v.clone());
            passed.push(k.clone());
        } else if kept && refused.is_none() {
            vars.insert(k.clone(), v.clone());
        } else if !REPLACED.contains(&k.as_str()) {
            let why = match refused {
                Some(Refusal::Secret) => Why::Secret,
                Some(Refusal::Injection) => Why::LoadsCode,
                None if held => Why::HeldBack,
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
    let unset = i
        .pass_flag
        .iter()
        .filter(|k| !i.caller.iter().any(|(n, _)| n == *k))
        .cloned()
        .collect();
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
        if !valid_name(k) || v.bytes().any(|b| b == 0) {
            return Err(format!("--env {k:?}: not a valid NAME=VALUE"));
        }
        if refusal(k) == Some(Refusal::Injection) {
            return Err(never(&format!("--env {k}")));
        }
        vars.insert(k.clone(), v.clone());
        removed.retain(|r| r != k);
    }
    vars.insert("PATH".into(), i.path.to_string());
    vars.insert("HOME".into(), i.home.to_string());
    vars.insert("TMPDIR".into(), i.tmp.to_string());
    vars.insert("USER".into(), i.user.to_string());
    vars.insert("LOGNAME".into(), i.user.to_string());
    for (k, v) in i.sandbox {
        vars.insert(k.clone(), v.clone());
        removed.retain(|r| r != k);
    }
    removed.sort();
    removed.dedup();
    passed.sort();
    passed.dedup();
    // A name the profile or `--env` set is replaced, not dropped.
    dropped.retain(|d| !vars.contains_key(&d.name));
    dropped.sort_by(|a, b| (a.why, &a.name).cmp(&(b.why, &b.name)));
    dropped.dedup();
    Ok(Built {
        vars,
        removed,
        dropped,
        passed,
        unset,
    })
}

/// A variable name the environment can hold: not empty, no `=`, no NUL.
fn valid_name(k: &str) -> bool {
    !k.is_empty() && !k.contains('=') && !k.bytes().any(|b| b == 0)
}

/// `WHAT: never passed ...` for a code-loading name asked for explicitly.
fn never(what: &str) -> String {
    format!(
        "{what}: never passed to a sandboxed command ({})",
        why(Refusal::Injection)
    )
}

/// A file of secrets the caller names (`--env-file`, `--secret-file`), opened as
/// [`open_caller_file`] does and checked: a regular file owned by the caller (`euid`) that no
/// other user can read or write. Errors are one line naming `flag` and the file.
pub fn open_private_file(
    flag: &str,
    path: &std::path::Path,
    repo: &std::path::Path,
    euid: u32,
) -> Result<std::fs::File, String> {
    use std::os::unix::fs::MetadataExt;
    let fail = |why: String| format!("{flag} {}: {why}", path.display());
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let file = open_caller_file(path, repo, flags).map_err(fail)?;
    let m = file.metadata().map_err(|e| fail(io_words(&e)))?;
    if !m.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if m.uid() != euid {
        return Err(fail(format!(
            "owned by uid {}, not by the caller (uid {euid}): a file of secrets must be the caller's own",
            m.uid()
        )));
    }
    if m.mode() & 0o077 != 0 {
        return Err(fail(format!(
            "mode {:04o} lets other users read or write it: it holds secrets (chmod 600 it)",
            m.mode() & 0o7777
        )));
    }
    Ok(file)
}

/// The most `--env-file` reads.
const ENV_FILE_MAX: u64 = 1 << 20;

/// `--env-file FILE`: `NAME=VALUE` lines, taken literally (no quotes removed, nothing
/// expanded, as `--env`); blank lines and lines starting with `#` are skipped. The file must
/// be a regular file owned by the caller (`euid`) that no other user can read: it holds
/// secrets. A file in the repo (`repo`, canonical) is opened without following any link
/// beneath it: an earlier run could have made `.env` a link to another file of secrets,
/// whose values would then reach the command. Errors are one line naming the file (and the
/// line).
pub fn read_env_file(
    path: &std::path::Path,
    euid: u32,
    repo: &std::path::Path,
) -> Result<Vec<(String, String)>, String> {
    use std::io::Read;
    let fail = |why: String| format!("--env-file {}: {why}", path.display());
    let file = open_private_file("--env-file", path, repo, euid)?;
    let mut text = String::new();
    file.take(ENV_FILE_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(io_words(&e)))?;
    if text.len() as u64 > ENV_FILE_MAX {
        return Err(fail(format!("larger than {ENV_FILE_MAX} bytes")));
    }
    parse_env_file(&text).map_err(|(n, why)| fail(format!("line {n}: {why}")))
}

/// Open a file the caller named (`--env-file`, `--stdin`) for reading with `flags`. One in
/// the repo (`repo`, canonical), by its own path or through a link to a directory of it, is
/// opened beneath the repo without following any link: the command may have planted them
/// there (`.env` made a link to a private key), and what is read here goes to the command.
/// Elsewhere links are followed: the caller chose them. Errors are the words after the path.
pub fn open_caller_file(
    path: &std::path::Path,
    repo: &std::path::Path,
    flags: i32,
) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let cwd = std::env::current_dir().map_err(|e| io_words(&e))?;
    let lexical = crate::hostfs::lexical(&cwd, path);
    // In the repo as written, or once the links to its directory are resolved.
    let beneath = match lexical.strip_prefix(repo) {
        Ok(rel) => Some(rel.to_path_buf()),
        Err(_) => match (
            lexical.parent().map(std::fs::canonicalize),
            lexical.file_name(),
        ) {
            (Some(Ok(dir)), Some(name)) => dir.strip_prefix(repo).ok().map(|rel| rel.join(name)),
            _ => None,
        },
    };
    match beneath {
        Some(rel) => crate::hostfs::Dir::open(repo)
            .and_then(|d| d.open_at(&rel, flags, 0))
            .map(std::fs::File::from)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::EXDEV) => {
                    "a link inside the repo is on the way (not followed)".into()
                }
                _ => io_words(&e),
            }),
        None => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
            .map_err(|e| io_words(&e)),
    }
}

/// The lines of an env file (see [`read_env_file`]); errors are (line number, why).
pub fn parse_env_file(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if valid_name(k) && !k.contains(char::is_whitespace) => {
                out.push((k.to_string(), v.to_string()))
            }
            _ => return Err((n + 1, "not NAME=VALUE".into())),
        }
    }
    Ok(out)
}

/// An I/O error without its `(os error N)` tail.
fn io_words(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

/// Where the sandbox's trust bundle (the system roots and the extra CAs, [`crate::trust`])
/// is inside a sandbox with its own root.
pub const CA_INSIDE: &str = "/run/sandbox-run/ca-certs.pem";

/// Where the extra CAs alone are, for Node.
pub const CA_EXTRA_INSIDE: &str = "/run/sandbox-run/ca-extra.pem";

/// The variables that name the whole bundle inside.
pub const CA_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// The variable that names the extra CAs alone (Node adds them to its own roots).
pub const CA_EXTRA_VAR: &str = "NODE_EXTRA_CA_CERTS";

/// `--ca-certs FILE`, checked: a regular file outside the repo that no other user can write
/// (owned by the caller or root, no group or other write bit). Returns its resolved path.
pub fn ca_bundle(
    path: &std::path::Path,
    repo: &std::path::Path,
    euid: u32,
) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let fail = |why: String| format!("--ca-certs {}: {why}", path.display());
    let real = std::fs::canonicalize(path).map_err(|e| fail(io_words(&e)))?;
    // As written, resolved, or through a link to a directory of it: the command could have
    // made it a link to any file (bound, it would be readable inside).
    let cwd = std::env::current_dir().map_err(|e| fail(io_words(&e)))?;
    let lexical = crate::hostfs::lexical(&cwd, path);
    let parent_in_repo = lexical
        .parent()
        .and_then(|d| std::fs::canonicalize(d).ok())
        .is_some_and(|d| d.starts_with(repo));
    if real.starts_with(repo) || lexical.starts_with(repo) || parent_in_repo {
        return Err(fail(
            "inside the repo, which the command controls: keep the bundle outside it".into(),
        ));
    }
    let m = std::fs::metadata(&real).map_err(|e| fail(io_words(&e)))?;
    if !m.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if m.uid() != euid && m.uid() != 0 {
        return Err(fail(format!(
            "owned by uid {}, neither the caller nor root: another user could change it",
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(fail(format!(
            "mode {:04o} lets other users write it",
            m.mode() & 0o7777
        )));
    }
    Ok(real)
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

    #[test]
    fn no_fetch_retries_keeps_what_was_set() {
        let mut v = BTreeMap::new();
        no_fetch_retries(&mut v);
        assert_eq!(
            v.get("npm_config_fetch_retries").map(String::as_str),
            Some("0")
        );
        assert_eq!(v.get("PIP_RETRIES").map(String::as_str), Some("0"));
        let mut v = BTreeMap::from([("NPM_CONFIG_FETCH_RETRIES".to_string(), "5".to_string())]);
        no_fetch_retries(&mut v);
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v["NPM_CONFIG_FETCH_RETRIES"], "5");
    }

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
            drop: &[],
            keep_flag: &[],
            pass: &[],
            pass_flag: &[],
            set,
            explicit,
            path: "/usr/bin:/bin",
            home: "/home/u",
            tmp: "/tmp",
            user: "u",
            sandbox: &[],
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn secret_looking_goes_by_whole_words() {
        for (name, secret) in [
            ("GITHUB_PATH", false),
            ("PKG_CONFIG_PATH", false),
            ("XDG_SESSION_TYPE", false),
            ("DESKTOP_SESSION", false),
            ("GIT_AUTHOR_NAME", false),
            ("KEYMAP", false),
            ("MONKEY_BUSINESS", false),
            ("COMPASS_DIR", false),
            ("AWS_SECRET_ACCESS_KEY", true),
            ("NPM_TOKEN", true),
            ("ANTHROPIC_API_KEY", true),
            ("OPENAI_API_KEY", true),
            ("GITHUB_TOKEN", true),
            ("GH_PAT", true),
            ("DB_PASSWORD", true),
            ("MYSQLPASSWORD", true),
            ("GHTOKEN", true),
            ("AWS_SESSION_TOKEN", true),
            ("SENTRY_DSN", true),
            ("http_auth", true),
            ("gemini-api-key", true),
        ] {
            assert_eq!(looks_secret(name), secret, "{name}");
        }
        assert_eq!(refusal("GITHUB_PATH"), None);
        assert_eq!(refusal("PKG_CONFIG_PATH"), None);
        assert_eq!(refusal("XDG_SESSION_TYPE"), None);
        assert_eq!(refusal("NPM_TOKEN"), Some(Refusal::Secret));
    }

    #[test]
    fn git_identity_passes_when_kept_other_git_variables_never() {
        for ok in [
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "GIT_COMMITTER_NAME",
            "GIT_COMMITTER_EMAIL",
            "git_author_name",
        ] {
            assert_eq!(refusal(ok), None, "{ok}");
        }
        for bad in [
            "GIT_DIR",
            "GIT_EXEC_PATH",
            "GIT_SSH_COMMAND",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "GIT_CONFIG_GLOBAL",
            "GIT_SSL_CAINFO",
        ] {
            assert_eq!(refusal(bad), Some(Refusal::Injection), "{bad}");
        }
        let c: Vec<(String, String)> = [("GIT_AUTHOR_NAME", "A U"), ("GIT_DIR", "/x")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let keep = strings(&["GIT_AUTHOR_NAME", "GIT_DIR"]);
        let b = build(&inputs(&c, &keep, &BTreeMap::new(), &[])).unwrap();
        assert_eq!(b.vars["GIT_AUTHOR_NAME"], "A U");
        assert!(!b.vars.contains_key("GIT_DIR"));
    }

    #[test]
    fn pass_passes_secrets_by_name_but_never_code_loading() {
        let c = caller();
        let none = BTreeMap::new();
        let pass = strings(&["GITHUB_TOKEN"]);
        let flag = strings(&["AWS_SECRET_ACCESS_KEY", "NOT_SET_ANYWHERE"]);
        let mut i = inputs(&c, &[], &none, &[]);
        i.pass = &pass;
        i.pass_flag = &flag;
        let b = build(&i).unwrap();
        assert_eq!(b.vars["GITHUB_TOKEN"], "ghp_secret");
        assert_eq!(b.vars["AWS_SECRET_ACCESS_KEY"], "k");
        assert_eq!(b.passed, ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"]);
        assert_eq!(b.unset, ["NOT_SET_ANYWHERE"]);
        assert!(!b.removed.iter().any(|r| r == "GITHUB_TOKEN"));
        assert!(!b.dropped.iter().any(|d| d.name == "GITHUB_TOKEN"));
        for bad in [
            "LD_PRELOAD",
            "NODE_OPTIONS",
            "BASH_ENV",
            "PYTHONSTARTUP",
            "GIT_SSH_COMMAND",
        ] {
            let v = strings(&[bad]);
            let mut i = inputs(&c, &[], &none, &[]);
            i.pass_flag = &v;
            let e = build(&i).unwrap_err();
            assert!(
                e.starts_with(&format!("--pass-env {bad}: never passed")),
                "{e}"
            );
            let mut i = inputs(&c, &[], &none, &[]);
            i.pass = &v;
            assert!(build(&i).unwrap_err().contains("[env] pass"));
        }
    }

    #[test]
    fn keep_env_of_a_secret_says_to_use_pass_env() {
        let c = caller();
        let none = BTreeMap::new();
        let v = strings(&["GITHUB_TOKEN"]);
        let mut i = inputs(&c, &[], &none, &[]);
        i.keep_flag = &v;
        let e = build(&i).unwrap_err();
        assert!(e.contains("use --pass-env GITHUB_TOKEN"), "{e}");
        let v = strings(&["LD_PRELOAD"]);
        i.keep_flag = &v;
        assert!(build(&i).unwrap_err().contains("never passed"));
        let v = strings(&["TERM"]);
        i.keep_flag = &v;
        assert_eq!(build(&i).unwrap().vars["TERM"], "xterm");
    }

    #[test]
    fn env_files() {
        let text = "# comment\n\nA=1\n  # indented comment\nB=x=y\nC=\nQ=\"quoted\"\n";
        let got = parse_env_file(text).unwrap();
        let want: Vec<(String, String)> =
            [("A", "1"), ("B", "x=y"), ("C", ""), ("Q", "\"quoted\"")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(got, want);
        assert_eq!(parse_env_file("A=1\nnope\n").unwrap_err().0, 2);
        assert_eq!(parse_env_file("=x\n").unwrap_err().0, 1);
        assert_eq!(parse_env_file("A B=x\n").unwrap_err().0, 1);
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
    fn drop_holds_back_what_keep_would_pass() {
        let c: Vec<(String, String)> = [
            ("NODE_ENV", "production"),
            ("ACTIONS_RUNTIME_URL", "https://x.invalid/"),
            ("ACTIONS_STEP_DEBUG", "true"),
            ("ACTIONS_RUNTIME_TOKEN", "t"),
            ("LD_PRELOAD", "/x.so"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let keep = strings(&["*"]);
        let drop = strings(&["ACTIONS_*"]);
        let none = BTreeMap::new();
        let mut i = inputs(&c, &keep, &none, &[]);
        i.drop = &drop;
        let b = build(&i).unwrap();
        assert_eq!(b.vars["NODE_ENV"], "production");
        let why = |n: &str| b.dropped.iter().find(|d| d.name == n).map(|d| d.why);
        assert_eq!(why("ACTIONS_RUNTIME_URL"), Some(Why::HeldBack));
        assert_eq!(why("ACTIONS_STEP_DEBUG"), Some(Why::HeldBack));
        assert_eq!(why("ACTIONS_RUNTIME_TOKEN"), Some(Why::Secret));
        assert_eq!(why("LD_PRELOAD"), Some(Why::LoadsCode));
        // `--keep-env NAME` passes a held-back name that is harmless
        let flag = strings(&["ACTIONS_STEP_DEBUG"]);
        i.keep_flag = &flag;
        let b = build(&i).unwrap();
        assert_eq!(b.vars["ACTIONS_STEP_DEBUG"], "true");
        assert!(!b.vars.contains_key("ACTIONS_RUNTIME_URL"));
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
