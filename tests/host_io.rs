//! The supervisor's own I/O on the host (DESIGN.md section 3, "The host boundary"): what
//! sandbox-run itself opens, writes or runs on the host must not be steered by what a hostile
//! command left in the repo: the report file, nothing run on the host, `--repo` through a
//! symlink, and the output the supervisor passes through.
//!
//! Each attack runs the probe inside a real sandbox (or plants what a previous run would have
//! left), beside a positive control.

mod common;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The report at `path`, parsed and checked against the schema.
fn valid_report(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("report {}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("report {}: not JSON ({e}): {text:?}", path.display()));
    schema::assert_valid_report(&v);
    v
}

/// A test profile with more TOML keys: `extra` is `(table, key, value)`.
fn profile_with(
    f: &Fixture,
    name: &str,
    spec: &Spec,
    extra: &[(&str, &str, toml::Value)],
) -> PathBuf {
    let mut t: toml::Table = toml::from_str(&spec.to_toml()).unwrap();
    for (table, key, value) in extra {
        t.entry(table.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap()
            .insert(key.to_string(), value.clone());
    }
    let p = f.path(&format!("profile-{name}.toml"));
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    p
}

/// Run `c` with its stdout going to the regular file `out` (as `> log` would), stderr
/// captured; at most [`LIMIT`].
fn run_to_file(mut c: Command, out: &Path) -> Run {
    use std::io::Read;
    let cmd = format!("{} > {}", render(&c), out.display());
    c.stdout(std::fs::File::create(out).unwrap())
        .stderr(Stdio::piped());
    let mut child = spawn_retrying(&mut c).unwrap();
    let mut err = child.stderr.take().unwrap();
    let t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = std::time::Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out: {cmd}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    Run::from_output(
        cmd,
        std::process::Output {
            status,
            stdout: Vec::new(),
            stderr: t.join().unwrap(),
        },
    )
}

const VICTIM: &str = "the victim's own content\n";

// ---------------------------------------------------------------------------------------------
// 6a: the report file is created at start, without following a link inside the repo.

/// Run 1, in a rw repo bound as it is (`disk = "off"`) with `--report <repo>/report.json`:
/// the workload replaces report.json with a symlink to a file outside the repo. The report
/// goes to the file opened at start (now unlinked: its fd still points at the old inode, so
/// that report is lost, which is the workload's doing), never through the link. Run 2 with
/// the same `--report` is refused with 125 before anything runs. The victim is intact
/// throughout. (With a disk cap the link never reaches the host:
/// [`a_report_path_is_left_alone_by_the_copy_back`].)
#[test]
fn a_report_file_replaced_by_a_symlink_is_never_written_through() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("report-file-link");
    let repo = f.repo("repo");
    let victim = f.write("victim.txt", VICTIM);
    let p = f.profile(&Spec::default().repo("rw").disk("off"));
    let report = repo.join("report.json");
    // left by an earlier run (and created by this one at its start anyway)
    std::fs::write(&report, "{}\n").unwrap();

    let r = run_probe(
        &p,
        &repo,
        &["--report", s(&report)],
        &["replace-with-symlink", s(&report), s(&victim)],
    );
    r.assert_ok();
    assert_eq!(
        std::fs::read_link(&report).ok().as_deref(),
        Some(victim.as_path()),
        "the workload's symlink is in place:\n{r}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        VICTIM,
        "the report was written through the workload's symlink:\n{r}"
    );

    // run 2: refused before anything runs
    let marker = repo.join("ran.txt");
    let r = run_probe(&p, &repo, &["--report", s(&report)], &["write", s(&marker)]);
    r.run.assert_code(125);
    assert!(
        r.run
            .stderr
            .contains(&format!("sandbox-run: report {}: ", report.display())),
        "one line naming the report path:\n{r}"
    );
    assert_eq!(r.run.stderr.lines().count(), 1, "one line:\n{r}");
    assert!(!marker.exists(), "the command ran:\n{r}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), VICTIM);

    // the same for validate
    let gene = f.write(
        "gene.json",
        &serde_json::json!({
            "type": "Gene", "id": "g1",
            "validation": [format!("{} write {}", probe().display(), marker.display())],
        })
        .to_string(),
    );
    let mut c = Command::new(BIN);
    c.args(["validate", "--profile", s(&p), "--gene", s(&gene)])
        .args(["--repo", s(&repo), "--report", s(&report)])
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e")
        .current_dir(&repo)
        .stdin(Stdio::null());
    let r = run_command(c, LIMIT);
    r.assert_code(125);
    assert!(r.stderr.contains("sandbox-run: report "), "{r}");
    assert!(!marker.exists(), "validate ran the command:\n{r}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), VICTIM);
}

/// The variant: a directory on the way to the report (`<repo>/out/report.json`) replaced by a
/// symlink to a directory outside the repo that holds a file of that name.
#[test]
fn a_report_directory_replaced_by_a_symlink_is_never_written_through() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("report-dir-link");
    let repo = f.repo("repo");
    std::fs::create_dir(repo.join("out")).unwrap();
    let victim = f.write("elsewhere/report.json", VICTIM);
    let p = f.profile(&Spec::default().repo("rw").disk("off"));
    let report = repo.join("out/report.json");

    run_probe(
        &p,
        &repo,
        &["--report", s(&report)],
        &[
            "replace-with-symlink",
            s(&repo.join("out")),
            s(&f.path("elsewhere")),
        ],
    )
    .assert_ok();
    assert!(repo.join("out").is_symlink());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), VICTIM);
    // the report of run 1 went to the file opened at start, now at out.replaced/
    valid_report(&repo.join("out.replaced/report.json"));

    let marker = repo.join("ran.txt");
    let r = run_probe(&p, &repo, &["--report", s(&report)], &["write", s(&marker)]);
    r.run.assert_code(125);
    assert!(r.run.stderr.contains("sandbox-run: report "), "{r}");
    assert!(!marker.exists(), "the command ran:\n{r}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), VICTIM);
}

/// With a disk cap (the default of rw profiles) the command works on a copy-on-write layer and
/// its changes are copied back after the run; there, the report file and each directory on
/// its way are left alone: replacing the file by a link, or its directory by a link, or
/// writing a forged report into it never reaches the host, and the real report arrives
/// whole. Each refusal is named on stderr. Control: another file beside it is copied back.
#[test]
fn a_report_path_is_left_alone_by_the_copy_back() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("report-kept");
    let repo = f.repo("repo");
    std::fs::create_dir(repo.join("out")).unwrap();
    let victim = f.write("elsewhere/report.json", VICTIM);
    let p = f.profile(&Spec::default().repo("rw"));
    let report = repo.join("out/report.json");
    let (out, elsewhere) = (repo.join("out"), f.path("elsewhere"));
    let attacks: [&[&str]; 3] = [
        &["replace-with-symlink", s(&report), s(&victim)],
        &["replace-with-symlink", s(&out), s(&elsewhere)],
        &["write", s(&report)],
    ];
    for attack in attacks {
        let r = run_probe(&p, &repo, &["--report", s(&report)], attack);
        r.assert_ok();
        assert!(
            r.run.stderr.contains("the report's path)"),
            "the refusal is named:\n{r}"
        );
        assert!(repo.join("out").is_dir() && !repo.join("out").is_symlink());
        let v = valid_report(&report);
        assert_eq!(v["results"][0]["status"], "ok", "{v:#}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), VICTIM);
    }
    // the report path as a link outside the repo leading into it: refused at the start (it
    // could not be told from one the command planted), so nothing runs
    let link = f.path("report-link.json");
    std::os::unix::fs::symlink(&report, &link).unwrap();
    let marker = repo.join("ran.txt");
    let r = run_probe(&p, &repo, &["--report", s(&link)], &["write", s(&marker)]);
    r.run.assert_code(125);
    assert!(
        r.run
            .stderr
            .contains("a symlink inside the repo is on the way"),
        "{r}"
    );
    assert!(!marker.exists());
    // control: a file beside the report is copied back
    let beside = repo.join("out/beside.txt");
    run_probe(&p, &repo, &["--report", s(&report)], &["write", s(&beside)]).assert_ok();
    assert!(beside.exists());
}

/// Control: a plain report path inside the repo works and holds a valid report; so does one
/// outside it, and a symlink the caller owns outside the repo is followed.
#[test]
fn a_report_inside_the_repo_works() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("report-inside");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));
    for report in [repo.join("report.json"), repo.join("src/r.json")] {
        run_probe(&p, &repo, &["--report", s(&report)], &["pid"]).assert_ok();
        let v = valid_report(&report);
        assert_eq!(v["results"][0]["status"], "ok", "{v:#}");
        assert!(v["env_fingerprint"]["node_version"].is_null());
    }
    // a relative path, against the caller's cwd (the repo here), written twice: no leftovers
    run_probe(&p, &repo, &["--report", "rel.json"], &["pid"]).assert_ok();
    valid_report(&repo.join("rel.json"));
    std::fs::write(repo.join("rel.json"), "x".repeat(100_000)).unwrap();
    run_probe(&p, &repo, &["--report", "rel.json"], &["pid"]).assert_ok();
    valid_report(&repo.join("rel.json"));
    // the caller's own link outside the repo
    std::fs::create_dir(f.path("reports")).unwrap();
    std::os::unix::fs::symlink(f.path("reports"), f.path("link")).unwrap();
    run_probe(
        &p,
        &repo,
        &["--report", s(&f.path("link/r.json"))],
        &["pid"],
    )
    .assert_ok();
    valid_report(&f.path("reports/r.json"));
}

