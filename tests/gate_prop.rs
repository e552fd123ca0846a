//! Property tests of the policy gate and the word splitter.
//!
//! (a) the gate never panics, whatever the bytes; (b) it never allows a program that is not
//! on the allow-list (byte-equal name, or an exact `rules.paths` entry), with inputs biased
//! towards near misses; (c) single-quoting words and splitting gives the words back.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use sandbox_run::policy::split::split_command;
use sandbox_run::policy::{gate, Context, Input, Outcome, Rules, Verdict};

const CASES: u32 = 2000;

struct Fixture {
    sys: PathBuf,
    repo: PathBuf,
    trusted: PathBuf,
    path: OsString,
}

fn write_exec(path: &Path) {
    fs::write(path, "#!/bin/sh\nexit 0\n").expect("write fixture program");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// System bin dir with the usual suspects, a repo with planted programs (`node`, `bin/node`,
/// `node_modules/.bin/node`) and a trusted absolute program listed in `rules.paths`.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        // Leftovers of earlier runs of this test binary.
        for entry in fs::read_dir(base).into_iter().flatten().flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("gate-prop-")
            {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        let root = base.join(format!("gate-prop-{}", std::process::id()));
        let sys = root.join("sys");
        let repo = root.join("repo");
        let trusted = root.join("opt/tool");
        for dir in [
            &sys,
            &repo.join("bin"),
            &repo.join("node_modules/.bin"),
            &root.join("opt"),
        ] {
            fs::create_dir_all(dir).expect("mkdir");
        }
        for name in [
            "node", "npm", "npx", "env", "bash", "sh", "eslint", "nodejs", "nod",
        ] {
            write_exec(&sys.join(name));
        }
        write_exec(&repo.join("node"));
        write_exec(&repo.join("bin/node"));
        write_exec(&repo.join("node_modules/.bin/node"));
        write_exec(&trusted);
        let sys = fs::canonicalize(&sys).expect("canonical sys");
        let repo = fs::canonicalize(&repo).expect("canonical repo");
        let trusted = fs::canonicalize(&trusted).expect("canonical trusted");
        // The repo's own bin dirs come first: shadowing must never be allowed.
        let path = OsString::from(format!(
            "{}:{}:{}:",
            repo.join("node_modules/.bin").display(),
            repo.join("bin").display(),
            sys.display()
        ));
        Fixture {
            sys,
            repo,
            trusted,
            path,
        }
    })
}

fn rules(fx: &Fixture) -> Rules {
    let strs = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Rules {
        programs: strs(&["node", "npm", "npx"]),
        wrapped: strs(&["node", "eslint", "jest"]),
        paths: vec![fx.trusted.clone()],
        repo_scripts: false,
        npm_subcommands: strs(&["test", "run", "exec", "x"]),
        node_options: Vec::new(),
        free_text: Vec::new(),
    }
}

fn run(input: &Input) -> Verdict {
    let fx = fixture();
    // cwd outside the repo, so the trailing empty PATH entry is not the repo.
    let ctx = Context {
        repo: &fx.repo,
        cwd: &fx.sys,
        path: &fx.path,
    };
    gate(input, &rules(fx), &ctx)
}

/// Property (b): an allowed verdict names an allow-listed program.
fn assert_only_listed(verdict: &Verdict) -> Result<(), TestCaseError> {
    let fx = fixture();
    if verdict.outcome != Outcome::Allowed {
        return Ok(());
    }
    let first = verdict.argv.first().cloned().unwrap_or_default();
    let listed = rules(fx).programs.contains(&first);
    let trusted = fs::canonicalize(fx.sys.join(&first)).ok().as_ref() == Some(&fx.trusted);
    prop_assert!(
        listed || trusted,
        "allowed unlisted program {:?}: {}",
        first,
        verdict.reason
    );
    let program = verdict.program.clone().unwrap_or_default();
    prop_assert!(
        !program.starts_with(&fx.repo),
        "allowed a program in the repo: {}",
        program.display()
    );
    Ok(())
}

fn assert_sane(verdict: &Verdict) -> Result<(), TestCaseError> {
    prop_assert!(
        !verdict.reason.chars().any(char::is_control),
        "raw control: {:?}",
        verdict.reason
    );
    prop_assert!(!verdict.rule.is_empty());
    let code = verdict.exit_code();
    prop_assert!(code == 0 || code == 126 || code == 127);
    prop_assert_eq!(code == 0, verdict.allowed());
    Ok(())
}

