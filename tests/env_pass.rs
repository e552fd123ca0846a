//! Secrets by name, never on a command line, and corporate CAs.
//!
//! `--pass-env NAME`, `[env] pass` and `--env-file FILE` bring a secret-looking variable into
//! the sandbox; its value reaches the workload (the probe's `getenv`) but no process's
//! `/proc/PID/cmdline` (checked from the host while the run sleeps), nor the report, which
//! lists the names under `sandbox.env_passed`. Code-loading variables never pass, whatever is
//! asked: each explicit ask is one line and exit 125. `--ca-certs FILE` shows a bundle
//! read-only inside and names it in the four variables tools read; without it they are
//! stripped.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const KEY_VALUE: &str = "sk-ant-sbx-e2e-3f9c1d77a2";
const OTHER_VALUE: &str = "visible-on-the-command-line-sbx-81e2";

/// A test profile (validate + the probe) with extra TOML appended to its sections.
fn profile_with(f: &Fixture, base: &str, env_pass: &[&str]) -> std::path::PathBuf {
    let text = Spec::extends(base).to_toml();
    let mut t: toml::Table = toml::from_str(&text).unwrap();
    if !env_pass.is_empty() {
        let mut env = toml::Table::new();
        env.insert(
            "pass".into(),
            toml::Value::Array(env_pass.iter().map(|s| toml::Value::from(*s)).collect()),
        );
        t.insert("env".into(), toml::Value::Table(env));
    }
    let p = f.path(&format!("profile-{base}-{}.toml", env_pass.len()));
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    p
}

fn getenv(p: &Path, repo: &Path, opts: &[&str], name: &str, env: &[(&str, &str)]) -> ProbeRun {
    run_probe_with(p, repo, opts, &["getenv", name], |c| {
        for (k, v) in env {
            c.env(k, v);
        }
    })
}

/// The caller's value of a secret-looking name arrives by `--pass-env` (and by the profile's
/// `[env] pass`); without it, it is removed as before.
#[test]
fn pass_env_brings_a_secret_by_name() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("pass-env");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let env = [("ANTHROPIC_API_KEY", KEY_VALUE)];
    let r = getenv(
        &p,
        &repo,
        &["--pass-env", "ANTHROPIC_API_KEY"],
        "ANTHROPIC_API_KEY",
        &env,
    );
    assert_eq!(r.assert_ok(), KEY_VALUE, "{r}");
    // control: not asked for, it does not pass
    let r = getenv(&p, &repo, &[], "ANTHROPIC_API_KEY", &env);
    assert_eq!(r.outcome, Outcome::Nothing("unset".into()), "{r}");
    // the profile's [env] pass does the same
    let pp = profile_with(&f, "validate", &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);
    let r = getenv(&pp, &repo, &[], "ANTHROPIC_API_KEY", &env);
    assert_eq!(r.assert_ok(), KEY_VALUE, "{r}");
    // a name the caller does not have is skipped, with a warning for --pass-env
    let r = getenv(
        &p,
        &repo,
        &["--pass-env", "SBX_NOT_SET_ANYWHERE"],
        "SBX_NOT_SET_ANYWHERE",
        &[],
    );
    assert_eq!(r.outcome, Outcome::Nothing("unset".into()), "{r}");
    assert!(
        r.run
            .stderr
            .contains("--pass-env SBX_NOT_SET_ANYWHERE: not set"),
        "{r}"
    );
    // --env still works, and may name a secret-looking variable
    let r = getenv(
        &p,
        &repo,
        &["--env", "NPM_TOKEN=from-env-flag"],
        "NPM_TOKEN",
        &[],
    );
    assert_eq!(r.assert_ok(), "from-env-flag", "{r}");
}

