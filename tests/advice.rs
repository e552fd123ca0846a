//! Advice that works on the host at hand.
//!
//! Where this user cannot have a cgroup (rootless on a cgroup v1 or hybrid host, or on v2
//! without a delegated subtree), `validate` requires the cgroup layer and refuses in two short
//! lines that point to `doctor`, which must name what works here, down to a profile that
//! marks the layer best-effort;
//! and following that advice literally (run the command it prints, rerun with the profile it
//! names) must make the run succeed, with the cgroup reported degraded.
//!
//! Where this user does get a cgroup (root, or a delegated subtree), there is nothing to
//! advise: the test says so and skips.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// `sandbox-run ARGS` with a private profile directory (`XDG_CONFIG_HOME=config`).
fn cmd(config: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", config)
        .current_dir(dir);
    c
}

/// The text between `start` and `end` in `s` (after the first `start`).
fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let i = s
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in: {s}"))
        + start.len();
    let j = s[i..]
        .find(end)
        .unwrap_or_else(|| panic!("no {end:?} after {start:?} in: {s}"));
    &s[i..i + j]
}

/// The profile the advice names, from the end of its last fix.
fn rerun_profile(line: &str) -> String {
    let i = line
        .rfind(", then rerun with --profile ")
        .unwrap_or_else(|| panic!("no rerun advice in: {line}"))
        + ", then rerun with --profile ".len();
    let rest = line[i..].trim_end();
    let name = rest.split([';', ' ']).next().unwrap();
    name.trim_matches('\'').to_string()
}

#[test]
fn advice_without_a_cgroup_names_a_profile_that_works_and_it_does() {
    if !sandbox_works() {
        return;
    }
    if which("node").is_none() {
        skip_tool("node is not installed");
        return;
    }
    let f = Fixture::new("advice-cgroup");
    let repo = f.git_repo("repo");
    std::fs::write(repo.join("t.js"), "console.log('sbx-advice-ran');\n").unwrap();
    let config = f.path("config");
    std::fs::create_dir_all(&config).unwrap();
    let report = f.path("report.json");
    let report_s = report.to_str().unwrap();
    let repo_s = repo.to_str().unwrap();

    // 1. The built-in validate profile, which requires the cgroup layer.
    let mut c = cmd(&config, &repo, &["--profile", "validate", "--repo", repo_s]);
    c.args(["--", "node", "t.js"]);
    let r = run_command(c, LIMIT);
    // SAFETY: geteuid takes no arguments and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if r.code == Some(0) {
        eprintln!(
            "SKIP advice_without_a_cgroup_names_a_profile_that_works_and_it_does: uid {uid} gets a \
             cgroup on this host, so validate runs and there is nothing to advise \
             (scripts/test runs this again rootless)"
        );
        return;
    }
    r.assert_code(125);
    // Two short lines: what is missing, then the quickest fixes and a pointer to doctor.
    let lines: Vec<&str> = r.stderr.trim_end().lines().collect();
    assert_eq!(lines.len(), 2, "two lines:\n{r}");
    assert!(
        lines[0].starts_with("sandbox-run: profile validate requires the cgroup layer, but "),
        "{r}"
    );
    assert!(
        lines[1].starts_with("sandbox-run: to run: ")
            && lines[1].contains("add --without cgroup")
            && lines[1].ends_with("every fix: sandbox-run doctor"),
        "{r}"
    );
    for l in &lines {
        assert!(
            l.len() <= 160,
            "a short line, not {} characters: {l}",
            l.len()
        );
    }
    // 2. doctor, which it points to, names every fix that works here, down to the three
    // lines of a profile that marks the layer best-effort.
    let d = run_command(cmd(&config, &repo, &["doctor"]), LIMIT);
    let line = d
        .stdout
        .lines()
        .find(|l| l.contains("then rerun with --profile "))
        .unwrap_or_else(|| panic!("doctor names no profile to rerun with:\n{d}"))
        .to_string();
    for l in [
        r#"'extends = "validate"'"#,
        "'[layers]'",
        r#"'cgroup = "best-effort"'"#,
    ] {
        assert!(line.contains(l), "doctor does not name {l}:\n{d}");
    }
    // What cannot work here is not offered: no systemd-run without a reachable user manager.
    if !Path::new(&format!("/run/user/{uid}/systemd/private")).exists()
        && std::env::var_os("XDG_RUNTIME_DIR").is_none()
    {
        assert!(!d.stdout.contains("systemd-run"), "{d}");
        assert!(!r.stderr.contains("systemd-run"), "{r}");
    }
    if !Path::new("/run/systemd/system").is_dir() {
        assert!(!d.stdout.contains("unified_cgroup_hierarchy"), "{d}");
    }
    let write = between(&line, "best-effort: ", ", then rerun with --profile ").to_string();
    let profile = rerun_profile(&line);

    // 3. Follow it literally: run the command it printed, then rerun with the profile.
    let mut sh = Command::new("/bin/sh");
    sh.args(["-c", &write])
        .env("XDG_CONFIG_HOME", &config)
        .current_dir(&repo);
    run_command(sh, LIMIT).assert_code(0);
    let mut c = cmd(
        &config,
        &repo,
        &[
            "--profile",
            &profile,
            "--repo",
            repo_s,
            "--report",
            report_s,
        ],
    );
    c.args(["--", "node", "t.js"]);
    let r = run_command(c, LIMIT);
    r.assert_code(0);
    assert!(r.stdout.contains("sbx-advice-ran"), "{r}");
    assert!(
        r.stderr
            .contains("degraded: running without the cgroup layer"),
        "{r}"
    );
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let degraded: Vec<&str> = rep["sandbox"]["degraded"]
        .as_array()
        .unwrap_or_else(|| panic!("no sandbox.degraded in {rep}"))
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(degraded, ["cgroup"], "{rep}");
    assert_eq!(rep["ok"], true, "{rep}");
}