/// The report file exists from the start, so a sandbox-run failure after that leaves a valid
/// report saying `sandbox_error`, not an empty file. (An `extra_rw` path that does not exist
/// makes the plan fail after the report was created.)
#[test]
fn a_sandbox_error_after_the_start_leaves_a_valid_report() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("report-sandbox-error");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("rw").extra_rw(&f.path("missing")));
    let report = repo.join("report.json");
    let marker = repo.join("ran.txt");
    let r = run_probe(&p, &repo, &["--report", s(&report)], &["write", s(&marker)]);
    r.run.assert_code(125);
    assert!(!marker.exists(), "{r}");
    let v = valid_report(&report);
    let res = &v["results"][0];
    assert_eq!(res["status"], "sandbox_error", "{v:#}");
    assert_eq!(res["exit_code"], 125);
    assert!(
        res["error"]
            .as_str()
            .unwrap_or("")
            .contains("does not exist"),
        "{v:#}"
    );
    assert_eq!(v["ok"], false);
}

// ---------------------------------------------------------------------------------------------
// 6d: sandbox-run never executes anything on the host.

/// A repo ships `node_modules/.bin/node`, and the caller's PATH starts with that directory (as
/// inside an npm script). A run with `--report` must not execute it on the host (the report's
/// node version used to come from running `node --version` found through that PATH).
#[test]
fn a_repo_supplied_node_on_path_never_runs_on_the_host() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("host-node");
    let repo = f.repo("repo");
    let marker = f.path("node-ran-on-the-host");
    let node = f.write(
        "repo/node_modules/.bin/node",
        &format!(
            "#!/bin/sh\necho ran > '{}'\necho v99.0.0-planted\n",
            marker.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
    // control: the planted node does run when something executes it
    let ran = spawn_retrying(Command::new(&node).stdout(Stdio::piped()))
        .unwrap()
        .wait_with_output()
        .unwrap();
    assert!(ran.status.success() && marker.exists());
    std::fs::remove_file(&marker).unwrap();

    let p = f.profile(&Spec::default());
    let path = format!(
        "{}:{}",
        repo.join("node_modules/.bin").display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    );
    let report = f.path("report.json");
    let r = run_probe_with(&p, &repo, &["--report", s(&report)], &["pid"], |c| {
        c.env("PATH", &path);
    });
    r.assert_ok();
    assert!(
        !marker.exists(),
        "sandbox-run executed the repo's node on the host:\n{r}"
    );
    let v = valid_report(&report);
    assert!(v["env_fingerprint"]["node_version"].is_null(), "{v:#}");
}

// ---------------------------------------------------------------------------------------------
// 2d: a `--repo` reached through a symlink is refused, with the resolved path in the message.

/// An rw run replaced `mono/packages/app` by a symlink to a host directory; the next run with
/// `--repo mono/packages/app` would have mounted that directory read-write as the repo. It is
/// refused (125, one line naming both paths) before anything runs. Variant: the link is a
/// directory on the way. Control: the resolved path, passed as such, works.
#[test]
fn a_repo_reached_through_a_symlink_is_refused() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("repo-link");
    let mono = f.repo("mono");
    std::fs::create_dir_all(mono.join("packages/app")).unwrap();
    let host = f.path("host-dir");
    std::fs::create_dir(&host).unwrap();
    let p = f.profile(&Spec::default().repo("rw"));
    // what the earlier rw run did, from inside
    run_probe(
        &p,
        &mono,
        &[],
        &[
            "replace-with-symlink",
            s(&mono.join("packages/app")),
            s(&host),
        ],
    )
    .assert_ok();
    std::os::unix::fs::symlink(&mono, f.path("mono-link")).unwrap();

    let marker = host.join("ran.txt");
    for flag in ["mono/packages/app", "mono-link/packages/app.replaced"] {
        let r = run_probe_with(&p, Path::new(flag), &[], &["write", s(&marker)], |c| {
            c.current_dir(&f.dir);
        });
        r.run.assert_code(125);
        let resolved = std::fs::canonicalize(f.path(flag)).unwrap();
        let want = format!(
            "sandbox-run: --repo {flag}: reached through a symlink (it resolves to {}); pass the \
             resolved path if you mean it\n",
            resolved.display()
        );
        assert_eq!(r.run.stderr, want, "{r}");
        assert!(!marker.exists(), "the command ran:\n{r}");
        assert!(!mono.join("packages/app.replaced/ran.txt").exists());
    }
    // control: the resolved path
    let r = run_probe_with(
        &p,
        Path::new("host-dir"),
        &[],
        &["write", s(&marker)],
        |c| {
            c.current_dir(&f.dir);
        },
    );
    r.assert_ok();
    assert!(marker.exists());
}

