//! Big writes in a read-write repo: past 64 MiB of `[limits] disk` the repo's layer lives on
//! disk in a private dir of the run (src/layers/disk.rs), not in memory; the cap is a budget
//! every call of the command is held to; the way back moves files in by rename when the layer is on the
//! repo's filesystem. Each test writes from inside a real sandbox and checks what reached the
//! host, what the sandbox's memory did, and what the run left behind.

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Run a bash script inside from `repo`, sandbox-run's state in the fixture's `state/` (in
/// the first test under /tmp, which the sandbox's own scratch root covers).
fn inside(f: &Fixture, p: &Path, repo: &Path, script: &str) -> (Run, serde_json::Value) {
    let sh = f.write("scripts/script.sh", script);
    let report = f.path("report.json");
    let _ = std::fs::remove_file(&report);
    let mut c = sandbox_command(
        p,
        repo,
        &["--report", report.to_str().unwrap()],
        &["bash", sh.to_str().unwrap()],
    );
    c.env("XDG_STATE_HOME", state(f));
    if let Some(s) = STATE.with(|s| s.borrow().clone()) {
        c.env("XDG_STATE_HOME", s);
    }
    let r = run_command(c, Duration::from_secs(120));
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("report: {e}\n{r}"));
    (r, serde_json::from_str(&text).unwrap())
}

thread_local! {
    /// Another state dir for this test's runs.
    static STATE: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

fn state(f: &Fixture) -> PathBuf {
    if let Some(s) = STATE.with(|s| s.borrow().clone()) {
        return s;
    }
    let s = f.path("state");
    std::fs::create_dir_all(&s).unwrap();
    s
}

/// The run dirs left in the state dir.
fn left_behind(f: &Fixture) -> Vec<String> {
    std::fs::read_dir(state(f).join("sandbox-run/runs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Birth time of a file (statx), in seconds since the epoch, when the filesystem keeps it.
fn born(p: &Path) -> Option<f64> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: all-zero is a valid statx; statx fills it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx of a NUL-terminated path into a struct we own.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BTIME,
            &mut st,
        )
    };
    (r == 0 && st.stx_mask & libc::STATX_BTIME != 0)
        .then(|| st.stx_btime.tv_sec as f64 + st.stx_btime.tv_nsec as f64 / 1e9)
}

/// 600 MiB written under `disk = "3G"` and `memory = "256M"`: the old in-memory layer could
/// not have held it (it counted against the memory cap). It succeeds, the sandbox's peak
/// memory stays far under the bytes written, every file arrives whole, and, the layer being
/// on the repo's filesystem, the big file arrives by rename: it was born inside the run,
/// before the command's last line, not after it as a copy would be. Nothing is left in the
/// state dir.
#[test]
fn a_write_larger_than_memory_lands_whole_and_by_rename() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("big-write");
    let repo = f.repo("repo");
    let tmp = Fixture::new_in(Path::new("/tmp"), "big-write-state");
    STATE.with(|s| *s.borrow_mut() = Some(tmp.dir.clone()));
    let p = ci_with(&f, "big", &[("disk", "3G"), ("memory", "256M")]);
    let script = "set -e; head -c 600M /dev/zero > big; mkdir -p out/deep; \
                  for i in $(seq 1 200); do echo $i > out/deep/f$i; done; \
                  echo s > suid; chmod 0751 suid; \
                  python3 -c \"import os; os.setxattr('suid', 'user.kept', b'v')\"; \
                  sleep 1.1; date +%s.%N";
    let (r, v) = inside(&f, &p, &repo, script);
    r.assert_code(0);
    let res = &v["results"][0];
    assert_eq!(res["status"], "ok", "{v:#}");
    assert_eq!(res["limits_hit"], serde_json::json!([]), "{v:#}");
    let c = &res["repo_changes"];
    assert_eq!(c["applied"], "all", "{v:#}");
    assert!(c["disk_used_bytes"].as_u64().unwrap() >= 600 * MIB, "{c:#}");
    assert_eq!(
        std::fs::metadata(repo.join("big")).unwrap().len(),
        600 * MIB
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("out/deep/f200")).unwrap(),
        "200\n"
    );
    match res["peak_memory_bytes"].as_u64() {
        Some(peak) => assert!(peak < 400 * MIB, "peak memory {peak} for 600 MiB written"),
        None => skip("disk", "no cgroup: the peak memory is not measured"),
    }
    let last_line: f64 = r.stdout.trim().lines().last().unwrap().parse().unwrap();
    let layer_dev = std::fs::metadata(state(&f)).unwrap().dev();
    let repo_dev = std::fs::metadata(&repo).unwrap().dev();
    match born(&repo.join("big")) {
        Some(b) if layer_dev == repo_dev => assert!(
            b < last_line - 1.0,
            "the big file was made at {b}, after the command's end at {last_line}: copied, not moved"
        ),
        _ => skip("disk", "the layer is not on the repo's filesystem here"),
    }
    // its mode and its user.* attributes come with it (set-ID bits cannot be set inside)
    let m = std::fs::metadata(repo.join("suid")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o751, "{v:#}");
    let x = std::process::Command::new("python3")
        .args([
            "-c",
            "import os,sys; print(os.getxattr(sys.argv[1], 'user.kept'))",
        ])
        .arg(repo.join("suid"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&x.stdout).trim(), "b'v'");
    assert_eq!(left_behind(&f), Vec::<String>::new());
}

