//! A command line that teaches: each mistake a newcomer makes gets the hint that fixes it, and
//! each hint is asserted word for word. `--help` lists the options of `run` (the default
//! command), a bare `sandbox-run` prints the usage, a missing `--` is named, a mistyped
//! profile gets "did you mean", a refused program names the profiles that allow it and
//! `--allow-program`, which lets it run without loosening the gate's other rules; `-v`
//! starts with the layers in force and `-q` is quiet.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// `sandbox-run ARGS` with no user profiles, in `dir`.
fn sbx(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-test")
        .current_dir(dir);
    c
}

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn go(args: &[&str]) -> Run {
    run_command(sbx(here(), args), LIMIT)
}

#[test]
fn help_lists_the_options_of_run_and_typos_point_to_the_right_help() {
    let r = go(&["--help"]);
    r.assert_code(0);
    let run_opts = r
        .stdout
        .split_once("\nrun is the default command: sandbox-run [run] --profile NAME|PATH [OPTIONS] -- PROGRAM [ARGS]...\nOptions of run:\n")
        .unwrap_or_else(|| panic!("no run options in --help:\n{r}"))
        .1;
    for flag in [
        "--profile <NAME|PATH>",
        "--timeout <DURATION>",
        "--allow-program <NAME>",
        "--without <LAYER>",
        "--report <FILE|->",
    ] {
        assert!(run_opts.contains(flag), "{flag} missing from --help:\n{r}");
    }
    // A typo in a run flag points to the help of run, which lists the flag.
    let r = go(&["--profil", "validate", "--", "node", "x.js"]);
    r.assert_code(125);
    assert_eq!(
        r.stderr,
        "sandbox-run: unexpected argument '--profil' found; tip: a similar argument exists: '--profile' (see 'sandbox-run run --help')\n"
    );
    let h = go(&["run", "--help"]);
    h.assert_code(0);
    assert!(h.stdout.contains("--profile <NAME|PATH>"), "{h}");
    // ... and one of check to check's help.
    let r = go(&["check", "--profil", "validate", "--", "node", "x.js"]);
    assert!(
        r.stderr.ends_with(" (see 'sandbox-run check --help')\n"),
        "{r}"
    );
}

#[test]
fn bare_sandbox_run_prints_the_usage_and_exits_125() {
    for args in [&[][..], &["-v"][..]] {
        let r = go(args);
        r.assert_code(125);
        assert!(r.stdout.is_empty(), "{r}");
        assert!(
            r.stderr
                .contains("Usage: sandbox-run [OPTIONS] <COMMAND>\n\nCommands:\n  run "),
            "{r}"
        );
        assert!(
            r.stderr.ends_with("\nsandbox-run: a command is required, e.g. sandbox-run --profile validate -- npm test (the options of run: 'sandbox-run run --help')\n"),
            "{r}"
        );
    }
}

#[test]
fn a_missing_double_dash_is_named_with_the_line_that_has_it() {
    let r = go(&["--profile", "validate", "npm", "test"]);
    r.assert_code(125);
    assert_eq!(
        r.stderr,
        "sandbox-run: unexpected argument 'npm' found; the command goes after '--': sandbox-run --profile validate -- npm test (see 'sandbox-run run --help')\n"
    );
    // Flags with values before it are skipped as clap skips them; `run` and `check` as written.
    let r = go(&[
        "-v",
        "run",
        "--profile",
        "validate",
        "--timeout",
        "5s",
        "--capture",
        "node",
        "t.js",
    ]);
    assert_eq!(
        r.stderr,
        "sandbox-run: unexpected argument 'node' found; the command goes after '--': sandbox-run -v run --profile validate --timeout 5s --capture -- node t.js (see 'sandbox-run run --help')\n"
    );
    let r = go(&["check", "--profile", "validate", "npm", "test"]);
    assert_eq!(
        r.stderr,
        "sandbox-run: unexpected argument 'npm' found; the command goes after '--': sandbox-run check --profile validate -- npm test (see 'sandbox-run check --help')\n"
    );
    // Not said where `--` is not what is missing.
    for args in [
        &["--profile", "validate", "--frob", "--", "npm"][..],
        &["--profile", "validate", "--command", "npm test", "x"][..],
        &["profiles", "show", "validate", "extra"][..],
    ] {
        let r = go(args);
        r.assert_code(125);
        assert!(!r.stderr.contains("goes after '--'"), "{args:?}: {r}");
    }
}

