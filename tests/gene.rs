//! `sandbox-run validate --gene`: gate all, then run fail-fast, each in a fresh sandbox.

#[path = "support/mod.rs"]
mod support;

use support::schema;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::BIN;

fn have_node() -> bool {
    Path::new("/usr/bin/node").exists() && Path::new("/usr/bin/npm").exists()
}

/// A node repo with passing, failing and marker-writing scripts, and a profile like
/// `validate` but with a read-write repo (so a marker proves a command ran) and the cgroup
/// layer best-effort.
fn fixture(name: &str) -> PathBuf {
    let base = support::scratch(&format!("gene-{name}"));
    let repo = base.join("repo");
    std::fs::create_dir_all(repo.join("scripts")).unwrap();
    std::fs::write(repo.join("scripts/pass.js"), "console.log('pass');\n").unwrap();
    std::fs::write(
        repo.join("scripts/fail.js"),
        "console.error('boom'); process.exit(3);\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("scripts/mark.js"),
        "require('fs').appendFileSync(process.argv[2], 'ran\\n');\n",
    )
    .unwrap();
    std::fs::write(
        base.join("profile.toml"),
        "extends = \"validate\"\n[filesystem]\nrepo = \"rw\"\n[layers]\ncgroup = \"best-effort\"\n",
    )
    .unwrap();
    base
}

fn write_gene(base: &Path, commands: &[&str]) -> PathBuf {
    let g = base.join("gene.json");
    let json = serde_json::json!({"type": "Gene", "id": "gene_test", "validation": commands});
    std::fs::write(&g, json.to_string()).unwrap();
    g
}

fn validate(base: &Path, gene: &Path) -> (Output, serde_json::Value) {
    let report = base.join("report.json");
    let _ = std::fs::remove_file(&report);
    let o = Command::new(BIN)
        .args(["validate", "--profile"])
        .arg(base.join("profile.toml"))
        .arg("--gene")
        .arg(gene)
        .arg("--repo")
        .arg(base.join("repo"))
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|_| panic!("no report; stderr: {}", String::from_utf8_lossy(&o.stderr)));
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    schema::assert_valid_report(&report);
    (o, report)
}

#[test]
fn a_passing_gene_runs_every_command() {
    if !support::sandbox_works() {
        return;
    }
    if !have_node() {
        eprintln!("skip: node/npm not installed");
        return;
    }
    let base = fixture("pass");
    let gene = write_gene(
        &base,
        &["node scripts/pass.js", "node scripts/mark.js ran.txt"],
    );
    let (o, r) = validate(&base, &gene);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(r["type"], "ValidationReport");
    assert_eq!(r["gene_id"], "gene_test");
    assert_eq!(r["ok"], true);
    assert_eq!(r["results"].as_array().unwrap().len(), 2);
    assert_eq!(r["results"][0]["out"], "pass\n");
    assert_eq!(
        std::fs::read_to_string(base.join("repo/ran.txt")).unwrap(),
        "ran\n"
    );
    for key in [
        "id",
        "commands",
        "results",
        "env_fingerprint",
        "started_at",
        "finished_at",
    ] {
        assert!(!r[key].is_null(), "seed field {key} missing: {r}");
    }
}

#[test]
fn fail_fast_stops_after_the_failing_command() {
    if !support::sandbox_works() {
        return;
    }
    if !have_node() {
        eprintln!("skip: node/npm not installed");
        return;
    }
    let base = fixture("failfast");
    let gene = write_gene(
        &base,
        &[
            "node scripts/pass.js",
            "node scripts/fail.js",
            "node scripts/mark.js after.txt",
        ],
    );
    let (o, r) = validate(&base, &gene);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(r["ok"], false);
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{r}");
    assert_eq!(results[1]["status"], "failed");
    assert_eq!(results[1]["exit_code"], 3);
    assert_eq!(results[1]["err"], "boom\n");
    // the command that did not run is listed as such, and one line says where it stopped
    assert_eq!(results[2]["status"], "skipped", "{r}");
    assert_eq!(results[2]["cmd"], "node scripts/mark.js after.txt");
    assert_eq!(results[2]["ok"], false);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "sandbox-run: gene gene_test: command 2 of 3 failed (\"node scripts/fail.js\": exit 3); 1 not run"
        ),
        "{err}"
    );
    assert!(
        !base.join("repo/after.txt").exists(),
        "the third command ran"
    );
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut n = r
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0)) >= (major, minor)
}

