//! The gate kind: a policy verdict that refused the command, as a [`Refusal`] with the setting
//! that would allow it (a program, a wrapped program, an npm subcommand, a node option, a
//! program path), or `never: WHY` where no profile setting may allow it (no shell ever runs,
//! the repo's own programs under a profile that does not run them...).

use super::{Kind, Patch, Refusal};
use crate::policy::{Outcome, Verdict};

/// The refusal a denying verdict means; `None` when the verdict allowed the command.
pub fn refusal(v: &Verdict) -> Option<Refusal> {
    if v.outcome == Outcome::Allowed {
        return None;
    }
    let word = v.word.clone().unwrap_or_default();
    let shown = crate::visible::text(&word);
    let what = if word.is_empty() {
        crate::visible::text(&v.argv.join(" "))
    } else {
        shown.clone()
    };
    let (fix, patch) = fix(v, &word, &shown);
    Some(Refusal {
        kind: Kind::Gate,
        sub: v.rule.clone(),
        what,
        rule: rule_words(v, &word),
        fix,
        patch,
        count: 1,
    })
}

/// The gate's sentence without its `denied by rule R: ` prefix (the line names the rule) and
/// without the hint `run` adds to a program not on the list (the fix says it).
fn rule_words(v: &Verdict, word: &str) -> String {
    let mut s = v.reason.as_str();
    for prefix in [
        format!("denied by rule {}: ", v.rule),
        format!("not found (rule {}): ", v.rule),
    ] {
        s = s.strip_prefix(prefix.as_str()).unwrap_or(s);
    }
    let hint = format!("; to allow it for this command only: --allow-program {word}");
    if let Some(head) = s.strip_suffix(hint.as_str()) {
        // `; profile ci allows it (--profile ci)` or `; no shipped profile allows it`
        if let Some(i) = head.rfind("; ") {
            s = &head[..i];
        }
    }
    s.to_string()
}

/// What would allow it, as a user would write it, and the patch `learn` applies.
fn fix(v: &Verdict, word: &str, shown: &str) -> (String, Option<Patch>) {
    let add = |key: &str| format!("[gate] {key} = {{ add = [\"{shown}\"] }}");
    // Only words a profile can name: printable, no quote or backslash to escape in TOML.
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && c != '"' && c != '\\');
    let never = |why: &str| (format!("never: {why}"), None);
    match v.rule.as_str() {
        "not-allowed" if plain && !word.contains('/') => (
            format!("--allow-program {shown} (or {})", add("programs")),
            Some(Patch::Program(word.to_string())),
        ),
        "not-allowed" if plain && word.starts_with('/') => (
            add("paths"),
            Some(Patch::ProgramPath(word.into())),
        ),
        "not-allowed" if plain => never(
            "a program given by a relative path is allowed only as the repo's own script ([gate] repo_scripts) or by its absolute path in [gate] paths",
        ),
        // `wrapped-not-allowed` also refuses what a wrapper cannot run at all (node, a shell)
        // and package specs that are paths or URLs: only a plain name not on the list is a
        // setting.
        "wrapped-not-allowed" if plain && v.reason.contains("is not on this profile's list of wrapped programs") => {
            let name = wrapped_name(word);
            (
                format!("[gate] wrapped = {{ add = [\"{}\"] }}", crate::visible::text(&name)),
                Some(Patch::Wrapped(name)),
            )
        }
        "npm-subcommand" if plain && v.reason.contains("is not allowed by this profile") => (
            add("npm_subcommands"),
            Some(Patch::NpmSubcommand(word.to_string())),
        ),
        "node-eval" | "node-option" if plain && word.starts_with('-') && word != "-" => {
            let name = match word.split_once('=') {
                Some((n, _)) if word.starts_with("--") => n,
                _ => word,
            };
            (
                format!(
                    "[gate] node_options = {{ add = [\"{}\"] }}",
                    crate::visible::text(name)
                ),
                Some(Patch::NodeOption(name.to_string())),
            )
        }
        "program-not-found" => never(
            "nothing by that name is an executable file on the sandbox's PATH; install it, or name its directory in [env] path",
        ),
        "program-in-repo" => never(
            "this profile does not run the repository's own programs (the repo chose them); a profile with [gate] repo_scripts = true, such as ci, does",
        ),
        "program-world-writable" => never(
            "any local user could swap a program in a world-writable place; install it where only root or you can write",
        ),
        "env-assignment" => never(
            "the environment is the profile's choice, not the command's; set it with --env KEY=VALUE or [env] set",
        ),
        "shell-operator" | "command-substitution" | "shell-expansion" | "shell-syntax" => never(
            "no shell ever runs the command; run each part as its own command, or put the pipeline in a script the profile runs",
        ),
        "control-character" | "invalid-utf8" | "too-long" | "empty-command"
        | "unterminated-quote" => never("the gate refuses such a command under every profile"),
        _ => never("no profile setting allows it"),
    }
}