#[test]
fn a_mistyped_profile_name_gets_did_you_mean() {
    let r = go(&["check", "--profile", "valdate", "--", "npm", "test"]);
    r.assert_code(125);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{r}");
    assert!(
        lines[0].starts_with("sandbox-run: profile \"valdate\" not found"),
        "{r}"
    );
    assert_eq!(lines[1], "sandbox-run: did you mean --profile validate?");
    let r = go(&["--profile", "github-action", "--", "npm", "test"]);
    assert_eq!(
        r.stderr.lines().nth(1),
        Some("sandbox-run: did you mean --profile github-actions?"),
        "{r}"
    );
    let r = go(&["profiles", "show", "adaptr"]);
    r.assert_code(125);
    assert_eq!(
        r.stderr.lines().nth(1),
        Some("sandbox-run: did you mean adapter?"),
        "{r}"
    );
    // Nothing close: one line, no guess.
    let r = go(&["check", "--profile", "zzzzzz", "--", "npm", "test"]);
    r.assert_code(125);
    assert_eq!(r.stderr.lines().count(), 1, "{r}");
}

#[test]
fn a_refused_program_names_the_profiles_that_allow_it_and_allow_program() {
    let r = go(&["check", "--profile", "validate", "--", "git", "status"]);
    r.assert_code(126);
    assert_eq!(
        r.stdout,
        "denied by rule not-allowed: \"git\" is not on this profile's program list; profiles adapter, ci, github-actions allow it; to allow it for this command only: --allow-program git\n"
    );
    let r = go(&["check", "--profile", "validate", "--", "sleep", "1"]);
    assert_eq!(
        r.stdout,
        "denied by rule not-allowed: \"sleep\" is not on this profile's program list; no shipped profile allows it; to allow it for this command only: --allow-program sleep\n"
    );
    let r = go(&["check", "--json", "--profile", "ci", "--", "sleep", "1"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["rule"], "not-allowed");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .ends_with("; to allow it for this command only: --allow-program sleep"),
        "{v}"
    );
    // `run` says the same on stderr, and its report too.
    let f = Fixture::new("hint-refused");
    let repo = f.git_repo("repo");
    let report = f.path("r.json");
    let r = run_command(
        sbx(
            &repo,
            &[
                "--profile",
                "validate",
                "--report",
                report.to_str().unwrap(),
                "--",
                "sleep",
                "0",
            ],
        ),
        LIMIT,
    );
    r.assert_code(126);
    assert_eq!(
        r.stderr,
        "sandbox-run: denied by rule not-allowed: \"sleep\" is not on this profile's program list; no shipped profile allows it; to allow it for this command only: --allow-program sleep\n"
    );
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(
        rep["results"][0]["denied"]["reason"]
            .as_str()
            .unwrap()
            .ends_with("--allow-program sleep"),
        "{rep}"
    );
}