/// A project whose tests run against its build output (`dist/`, committed, as many packages
/// do), with the `validate` profile's copy-on-write repo.
fn build_project(name: &str, add: &str) -> PathBuf {
    let base = support::scratch(&format!("gene-{name}"));
    let repo = base.join("repo");
    std::fs::create_dir_all(repo.join("scripts")).unwrap();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::create_dir_all(repo.join("dist/old")).unwrap();
    let good = "exports.add = (a, b) => a + b;\n";
    std::fs::write(repo.join("dist/index.js"), good).unwrap();
    std::fs::write(repo.join("dist/old/stale.js"), "stale\n").unwrap();
    std::fs::write(repo.join("src/index.js"), add).unwrap();
    std::fs::write(repo.join("obsolete.txt"), "x\n").unwrap();
    // the build replaces dist/ whole (a directory removed and made anew: overlayfs marks it
    // opaque in a user xattr, which tmpfs takes since Linux 6.6; before, even removing a
    // directory of the repo fails with EIO there, so only the stale file goes)
    let clean = if kernel_at_least(6, 6) {
        "fs.rmSync('dist', { recursive: true, force: true });\nfs.mkdirSync('dist');\n"
    } else {
        "fs.rmSync('dist/old/stale.js');\n"
    };
    std::fs::write(
        repo.join("scripts/build.js"),
        format!(
            "const fs = require('fs');\n{clean}\
             fs.copyFileSync('src/index.js', 'dist/index.js');\n\
             fs.rmSync('obsolete.txt');\n"
        ),
    )
    .unwrap();
    std::fs::write(
        repo.join("scripts/test.js"),
        "const fs = require('fs');\n\
         if (fs.existsSync('dist/old/stale.js') || fs.existsSync('obsolete.txt')) { console.error('stale tree'); process.exit(2); }\n\
         const { add } = require('../dist/index.js');\n\
         if (add(2, 2) !== 4) { console.error('add(2, 2) = ' + add(2, 2)); process.exit(1); }\n\
         console.log('ok');\n",
    )
    .unwrap();
    std::fs::write(
        base.join("profile.toml"),
        "extends = \"validate\"\n[layers]\ncgroup = \"best-effort\"\n",
    )
    .unwrap();
    base
}

/// A false green once seen: a gene `build, test` on a broken change reported ok, because
/// each command got a fresh copy-on-write repo and the tests ran against the stale build.
/// Now the gene's commands share one layer: the test sees the new build (and what the build
/// removed is gone), so the broken change fails and the intact one passes. The repo itself
/// is untouched either way.
#[test]
fn a_genes_commands_share_one_copy_on_write_workspace() {
    if !support::sandbox_works() {
        return;
    }
    if !have_node() {
        eprintln!("skip: node/npm not installed");
        return;
    }
    for (name, add, want) in [
        ("broken", "exports.add = (a, b) => a - b;\n", Some(1)),
        ("intact", "exports.add = (a, b) => a + b;\n", Some(0)),
    ] {
        let base = build_project(name, add);
        let gene = write_gene(&base, &["node scripts/build.js", "node scripts/test.js"]);
        let (o, r) = validate(&base, &gene);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), want, "{name}: {err}\n{r:#}");
        assert_eq!(r["ok"], want == Some(0), "{name}: {r:#}");
        if name == "broken" {
            assert_eq!(r["results"][1]["err"], "add(2, 2) = 0\n", "{r:#}");
        }
        // nothing reached the repo
        let repo = base.join("repo");
        assert!(repo.join("dist/old/stale.js").exists(), "{name}");
        assert!(repo.join("obsolete.txt").exists(), "{name}");
        assert_eq!(
            std::fs::read_to_string(repo.join("dist/index.js")).unwrap(),
            "exports.add = (a, b) => a + b;\n"
        );
    }
}