/// While the sandbox runs, no process on the host shows the passed value in its command line:
/// not the supervisor (`sandbox-run --pass-env NAME ...`), not stage 2. The control: a value
/// given with `--env` on the same command line IS seen there, so the scan works.
#[test]
fn the_value_is_on_no_command_line() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("pass-env-cmdline");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let other = format!("SBX_OTHER={OTHER_VALUE}");
    let mut c = sandbox_command(
        &p,
        &repo,
        &["--pass-env", "SBX_E2E_API_KEY", "--env", &other],
        &[probe().to_str().unwrap(), "sleep", "3"],
    );
    c.env("SBX_E2E_API_KEY", KEY_VALUE)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = spawn_retrying(&mut c).unwrap();
    let supervisor = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = None;
    while Instant::now() < deadline {
        let procs = processes();
        let sleeping = procs.iter().any(|(_, _, cmd)| {
            cmd.windows(5).any(|w| w == b"sleep")
                && cmd.starts_with(probe().to_str().unwrap().as_bytes())
        });
        if sleeping {
            seen = Some(procs);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let procs = seen.expect("the probe never showed up asleep");
    let has = |cmd: &[u8], v: &str| cmd.windows(v.len()).any(|w| w == v.as_bytes());
    let sup = procs
        .iter()
        .find(|(pid, _, _)| *pid == supervisor)
        .expect("supervisor");
    let stage2 = procs
        .iter()
        .find(|(_, ppid, _)| *ppid == supervisor)
        .expect("stage 2, the supervisor's child");
    assert!(has(&sup.2, "--pass-env"), "not the supervisor's cmdline");
    assert!(
        has(&sup.2, OTHER_VALUE),
        "control: --env's value is on the command line"
    );
    assert!(
        !has(&sup.2, KEY_VALUE),
        "the supervisor's cmdline shows the secret"
    );
    assert!(
        !has(&stage2.2, KEY_VALUE),
        "stage 2's cmdline shows the secret"
    );
    for (pid, _, cmd) in &procs {
        assert!(!has(cmd, KEY_VALUE), "/proc/{pid}/cmdline shows the secret");
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Every process: (pid, ppid, cmdline).
fn processes() -> Vec<(i32, i32, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        out.push((pid, ppid, cmd));
    }
    out
}

/// The report names what was passed, never the value.
#[test]
fn the_report_lists_names_passed_never_values() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("pass-env-report");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let report = f.path("report.json");
    let r = run_probe_with(
        &p,
        &repo,
        &[
            "--pass-env",
            "GITHUB_TOKEN",
            "--report",
            report.to_str().unwrap(),
        ],
        &["pid"],
        |c| {
            c.env("GITHUB_TOKEN", KEY_VALUE);
        },
    );
    r.assert_ok();
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(!text.contains(KEY_VALUE), "the report holds the value");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["sandbox"]["env_passed"],
        serde_json::json!(["GITHUB_TOKEN"])
    );
    let removed = v["sandbox"]["env_removed"].as_array().unwrap();
    assert!(!removed.iter().any(|n| n == "GITHUB_TOKEN"), "{removed:?}");
}

/// Code-loading variables never pass, whatever is asked: each explicit ask is one line and
/// exit 125, before anything runs. `--keep-env` of a secret-looking name says to use
/// `--pass-env`.
#[test]
fn code_loading_names_are_refused_when_asked() {
    let f = Fixture::new("pass-env-refused");
    let repo = f.repo("repo");
    // (landlock best-effort: the refusal is about the names, on any kernel)
    let p = f.profile(&Spec::default().layer("landlock", "best-effort"));
    let env = [
        ("LD_PRELOAD", "/tmp/evil.so"),
        ("NODE_OPTIONS", "--require=/tmp/evil.js"),
        ("BASH_ENV", "/tmp/evil.sh"),
        ("PYTHONSTARTUP", "/tmp/evil.py"),
        ("GIT_SSH_COMMAND", "evil"),
        ("NPM_TOKEN", "t"),
    ];
    for (opts, words) in [
        (
            vec!["--pass-env", "LD_PRELOAD"],
            "--pass-env LD_PRELOAD: never passed",
        ),
        (
            vec!["--pass-env", "ld_audit"],
            "--pass-env ld_audit: never passed",
        ),
        (
            vec!["--pass-env", "NODE_OPTIONS"],
            "--pass-env NODE_OPTIONS: never passed",
        ),
        (
            vec!["--pass-env", "BASH_ENV"],
            "--pass-env BASH_ENV: never passed",
        ),
        (
            vec!["--pass-env", "PYTHONSTARTUP"],
            "--pass-env PYTHONSTARTUP: never passed",
        ),
        (
            vec!["--pass-env", "GIT_SSH_COMMAND"],
            "--pass-env GIT_SSH_COMMAND: never passed",
        ),
        (
            vec!["--keep-env", "LD_PRELOAD"],
            "--keep-env LD_PRELOAD: never passed",
        ),
        (
            vec!["--env", "NODE_OPTIONS=x"],
            "--env NODE_OPTIONS: never passed",
        ),
        (vec!["--keep-env", "NPM_TOKEN"], "use --pass-env NPM_TOKEN"),
    ] {
        let r = run_probe_with(&p, &repo, &opts, &["pid"], |c| {
            for (k, v) in env {
                c.env(k, v);
            }
        });
        assert_eq!(r.code(), Some(125), "{opts:?}:\n{r}");
        assert_eq!(r.outcome, Outcome::Missing, "{opts:?} ran:\n{r}");
        assert!(
            r.run.stderr.contains(words),
            "{opts:?}: want {words:?}:\n{r}"
        );
        assert_eq!(
            r.run.stderr.trim_end().lines().count(),
            1,
            "{opts:?}: one line:\n{r}"
        );
    }
    // a profile that tries is refused when loaded
    let pp = profile_with(&f, "validate", &["LD_PRELOAD"]);
    let r = run_probe(&pp, &repo, &[], &["pid"]);
    assert_eq!(r.code(), Some(125), "{r}");
    assert!(r.run.stderr.contains("env.pass"), "{r}");
}

