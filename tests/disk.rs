//! `[limits] disk`: in a read-write repo the command may add at most so many bytes and files.
//! The repo is a copy-on-write overlay (src/layers/overlay.rs; on disk past 64 MiB of cap,
//! src/layers/disk.rs) whose changes reach the repo through the way back (src/changes/). Each
//! test writes from inside a real sandbox beside a control that stays under the cap, then
//! checks what reached the host.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Run a bash script inside, from `repo`, with a report; the script lives outside the repo
/// (in the fixture's `scripts/`, bound read-only by [`ci_with`]).
fn inside(f: &Fixture, p: &Path, repo: &Path, script: &str) -> (Run, serde_json::Value) {
    let sh = f.write("scripts/script.sh", script);
    let report = f.path("report.json");
    let c = sandbox_command(
        p,
        repo,
        &["--report", report.to_str().unwrap()],
        &["bash", sh.to_str().unwrap()],
    );
    let r = run_command(c, Duration::from_secs(120));
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("report: {e}\n{r}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    (r, v)
}

fn size_of(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Bytes of the regular files under `dir`, `.git` left out.
fn tree_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.path().symlink_metadata().unwrap();
        if e.file_name() == ".git" {
            continue;
        }
        if m.is_dir() {
            n += tree_bytes(&e.path());
        } else if m.is_file() {
            n += m.len();
        }
    }
    n
}

fn limits_hit(v: &serde_json::Value) -> Vec<String> {
    v["results"][0]["limits_hit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// 1.2 GiB reached an adapter repo with `fsize` at 32M per file and the report said `ok`. Now:
/// under `disk = "8M"`, the second 6 MiB file fails with ENOSPC inside, the report lists
/// `disk` under `limits_hit`, and the host's repo grew by at most 8 MiB. Control: with room
/// for both, both arrive on the host whole and no limit is hit.
#[test]
fn writes_past_the_disk_cap_fail_inside_and_are_reported() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("disk-bytes");
    let script = "head -c 6M /dev/zero > a && echo A-ok; \
                  head -c 6M /dev/zero > b && echo B-ok || echo B-failed; exit 0";

    let repo = f.repo("capped");
    let before = tree_bytes(&repo);
    let (r, v) = inside(&f, &ci_with(&f, "capped", &[("disk", "8M")]), &repo, script);
    r.assert_code(0);
    assert!(r.stdout.contains("A-ok"), "{r}");
    assert!(
        r.stdout.contains("B-failed"),
        "the cap must stop the second file:\n{r}"
    );
    assert!(r.stderr.contains("No space left on device"), "{r}");
    assert!(limits_hit(&v).contains(&"disk".to_string()), "{v:#}");
    assert_eq!(v["results"][0]["status"], "ok", "{v:#}");
    let grown = tree_bytes(&repo) - before;
    assert!(grown <= 8 * MIB, "the host repo grew by {grown} bytes");
    assert_eq!(
        size_of(&repo.join("a")),
        6 * MIB,
        "the first file arrived whole"
    );
    let c = &v["results"][0]["repo_changes"];
    assert_eq!(c["disk_full"], true, "{v:#}");
    assert!(c["disk_used_bytes"].as_u64().unwrap() >= 7 * MIB, "{v:#}");

    // control: room for both
    let repo = f.repo("roomy");
    let (r, v) = inside(&f, &ci_with(&f, "roomy", &[("disk", "64M")]), &repo, script);
    r.assert_code(0);
    assert!(
        r.stdout.contains("A-ok") && r.stdout.contains("B-ok"),
        "{r}"
    );
    assert_eq!(limits_hit(&v), Vec::<String>::new(), "{v:#}");
    assert_eq!(size_of(&repo.join("a")), 6 * MIB);
    assert_eq!(size_of(&repo.join("b")), 6 * MIB);
    assert_eq!(v["results"][0]["repo_changes"]["written"], 2, "{v:#}");
}

/// The cap counts files too (one per 4 KiB of `disk`, at least 1024): thousands of empty
/// files cannot fill the host's inode table. Under `disk = "4M"` creating 3000 files stops
/// before 1100; control: 500 files arrive on the host.
#[test]
fn files_past_the_disk_cap_fail_inside() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("disk-files");
    let script = |n: u32| {
        format!(
            "mkdir many; for i in $(seq {n}); do : > many/f$i 2>/dev/null || {{ echo stopped-at=$i; break; }}; done; exit 0"
        )
    };
    let repo = f.repo("capped");
    let p = ci_with(&f, "files", &[("disk", "4M")]);
    let (r, v) = inside(&f, &p, &repo, &script(3000));
    r.assert_code(0);
    let at: u32 = r
        .stdout
        .split("stopped-at=")
        .nth(1)
        .unwrap_or_else(|| panic!("3000 files fit under the cap:\n{r}"))
        .trim()
        .parse()
        .unwrap();
    assert!((900..=1100).contains(&at), "stopped at {at}");
    assert!(limits_hit(&v).contains(&"disk".to_string()), "{v:#}");
    let on_host = std::fs::read_dir(repo.join("many")).unwrap().count() as u32;
    assert_eq!(on_host, at - 1, "what was made inside arrives, no more");

    let repo = f.repo("control");
    let (r, v) = inside(&f, &p, &repo, &script(500));
    r.assert_code(0);
    assert!(!r.stdout.contains("stopped-at"), "{r}");
    assert_eq!(std::fs::read_dir(repo.join("many")).unwrap().count(), 500);
    assert_eq!(limits_hit(&v), Vec::<String>::new(), "{v:#}");
}

fn host_git(dir: &Path, args: &[&str]) -> Run {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir.parent().unwrap());
    run_command(c, Duration::from_secs(30))
}