#[test]
fn one_denied_command_means_nothing_runs() {
    if !have_node() {
        eprintln!("skip: node/npm not installed");
        return;
    }
    let base = fixture("denied");
    let gene = write_gene(
        &base,
        &[
            "node scripts/mark.js first.txt",
            "npm test && rm -rf /",
            "node -e 1",
        ],
    );
    let (o, r) = validate(&base, &gene);
    assert_eq!(o.status.code(), Some(126));
    assert_eq!(r["ok"], false);
    let results = r["results"].as_array().unwrap();
    let rules: Vec<&str> = results
        .iter()
        .map(|x| x["denied"]["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["shell-operator", "node-eval"]);
    assert!(results.iter().all(|x| x["status"] == "denied"));
    assert!(
        !base.join("repo/first.txt").exists(),
        "an allowed command ran before the audit finished"
    );
}

#[test]
fn malformed_genes_are_one_line_and_125() {
    let base = fixture("malformed");
    for (name, text) in [
        ("notjson", "nope".to_string()),
        ("noarray", r#"{"id":"g"}"#.to_string()),
        ("empty", r#"{"id":"g","validation":[""]}"#.to_string()),
        (
            "many",
            format!(
                r#"{{"id":"g","validation":[{}]}}"#,
                vec!["\"npm test\""; 10_000].join(",")
            ),
        ),
    ] {
        let g = base.join(format!("{name}.json"));
        std::fs::write(&g, text).unwrap();
        let o = Command::new(BIN)
            .args(["validate", "--profile", "validate", "--gene"])
            .arg(&g)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{name}: {e}");
        assert_eq!(e.lines().count(), 1, "{name}: {e}");
        assert!(e.starts_with("sandbox-run: gene "), "{name}: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Where a gene's carried workspace lives between its commands: a private run dir in
// sandbox-run's state (`STATE/sandbox-run/runs/gene-*`), owned by the user the sandbox runs
// as, removed at the end, and by the next gene when its sandbox-run was killed. Never under
// `$TMPDIR`.

/// A copy-on-write project whose first command writes `built.txt` and whose second waits
/// (`wait`) or passes.
fn carry_project(name: &str) -> PathBuf {
    let base = build_project(name, "exports.add = (a, b) => a + b;\n");
    let repo = base.join("repo");
    std::fs::write(
        repo.join("scripts/write.js"),
        "const fs = require('fs');\n\
         fs.writeFileSync('built.txt', 'built\\n');\n\
         fs.mkdirSync('locked'); fs.writeFileSync('locked/f', 'x'); fs.chmodSync('locked', 0);\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("scripts/check.js"),
        "if (require('fs').readFileSync('built.txt', 'utf8') !== 'built\\n') process.exit(4);\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("scripts/wait.js"),
        "setTimeout(() => {}, 120000);\n",
    )
    .unwrap();
    for d in ["state", "tmp"] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    base
}

/// `validate --gene` with `STATE` and `TMPDIR` of the fixture's own.
fn gene_command(base: &Path, gene: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["validate", "--profile"])
        .arg(base.join("profile.toml"))
        .arg("--gene")
        .arg(gene)
        .arg("--repo")
        .arg(base.join("repo"))
        .arg("--report")
        .arg(base.join("report.json"))
        .env("XDG_STATE_HOME", base.join("state"))
        .env("TMPDIR", base.join("tmp"));
    c
}

/// The entries of `dir` (none when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn can_carry() -> bool {
    if !support::sandbox_works() {
        return false;
    }
    if !have_node() {
        eprintln!("skip: node/npm not installed");
        return false;
    }
    true
}

/// A normal gene run leaves nothing: no run dir in the state, nothing under `$TMPDIR`; and the
/// layer really was carried (the second command reads what the first wrote).
#[test]
fn a_genes_workspace_leaves_nothing_behind() {
    if !can_carry() {
        return;
    }
    let base = carry_project("carry-clean");
    let gene = write_gene(&base, &["node scripts/write.js", "node scripts/check.js"]);
    let o = gene_command(&base, &gene).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        !base.join("repo/built.txt").exists(),
        "the repo was written"
    );
    assert_eq!(
        entries(&base.join("tmp")),
        Vec::<String>::new(),
        "left in TMPDIR"
    );
    let runs = base.join("state/sandbox-run/runs");
    assert!(
        runs.is_dir(),
        "the gene's layer was not kept in the state dir"
    );
    assert_eq!(
        entries(&runs),
        Vec::<String>::new(),
        "left in {}",
        runs.display()
    );
}

/// sandbox-run killed (SIGKILL) during a gene's second command: its run dir stays (nothing
/// of it ran at the end), and the next gene removes it; a live gene's is left alone.
#[test]
fn a_killed_genes_workspace_is_removed_by_the_next_gene() {
    use std::os::unix::fs::MetadataExt;
    if !can_carry() {
        return;
    }
    let base = carry_project("carry-killed");
    let runs = base.join("state/sandbox-run/runs");
    let gene = write_gene(&base, &["node scripts/write.js", "node scripts/wait.js"]);
    /// Killed (SIGKILL) when dropped, a failing assertion too.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Killed(
        gene_command(&base, &gene)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The first command's layer is saved: the second is starting.
    let deadline = std::time::Instant::now() + support::slack(60.0);
    let saved = loop {
        let found = entries(&runs)
            .into_iter()
            .map(|n| runs.join(n))
            .find(|d| d.join("layer/built.txt").exists());
        if let Some(d) = found {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first command's layer was never saved under {}",
            runs.display()
        );
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the gene ended early"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // private to the user the sandbox runs as (the caller here)
    let m = std::fs::metadata(&saved).unwrap();
    // SAFETY: geteuid takes no arguments and cannot fail.
    assert_eq!(
        (m.mode() & 0o7777, m.uid()),
        (0o700, unsafe { libc::geteuid() })
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(child);
    assert!(
        saved.exists(),
        "control: the killed gene's run dir is there"
    );
    // the next gene (which sees the killed one's lock free once its stage 2 has died with it)
    let deadline = std::time::Instant::now() + support::slack(10.0);
    loop {
        let next = write_gene(&base, &["node scripts/write.js", "node scripts/check.js"]);
        let o = gene_command(&base, &next).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        if !saved.exists() || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(!saved.exists(), "the killed gene's run dir is still there");
    assert_eq!(entries(&runs), Vec::<String>::new());
    assert_eq!(
        entries(&base.join("tmp")),
        Vec::<String>::new(),
        "left in TMPDIR"
    );
}

/// Root runs a gene on a repo owned by another user (the sandbox runs as that user) with a
/// `$TMPDIR` that only root may enter: the layer is kept where that user can reach it (their
/// own state), so the gene works; nothing is left there or in `$TMPDIR`. It failed when the
/// layer was staged under `$TMPDIR`.
#[test]
fn root_runs_another_users_gene_with_a_private_tmpdir() {
    use std::os::unix::fs::PermissionsExt;
    if !can_carry() {
        return;
    }
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skip root_runs_another_users_gene_with_a_private_tmpdir: needs root (root runs another user's repo)");
        return;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let Some((uid, gid, home)) = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[0] == "sbxtest").then(|| {
            (
                f[2].parse::<u32>().unwrap(),
                f[3].parse::<u32>().unwrap(),
                PathBuf::from(f[5]),
            )
        })
    }) else {
        eprintln!("skip root_runs_another_users_gene_with_a_private_tmpdir: no user sbxtest");
        return;
    };
    if !home.is_dir() {
        eprintln!("skip root_runs_another_users_gene_with_a_private_tmpdir: sbxtest has no home directory");
        return;
    }
    let base = carry_project("carry-root");
    fn chown_tree(p: &Path, uid: u32, gid: u32) {
        std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(p).unwrap() {
                chown_tree(&e.unwrap().path(), uid, gid);
            }
        }
    }
    chown_tree(&base.join("repo"), uid, gid);
    let tmp = base.join("tmp");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700)).unwrap();
    let runs = home.join(".local/state/sandbox-run/runs");
    let before = entries(&runs);
    let gene = write_gene(&base, &["node scripts/write.js", "node scripts/check.js"]);
    let mut c = gene_command(&base, &gene);
    c.env_remove("XDG_STATE_HOME");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(base.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(entries(&tmp), Vec::<String>::new(), "left in TMPDIR");
    let after: Vec<String> = entries(&runs)
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(after, Vec::<String>::new(), "left in {}", runs.display());
}

/// Root runs a gene on a repo owned by a uid with no passwd entry (no home to keep state
/// under, as a checkout's owner in a container often is): the layer goes to root's
/// `/var/lib/sandbox-run/runs`, 0711 down to it, the run dir that uid's and 0700; it works
/// with a 0700 `$TMPDIR`, and nothing is left.
#[test]
fn root_runs_a_homeless_uids_gene() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !can_carry() {
        return;
    }
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "skip root_runs_a_homeless_uids_gene: needs root (root runs another user's repo)"
        );
        return;
    }
    const UID: u32 = 48_213;
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    if passwd
        .lines()
        .any(|l| l.split(':').nth(2) == Some(&UID.to_string()))
    {
        eprintln!("skip root_runs_a_homeless_uids_gene: uid {UID} has a passwd entry here");
        return;
    }
    let base = carry_project("carry-homeless");
    fn chown_tree(p: &Path, uid: u32) {
        std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(p).unwrap() {
                chown_tree(&e.unwrap().path(), uid);
            }
        }
    }
    chown_tree(&base.join("repo"), UID);
    let tmp = base.join("tmp");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700)).unwrap();
    let runs = Path::new("/var/lib/sandbox-run/runs");
    let before = entries(runs);
    let gene = write_gene(&base, &["node scripts/write.js", "node scripts/wait.js"]);
    let mut c = gene_command(&base, &gene);
    c.env_remove("XDG_STATE_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    // while it runs: the run dir is that uid's, 0700; the way to it root's, 0711
    let deadline = std::time::Instant::now() + support::slack(60.0);
    let dir = loop {
        let new = entries(runs)
            .into_iter()
            .filter(|n| !before.contains(n))
            .map(|n| runs.join(n))
            .find(|d| d.join("layer/built.txt").exists());
        if let Some(d) = new {
            break d;
        }
        if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the first command's layer was never saved under {}",
                runs.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let m = std::fs::metadata(&dir).unwrap();
    let ways: Vec<(u32, u32)> = [runs, runs.parent().unwrap()]
        .iter()
        .map(|d| {
            let m = std::fs::metadata(d).unwrap();
            (m.mode() & 0o7777, m.uid())
        })
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o700, UID));
    assert_eq!(ways, vec![(0o711, 0), (0o711, 0)]);
    // and a whole gene, which also removes the killed one's
    let gene = write_gene(&base, &["node scripts/write.js", "node scripts/check.js"]);
    let mut c = gene_command(&base, &gene);
    c.env_remove("XDG_STATE_HOME");
    let o = c.output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!dir.exists(), "the killed gene's run dir is still there");
    assert_eq!(entries(&tmp), Vec::<String>::new(), "left in TMPDIR");
    let after: Vec<String> = entries(runs)
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(after, Vec::<String>::new(), "left in {}", runs.display());
}
