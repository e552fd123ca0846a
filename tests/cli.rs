//! The binary as a user meets it: `check` and `profiles`, exit codes, one-line errors, lookup.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-run");

/// A scratch dir under the target dir (not /tmp: the gate denies world-writable locations).
fn scratch(name: &str) -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run the binary with a clean, predictable environment: no user profiles unless given.
fn run(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-test")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A sandbox-run failure is exactly one line on stderr, prefixed, with exit 125, no panic.
fn assert_one_line_125(o: &Output, needle: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(125), "stderr: {e}");
    assert_eq!(e.lines().count(), 1, "expected one line, got: {e}");
    assert!(e.starts_with("sandbox-run: "), "{e}");
    assert!(e.contains(needle), "expected {needle:?} in: {e}");
    assert!(
        !e.contains("panicked") && !e.contains("RUST_BACKTRACE"),
        "{e}"
    );
}

fn example() -> String {
    format!("{}/examples/hello-node", env!("CARGO_MANIFEST_DIR"))
}

fn have(prog: &str) -> bool {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(prog).exists())
}

#[test]
fn check_exit_codes_follow_the_contract() {
    if !have("npm") {
        eprintln!("skip: npm is not installed");
        return;
    }
    let repo = example();
    let o = run(
        &[
            "check",
            "--profile",
            "validate",
            "--repo",
            &repo,
            "--",
            "npm",
            "test",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("allowed: "), "{}", stdout(&o));

    let o = run(
        &[
            "check",
            "--profile",
            "validate",
            "--repo",
            &repo,
            "--",
            "node",
            "-e",
            "1",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(126));
    assert!(
        stdout(&o).contains("node-eval") && stdout(&o).contains("\"-e\""),
        "{}",
        stdout(&o)
    );

    let o = run(
        &[
            "check",
            "--profile",
            "validate",
            "--repo",
            &repo,
            "--command",
            "npm test && rm -rf /",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(126), "{}", stdout(&o));

    let o = run(
        &[
            "check",
            "--profile",
            "validate",
            "--repo",
            &repo,
            "--",
            "bash",
            "-c",
            "npm test",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(126));
    assert!(stdout(&o).contains("not-allowed"), "{}", stdout(&o));
}

#[test]
fn check_not_found_is_127() {
    let d = scratch("nf");
    std::fs::write(
        d.join("p.toml"),
        "[gate]\nprograms = [\"definitely-not-a-program-xyz\"]\n[env]\npath = \"/usr/bin:/bin\"\n",
    )
    .unwrap();
    let p = d.join("p.toml");
    let o = run(
        &[
            "check",
            "--profile",
            p.to_str().unwrap(),
            "--repo",
            &example(),
            "--",
            "definitely-not-a-program-xyz",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(127), "{}", stdout(&o));
    assert!(
        stdout(&o).starts_with("not found (rule program-not-found)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn check_json_has_the_documented_fields() {
    if !have("node") {
        eprintln!("skip: node is not installed");
        return;
    }
    let o = run(
        &[
            "check",
            "--json",
            "--profile",
            "validate",
            "--repo",
            &example(),
            "--",
            "node",
            "--eval=1",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(126));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["allowed"], false);
    assert_eq!(v["rule"], "node-eval");
    assert_eq!(v["word"], "--eval=1");
    assert!(v["program"].as_str().unwrap().ends_with("/node"), "{v}");

    let o = run(
        &[
            "check",
            "--json",
            "--profile",
            "validate",
            "--repo",
            &example(),
            "--command",
            "node test/slug.test.js",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["allowed"].clone(), v["rule"].clone(), v["word"].clone()),
        (true.into(), "allowed".into(), serde_json::Value::Null)
    );
}

#[test]
fn bad_flags_are_one_line_and_125() {
    assert_one_line_125(&run(&["--frobnicate"], &[]), "--frobnicate");
    assert_one_line_125(&run(&["check", "--", "npm", "test"], &[]), "--profile");
    assert_one_line_125(&run(&["check", "--profile", "validate"], &[]), "required");
    assert_one_line_125(
        &run(
            &[
                "check",
                "--profile",
                "validate",
                "--command",
                "npm test",
                "--",
                "npm",
                "test",
            ],
            &[],
        ),
        "cannot be used with",
    );
    assert_one_line_125(
        &run(
            &[
                "check",
                "--profile",
                "validate",
                "--repo",
                "/nonexistent/dir",
                "--",
                "npm",
                "test",
            ],
            &[],
        ),
        "/nonexistent/dir",
    );
    assert_one_line_125(
        &run(
            &[
                "run",
                "--profile",
                "validate",
                "--net",
                "sideways",
                "--",
                "npm",
                "test",
            ],
            &[],
        ),
        "sideways",
    );
    assert_one_line_125(
        &run(
            &[
                "--profile",
                "validate",
                "--env",
                "NOEQUALS",
                "--",
                "npm",
                "test",
            ],
            &[],
        ),
        "KEY=VALUE",
    );
    // help and version are not errors
    let o = run(&["--help"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("check") && stdout(&o).contains("profiles"));
    assert_eq!(run(&["--version"], &[]).status.code(), Some(0));
}

#[test]
fn bad_profiles_are_one_line_and_125() {
    let d = scratch("bad");
    let w = |name: &str, text: &str| std::fs::write(d.join(name), text).unwrap();
    w(
        "unknown.toml",
        "description = \"x\"\n[gate]\nprograms = [\"node\"]\nallow_everything = true\n",
    );
    w("wrongtype.toml", "[limits]\npids = \"lots\"\n");
    w("badsize.toml", "[limits]\n\nmemory = \"2 potatoes\"\n");
    w("badmode.toml", "[filesystem]\nrepo = \"rwx\"\n");
    w("cycle-a.toml", "extends = \"cycle-b\"\n");
    w("cycle-b.toml", "extends = \"cycle-a.toml\"\n");
    w("self.toml", "extends = \"./self.toml\"\n");
    w(
        "missing-parent.toml",
        "extends = \"no-such-profile-anywhere\"\n",
    );
    w("syntax.toml", "[gate\nprograms = 1\n");
    w("zero-cpus.toml", "[limits]\ncpus = 0\n");
    w("slash-program.toml", "[gate]\nprograms = [\"./node\"]\n");
    let dir = d.as_path();
    let check = |profile: &str| {
        run(
            &[
                "check",
                "--profile",
                profile,
                "--repo",
                &example(),
                "--",
                "npm",
                "test",
            ],
            &[("SANDBOX_RUN_PROFILE_PATH", dir)],
        )
    };
    let o = check("unknown");
    assert_one_line_125(&o, "unknown.toml:4:");
    assert!(stderr(&o).contains("allow_everything"));
    let o = check("wrongtype");
    assert_one_line_125(&o, "wrongtype.toml:2:");
    assert!(stderr(&o).contains("pids"));
    assert_one_line_125(&check("badsize"), "badsize.toml:3:");
    assert_one_line_125(&check("badmode"), "overlay");
    assert_one_line_125(&check("cycle-a"), "extends cycle");
    assert_one_line_125(&check("self"), "extends cycle");
    assert_one_line_125(&check("missing-parent"), "no-such-profile-anywhere");
    assert_one_line_125(&check("syntax"), "syntax.toml:1:");
    assert_one_line_125(&check("zero-cpus"), "limits.cpus");
    assert_one_line_125(&check("slash-program"), "gate.programs");
    assert_one_line_125(&check("nope"), "not found");
    assert_one_line_125(&check("/nonexistent/p.toml"), "No such file");
    assert_one_line_125(&check("../etc"), "No such file");
    assert_one_line_125(&check("bad name"), "not a valid profile name");
    // `profiles show` reports the same errors the same way
    let o = run(
        &["profiles", "show", "unknown"],
        &[("SANDBOX_RUN_PROFILE_PATH", dir)],
    );
    assert_one_line_125(&o, "allow_everything");
}

#[test]
fn lookup_order_and_extends_own_name() {
    let first = scratch("lookup1");
    let config = scratch("lookup-xdg");
    std::fs::create_dir_all(config.join("sandbox-run/profiles")).unwrap();
    // user config refines the built-in validate by extending its own name
    std::fs::write(
        config.join("sandbox-run/profiles/validate.toml"),
        "extends = \"validate\"\n[limits]\ntimeout = \"7m\"\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["profiles", "show", "validate"])
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", &config)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.contains("timeout = \"7m\""), "{out}");
    assert!(
        out.contains("repo = \"overlay\""),
        "inherited from built-in: {out}"
    );
    assert!(out.contains("built-in:validate"), "{out}");

    // $SANDBOX_RUN_PROFILE_PATH wins over the user config
    std::fs::write(
        first.join("validate.toml"),
        "extends = \"validate\"\n[limits]\ntimeout = \"9s\"\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["profiles", "show", "validate"])
        .env("SANDBOX_RUN_PROFILE_PATH", &first)
        .env("XDG_CONFIG_HOME", &config)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("timeout = \"9s\""), "{out}");
    // ... and its extends continues the lookup after itself: the user config, then built-in
    assert_eq!(out.matches(" <- ").count(), 2, "{out}");

    let o = Command::new(BIN)
        .args(["profiles", "list"])
        .env("SANDBOX_RUN_PROFILE_PATH", &first)
        .env("XDG_CONFIG_HOME", &config)
        .output()
        .unwrap();
    let out = stdout(&o);
    for name in ["adapter", "ci", "validate"] {
        assert!(
            out.lines().any(|l| l.starts_with(name)),
            "{name} missing: {out}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("validate") && l.contains(first.to_str().unwrap())),
        "{out}"
    );
}

#[test]
fn profiles_show_prints_every_section() {
    for name in ["validate", "adapter", "ci"] {
        let o = run(&["profiles", "show", name], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        for section in [
            "[gate]",
            "[filesystem]",
            "[network]",
            "[limits]",
            "[env]",
            "[layers]",
            "[process]",
            "[report]",
        ] {
            assert!(out.contains(section), "{name}: {section} missing in {out}");
        }
    }
    let v = stdout(&run(&["profiles", "show", "validate"], &[]));
    for line in [
        "repo = \"overlay\"",
        "mode = \"none\"",
        "timeout = \"3m\"",
        "memory = \"2G\"",
        "pids = 256",
        "cgroup = \"required\"",
    ] {
        assert!(v.contains(line), "{line} missing in {v}");
    }
}

#[test]
fn doctor_reports_every_check_and_the_readme_table_is_current() {
    let o = run(&["doctor", "--json"], &[]);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor --json is JSON");
    let table = String::from_utf8(run(&["doctor", "--requirements-md"], &[]).stdout).unwrap();
    for c in d["checks"].as_array().unwrap() {
        let key = c["key"].as_str().unwrap();
        assert!(
            table.contains(&format!("| `{key}` |")),
            "check {key} has no requirements row"
        );
        assert!(
            c["ok"].as_bool().unwrap() || c["fix"].is_string(),
            "failed check {key} without a fix"
        );
    }
    assert_doctor_verdict(&o, &d);
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("<!-- requirements:begin -->\n")
        .expect("README marker")
        + 28;
    let end = readme
        .find("<!-- requirements:end -->")
        .expect("README marker");
    assert_eq!(&readme[start..end], table, "README's host requirements are stale: regenerate with `sandbox-run doctor --requirements-md`");
}

const LAYER_CHECKS: &[&str] = &["userns", "overlay", "landlock", "seccomp", "cgroup"];

/// doctor's verdict means what it says: a check that takes a layer away is `fail`, any other
/// failed check `advice`; exit 1 exactly when some check is `fail` or a shipped profile
/// cannot run with every layer, and then the text says FAIL. Returns the exit code.
fn assert_doctor_verdict(o: &Output, d: &serde_json::Value) -> i32 {
    let checks = d["checks"].as_array().unwrap();
    let mut failed = false;
    for c in checks {
        let key = c["key"].as_str().unwrap();
        let want = match (c["ok"] == true, LAYER_CHECKS.contains(&key)) {
            (true, _) => "ok",
            (false, true) => "fail",
            (false, false) => "advice",
        };
        assert_eq!(c["severity"], want, "check {key}: {c}");
        failed |= want == "fail";
    }
    let profiles = d["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 4);
    let all_full = profiles.iter().all(|p| p["full"] == true);
    let code = if all_full && !failed { 0 } else { 1 };
    assert_eq!(o.status.code(), Some(code), "{d}");
    code
}

/// On a healthy host with `dev.tty.legacy_tiocsti=1` (the kernel's default, which the seccomp
/// filter already covers), doctor prints an advice line and exits 0, so `doctor && deploy`
/// works; with user namespaces taken away (a sysctl of 0 in a user namespace of the test's
/// own), every profile loses its namespaces: a FAIL line, exit 1, in text and in JSON.
#[test]
fn doctor_exits_0_on_advice_and_1_on_a_missing_layer() {
    let text = run(&["doctor"], &[]);
    let json = run(&["doctor", "--json"], &[]);
    let d: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let code = assert_doctor_verdict(&json, &d);
    assert_eq!(text.status.code(), Some(code), "{}", stdout(&text));
    let tiocsti = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == "tiocsti")
        .unwrap();
    let legacy =
        std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "1");
    if legacy {
        assert_eq!(tiocsti["severity"], "advice", "{tiocsti}");
        assert!(
            stdout(&text).contains("advice tiocsti"),
            "{}",
            stdout(&text)
        );
    }
    let layers_ok = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| LAYER_CHECKS.contains(&c["key"].as_str().unwrap()))
        .all(|c| c["ok"] == true);
    if layers_ok {
        assert_eq!(code, 0, "every layer is here: advice alone exits 0: {d}");
        assert!(
            stdout(&text).contains("verdict: every shipped profile runs with every layer (exit 0)")
        );
        assert!(!stdout(&text).contains("FAIL"), "{}", stdout(&text));
    } else {
        eprintln!(
            "note: this host or user lacks a layer, so the exit-0 case is not seen here: {d}"
        );
    }
    // `doctor --help` and the README say the same as the behaviour above.
    let help = stdout(&run(&["doctor", "--help"], &[]));
    assert!(
        help.contains("Exit 0 when every shipped profile can run with every layer, else 1 (each missing layer is a FAIL line); `advice` lines (host hardening the sandbox already covers, such as dev.tty.legacy_tiocsti=1) are printed and leave the exit code 0."),
        "{help}"
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        readme.contains("(exit 0 when every shipped profile runs with every layer, else 1: a missing layer is a `FAIL` line; host hardening the sandbox already covers, such as `tiocsti`, is an `advice` line that leaves the exit 0; `--json` gives each check's `severity`)"),
        "README's doctor text no longer says what doctor does"
    );
    // The FAIL case, made: no user namespace can be created below the test's own.
    let have_unshare = have("unshare") && have("setpriv");
    if !have_unshare {
        eprintln!("skip the FAIL half: no unshare/setpriv (util-linux) on this host");
        return;
    }
    let under = |args: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(args)
            .env_remove("SANDBOX_RUN_PROFILE_PATH")
            .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-test");
        let mut w = Command::new("unshare");
        w.args(["--user", "--map-current-user", "--keep-caps", "--", "/bin/sh", "-c"])
            .arg("echo 0 >/proc/sys/user/max_user_namespaces && exec setpriv --inh-caps=-all --ambient-caps=-all -- \"$@\"")
            .arg("sh")
            .arg(c.get_program())
            .args(c.get_args())
            .env_remove("SANDBOX_RUN_PROFILE_PATH")
            .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-test");
        w.output().unwrap()
    };
    let json = under(&["doctor", "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&json.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&json), stderr(&json)));
    let userns = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == "userns")
        .unwrap();
    assert_eq!(userns["severity"], "fail", "{userns}");
    assert_eq!(assert_doctor_verdict(&json, &d), 1);
    let text = under(&["doctor"]);
    assert_eq!(text.status.code(), Some(1));
    let out = stdout(&text);
    assert!(out.contains("FAIL   userns"), "{out}");
    assert!(
        out.contains("verdict: a shipped profile cannot run with every layer (exit 1)"),
        "{out}"
    );
}

/// Printing into a pipe whose reader has gone (`sandbox-run profiles show validate | head -1`)
/// ends the command quietly, like any filter: no panic, no backtrace.
#[test]
fn a_closed_stdout_pipe_is_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    for args in [
        &["profiles", "show", "validate"][..],
        &["doctor", "--requirements-md"][..],
    ] {
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        let o = Command::new(BIN)
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .stdout(w)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{args:?}: {e}");
    }
}

/// `--timeout 0` and negative durations are refused before anything runs (one line, 125);
/// a negative value reaches the parser rather than being taken for a flag.
#[test]
fn zero_and_negative_timeouts_are_refused() {
    let cmd = |flag: &str, value: &str| {
        run(
            &[
                "run",
                "--profile",
                "validate",
                flag,
                value,
                "--",
                "node",
                "x.js",
            ],
            &[],
        )
    };
    for v in ["0", "0s", "0ms"] {
        assert_one_line_125(&cmd("--timeout", v), "is 0 (expected a timeout above 0");
    }
    for v in ["-5s", "-1", "-0.5m"] {
        assert_one_line_125(&cmd("--timeout", v), "is negative");
        assert_one_line_125(&cmd("--kill-grace", v), "is negative");
    }
    let o = run(
        &[
            "validate",
            "--profile",
            "validate",
            "--gene",
            "g.json",
            "--timeout",
            "0",
        ],
        &[],
    );
    assert_one_line_125(&o, "is 0 (expected a timeout above 0");
    let o = run(
        &[
            "validate",
            "--profile",
            "validate",
            "--gene",
            "g.json",
            "--timeout",
            "-3s",
        ],
        &[],
    );
    assert_one_line_125(&o, "is negative");
}

/// clap's "did you mean" tips survive the one-line error format.
#[test]
fn did_you_mean_tips_survive_the_one_line_format() {
    assert_one_line_125(
        &run(&["--profil", "validate", "--", "node", "x.js"], &[]),
        "tip: a similar argument exists: '--profile'",
    );
    assert_one_line_125(
        &run(&["valdate", "--profile", "validate"], &[]),
        "tip: a similar subcommand exists: 'validate'",
    );
    assert_one_line_125(
        &run(
            &[
                "--profile",
                "validate",
                "--net",
                "nnone",
                "--",
                "node",
                "x.js",
            ],
            &[],
        ),
        "tip: a similar value exists: 'none'",
    );
}
