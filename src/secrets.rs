//! `--secret NAME=HOST[,HOST…]`, `--secret-file FILE` and the profile's `[secrets]` table:
//! which secrets a run has, their values (into the vault, [`crate::net::vault`]), and the
//! placeholder each shows inside the sandbox instead.
//!
//! Runs in the supervisor before anything copies its environment: [`load`] takes each value
//! out of the environment block and leaves the placeholder in its place, so the environment
//! that [`crate::plan::Host::probe`] reads later (and every fork inherits) holds no value.

use crate::net::secret::{Secret, Secrets};
use crate::net::vault;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The shortest value taken as a secret: a placeholder of fewer random characters would be
/// guessable, and no API key is that short.
pub const MIN_LEN: usize = 8;

/// Prefixes kept in the placeholder (longest first), so that a CLI checking a key's format
/// starts: the vendors' documented key prefixes.
const KNOWN_PREFIXES: &[&str] = &[
    "sk-ant-api03-",
    "sk-ant-",
    "sk-proj-",
    "github_pat_",
    "sk-",
    "ghp_",
    "AIza",
];

/// The largest `--secret-file`.
const FILE_MAX: usize = 16 << 10;

/// What the command line and the profile ask for.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    /// `--secret NAME=HOST[,HOST…]`, as written.
    pub flags: Vec<String>,
    /// `--secret-file FILE`.
    pub files: Vec<PathBuf>,
}

/// Names given to the sandbox some other way (a secret's name may not be among them).
pub struct Others<'a> {
    pub pass_env: &'a [String],
    pub keep_env: &'a [String],
    /// `--env` and `--env-file` names.
    pub env: &'a [String],
    /// The profile's `[env] set` names.
    pub profile_set: &'a [String],
}

/// The secrets of a run, with their values in the vault.
#[derive(Debug, Default, Clone)]
pub struct Loaded {
    pub secrets: Arc<Secrets>,
}

impl Loaded {
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The hosts the secrets go to: they join the proxy's allow-list.
    pub fn hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in &self.secrets.list {
            for h in &s.host_text {
                if !out.contains(h) {
                    out.push(h.clone());
                }
            }
        }
        out
    }

    /// `NAME=placeholder` for the sandbox's environment.
    pub fn env(&self) -> Vec<(String, String)> {
        self.secrets
            .list
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    String::from_utf8_lossy(&s.placeholder).into_owned(),
                )
            })
            .collect()
    }

    /// Names and hosts, for the plan and the report (never a value).
    pub fn planned(&self) -> Vec<(String, Vec<String>)> {
        self.secrets
            .list
            .iter()
            .map(|s| (s.name.clone(), s.host_text.clone()))
            .collect()
    }
}

/// `NAME=HOST[,HOST…]`: the name and the host patterns. Errors are one line.
pub fn parse_flag(s: &str) -> Result<(String, Vec<String>), String> {
    let Some((name, hosts)) = s.split_once('=') else {
        return Err(format!(
            "--secret {s:?}: expected NAME=HOST[,HOST…] (the value comes from the environment or --secret-file, never the command line)"
        ));
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect();
    check_entry(name, &hosts, "--secret")?;
    Ok((name.to_string(), hosts))
}

/// A secret's name and hosts, checked; errors begin with `what`.
pub fn check_entry(name: &str, hosts: &[String], what: &str) -> Result<(), String> {
    check_name(name, what)?;
    check_hosts(name, hosts, what)
}

/// A name a secret may have: a variable name (letters, digits, `_`, not starting with a
/// digit) that the sandbox does not set itself and that loads no code.
fn check_name(name: &str, what: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(format!(
            "{what} {name:?}: not a variable name (letters, digits and _, not starting with a digit)"
        ));
    }
    let up = name.to_ascii_uppercase();
    let own = [
        "PATH",
        "HOME",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "FTP_PROXY",
        "PIP_CERT",
        // read by sandbox-run itself before the secrets are taken out
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
    ];
    if own.contains(&up.as_str()) || up.starts_with("SANDBOX_RUN_") {
        return Err(format!(
            "{what} {name}: the sandbox sets {name} itself; a secret needs a name of its own"
        ));
    }
    if crate::layers::env::refusal(name) == Some(crate::layers::env::Refusal::Injection) {
        return Err(format!(
            "{what} {name}: it changes what code the command loads, and never enters the sandbox, not even as a placeholder"
        ));
    }
    Ok(())
}

fn check_hosts(name: &str, hosts: &[String], what: &str) -> Result<(), String> {
    if hosts.is_empty() {
        return Err(format!(
            "{what} {name}: no host: a secret goes only to the hosts listed for it (NAME=HOST[,HOST…])"
        ));
    }
    if let Some(h) = hosts.iter().find(|h| h.contains('*')) {
        return Err(format!(
            "{what} {name}: {h:?} is a wildcard: a secret goes only to hosts named one by one"
        ));
    }
    crate::net::allow::AllowList::parse(hosts).map_err(|e| format!("{what} {name}: {e}"))?;
    Ok(())
}