/// What the copy-back brings to the host, and what it refuses. Inside: a file edited, one
/// removed, a directory removed and made anew with other content (overlayfs's opaque dir),
/// a new file with an mtime in the past and mode 0751, a link to a host path, a commit. All of
/// it arrives; the link arrives as a link. Refused, and named on stderr: a FIFO, a `.git`
/// made in a subdirectory (a nested repo whose config the host's git would read) and a file
/// made in the repo's git dir outside its work dirs. Afterwards the host's git sees the commit
/// and a clean, consistent repo.
#[test]
fn the_copy_back_brings_changes_and_refuses_what_must_not_reach_the_host() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    if which("git").is_none() {
        skip_tool("git is not installed");
        return;
    }
    let f = Fixture::new("disk-copyback");
    let repo = f.path("repo");
    std::fs::create_dir_all(repo.join("old/deep")).unwrap();
    std::fs::write(repo.join("old/deep/gone.txt"), "old\n").unwrap();
    std::fs::write(repo.join("edit.txt"), "one\n").unwrap();
    std::fs::write(repo.join("remove.txt"), "bye\n").unwrap();
    host_git(&repo, &["init", "-q", "-b", "main"]).assert_code(0);
    host_git(&repo, &["add", "-A"]).assert_code(0);
    host_git(&repo, &["commit", "-qm", "init"]).assert_code(0);

    let p = ci_with(&f, "copyback", &[("disk", "64M")]);
    let script = "set -e
echo two >> edit.txt
rm remove.txt
rm -r old; mkdir -p old/fresh; echo new > old/fresh/here.txt
echo made > made.txt; chmod 0751 made.txt; touch -d '2001-02-03 04:05:06' made.txt
ln -s /etc/hostname link
git -c user.name=t -c user.email=t@example.invalid add -A
git -c user.name=t -c user.email=t@example.invalid commit -qm inside
mkfifo fifo
mkdir -p nested/.git; printf '[core]\\n\\tfsmonitor = \"touch /tmp/x\"\\n' > nested/.git/config
echo planted > .git/planted 2>/dev/null || echo git-dir-refused-inside
echo done";
    let (r, v) = inside(&f, &p, &repo, script);
    r.assert_code(0);
    assert!(r.stdout.contains("done"), "{r}");

    assert_eq!(
        std::fs::read_to_string(repo.join("edit.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!repo.join("remove.txt").exists());
    assert!(
        !repo.join("old/deep").exists(),
        "the opaque dir replaced the old one"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("old/fresh/here.txt")).unwrap(),
        "new\n"
    );
    let m = std::fs::metadata(repo.join("made.txt")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o751);
    assert_eq!(m.mtime(), 981173106, "the mtime comes back too");
    let l = repo.join("link").symlink_metadata().unwrap();
    assert!(l.file_type().is_symlink());
    assert_eq!(
        std::fs::read_link(repo.join("link")).unwrap(),
        Path::new("/etc/hostname")
    );

    // refused, and said so
    assert!(repo.join("fifo").symlink_metadata().is_err());
    assert!(r.stderr.contains("refused fifo (a FIFO"), "{r}");
    assert!(repo.join("nested/.git").symlink_metadata().is_err());
    assert!(r.stderr.contains("refused nested/.git (a new .git)"), "{r}");
    assert!(!repo.join(".git/planted").exists());
    let c = &v["results"][0]["repo_changes"];
    assert!(c["refused"].as_u64().unwrap() >= 2, "{v:#}");
    assert!(c["removed"].as_u64().unwrap() >= 2, "{v:#}");

    // the host's git: the commit, a consistent object store, nothing left to commit
    let log = host_git(&repo, &["log", "--format=%s"]);
    assert_eq!(log.stdout, "inside\ninit\n", "{log}");
    host_git(&repo, &["fsck", "--strict"]).assert_code(0);
    let st = host_git(&repo, &["status", "--porcelain", "--untracked-files=no"]);
    assert_eq!(st.stdout, "", "{st}");
}

/// The copy-back happens when the run ends on its timeout too, as long as the command goes
/// at SIGTERM: the work done before the deadline is not lost.
#[test]
fn a_run_ended_by_its_timeout_still_copies_back() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("disk-timeout");
    let repo = f.repo("repo");
    let p = ci_with(&f, "timeout", &[("disk", "16M"), ("timeout", "2s")]);
    let (r, v) = inside(&f, &p, &repo, "echo before > before-timeout.txt; sleep 60");
    r.assert_code(124);
    assert_eq!(v["results"][0]["status"], "timeout", "{v:#}");
    assert_eq!(
        std::fs::read_to_string(repo.join("before-timeout.txt")).unwrap(),
        "before\n"
    );
}

/// `disk = "off"`: the repo is bound as it is (no layer, nothing to copy back, no cap): a
/// write larger than the capped runs' limit goes through, and the report has no
/// `repo_changes`. Control for the tests above: the cap is the layer's doing.
#[test]
fn disk_off_binds_the_repo_as_it_is() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("disk-off");
    let repo = f.repo("repo");
    let p = ci_with(&f, "off", &[("disk", "off")]);
    let (r, v) = inside(&f, &p, &repo, "head -c 12M /dev/zero > big && echo big-ok");
    r.assert_code(0);
    assert!(r.stdout.contains("big-ok"), "{r}");
    assert_eq!(size_of(&repo.join("big")), 12 * MIB);
    assert!(v["results"][0].get("repo_changes").is_none(), "{v:#}");
    assert_eq!(limits_hit(&v), Vec::<String>::new(), "{v:#}");
}