/// The package name of a wrapped word (`@scope/pkg@1.2` -> `@scope/pkg`, `pkg@latest` ->
/// `pkg`), as `[gate] wrapped` lists it.
fn wrapped_name(word: &str) -> String {
    let (scope, rest) = match word.strip_prefix('@') {
        Some(r) => match r.split_once('/') {
            Some((s, rest)) => (format!("@{s}/"), rest),
            None => (String::new(), word),
        },
        None => (String::new(), word),
    };
    let base = rest.split('@').next().unwrap_or(rest);
    format!("{scope}{base}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::path::Path;

    fn gate(argv: &[&str], rules: &crate::policy::Rules) -> Verdict {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let ctx = crate::policy::Context {
            repo: Path::new("/nonexistent-repo"),
            cwd: Path::new("/nonexistent-repo"),
            path: std::ffi::OsStr::new("/usr/bin:/bin"),
        };
        crate::policy::gate(&crate::policy::Input::Argv(&argv), rules, &ctx)
    }

    fn rules() -> crate::policy::Rules {
        crate::policy::Rules {
            programs: vec!["npm".into(), "node".into(), "npx".into()],
            npm_subcommands: vec!["test".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_program_not_on_the_list_names_the_flag_and_the_profile_line() {
        let v = gate(&["cat", "x"], &rules());
        let r = refusal(&v).unwrap();
        assert_eq!(
            (r.kind, r.sub.as_str(), r.what.as_str()),
            (Kind::Gate, "not-allowed", "cat")
        );
        assert_eq!(
            r.fix,
            "--allow-program cat (or [gate] programs = { add = [\"cat\"] })"
        );
        assert_eq!(r.patch, Some(Patch::Program("cat".into())));
        assert_eq!(r.rule, "\"cat\" is not on this profile's program list");
        // as `run` words it, with the profiles that allow it: the same rule
        let mut hinted = v.clone();
        hinted.reason = format!(
            "{}; profiles ci, github-actions allow it; to allow it for this command only: --allow-program cat",
            v.reason
        );
        assert_eq!(refusal(&hinted).unwrap().rule, r.rule);
    }

    #[test]
    fn settings_for_their_own_rules_and_never_for_the_rest() {
        let v = gate(&["npm", "publish"], &rules());
        assert_eq!(
            refusal(&v).unwrap().patch,
            Some(Patch::NpmSubcommand("publish".into()))
        );
        let v = gate(&["node", "--require=x", "t.js"], &rules());
        assert_eq!(
            refusal(&v).unwrap().patch,
            Some(Patch::NodeOption("--require".into()))
        );
        for argv in [
            &["npm", "test", "|", "cat"][..],
            &["X=1", "npm", "test"],
            &["./script.sh"],
            &["npx", "-c", "ls"],
        ] {
            let r = refusal(&gate(argv, &rules())).unwrap();
            assert!(
                r.patch.is_none() && r.fix.starts_with("never: "),
                "{argv:?}: {r:?}"
            );
        }
    }

    #[test]
    fn wrapped_names_drop_the_version() {
        assert_eq!(wrapped_name("jest@29"), "jest");
        assert_eq!(wrapped_name("@scope/pkg@1.2"), "@scope/pkg");
        assert_eq!(wrapped_name("eslint"), "eslint");
    }
}
