//! Argument rules for `npm` and `npx` (and `npm exec` / `npm x`).
//!
//! `npm test` itself is the point of the validate profile, but npm's *options* can turn it
//! into something else: `--node-options=--require=x` preloads code into every node it starts,
//! `--script-shell` picks the program that runs scripts, `--userconfig`/`--globalconfig` load
//! an npmrc that can set both, `--prefix` moves where npm reads the project config from.
//! `npm exec`/`npx` run a package's program, which is checked recursively like any wrapped
//! command, and `-c/--call` runs a shell command line, which is never allowed.

use std::path::Path;

use super::deny::Deny;
use super::engine::{Engine, Slot};
use super::npm_options::{is_option, lenient, strict, Arity};
use super::resolve::resolve_lenient;
use super::text::{quote, quote_path};

/// Configuration keys that run or configure code outside the project's own scripts. Denied
/// anywhere before `--`, whatever the subcommand.
const DANGEROUS_KEYS: &[(&str, &str)] = &[
    (
        "node-options",
        "passes options (such as --require) to every node process npm starts",
    ),
    (
        "script-shell",
        "chooses the program that runs package scripts",
    ),
    ("shell", "chooses the program that runs package scripts"),
    (
        "userconfig",
        "loads an npmrc file that can set node-options or script-shell",
    ),
    (
        "globalconfig",
        "loads an npmrc file that can set node-options or script-shell",
    ),
    ("init-module", "names a module npm would load and run"),
    ("init.module", "names a module npm would load and run"),
    (
        "node-gyp",
        "chooses the program npm runs to build native modules",
    ),
    ("git", "chooses the program npm runs for git dependencies"),
    ("editor", "chooses a program npm would run"),
    ("viewer", "chooses a program npm would run"),
];

/// The only words `npm` may get without a subcommand.
const INFO_FLAGS: &[&str] = &["--version", "-v", "--help", "-h", "-l"];

/// Options `npx` accepts before its target (all flags).
const NPX_FLAGS: &[&str] = &[
    "-y",
    "--yes",
    "--no",
    "--no-install",
    "--quiet",
    "-q",
    "--ignore-existing",
    "--prefer-offline",
    "--offline",
    "--prefer-online",
];

/// Options `npm exec` accepts before its target. Unlike npx, `-p` here is npm's `--parseable`
/// (a flag); the package must be given as `--package`.
const NPM_EXEC_FLAGS: &[&str] = &[
    "-y",
    "--yes",
    "--no",
    "--no-yes",
    "-n",
    "--no-install",
    "--quiet",
    "-q",
    "--ignore-existing",
    "--prefer-offline",
    "--offline",
    "--prefer-online",
    "-p",
    "--parseable",
];

/// Index of the first `--` after `words[0]`, or `words.len()`.
fn options_end(words: &[String]) -> usize {
    words
        .iter()
        .skip(1)
        .position(|w| w == "--")
        .map_or(words.len(), |p| p + 1)
}

/// Checks an npm command line (`words[0]` is npm).
pub(crate) fn check_npm(
    eng: &mut Engine,
    words: &[String],
    cwd: &Path,
    depth: usize,
) -> Result<(), Deny> {
    let end = options_end(words);
    deny_dangerous_settings(eng, &words[1..end], cwd)?;
    let Some(sub) = find_subcommand(words, end)? else {
        return no_subcommand(words, end);
    };
    let name = words[sub].as_str();
    if !eng.rules.npm_subcommands.iter().any(|s| s == name) {
        return Err(Deny::denied(
            "npm-subcommand",
            Some(name),
            format!(
                "npm subcommand {} is not allowed by this profile (allowed: {})",
                quote(name),
                eng.rules.npm_subcommands.join(", ")
            ),
        ));
    }
    if is_exec(name) {
        check_npm_exec(eng, words, sub, end, cwd, depth)
    } else {
        Ok(())
    }
}

/// `exec` and its alias `x` (and npm's unique abbreviation `exe`) run a package's program.
fn is_exec(subcommand: &str) -> bool {
    matches!(subcommand, "exec" | "x" | "exe")
}

