//! With `--report`, every exit writes a valid report, exit 125 included: a bad profile, a
//! missing repo, a malformed gene, a required layer missing, a bad flag value or an unknown
//! flag. That report's result has status `sandbox_error` and the very line printed on stderr.
//! The report path is checked before anything else.

#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{probe, schema, BIN};

fn fixture(name: &str) -> PathBuf {
    let base = support::scratch(&format!("report-paths-{name}"));
    support::probe_profile(
        &base,
        "validate",
        "",
        "[layers]\ncgroup = \"best-effort\"\n",
    );
    std::fs::write(
        base.join("gene.json"),
        r#"{"type": "Gene", "id": "g-1", "validation": ["node -e 1"]}"#,
    )
    .unwrap();
    std::fs::write(
        base.join("broken-gene.json"),
        "{\"type\": \"Gene\", \"id\": ",
    )
    .unwrap();
    std::fs::write(
        base.join("bad.toml"),
        "extends = \"validate\"\nno_such_key = 1\n",
    )
    .unwrap();
    base
}

fn sandbox(args: &[&str], cwd: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-test")
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Exit 125, one line on stderr (and at most one more: what to do), and a valid report at
/// `report` whose only result says `sandbox_error` with that line; `needle` is in the line.
fn assert_failure_report(o: &Output, report: &Path, needle: &str) -> serde_json::Value {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(125), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() == 1 || (lines.len() == 2 && lines[1].starts_with("sandbox-run: ")),
        "one line, or one and a line of what to do, expected: {err}"
    );
    let line = lines[0]
        .strip_prefix("sandbox-run: ")
        .unwrap_or_else(|| panic!("unprefixed: {err}"));
    assert!(line.contains(needle), "{needle:?} not in {line:?}");
    let text = std::fs::read_to_string(report)
        .unwrap_or_else(|e| panic!("no report at {} ({e}) after: {err}", report.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    schema::assert_valid_report(&v);
    assert_eq!(v["ok"], false, "{v:#}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{v:#}");
    let res = &results[0];
    assert_eq!(res["status"], "sandbox_error", "{v:#}");
    assert_eq!(res["exit_code"], 125);
    // the report's error holds the line and the one of what to do, joined
    let whole: Vec<&str> = lines
        .iter()
        .map(|l| l.strip_prefix("sandbox-run: ").unwrap_or(l))
        .collect();
    assert_eq!(res["error"], whole.join("; "), "{v:#}");
    assert!(v["sandbox"].is_null());
    v
}

#[test]
fn run_failures_before_the_sandbox_write_a_report() {
    let base = fixture("run");
    let report = base.join("r.json");
    let p = base.join("p.toml");
    let repo = base.join("repo");
    let probe = probe();
    let bad = base.join("bad.toml");
    let no_repo = base.join("no-such-repo");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // a profile that does not exist, and one with an unknown key
        (
            vec!["--profile", "no-such-profile-xyz", "--repo", s(&repo)],
            "no-such-profile-xyz",
        ),
        (
            vec!["--profile", s(&bad), "--repo", s(&repo)],
            "no_such_key",
        ),
        // a repo that does not exist
        (
            vec!["--profile", s(&p), "--repo", s(&no_repo)],
            "no-such-repo",
        ),
        // bad flag values and an unknown flag, found by the argument parser
        (
            vec!["--profile", s(&p), "--repo", s(&repo), "--memory", "12X"],
            "--memory",
        ),
        (
            vec!["--profile", s(&p), "--repo", s(&repo), "--cpus", "0"],
            "--cpus",
        ),
        (
            vec!["--profile", s(&p), "--repo", s(&repo), "--no-such-flag"],
            "--no-such-flag",
        ),
    ];
    for (flags, needle) in cases {
        let _ = std::fs::remove_file(&report);
        let mut args = flags.clone();
        args.extend(["--report", s(&report), "--", s(&probe), "whoami"]);
        let o = sandbox(&args, &base);
        let v = assert_failure_report(&o, &report, needle);
        assert_eq!(
            v["commands"][0],
            format!("{} whoami", probe.display()),
            "{flags:?}"
        );
        assert_eq!(
            v["results"][0]["cmd"],
            format!("{} whoami", probe.display())
        );
    }
    // `--report=FILE` and the implied `run` before a bad value, too
    let _ = std::fs::remove_file(&report);
    let eq = format!("--report={}", s(&report));
    let o = sandbox(
        &[
            "-q",
            "run",
            "--timeout",
            "soon",
            &eq,
            "--profile",
            s(&p),
            "--",
            "x",
        ],
        &base,
    );
    assert_failure_report(&o, &report, "--timeout");
    // the report on stdout
    let o = sandbox(
        &[
            "--profile",
            "no-such-profile-xyz",
            "--repo",
            s(&repo),
            "--report",
            "-",
            "--",
            "x",
        ],
        &base,
    );
    assert_eq!(o.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not the report ({e}): {:?}", o));
    schema::assert_valid_report(&v);
    assert_eq!(v["results"][0]["status"], "sandbox_error");
}

#[test]
fn validate_failures_before_the_sandbox_write_a_report() {
    let base = fixture("validate");
    let report = base.join("r.json");
    let p = base.join("p.toml");
    let repo = base.join("repo");
    let gene = base.join("gene.json");
    let broken = base.join("broken-gene.json");
    let no_gene = base.join("no-gene.json");
    let no_repo = base.join("no-such-repo");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--profile", s(&p), "--repo", s(&repo), "--gene", s(&broken)],
            "broken-gene.json",
        ),
        (
            vec![
                "--profile",
                s(&p),
                "--repo",
                s(&repo),
                "--gene",
                s(&no_gene),
            ],
            "no-gene.json",
        ),
        (
            vec![
                "--profile",
                "no-such-profile-xyz",
                "--repo",
                s(&repo),
                "--gene",
                s(&gene),
            ],
            "no-such-profile-xyz",
        ),
        (
            vec![
                "--profile",
                s(&p),
                "--repo",
                s(&no_repo),
                "--gene",
                s(&gene),
            ],
            "no-such-repo",
        ),
        (
            vec![
                "--profile",
                s(&p),
                "--repo",
                s(&repo),
                "--gene",
                s(&gene),
                "--timeout",
                "1x",
            ],
            "--timeout",
        ),
    ];
    for (flags, needle) in cases {
        let _ = std::fs::remove_file(&report);
        let mut args = vec!["validate"];
        args.extend(flags);
        args.extend(["--report", s(&report)]);
        let o = sandbox(&args, &base);
        let v = assert_failure_report(&o, &report, needle);
        if needle == "no-such-profile-xyz" {
            // the gene was read: its id and commands are in the report
            assert_eq!(v["gene_id"], "g-1", "{v:#}");
            assert_eq!(v["commands"], serde_json::json!(["node -e 1"]));
        }
    }
}