/// The secrets asked for by `profile` (`[secrets]`) and `asked` (the command line; its hosts
/// for a name replace the profile's), their values taken into the vault: from the last
/// `--secret-file` that has the name, else from the caller's environment. Every caller
/// variable of a secret's name is overwritten in place with a placeholder, whichever source
/// gave the value. `euid` owns the files; `repo` is where no link is followed.
pub fn load(
    profile: &BTreeMap<String, Vec<String>>,
    asked: &Asked,
    others: &Others,
    euid: u32,
    repo: &Path,
) -> Result<Loaded, String> {
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, hosts) in profile {
        check_entry(name, hosts, "[secrets]")?;
        wanted.insert(name.clone(), hosts.clone());
    }
    let mut from_flags: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &asked.flags {
        let (name, hosts) = parse_flag(f)?;
        let e = from_flags.entry(name).or_default();
        for h in hosts {
            if !e.contains(&h) {
                e.push(h);
            }
        }
    }
    wanted.extend(from_flags);
    if wanted.is_empty() {
        if let Some(f) = asked.files.first() {
            return Err(format!(
                "--secret-file {}: no secret is named (--secret NAME=HOST or the profile's [secrets])",
                f.display()
            ));
        }
        return Ok(Loaded::default());
    }
    for name in wanted.keys() {
        for (flag, list) in [
            ("--pass-env", others.pass_env),
            ("--keep-env", others.keep_env),
            ("--env", others.env),
            ("the profile's [env] set", others.profile_set),
        ] {
            if list.iter().any(|n| n == name) {
                return Err(format!(
                    "{name}: a secret, and also given by {flag}: a secret's value never enters the sandbox (inside, {name} is a placeholder); name it only as a secret"
                ));
            }
        }
    }
    let v = vault::vault()?;
    // The files first: which names they give.
    let mut from_file: BTreeMap<String, &'static [u8]> = BTreeMap::new();
    for f in &asked.files {
        for (name, value) in read_file(f, euid, repo, v)? {
            if wanted.contains_key(&name) {
                from_file.insert(name, value);
            }
        }
    }
    let mut list = Vec::new();
    for (name, hosts) in wanted {
        let file_value = from_file.get(&name).copied();
        let mut placeholder: Option<Vec<u8>> = None;
        let env_value = v.take_env(&name, |value| {
            if file_value.is_some() || placeholder.is_some() {
                // The file's value is the secret (or this is a second entry of the name):
                // this one is hidden all the same.
                return Ok(random_alnum(value.len()));
            }
            let p = make_placeholder(&name, value)?;
            placeholder = Some(p.clone());
            Ok(p)
        })?;
        let (value, placeholder) = match (file_value, env_value, placeholder) {
            (Some(value), _, _) => (value, make_placeholder(&name, value)?),
            (None, Some(value), Some(p)) => (value, p),
            _ => {
                return Err(format!(
                    "--secret {name}: not set in the caller's environment{}; export {name}=… before the run",
                    if asked.files.is_empty() {
                        String::new()
                    } else {
                        " nor in any --secret-file".to_string()
                    }
                ))
            }
        };
        list.push(Secret::new(name, hosts, placeholder, value)?);
    }
    Ok(Loaded {
        secrets: Arc::new(Secrets { list }),
    })
}

/// The `NAME=VALUE` lines of a `--secret-file` (`#` comments and blank lines skipped), the
/// file read into the vault whole and the values slices of it. The same rules as
/// `--env-file`: a regular file of the caller's that no other user can read or write; in
/// the repo, no link followed.
fn read_file(
    path: &Path,
    euid: u32,
    repo: &Path,
    v: &'static vault::Vault,
) -> Result<Vec<(String, &'static [u8])>, String> {
    use std::os::fd::AsFd;
    let fail = |why: String| format!("--secret-file {}: {why}", path.display());
    let file = crate::layers::env::open_private_file("--secret-file", path, repo, euid)?;
    let m = file.metadata().map_err(|e| fail(e.to_string()))?;
    if m.len() > FILE_MAX as u64 {
        return Err(fail(format!("larger than {FILE_MAX} bytes")));
    }
    // Room for what it holds now (the vault is small); a file that grows meanwhile fails.
    let text = v.read_file(file.as_fd(), m.len() as usize).map_err(fail)?;
    let mut out = Vec::new();
    for (n, line) in text.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let t = line.trim_ascii_start();
        if t.is_empty() || t.starts_with(b"#") {
            continue;
        }
        let Some(eq) = line.iter().position(|b| *b == b'=') else {
            return Err(fail(format!("line {}: not NAME=VALUE", n + 1)));
        };
        let name = std::str::from_utf8(&line[..eq])
            .ok()
            .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .ok_or_else(|| fail(format!("line {}: not NAME=VALUE", n + 1)))?;
        out.push((name.to_string(), &line[eq + 1..]));
    }
    Ok(out)
}