/// Rule `npm-option`: dangerous configuration keys, in any spelling npm accepts, and a
/// `--prefix` outside the repo.
fn deny_dangerous_settings(eng: &Engine, words: &[String], cwd: &Path) -> Result<(), Deny> {
    for (i, word) in words.iter().enumerate() {
        for setting in lenient(word) {
            if let Some((_, why)) = DANGEROUS_KEYS.iter().find(|(k, _)| *k == setting.key) {
                return Err(npm_option(word, &format!("(--{}) {why}", setting.key)));
            }
            if setting.key == "prefix" {
                let dir = match (&setting.inline, setting.takes_next) {
                    (Some(v), _) => Some(v.as_str()),
                    (None, true) => words.get(i + 1).map(String::as_str),
                    (None, false) => None,
                };
                if let Some(dir) = dir {
                    check_prefix(eng, word, dir, cwd)?;
                }
            }
        }
    }
    Ok(())
}

/// `--prefix DIR` makes npm read `DIR/.npmrc` and run `DIR`'s scripts: only inside the repo.
fn check_prefix(eng: &Engine, word: &str, dir: &str, cwd: &Path) -> Result<(), Deny> {
    let resolved = resolve_lenient(cwd, Path::new(dir));
    if eng.locator.in_repo(&resolved) {
        return Ok(());
    }
    Err(npm_option(
        word,
        &format!(
            "sets the npm prefix to {} ({}), outside the repository; npm would read its \
             configuration and scripts from there",
            quote(dir),
            quote_path(&resolved)
        ),
    ))
}

fn npm_option(word: &str, why: &str) -> Deny {
    Deny::denied(
        "npm-option",
        Some(word),
        format!("npm option {} {why}", quote(word)),
    )
}

/// The index of the subcommand: the first word before `end` that npm does not read as an
/// option or an option's value. Only exact spellings are accepted before it, so the gate and
/// npm always agree on which word it is.
fn find_subcommand(words: &[String], end: usize) -> Result<Option<usize>, Deny> {
    let mut i = 1;
    while i < end {
        let word = &words[i];
        if !is_option(word) {
            return Ok(Some(i));
        }
        match strict(word) {
            None => {
                return Err(npm_option(
                    word,
                    "is unknown, abbreviated or combined; before the subcommand only options \
                     spelled exactly as npm defines them are accepted, so that it is certain \
                     which word is the subcommand",
                ))
            }
            Some((_, Arity::Flag)) => i += 1,
            Some((key, Arity::TakesNext)) => match words.get(i + 1) {
                Some(value) if i + 1 < end && !value.starts_with('-') => i += 2,
                _ => {
                    return Err(npm_option(
                        word,
                        &format!("needs a value; write --{key}=VALUE"),
                    ))
                }
            },
        }
    }
    Ok(None)
}

/// Rule `npm-subcommand` without a subcommand: only version/help output is allowed. npm takes
/// the first word after `--` as the subcommand, so `npm -- exec sh` is denied too.
fn no_subcommand(words: &[String], end: usize) -> Result<(), Deny> {
    if let Some(after) = words.get(end + 1) {
        return Err(Deny::denied(
            "npm-subcommand",
            Some(after),
            format!(
                "npm would take {} after \"--\" as its subcommand; write the subcommand before \
                 \"--\"",
                quote(after)
            ),
        ));
    }
    match words[1..end]
        .iter()
        .find(|w| !INFO_FLAGS.contains(&w.as_str()))
    {
        None => Ok(()),
        Some(word) => Err(Deny::denied(
            "npm-subcommand",
            Some(word),
            format!(
                "npm without a subcommand only allows --version or --help, not {}",
                quote(word)
            ),
        )),
    }
}