/// A layer the profile requires that this host cannot give: rootless here, the cgroup (not
/// delegated); as root, a landlock ABI above the kernel's (when there is one).
#[test]
fn a_required_layer_missing_writes_a_report() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("layer");
    let report = base.join("r.json");
    let root = nix::unistd::geteuid().is_root();
    let abi = support::common::landlock_abi();
    let (extra, needle) = if !root && sandbox_run::layers::cgroup::Host::detect().is_err() {
        ("[layers]\ncgroup = \"required\"\n", "cgroup")
    } else if abi < 7 {
        (
            "[layers]\ncgroup = \"best-effort\"\nlandlock_min_abi = 7\n",
            "landlock",
        )
    } else {
        eprintln!(
            "skip: this host has every layer a profile can require (landlock ABI {abi}, a cgroup)"
        );
        return;
    };
    support::probe_profile(&base, "validate", "", extra);
    let o = sandbox(
        &[
            "--profile",
            s(&base.join("p.toml")),
            "--repo",
            s(&base.join("repo")),
            "--report",
            s(&report),
            "--",
            s(&probe()),
            "whoami",
        ],
        &base,
    );
    let v = assert_failure_report(&o, &report, needle);
    assert_eq!(v["results"][0]["argv"][1], "whoami", "{v:#}");
}

