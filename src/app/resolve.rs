//! Resolving a request once, for every command: the profile (with `--without`), the
//! workspace, the gate's verdict, the command's words, `--with-changes`.

use super::Fail;
use crate::cli::Target;
use crate::policy::{self, Input};
use crate::profile::{Loader, Profile};
use crate::workspace::Workspace;
use std::ffi::OsString;

pub(super) fn load_profile(name: &str) -> Result<Profile, Fail> {
    let loader = Loader::from_env();
    let profile = loader.load(name).map_err(|e| Fail {
        hint: did_you_mean(&loader, name, "--profile "),
        ..Fail::usage(e.0)
    })?;
    if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
        let env = |k: &str| std::env::var(k).ok();
        crate::profile::refuse_writable_places(&loader, &profile, &step_writable(), env)
            .map_err(|e| Fail::usage(e.0))?;
    }
    Ok(profile)
}

/// A bare NAME that is no profile here: the profiles whose names are closest to it (an
/// edit or two away, or a prefix), as the second line of the error.
/// `flag`: what goes before the name in the suggestion (`--profile `, or nothing).
pub(super) fn did_you_mean(loader: &Loader, name: &str, flag: &str) -> Option<String> {
    let valid = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    if !valid(name) || name.ends_with(".toml") {
        return None;
    }
    let names: Vec<String> = loader.list().into_iter().map(|(n, _)| n).collect();
    if names.iter().any(|n| n == name) {
        return None; // found, but broken: the error says why
    }
    let limit = if name.len() <= 4 { 1 } else { 2 };
    let mut close: Vec<(usize, &String)> = names
        .iter()
        .map(|n| (edit_distance(name, n), n))
        .filter(|(d, n)| *d <= limit || (name.len() >= 3 && n.starts_with(name)))
        .collect();
    close.sort();
    close.dedup_by(|a, b| a.1 == b.1);
    let best: Vec<String> = close
        .iter()
        .take(3)
        .map(|(_, n)| format!("{flag}{n}"))
        .collect();
    (!best.is_empty()).then(|| format!("did you mean {}?", best.join(" or ")))
}

/// Levenshtein distance over bytes (profile names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// `--allow-program NAME`: NAME joins the profile's programs for this one command, so the
/// gate finds and checks it exactly as one of the profile's own (and the toolchain binds
/// see it too). Bare names only, as in a profile's `gate.programs`.
pub(super) fn allow_programs(profile: &mut Profile, names: &[String]) -> Result<(), Fail> {
    for n in names {
        let bare = !n.is_empty()
            && n != "."
            && n != ".."
            && !n.starts_with('-')
            && n.chars()
                .all(|c| c != '/' && !c.is_control() && !c.is_whitespace());
        if !bare {
            return Err(Fail::usage(format!(
                "--allow-program {}: a bare program name is expected (found through PATH), not a path or an option",
                crate::visible::text(n)
            )));
        }
        if !profile.gate.programs.contains(n) {
            profile.gate.programs.push(n.clone());
        }
    }
    Ok(())
}

/// The second half of a "not on this profile's program list" refusal: the shipped profiles
/// that allow the program, and the flag that allows it for one command.
fn refusal_hint(v: &policy::Verdict) -> Option<String> {
    if v.rule != "not-allowed" {
        return None;
    }
    let word = v.word.as_deref()?;
    let plain = word
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b));
    if word.is_empty() || !plain {
        return None;
    }
    let builtin = Loader { dirs: vec![] };
    let allow: Vec<String> = crate::profile::BUILTIN
        .iter()
        .filter_map(|(name, _)| builtin.load(name).ok())
        .filter(|p| p.gate.programs.iter().any(|p| p == word))
        .map(|p| p.name)
        .collect();
    let by = match allow.as_slice() {
        [] => "no shipped profile allows it".to_string(),
        [one] => format!("profile {one} allows it (--profile {one})"),
        many => format!("profiles {} allow it", many.join(", ")),
    };
    Some(format!(
        "{by}; to allow it for this command only: --allow-program {word}"
    ))
}

/// Where a sandboxed Actions step can write, as far as known before the profile is read:
/// `$RUNNER_TEMP`, the workspace (`$GITHUB_WORKSPACE`, and the git top level above the
/// current directory), and sandbox-run's state directory (kept homes, run directories).
fn step_writable() -> crate::profile::Places {
    let var = |k: &str| {
        std::env::var(k)
            .ok()
            .filter(|v| v.starts_with('/') && v != "/")
    };
    let mut out = Vec::new();
    if let Some(t) = var("RUNNER_TEMP") {
        out.push((t.into(), "$RUNNER_TEMP".to_string()));
    }
    if let Some(w) = var("GITHUB_WORKSPACE") {
        out.push((w.into(), "$GITHUB_WORKSPACE".to_string()));
    }
    if let Ok(cwd) = std::env::current_dir() {
        if let Ok(ws) = crate::workspace::Workspace::find(None, &cwd) {
            if ws.chosen == crate::workspace::Chosen::Git && ws.repo != std::path::Path::new("/") {
                out.push((ws.repo, "the repo".to_string()));
            }
        }
    }
    if let Some(dir) = state_dir("profile") {
        out.push((
            dir,
            "sandbox-run's state directory (kept homes, run directories)".into(),
        ));
    }
    out
}