/// Past the cap a write fails inside: 300 MiB under `disk = "100M"` stops at the budget left
/// with EFBIG ("File too large"; the file-size limit follows the budget, SIGXFSZ is ignored),
/// the command goes on, one stderr line names the cap, `limits_hit` is `["disk"]`, and what fit
/// reaches the repo: the small file whole, the big one cut short, together within the cap.
/// Control: the test above, under a cap with room.
#[test]
fn a_write_past_its_cap_fails_inside_and_what_fit_arrives() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("big-cap");
    let repo = f.repo("repo");
    let p = ci_with(&f, "cap", &[("disk", "100M")]);
    let script = "echo small > small; head -c 300M /dev/zero > big; echo after-$?";
    let (r, v) = inside(&f, &p, &repo, script);
    r.assert_code(0);
    assert!(r.stdout.contains("after-1"), "{r}");
    assert!(r.stderr.contains("File too large"), "{r}");
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("sandbox-run: disk:"))
        .collect();
    assert_eq!(lines.len(), 1, "{r}");
    assert!(
        lines[0].contains("filled the repo's layer, 100M ([limits] disk)"),
        "{r}"
    );
    let res = &v["results"][0];
    assert_eq!(res["limits_hit"], serde_json::json!(["disk"]), "{v:#}");
    assert_eq!(res["repo_changes"]["applied"], "all", "{v:#}");
    assert_eq!(
        std::fs::read_to_string(repo.join("small")).unwrap(),
        "small\n"
    );
    let big = std::fs::metadata(repo.join("big")).unwrap().len();
    assert!((90 * MIB..100 * MIB).contains(&big), "{big}");
    assert_eq!(left_behind(&f), Vec::<String>::new());
}

/// The file cap holds on disk too (one file per 4 KiB of the cap): 20,000 empty files under
/// `disk = "65M"` (16,640 files) stop the run; nothing is applied.
#[test]
fn files_past_the_cap_stop_the_run() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("big-files");
    let repo = f.repo("repo");
    let p = ci_with(&f, "files", &[("disk", "65M")]);
    let script =
        "mkdir m; cd m; for i in $(seq 1 200); do touch a$i-{1..100}; done; echo not-stopped";
    let (r, v) = inside(&f, &p, &repo, script);
    // stopped while it wrote (maybe just as it ended), or, when it ended between two
    // checks, found at the end
    let stopped = r.code == Some(137);
    let found = r.code == Some(0) && r.stderr.contains("nothing of it was applied");
    assert!(stopped || found, "{r}");
    assert!(
        r.stderr
            .contains("files in the repo's layer, past its cap of 16640 files"),
        "{r}"
    );
    assert_eq!(
        v["results"][0]["limits_hit"],
        serde_json::json!(["disk"]),
        "{v:#}"
    );
    assert!(!repo.join("m").exists());
}

/// A run killed with SIGKILL leaves its layer dir; the next run removes it.
#[test]
fn a_killed_runs_layer_is_swept_by_the_next_run() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("big-sweep");
    let repo = f.repo("repo");
    let p = ci_with(&f, "sweep", &[("disk", "1G")]);
    let sh = f.write("scripts/sleep.sh", "echo x > w; sleep 30");
    let mut c = sandbox_command(&p, &repo, &[], &["bash", sh.to_str().unwrap()]);
    c.env("XDG_STATE_HOME", state(&f));
    let mut child = spawn_retrying(&mut c).unwrap();
    let t = std::time::Instant::now();
    while left_behind(&f).is_empty() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let left = left_behind(&f);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("layer-"), "{left:?}");
    let (r, _) = inside(&f, &p, &repo, "echo y > y");
    r.assert_code(0);
    assert_eq!(left_behind(&f), Vec::<String>::new());
    assert!(repo.join("y").exists() && !repo.join("w").exists());
}