/// The report path comes first: a report that cannot be created is the error, before the
/// profile is even read, and nothing runs.
#[test]
fn the_report_path_is_checked_before_anything_else() {
    let base = fixture("first");
    let report = base.join("no-such-dir/r.json");
    let o = sandbox(
        &[
            "--profile",
            "no-such-profile-xyz",
            "--repo",
            s(&base.join("repo")),
            "--report",
            s(&report),
            "--",
            "x",
        ],
        &base,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.starts_with("sandbox-run: report "), "{err}");
    assert!(!err.contains("no-such-profile-xyz"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!report.exists());
}

/// The repo unknown (`--repo` missing): the report path is opened without following any link
/// at all, since which links the repo controls is unknown. A path through a symlink is refused
/// (the error line says so), a plain one is written.
#[test]
fn with_the_repo_unknown_no_link_is_followed_to_the_report() {
    let base = fixture("nolink");
    let real = base.join("real");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
    let through = base.join("link/r.json");
    let no_repo = base.join("no-such-repo");
    let args = |report: &Path| {
        sandbox(
            &[
                "--profile",
                "validate",
                "--repo",
                s(&no_repo),
                "--report",
                s(report),
                "--",
                "x",
            ],
            &base,
        )
    };
    let o = args(&through);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains("no-such-repo"), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with(&format!("sandbox-run: report {}: ", through.display()))),
        "{err}"
    );
    assert!(!real.join("r.json").exists());
    // control: the plain path gets its report
    let plain = real.join("r.json");
    let o = args(&plain);
    assert_failure_report(&o, &plain, "no-such-repo");
}

// ---------------------------------------------------------------------------------------------
// The report outside the repo is created fresh by its caller, never written into a file or
// through a link or directory someone else controls. Found: root's `--report /tmp/x/r.json`
// went into a file another user had made beforehand (0666), which that user rewrote to
// `"ok"` after the run, and a consumer trusted it; and through another user's directory link
// on the way.

/// The uid and gid of the local user `name` (from /etc/passwd), if there is one.
fn local_user(name: &str) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// `sh -c script` as the user `name`; its exit code.
fn as_user(name: &str, script: &str) -> Option<i32> {
    Command::new("runuser")
        .args(["-u", name, "--", "sh", "-c", script])
        .status()
        .unwrap()
        .code()
}

fn mode(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.mode() & 0o7777, m.uid())
}