/// `npm exec` / `npm x`: npm's parser reads options anywhere before `--`, so `-c/--call` and
/// `--package` are looked for everywhere there; then the target is found and checked.
fn check_npm_exec(
    eng: &mut Engine,
    words: &[String],
    sub: usize,
    end: usize,
    cwd: &Path,
    depth: usize,
) -> Result<(), Deny> {
    let region = &words[1..end];
    for (i, word) in region.iter().enumerate() {
        for setting in lenient(word) {
            match setting.key.as_str() {
                "call" => return Err(npx_call(word)),
                "package" => {
                    let value = match (&setting.inline, setting.takes_next) {
                        (Some(v), _) => Some(v.as_str()),
                        (None, true) => region.get(i + 1).map(String::as_str),
                        (None, false) => None,
                    };
                    check_package(eng, word, value.unwrap_or(""))?;
                }
                _ => {}
            }
        }
    }
    let target = find_target(words, sub + 1, "npm exec", |word| {
        if NPM_EXEC_FLAGS.contains(&word) || word.starts_with("--package=") {
            Some(0)
        } else if word == "--package" {
            Some(1)
        } else {
            None
        }
    })?;
    let argv = npm_exec_argv(words, target, end)?;
    eng.check(&argv, Slot::Package, cwd, depth + 1)
}

/// The argv `npm exec` runs when its target is `words[target]`. npm's parser takes every
/// option before `--` for itself (and maybe a value word with it) and drops the `--`. Options
/// between the target and `--` are refused, so the argv is exactly the remaining words: the
/// gate then checks what really runs (`npm exec node --title -- -e x` would run
/// `node -e x`).
fn npm_exec_argv(words: &[String], target: usize, end: usize) -> Result<Vec<String>, Deny> {
    if target > end {
        return Ok(words[target..].to_vec());
    }
    if let Some(word) = words[target + 1..end].iter().find(|w| is_option(w)) {
        return Err(Deny::denied(
            "npx-option",
            Some(word),
            format!(
                "npm exec would read {} as its own option instead of passing it to the \
                 command; put the command's options after \"--\"",
                quote(word)
            ),
        ));
    }
    let after = words.get(end + 1..).unwrap_or(&[]);
    Ok(words[target..end].iter().chain(after).cloned().collect())
}

/// Checks an npx command line (`words[0]` is npx). npx reads options only up to its target
/// and passes everything after the target to it.
pub(crate) fn check_npx(
    eng: &mut Engine,
    words: &[String],
    cwd: &Path,
    depth: usize,
) -> Result<(), Deny> {
    let mut i = 1;
    while let Some(word) = words.get(i) {
        if word == "--" || !is_option(word) {
            break;
        }
        if NPX_FLAGS.contains(&word.as_str()) {
            i += 1;
            continue;
        }
        let (key, inline) = match word.trim_start_matches('-').split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word.trim_start_matches('-'), None),
        };
        if matches!(key, "c" | "call") || lenient(word).iter().any(|s| s.key == "call") {
            return Err(npx_call(word));
        }
        if matches!(key, "p" | "package") {
            let value = inline.or_else(|| words.get(i + 1).map(String::as_str));
            check_package(eng, word, value.unwrap_or(""))?;
            i += if inline.is_some() { 1 } else { 2 };
            continue;
        }
        return Err(npx_option(word, "npx"));
    }
    let target = find_target(words, i, "npx", |_| None)?;
    eng.check(&words[target..], Slot::Package, cwd, depth + 1)
}

/// Finds the target of npx/npm exec starting at `start`: skips options that `accept` knows
/// (returning how many value words follow them), stops at `--` (the next word is the target)
/// or at the first non-option word.
fn find_target(
    words: &[String],
    start: usize,
    who: &str,
    accept: impl Fn(&str) -> Option<usize>,
) -> Result<usize, Deny> {
    let mut i = start;
    loop {
        match words.get(i) {
            None => break,
            Some(word) if word == "--" => {
                i += 1;
                break;
            }
            Some(word) if !is_option(word) => break,
            Some(word) => match accept(word) {
                Some(values) => i += 1 + values,
                None => return Err(npx_option(word, who)),
            },
        }
    }
    if i < words.len() {
        Ok(i)
    } else {
        Err(Deny::denied(
            "wrapped-missing",
            None,
            format!("{who} without a command would start an interactive shell"),
        ))
    }
}