/// sandbox-run's state directory of the caller (kept homes, run directories), which sandboxed
/// commands can write; `what` names the step asking, for the error text of `state::location`.
pub(super) fn state_dir(what: &str) -> Option<std::path::PathBuf> {
    let me = nix::unistd::geteuid().as_raw();
    let (base, below) = crate::state::location(
        me,
        me,
        |k| std::env::var(k).ok(),
        crate::state::passwd_home(me),
        what,
    )
    .ok()?;
    Some(below.iter().fold(base, |d, c| d.join(c)))
}

/// The profile, with the layers the caller waived by `--without` made best-effort.
pub(super) fn load_profile_without(
    name: &str,
    without: &[crate::cli::WithoutArg],
) -> Result<Profile, Fail> {
    use crate::cli::WithoutArg as W;
    let mut p = load_profile(name)?;
    for w in without {
        p.accept_without(match w {
            W::Cgroup => "cgroup",
            W::Landlock => "landlock",
            W::Seccomp => "seccomp",
            W::Namespaces => "namespaces",
        });
    }
    Ok(p)
}

/// The PATH the sandbox will use: the profile's, else the caller's.
pub fn sandbox_path(p: &Profile) -> OsString {
    crate::plan::sandbox_path_from(p, std::env::var("PATH").ok().as_deref())
}

/// `--repo DIR`, else the git top level above the current directory, else that directory.
pub(super) fn workspace(repo: Option<&std::path::Path>) -> Result<Workspace, Fail> {
    let cwd =
        std::env::current_dir().map_err(|e| Fail::usage(format!("current directory: {e}")))?;
    let ws = Workspace::find(repo, &cwd).map_err(Fail::usage)?;
    if let Some(n) = ws.notice() {
        tracing::warn!("{n}");
    }
    Ok(ws)
}

pub(super) fn gate(
    target: &Target,
    profile: &Profile,
) -> Result<(policy::Verdict, Workspace), Fail> {
    let ws = workspace(target.repo.as_deref())?;
    Ok((gate_in(target, profile, &ws), ws))
}

pub(super) fn gate_in(target: &Target, profile: &Profile, ws: &Workspace) -> policy::Verdict {
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
    let mut v = policy::gate(&input, &profile.gate, &ctx);
    if let Some(hint) = refusal_hint(&v) {
        v.reason = format!("{}; {hint}", v.reason);
    }
    v
}

/// `allowed: ...`, `denied by rule R: ...` or `not found (rule R): ...`, on one line, with the
/// resolved program when there is one.
pub fn verdict_line(v: &policy::Verdict) -> String {
    let line = match &v.program {
        _ if v.allowed() => return v.reason.clone(),
        Some(p) => format!("{} [program {}]", v.reason, p.display()),
        None => v.reason.clone(),
    };
    // The setting that allows it, where the gate's own words do not say one already.
    match crate::denials::gate::refusal(v) {
        Some(r) if r.patch.is_some() && !line.contains("to allow") => {
            format!("{line}; to allow: {}", r.fix)
        }
        _ => line,
    }
}

/// The command as the user wrote it: the `--command` string, or the argv joined by spaces.
pub(super) fn command_text(t: &Target) -> String {
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

/// `--with-changes ID`: the kept changeset's trees, each with the host directory it goes over.
/// It must have been kept from this repo.
pub(super) fn with_changes(
    id: Option<&str>,
    ws: &Workspace,
) -> Result<Vec<(std::path::PathBuf, std::path::PathBuf)>, Fail> {
    let Some(id) = id else {
        return Ok(Vec::new());
    };
    let stored = crate::changes::store::open(id)
        .map_err(|e| Fail::usage(format!("--with-changes {id}: {e}")))?;
    let roots = stored.manifest.changeset.roots.clone();
    if roots.first() != Some(&ws.repo) {
        return Err(Fail::usage(format!(
            "--with-changes {id}: the changeset was kept from the repo {}, not {}",
            roots
                .first()
                .map(|r| r.display().to_string())
                .unwrap_or_default(),
            ws.repo.display()
        )));
    }
    Ok(roots.into_iter().zip(stored.trees).collect())
}