/// The placeholder of `value`: the same length, the same known prefix (or what comes up to
/// the last `-` or `_` of its first 16 characters), the rest random letters and digits, never
/// the value itself. The value must be one line of printable ASCII, at least [`MIN_LEN`]
/// bytes: it goes into a header. Errors name the secret, never the value.
pub fn make_placeholder(name: &str, value: &[u8]) -> Result<Vec<u8>, String> {
    if value.len() < MIN_LEN {
        return Err(format!(
            "--secret {name}: the value is {} bytes; a secret must be at least {MIN_LEN} (its placeholder would be guessable)",
            value.len()
        ));
    }
    if let Some(i) = value.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(format!(
            "--secret {name}: byte {} of the value is not printable ASCII (a space, a control character or a line break): a secret goes into a header, which is one line",
            i + 1
        ));
    }
    let keep = prefix_len(value).min(value.len() - 4);
    loop {
        let mut p = value[..keep].to_vec();
        p.extend(random_alnum(value.len() - keep));
        if p != value {
            return Ok(p);
        }
    }
}

/// How many bytes of `value` the placeholder keeps.
fn prefix_len(value: &[u8]) -> usize {
    if let Some(p) = KNOWN_PREFIXES
        .iter()
        .find(|p| value.starts_with(p.as_bytes()))
    {
        return p.len();
    }
    value
        .iter()
        .take(16)
        .rposition(|b| *b == b'-' || *b == b'_')
        .map_or(0, |i| i + 1)
}

/// `n` random characters of `[A-Za-z0-9]` (getrandom; a rejected byte is drawn again, so
/// each character is uniform).
fn random_alnum(n: usize) -> Vec<u8> {
    const SET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = Vec::with_capacity(n);
    let mut buf = [0u8; 64];
    while out.len() < n {
        // SAFETY: getrandom into a stack buffer of the given length.
        let got = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got <= 0 {
            continue;
        }
        for b in &buf[..got as usize] {
            if *b < 248 && out.len() < n {
                out.push(SET[(*b % 62) as usize]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_keep_the_shape() {
        for (value, prefix) in [
            ("sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "sk-ant-api03-"),
            ("sk-proj-abcdefghijklmnopqrst", "sk-proj-"),
            ("ghp_0123456789abcdefghij", "ghp_"),
            ("AIzaSyA0123456789abcdefgh", "AIza"),
            ("github_pat_11AAAAAAAAAAAAAA", "github_pat_"),
            ("xoxb-1234-5678-abcdefghijkl", "xoxb-1234-5678-"),
            ("plainvalue0123456789", ""),
            ("abc_defghijklmnopqrstuvwxyz_0123", "abc_"),
            ("abcdefg_", "abcd"),
        ] {
            let p = make_placeholder("K", value.as_bytes()).unwrap();
            assert_eq!(p.len(), value.len(), "{value}");
            assert!(p.starts_with(prefix.as_bytes()), "{value}");
            assert_ne!(p, value.as_bytes());
            assert!(p[prefix.len()..].iter().all(u8::is_ascii_alphanumeric));
        }
        let a = make_placeholder("K", b"sk-0123456789abcdef").unwrap();
        let b = make_placeholder("K", b"sk-0123456789abcdef").unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn bad_values_are_refused_without_showing_them() {
        let e = make_placeholder("K", b"short").unwrap_err();
        assert!(e.contains("5 bytes") && !e.contains("short"), "{e}");
        let e = make_placeholder("K", b"line-one\nline-two").unwrap_err();
        assert!(e.contains("byte 9") && !e.contains("line-"), "{e}");
        assert!(make_placeholder("K", b"has a space inside").is_err());
    }

    /// [`load`] runs before anything copies the whole environment: the one copy is
    /// `plan::Host::probe`, which the commands call after it. A new one elsewhere would have
    /// to come after [`load`] too (this test then names it).
    #[test]
    fn the_environment_is_copied_in_one_place() {
        fn scan(dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    scan(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for (n, line) in text.lines().enumerate() {
                        let code = line.split("//").next().unwrap_or("");
                        if [concat!("env::", "vars()"), concat!("env::", "vars_os()")]
                            .iter()
                            .any(|c| code.contains(c))
                        {
                            out.push(format!("{}:{}", p.display(), n + 1));
                        }
                    }
                }
            }
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        scan(&src, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("plan.rs"), "{found:?}");
    }

    #[test]
    fn flags_are_checked() {
        assert_eq!(
            parse_flag("API_KEY=api.example.com,example.net:8443").unwrap(),
            (
                "API_KEY".into(),
                vec!["api.example.com".into(), "example.net:8443".into()]
            )
        );
        for bad in [
            "API_KEY",
            "API_KEY=",
            "API_KEY=*.example.com",
            "1KEY=a.com",
            "A-B=a.com",
            "PATH=a.com",
            "LD_PRELOAD=a.com",
            "HTTPS_PROXY=a.com",
            "SANDBOX_RUN_PROFILE_PATH=a.com",
            "XDG_CONFIG_HOME=a.com",
            "K=exa mple.com:99999",
        ] {
            assert!(parse_flag(bad).is_err(), "{bad}");
        }
    }
}