/// Whole words, not substrings: `GITHUB_PATH` and `XDG_SESSION_TYPE` are not secrets and pass
/// when kept; git's identity variables are not code-loading and pass when kept; the other
/// `GIT_*` stay refused.
#[test]
fn harmless_names_pass_when_kept() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("pass-env-words");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    for (name, value) in [
        (
            "GITHUB_PATH",
            "/runner/_temp/_runner_file_commands/add_path_x",
        ),
        ("XDG_SESSION_TYPE", "tty"),
        ("PKG_CONFIG_PATH", "/usr/lib/pkgconfig"),
        ("GIT_AUTHOR_NAME", "A. U. Thor"),
        ("GIT_COMMITTER_EMAIL", "thor@example.org"),
    ] {
        let r = getenv(&p, &repo, &["--keep-env", name], name, &[(name, value)]);
        assert_eq!(r.assert_ok(), value, "{name}: {r}");
    }
    let r = getenv(
        &p,
        &repo,
        &["--keep-env", "GIT_DIR"],
        "GIT_DIR",
        &[("GIT_DIR", "/x")],
    );
    assert_eq!(r.code(), Some(125), "{r}");
}

/// `--env-file FILE`: NAME=VALUE lines reach the workload; a file other users could read, or
/// that is not the caller's, is refused with one line.
#[test]
fn env_file_is_read_only_from_a_private_file() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("env-file");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let file = f.write(
        "secrets.env",
        &format!("# keys\n\nANTHROPIC_API_KEY={KEY_VALUE}\nQUOTED=\"kept as is\"\n"),
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let opt = ["--env-file", file.to_str().unwrap()];
    let r = getenv(&p, &repo, &opt, "ANTHROPIC_API_KEY", &[]);
    assert_eq!(r.assert_ok(), KEY_VALUE, "{r}");
    let r = getenv(&p, &repo, &opt, "QUOTED", &[]);
    assert_eq!(r.assert_ok(), "\"kept as is\"", "{r}");
    // --env wins over the file
    let mut o = opt.to_vec();
    o.extend(["--env", "ANTHROPIC_API_KEY=override"]);
    assert_eq!(
        getenv(&p, &repo, &o, "ANTHROPIC_API_KEY", &[]).assert_ok(),
        "override"
    );

    for mode in [0o640, 0o604, 0o644, 0o620] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let r = getenv(&p, &repo, &opt, "ANTHROPIC_API_KEY", &[]);
        assert_eq!(r.code(), Some(125), "mode {mode:o}: {r}");
        assert!(
            r.run.stderr.contains("--env-file") && r.run.stderr.contains("chmod 600"),
            "{r}"
        );
        assert_eq!(r.run.stderr.trim_end().lines().count(), 1, "{r}");
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    // a code-loading line is refused like --env
    let bad = f.write("bad.env", "LD_PRELOAD=/tmp/x.so\n");
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = getenv(
        &p,
        &repo,
        &["--env-file", bad.to_str().unwrap()],
        "LD_PRELOAD",
        &[],
    );
    assert_eq!(r.code(), Some(125), "{r}");
    assert!(r.run.stderr.contains("never passed"), "{r}");
    // a line that is not NAME=VALUE names the file and the line
    let broken = f.write("broken.env", "A=1\nnot a pair\n");
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = getenv(
        &p,
        &repo,
        &["--env-file", broken.to_str().unwrap()],
        "A",
        &[],
    );
    assert_eq!(r.code(), Some(125), "{r}");
    assert!(r.run.stderr.contains("line 2"), "{r}");
    // in the repo: read where it is, but never through a link planted there (an earlier run
    // could make `.env` point at another file of secrets)
    let in_repo = repo.join(".env");
    std::fs::write(&in_repo, "IN_REPO=yes\n").unwrap();
    std::fs::set_permissions(&in_repo, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = getenv(&p, &repo, &["--env-file", ".env"], "IN_REPO", &[]);
    assert_eq!(r.assert_ok(), "yes", "{r}");
    std::fs::remove_file(&in_repo).unwrap();
    std::os::unix::fs::symlink(&file, &in_repo).unwrap();
    for given in [".env", in_repo.to_str().unwrap()] {
        let r = getenv(&p, &repo, &["--env-file", given], "ANTHROPIC_API_KEY", &[]);
        assert_eq!(r.code(), Some(125), "{given}: {r}");
        assert!(r.run.stderr.contains("link inside the repo"), "{r}");
        assert!(!r.run.all().contains(KEY_VALUE), "{r}");
    }
    // a link to a directory of the repo, from outside it: the same
    std::fs::create_dir(repo.join("conf")).unwrap();
    std::os::unix::fs::symlink(&file, repo.join("conf/.env")).unwrap();
    std::os::unix::fs::symlink(repo.join("conf"), f.path("conf-link")).unwrap();
    let via = f.path("conf-link/.env");
    let r = getenv(
        &p,
        &repo,
        &["--env-file", via.to_str().unwrap()],
        "ANTHROPIC_API_KEY",
        &[],
    );
    assert_eq!(r.code(), Some(125), "{r}");
    assert!(r.run.stderr.contains("link inside the repo"), "{r}");
    // another user's file (root can make one)
    if is_root() {
        std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
        let r = getenv(&p, &repo, &opt, "ANTHROPIC_API_KEY", &[]);
        assert_eq!(r.code(), Some(125), "{r}");
        assert!(r.run.stderr.contains("not by the caller"), "{r}");
    }
}

const BUNDLE: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBsbxe2eCorporateRootCA\n-----END CERTIFICATE-----\n";

/// `--ca-certs FILE`: its CA joins the sandbox's trust bundle, a readable read-only file that
/// SSL_CERT_FILE and friends name (the system roots, then the CA: OpenSSL clients take it
/// instead of the system's), and Node's NODE_EXTRA_CA_CERTS names the extra CA alone;
/// without the flag the caller's values are stripped.
#[test]
fn ca_certs_are_bound_and_named() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("ca-certs");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let bundle = f.write("corp-ca.pem", BUNDLE);
    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o644)).unwrap();
    let opt = ["--ca-certs", bundle.to_str().unwrap()];
    let vars = [
        "NODE_EXTRA_CA_CERTS",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
    ];
    let caller: Vec<(&str, &str)> = vars.iter().map(|v| (*v, "/host/ca.pem")).collect();
    let hex: String = BUNDLE.bytes().map(|b| format!("{b:02x}")).collect();
    for v in vars {
        let r = getenv(&p, &repo, &opt, v, &caller);
        let inside = r.assert_ok();
        let r = run_probe(&p, &repo, &opt, &["read-hex", &inside]);
        r.assert_ok();
        let got = r.lines.first().cloned().unwrap_or_default();
        if v == "NODE_EXTRA_CA_CERTS" {
            assert_eq!(got, hex, "{v}={inside}: {r}");
        } else {
            assert!(
                got.ends_with(&hex) && got.len() > hex.len(),
                "{v}={inside}: {r}"
            );
        }
        // read-only inside
        let r = run_probe(&p, &repo, &opt, &["open-write", &inside]);
        assert!(
            matches!(r.outcome, Outcome::Denied(_)),
            "{v}: writable: {r}"
        );
    }
    for v in vars {
        let r = getenv(&p, &repo, &[], v, &caller);
        assert_eq!(
            r.outcome,
            Outcome::Nothing("unset".into()),
            "{v} without --ca-certs: {r}"
        );
        let r = getenv(&p, &repo, &["--keep-env", v], v, &caller);
        assert_eq!(r.code(), Some(125), "--keep-env {v}: {r}");
    }
}