fn npx_call(word: &str) -> Deny {
    Deny::denied(
        "npx-call",
        Some(word),
        format!(
            "{} (--call) runs a command line through a shell; name the program directly instead",
            quote(word)
        ),
    )
}

fn npx_option(word: &str, who: &str) -> Deny {
    Deny::denied(
        "npx-option",
        Some(word),
        format!(
            "{who} option {} is not allowed (deny by default)",
            quote(word)
        ),
    )
}

/// Splits a package spec into name and version: `eslint@8` -> (`eslint`, `8`),
/// `@scope/pkg@1` -> (`@scope/pkg`, `1`).
pub(crate) fn split_spec(spec: &str) -> (&str, Option<&str>) {
    let search_from = if spec.starts_with('@') {
        spec.find('/').unwrap_or(spec.len())
    } else {
        0
    };
    match spec[search_from..].find('@') {
        Some(at) if search_from + at > 0 => {
            let at = search_from + at;
            (&spec[..at], Some(&spec[at + 1..]))
        }
        _ => (spec, None),
    }
}

/// A registry package name (optionally scoped): not a path, URL, git spec or alias.
fn is_registry_name(name: &str) -> bool {
    let valid = |part: &str| {
        !part.is_empty()
            && !part.starts_with('.')
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~'))
    };
    match name.strip_prefix('@') {
        Some(scoped) => matches!(scoped.split_once('/'), Some((s, n)) if valid(s) && valid(n)),
        None => valid(name),
    }
}

/// A version, range or tag: nothing that points outside the registry (`file:`, `git+`,
/// `npm:` aliases, URLs, paths).
fn is_registry_version(version: &str) -> bool {
    version.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                '.' | '-' | '_' | '^' | '~' | '*' | '+' | '<' | '>' | '=' | '|' | ' '
            )
    })
}

/// The name of a registry spec if it is one (`eslint@8` -> `eslint`), else `None`.
pub(crate) fn registry_name(spec: &str) -> Option<&str> {
    let (name, version) = split_spec(spec);
    let version_ok = match version {
        Some(v) => is_registry_version(v),
        None => true,
    };
    (is_registry_name(name) && version_ok).then_some(name)
}

/// Rule `wrapped-not-allowed` for `--package X` / `-p X`: X must be a registry spec whose name
/// is on `rules.wrapped`.
fn check_package(eng: &Engine, word: &str, value: &str) -> Result<(), Deny> {
    match registry_name(value) {
        Some(name) if eng.rules.wrapped.iter().any(|w| w == name) => Ok(()),
        Some(name) => Err(Deny::denied(
            "wrapped-not-allowed",
            Some(value),
            format!(
                "package {} (from {}) is not on this profile's list of wrapped programs",
                quote(name),
                quote(word)
            ),
        )),
        None => Err(Deny::denied(
            "wrapped-not-allowed",
            Some(value),
            format!(
                "package spec {} (from {}) is not a registry package name (paths, URLs, git \
                 specs and aliases are not allowed)",
                quote(value),
                quote(word)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_specs() {
        assert_eq!(split_spec("eslint"), ("eslint", None));
        assert_eq!(split_spec("eslint@8"), ("eslint", Some("8")));
        assert_eq!(split_spec("@scope/pkg@1.2"), ("@scope/pkg", Some("1.2")));
        assert_eq!(split_spec("@scope/pkg"), ("@scope/pkg", None));
        assert_eq!(registry_name("eslint@^8.0.0"), Some("eslint"));
        assert_eq!(registry_name("eslint@latest"), Some("eslint"));
        assert_eq!(registry_name("eslint@file:../x"), None);
        assert_eq!(registry_name("eslint@npm:evil"), None);
        assert_eq!(registry_name("eslint@github:evil/x"), None);
        assert_eq!(registry_name("github:evil/pkg"), None);
        assert_eq!(registry_name("./x.js"), None);
        assert_eq!(registry_name("@scope/pkg"), Some("@scope/pkg"));
        assert_eq!(registry_name("a/b"), None);
        assert_eq!(registry_name("@"), None);
        assert_eq!(registry_name(""), None);
    }
}