/// Words that are near misses of allowed programs, dangerous options and shell syntax.
fn near_miss_word() -> impl Strategy<Value = String> {
    let fixed = prop::sample::select(vec![
        "node",
        "npm",
        "npx",
        "n\u{43e}de",
        "\u{ff4e}ode",
        "node\u{200b}",
        "NODE",
        "Node",
        "nodejs",
        "nod",
        "nodee",
        "node ",
        " node",
        "./node",
        "bin/node",
        "/usr/bin/node",
        "node_modules/.bin/node",
        "../sys/node",
        "npm-cli.js",
        "npx-cli.js",
        "bash",
        "sh",
        "env",
        "eslint",
        "jest",
        "-e",
        "-p",
        "-pe",
        "-r",
        "--eval=1",
        "--require=x",
        "--import=x",
        "-",
        "--",
        "t.js",
        "test",
        "exec",
        "x",
        "-c",
        "--call=sh",
        "NODE_OPTIONS=x",
        "&&",
        "|",
        ";",
        ">",
        "$(id)",
        "`id`",
        "$HOME",
        "'",
        "\"",
        "\\",
        "a|b",
        "--node-options=x",
        "-y",
        "--package=node",
        "sh -c id",
        "\n",
        "\t",
        "\u{85}",
        "",
        "=",
        "node=1",
    ]);
    let mutated = (
        fixed.clone(),
        "[a-z./ \\-\u{430}-\u{44f}]{0,2}",
        "[a-z./ \\-\u{430}-\u{44f}]{0,2}",
    )
        .prop_map(|(w, pre, post)| format!("{pre}{w}{post}"));
    let absolute = Just(()).prop_map(|()| fixture().trusted.display().to_string());
    let sys_path = prop::sample::select(vec!["node", "npm", "npx", "bash"])
        .prop_map(|name| fixture().sys.join(name).display().to_string());
    prop_oneof![
        4 => fixed.prop_map(str::to_owned),
        3 => mutated,
        1 => absolute,
        1 => sys_path,
        1 => ".{0,6}",
    ]
}

/// Benign arguments, so that allowed verdicts are frequent enough to test property (b).
fn benign_word() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "t.js",
        "test",
        "run",
        "lint",
        "eslint",
        "jest",
        "--test",
        "--",
        "exec",
        "x",
        "-y",
        ".",
        "src/",
        "--coverage",
    ])
    .prop_map(str::to_owned)
}

/// argv[0] is an allowed name half of the time, a near miss otherwise.
fn near_miss_argv() -> impl Strategy<Value = Vec<String>> {
    let first = prop_oneof![
        2 => prop::sample::select(vec!["node", "npm", "npx"]).prop_map(str::to_owned),
        2 => near_miss_word(),
    ];
    let rest = prop::collection::vec(prop_oneof![2 => benign_word(), 1 => near_miss_word()], 0..5);
    (first, rest).prop_map(|(first, mut rest)| {
        rest.insert(0, first);
        rest
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    /// (a) Arbitrary bytes as a --command never panic.
    #[test]
    fn never_panics_on_command_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let text = String::from_utf8_lossy(&bytes);
        let verdict = run(&Input::Command(&text));
        assert_sane(&verdict)?;
        assert_only_listed(&verdict)?;
    }

    /// (a) Arbitrary byte argv never panics.
    #[test]
    fn never_panics_on_argv_bytes(words in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..6)) {
        let argv: Vec<OsString> = words.into_iter().map(OsString::from_vec).collect();
        let verdict = run(&Input::Argv(&argv));
        assert_sane(&verdict)?;
        assert_only_listed(&verdict)?;
    }

    /// (b) Near misses in the argv form are never allowed unless listed.
    #[test]
    fn only_listed_programs_argv(words in near_miss_argv()) {
        let argv: Vec<OsString> = words.iter().map(OsString::from).collect();
        let verdict = run(&Input::Argv(&argv));
        assert_sane(&verdict)?;
        assert_only_listed(&verdict)?;
    }

    /// (b) Near misses in the command form (words joined by spaces) are never allowed unless
    /// listed.
    #[test]
    fn only_listed_programs_command(words in near_miss_argv()) {
        let text = words.join(" ");
        let verdict = run(&Input::Command(&text));
        assert_sane(&verdict)?;
        assert_only_listed(&verdict)?;
    }

    /// (c) Single-quoting words (`'` as `'\''`) and splitting gives the same words.
    #[test]
    fn split_round_trip(words in prop::collection::vec(any::<String>(), 0..8)) {
        let quoted: Vec<String> = words
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
            .collect();
        let line = quoted.join(" ");
        let split = split_command(&line).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let texts: Vec<String> = split.into_iter().map(|w| w.into_string()).collect();
        prop_assert_eq!(texts, words);
    }
}