/// The bundle must be outside the repo, a regular file, and not writable by other users.
#[test]
fn ca_certs_refusals() {
    let f = Fixture::new("ca-certs-refused");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let in_repo = repo.join("ca.pem");
    std::fs::write(&in_repo, BUNDLE).unwrap();
    let writable = f.write("ww-ca.pem", BUNDLE);
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o666)).unwrap();
    let group = f.write("gw-ca.pem", BUNDLE);
    std::fs::set_permissions(&group, std::fs::Permissions::from_mode(0o664)).unwrap();
    let dir = f.path("");
    // links the command could plant in the repo: to a file outside, to a directory outside
    let outside = f.write("outside-ca.pem", BUNDLE);
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&outside, repo.join("link.pem")).unwrap();
    std::os::unix::fs::symlink(&f.dir, repo.join("out")).unwrap();
    let via_dir = repo.join("out/outside-ca.pem");
    for (file, words) in [
        (repo.join("link.pem").as_path(), "inside the repo"),
        (via_dir.as_path(), "inside the repo"),
        (in_repo.as_path(), "inside the repo"),
        (writable.as_path(), "lets other users write"),
        (group.as_path(), "lets other users write"),
        (dir.as_path(), "not a regular file"),
        (Path::new("/nonexistent/ca.pem"), "No such file"),
    ] {
        let r = run_probe(&p, &repo, &["--ca-certs", file.to_str().unwrap()], &["pid"]);
        assert_eq!(r.code(), Some(125), "{}: {r}", file.display());
        assert!(
            r.run.stderr.contains(words),
            "{}: want {words:?}: {r}",
            file.display()
        );
        assert_eq!(r.run.stderr.trim_end().lines().count(), 1, "{r}");
    }
}