/// A program in `dir`, printing MARK.
fn program(dir: &Path, name: &str, mark: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\necho {mark}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn allow_program_runs_the_program_and_the_gate_still_holds() {
    let f = Fixture::new("hint-allow");
    let repo = f.git_repo("repo");
    let report = f.path("r.json");
    let rs = report.to_str().unwrap();
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());

    // Not a path or an option: one line, 125.
    for bad in ["./echo", "/bin/echo", "", "-x"] {
        let r = run_command(
            sbx(
                &repo,
                &[
                    "check",
                    "--profile",
                    "validate",
                    &format!("--allow-program={bad}"),
                    "--",
                    "echo",
                ],
            ),
            LIMIT,
        );
        r.assert_code(125);
        assert!(
            r.stderr.contains(
                "a bare program name is expected (found through PATH), not a path or an option"
            ),
            "{bad}: {r}"
        );
    }
    // The gate's other rules hold for an allowed program: inside the repo it is refused ...
    program(&repo.join("bin"), "sbx-in-repo", "sbx-in-repo-ran");
    let mut c = sbx(
        &repo,
        &[
            "check",
            "--profile",
            "validate",
            "--allow-program",
            "sbx-in-repo",
            "--",
            "sbx-in-repo",
        ],
    );
    c.env("PATH", format!("{}:{path}", repo.join("bin").display()));
    let r = run_command(c, LIMIT);
    r.assert_code(126);
    assert!(
        r.stdout.starts_with("denied by rule program-in-repo: "),
        "{r}"
    );
    // ... in a world-writable directory too ...
    let open = f.path("open");
    program(&open, "sbx-open", "sbx-open-ran");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut c = sbx(
        &repo,
        &[
            "check",
            "--profile",
            "validate",
            "--allow-program",
            "sbx-open",
            "--",
            "sbx-open",
        ],
    );
    c.env("PATH", format!("{}:{path}", open.display()));
    let r = run_command(c, LIMIT);
    r.assert_code(126);
    assert!(
        r.stdout
            .starts_with("denied by rule program-world-writable: "),
        "{r}"
    );
    // ... also through a link from a safe place that leads into the repo ...
    let links = f.path("links");
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(repo.join("bin/sbx-in-repo"), links.join("sbx-link")).unwrap();
    let mut c = sbx(
        &repo,
        &[
            "check",
            "--profile",
            "validate",
            "--allow-program",
            "sbx-link",
            "--",
            "sbx-link",
        ],
    );
    c.env("PATH", format!("{}:{path}", links.display()));
    let r = run_command(c, LIMIT);
    r.assert_code(126);
    assert!(
        r.stdout.starts_with("denied by rule program-in-repo: "),
        "{r}"
    );
    // ... it joins the programs, not the wrapped list (env may run it, not run it for env) ...
    let r = run_command(
        sbx(
            &repo,
            &[
                "check",
                "--profile",
                "validate",
                "--allow-program",
                "env",
                "--",
                "env",
                "sleep",
                "1",
            ],
        ),
        LIMIT,
    );
    r.assert_code(126);
    assert!(
        r.stdout.starts_with("denied by rule wrapped-not-allowed: "),
        "{r}"
    );
    // ... and so do the argument rules of what it wraps (env's target is checked as node).
    let r = run_command(
        sbx(
            &repo,
            &[
                "check",
                "--profile",
                "validate",
                "--allow-program",
                "env",
                "--",
                "env",
                "node",
                "-e",
                "1",
            ],
        ),
        LIMIT,
    );
    r.assert_code(126);
    assert!(r.stdout.starts_with("denied by rule node-eval: "), "{r}");
    let r = run_command(
        sbx(
            &repo,
            &[
                "check",
                "--profile",
                "validate",
                "--allow-program",
                "env",
                "--",
                "env",
                "node",
                "t.js",
            ],
        ),
        LIMIT,
    );
    r.assert_code(0);

    // It runs: outside the repo, not world-writable. Without the flag, the same is refused.
    if !sandbox_works() {
        return;
    }
    let safe = f.path("safe");
    let open_above = safe
        .ancestors()
        .skip(1)
        .find(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o002 != 0));
    if let Some(d) = open_above {
        eprintln!(
            "skip the run half of allow_program_runs_the_program_and_the_gate_still_holds: the fixtures lie below {}, which any user can write (the gate rightly refuses programs there)",
            d.display()
        );
        return;
    }
    program(&safe, "sbx-allowed", "sbx-allowed-ran");
    std::fs::set_permissions(&safe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let with_path = |args: &[&str]| {
        let mut c = sbx(&repo, args);
        c.env("PATH", format!("{}:/usr/bin:/bin", safe.display()));
        run_command(c, LIMIT)
    };
    let r = with_path(&[
        "--profile",
        "validate",
        "--without",
        "cgroup",
        "--",
        "sbx-allowed",
    ]);
    r.assert_code(126);
    let r = with_path(&[
        "-v",
        "--profile",
        "validate",
        "--without",
        "cgroup",
        "--allow-program",
        "sbx-allowed",
        "--report",
        rs,
        "--",
        "sbx-allowed",
    ]);
    r.assert_code(0);
    assert_eq!(r.stdout.trim(), "sbx-allowed-ran", "{r}");
    assert!(
        r.stderr.contains("\nsandbox-run: gate: sbx-allowed allowed for this command by --allow-program, beside profile validate's programs\n"),
        "{r}"
    );
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(
        rep["allowed_programs"],
        serde_json::json!(["sbx-allowed"]),
        "{rep}"
    );
    assert_eq!(rep["results"][0]["ok"], true, "{rep}");
}