fn chmod(p: &Path, m: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

/// A run of the probe with `--report report`; the report as JSON when it was written.
fn run_with_report(base: &Path, report: &Path) -> (Output, Option<serde_json::Value>) {
    let o = sandbox(
        &[
            "--profile",
            s(&base.join("p.toml")),
            "--repo",
            s(&base.join("repo")),
            "--report",
            s(report),
            "--",
            s(&probe()),
            "whoami",
        ],
        base,
    );
    let v = std::fs::read_to_string(report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    (o, v)
}

/// Root, another user playing the attacker (`sbxtest`): a report file that user made
/// beforehand in a sticky shared directory (as in /tmp) is replaced by a fresh one of root's,
/// 0644, which that user can neither rewrite nor remove afterwards; a directory of that user's
/// on the way, or a link of theirs, is refused with one line naming it (exit 125), and nothing
/// is written there or where the link leads. The same for the report of a run that fails
/// before the repo is known.
#[test]
fn another_users_file_or_link_never_carries_the_report() {
    if !support::sandbox_works() {
        return;
    }
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skip another_users_file_or_link_never_carries_the_report: needs root to play another user");
        return;
    }
    let Some((uid, gid)) = local_user("sbxtest") else {
        eprintln!("skip another_users_file_or_link_never_carries_the_report: no user sbxtest");
        return;
    };
    let base = fixture("foreign");
    chmod(&base, 0o755);
    let shared = base.join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let chown = |p: &Path| std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();

    // 1. the other user's file, made beforehand, 0666
    let report = shared.join("r.json");
    let r = s(&report);
    assert_eq!(
        as_user("sbxtest", &format!("umask 0; echo planted > {r}")),
        Some(0)
    );
    let (o, v) = run_with_report(&base, &report);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(v.expect("a valid report")["ok"], true);
    assert_eq!(mode(&report), (0o644, 0), "not a fresh file of root's");
    // the other user, after the run, rewrites it for the consumer, or swaps it
    assert_ne!(
        as_user("sbxtest", &format!("printf '\"ok\"' > {r}")),
        Some(0)
    );
    assert_ne!(
        as_user(
            "sbxtest",
            &format!("mv -f {r} {r}.x 2>/dev/null || rm -f {r}; test ! -e {r}")
        ),
        Some(0)
    );
    let text = std::fs::read_to_string(&report).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["commands"][0], format!("{} whoami", probe().display()));

    // 1a. the other way round: the other user's report onto root's file there is refused
    // (not root, they may not replace it in a sticky directory), and the file stays root's
    let o = Command::new("runuser")
        .args(["-u", "sbxtest", "--", BIN, "--profile"])
        .arg(base.join("p.toml"))
        .arg("--repo")
        .arg(base.join("repo"))
        .arg("--report")
        .arg(&report)
        .args(["--", "x"])
        .current_dir(&base)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains("an existing file of uid 0 that may not be replaced here"),
        "{err}"
    );
    assert_eq!(mode(&report), (0o644, 0));
    assert_eq!(std::fs::read_to_string(&report).unwrap(), text);

    // 1b. the same before the repo is known (a failure's report)
    std::fs::remove_file(&report).unwrap();
    assert_eq!(
        as_user("sbxtest", &format!("umask 0; echo planted > {r}")),
        Some(0)
    );
    let o = sandbox(
        &[
            "--profile",
            "no-such-profile-xyz",
            "--report",
            r,
            "--repo",
            s(&base.join("repo")),
            "--",
            "x",
        ],
        &base,
    );
    assert_failure_report(&o, &report, "no-such-profile-xyz");
    assert_eq!(mode(&report), (0o644, 0), "not a fresh file of root's");

    // 2. a directory of the other user's on the way
    let theirs = base.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    chown(&theirs);
    let into = theirs.join("r.json");
    let (o, _) = run_with_report(&base, &into);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("{} is a directory of uid {uid}", theirs.display())),
        "{err}"
    );
    assert!(!into.exists());

    // 3. a link of the other user's on the way (made in the shared directory)
    let elsewhere = base.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = shared.join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    chown(&link);
    let (o, _) = run_with_report(&base, &link.join("r.json"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!("{} is a symlink of uid {uid}", link.display())),
        "{err}"
    );
    assert!(!elsewhere.join("r.json").exists());
    // control: the same link of root's is followed
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    let (o, v) = run_with_report(&base, &link.join("r.json"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(v.is_some() && elsewhere.join("r.json").is_file());
}

/// Root and rootless: a directory other users may write to, without the sticky bit, is
/// refused (naming it); an existing file of the caller's own that others may write, or that
/// has another hard link, is replaced by a fresh one (the other name keeps its content); a
/// plain report is made without group or other write.
#[test]
fn the_report_is_a_fresh_file_in_a_directory_the_caller_controls() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("fresh");
    chmod(&base, 0o755);
    // SAFETY: geteuid takes no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };

    // a directory everyone may write to, no sticky bit
    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    let (o, _) = run_with_report(&base, &open.join("r.json"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "{} is a directory other users may write to",
            open.display()
        )),
        "{err}"
    );
    assert!(!open.join("r.json").exists());
    // control: with the sticky bit, as /tmp
    chmod(&open, 0o1777);
    let (o, v) = run_with_report(&base, &open.join("r.json"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(v.is_some());
    assert_eq!(mode(&open.join("r.json")).1, me);
    assert_eq!(mode(&open.join("r.json")).0 & 0o022, 0);

    // the caller's own file, 0666 and with a second name
    let mine = base.join("mine");
    std::fs::create_dir(&mine).unwrap();
    let report = mine.join("r.json");
    std::fs::write(&report, "old\n").unwrap();
    chmod(&report, 0o666);
    std::fs::hard_link(&report, mine.join("other")).unwrap();
    let (o, v) = run_with_report(&base, &report);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(v.is_some());
    assert_eq!(
        std::fs::read_to_string(mine.join("other")).unwrap(),
        "old\n"
    );
    let (m, owner) = mode(&report);
    assert_eq!((m & 0o022, owner), (0, me));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&report).unwrap().nlink(), 1);
}