// ---------------------------------------------------------------------------------------------
// 10: the output the supervisor passes through is capped by `[limits] output`.

const MIB: usize = 1 << 20;

/// With a capture the supervisor pipes the command's output and writes it to its own stdout,
/// which `fsize` does not limit: 12 MiB reached a log file under `fsize 4M`. With `[limits]
/// output = "1M"` the log holds exactly the first MiB, one line says so, and the report lists
/// `output` under `limits_hit`; the command itself is not disturbed (it finishes, exit 0).
/// Control: under the cap everything arrives. Variant: `--report -`, where the command's
/// stdout goes to sandbox-run's stderr and the report to its stdout.
#[test]
fn captured_output_past_the_output_cap_is_dropped() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("output-cap");
    let repo = f.repo("repo");
    let p = profile_with(
        &f,
        "cap",
        &Spec::default(),
        &[
            ("limits", "output", toml::Value::String("1M".into())),
            ("limits", "fsize", toml::Value::String("1M".into())),
        ],
    );
    let report = f.path("report.json");
    let log = f.path("out.log");
    let probe = probe();
    let run = |n: usize| {
        let c = sandbox_command(
            &p,
            &repo,
            &["--report", s(&report), "--capture"],
            &[s(&probe), "write-bytes", &n.to_string()],
        );
        run_to_file(c, &log)
    };
    let line = "sandbox-run: output: stdout passed the 1M cap; the rest was dropped";

    let r = run(3 * MIB);
    r.assert_code(0);
    let got = std::fs::read(&log).unwrap();
    assert_eq!(got.len(), MIB, "the log holds the cap, no more:\n{r}");
    assert!(got.iter().all(|b| *b == b'x'), "only the command's bytes");
    assert!(r.stderr.lines().any(|l| l == line), "{r}");
    assert!(r.stderr.contains("write-bytes: ok bytes=3145728"), "{r}");
    let v = valid_report(&report);
    let res = &v["results"][0];
    assert_eq!(res["status"], "ok", "{v:#}");
    assert_eq!(res["limits_hit"], serde_json::json!(["output"]), "{v:#}");
    assert_eq!(res["out"].as_str().unwrap().len(), 64 * 1024);

    // control: under the cap everything arrives
    let r = run(MIB / 2);
    r.assert_code(0);
    assert_eq!(std::fs::read(&log).unwrap().len(), MIB / 2, "{r}");
    assert!(!r.stderr.contains("sandbox-run: output"), "{r}");
    let v = valid_report(&report);
    assert_eq!(
        v["results"][0]["limits_hit"],
        serde_json::json!([]),
        "{v:#}"
    );

    // --report -: the command's stdout goes to stderr, capped the same way
    let c = sandbox_command(
        &p,
        &repo,
        &["--report", "-"],
        &[s(&probe), "write-bytes", &(3 * MIB).to_string()],
    );
    let r = run_to_file(c, &log);
    r.assert_code(0);
    assert!(r.stderr.lines().any(|l| l.ends_with(line)), "{r}");
    // the command's bytes: one run of `x`, right before the cap's line
    let xs = r
        .stderr
        .split(|c| c != 'x')
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert_eq!(xs, MIB, "stderr holds the capped stdout");
    assert!(
        r.stderr.contains(&format!("x{line}")),
        "the line follows the cap"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
    schema::assert_valid_report(&v);
    assert_eq!(v["results"][0]["limits_hit"], serde_json::json!(["output"]));
}

/// When sandbox-run does not pipe (no `--report`, so no capture), the command writes to the inherited fd
/// itself and `RLIMIT_FSIZE` applies to its writes to a regular file: the log stops at
/// `fsize` and the command gets SIGXFSZ. Control: under `fsize`, everything arrives.
#[test]
fn without_a_capture_fsize_caps_the_commands_own_writes() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("output-fsize");
    let repo = f.repo("repo");
    let p = profile_with(
        &f,
        "fsize",
        &Spec::default(),
        &[("limits", "fsize", toml::Value::String("1M".into()))],
    );
    let log = f.path("out.log");
    let probe = probe();
    let run = |n: usize| {
        let c = sandbox_command(&p, &repo, &[], &[s(&probe), "write-bytes", &n.to_string()]);
        run_to_file(c, &log)
    };
    let r = run(3 * MIB);
    r.assert_code(128 + libc::SIGXFSZ);
    assert_eq!(std::fs::read(&log).unwrap().len(), MIB, "{r}");
    let r = run(MIB / 2);
    r.assert_code(0);
    assert_eq!(std::fs::read(&log).unwrap().len(), MIB / 2, "{r}");
}