/// The line `scripts/bench` prints from a report's `sandbox`, which `-v` prints first.
fn layers_from_report(s: &serde_json::Value) -> String {
    let ns: Vec<&str> = s["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let fs = &s["filesystem"];
    let landlock = match fs["landlock"].as_str().unwrap() {
        "fully_enforced" => format!("landlock ABI {} full", fs["landlock_abi"]),
        "partially_enforced" => {
            let missing: Vec<&str> = fs["landlock_missing"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            format!(
                "landlock ABI {} partial (no {})",
                fs["landlock_abi"],
                missing.join(", no ")
            )
        }
        _ => "landlock none".into(),
    };
    let cgroup = match s["cgroup"]["version"].as_u64() {
        Some(v) => format!("v{v}"),
        None => "none".into(),
    };
    let degraded: Vec<&str> = s["degraded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    format!(
        "layers: namespaces {}; repo {}; {landlock}; cgroup {cgroup}; seccomp {}; degraded: {}",
        if ns.is_empty() {
            "none".into()
        } else {
            ns.join(",")
        },
        fs["repo"].as_str().unwrap(),
        s["seccomp"]["mode"].as_str().unwrap(),
        if degraded.is_empty() {
            "none".into()
        } else {
            degraded.join(", ")
        }
    )
}

#[test]
fn verbose_starts_with_the_layers_in_force_and_what_is_degraded() {
    if !sandbox_works() {
        return;
    }
    if which("node").is_none() {
        skip_tool("node is not installed");
        return;
    }
    let f = Fixture::new("hint-verbose");
    let repo = f.git_repo("repo");
    std::fs::write(repo.join("t.js"), "console.log('sbx-verbose-ran');\n").unwrap();
    let report = f.path("r.json");
    for profile in ["validate", "ci"] {
        let r = run_command(
            sbx(
                &repo,
                &[
                    "-v",
                    "--profile",
                    profile,
                    "--without",
                    "cgroup",
                    "--report",
                    report.to_str().unwrap(),
                    "--",
                    "node",
                    "t.js",
                ],
            ),
            LIMIT,
        );
        r.assert_code(0);
        let rep: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        let want = format!("sandbox-run: {}", layers_from_report(&rep["sandbox"]));
        assert_eq!(
            r.stderr.lines().next(),
            Some(want.as_str()),
            "{profile}: {r}"
        );
    }
}

#[test]
fn quiet_leaves_out_the_kept_changes_line() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("hint-quiet");
    let repo = f.git_repo("repo");
    let args = |q: bool| {
        let mut a = vec![
            "--profile",
            "ci",
            "--changes",
            "keep",
            "--",
            "sh",
            "-c",
            "echo hi > f.txt",
        ];
        if q {
            a.insert(0, "-q");
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let go = |q: bool| {
        let a = args(q);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run_command(sbx(&repo, &a), LIMIT)
    };
    // The positive control: without -q, the line says where the changes were kept.
    let r = go(false);
    r.assert_code(0);
    assert!(
        r.stderr
            .contains("sandbox-run: repo: the run's changes were kept as "),
        "{r}"
    );
    let id = r
        .stderr
        .split("kept as ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap()
        .to_string();
    let r = go(true);
    r.assert_code(0);
    assert_eq!(r.stderr, "", "-q prints nothing on success: {r}");
    // (both changesets are this test's: drop them)
    for _ in 0..2 {
        let list = run_command(sbx(&repo, &["changes", "list"]), LIMIT);
        for line in list
            .stdout
            .lines()
            .filter(|l| l.contains(repo.to_str().unwrap()))
        {
            let id = line.split_whitespace().next().unwrap();
            run_command(sbx(&repo, &["changes", "drop", id]), LIMIT);
        }
    }
    assert!(!id.is_empty());
}
