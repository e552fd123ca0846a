//! Namespaces best-effort: a host where the caller cannot create user namespaces.
//!
//! The host is made for real, not mocked: each run goes through `unshare --user` into a user
//! namespace whose `user.max_user_namespaces` is 0, so any user namespace sandbox-run tries
//! to create fails with ENOSPC, exactly as under `sysctl user.max_user_namespaces=0` (the
//! `nouserns` variant of `scripts/vm-test` does that to a whole kernel).
//!
//! There, a profile that requires namespaces refuses (125) and names the fix; one that marks
//! namespaces and the filesystem best-effort runs in the host's namespaces under landlock,
//! seccomp, no capabilities and rlimits, says so in its report, keeps everything outside the
//! repo and the repo's protected paths out of reach, gives the command a private `$HOME` and
//! `$TMPDIR` that are gone afterwards, and leaves no process behind. As root it refuses:
//! without a user namespace the command would run as the host's root.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::common::*;
use support::{schema, slack};

/// `c`, run where no further user namespace can be created (`user.max_user_namespaces` 0).
fn without_userns(c: Command) -> Command {
    under_zero_sysctl(c, "user/max_user_namespaces")
}

/// Can this host make such a namespace at all? (No: no user namespaces to begin with, or no
/// util-linux `unshare`; then there is nothing to degrade from here, and the test skips.)
fn can_remove_userns() -> bool {
    let mut c = Command::new(probe());
    c.arg("unshare-user");
    let r = ProbeRun::parse("unshare-user", run_command(without_userns(c), LIMIT));
    if r.outcome == Outcome::Denied(libc::ENOSPC) {
        return true;
    }
    skip(
        "userns",
        &format!("cannot make a user namespace without user namespaces here:\n{r}"),
    );
    false
}

/// A fixture with a git repo and an empty dir for sandbox-run's `$TMPDIR` (where a run
/// without namespaces puts its scratch dir).
fn setup(name: &str) -> (Fixture, std::path::PathBuf, std::path::PathBuf) {
    let f = Fixture::new(name);
    let repo = f.git_repo("repo");
    let tmp = f.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    (f, repo, tmp)
}

/// No scratch dir was left behind in `tmp`.
fn assert_no_scratch(tmp: &Path) {
    let left: Vec<_> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
}

/// A profile like `ci` (repo read-write, the probe allowed) with namespaces and the filesystem
/// best-effort.
fn best_effort(f: &Fixture) -> std::path::PathBuf {
    f.profile(
        &Spec::extends("ci")
            .repo("rw")
            .layer("namespaces", "best-effort")
            .layer("filesystem", "best-effort"),
    )
}

/// The probe in a sandbox on this namespace-less host. `tmp` is sandbox-run's `$TMPDIR`
/// (where the scratch dir goes).
fn probe_here(profile: &Path, repo: &Path, tmp: &Path, opts: &[&str], args: &[&str]) -> ProbeRun {
    let mut argv = vec![probe().into_os_string()];
    argv.extend(args.iter().map(Into::into));
    let mut c = sandbox_command(profile, repo, opts, &argv);
    c.env("TMPDIR", tmp);
    ProbeRun::parse(args[0], run_command(without_userns(c), LIMIT))
}

/// Rootless only: as root a degraded run is refused (see `as_root_best_effort_refuses`).
fn rootless(what: &str) -> bool {
    if is_root() {
        eprintln!(
            "SKIP {what}: runs only rootless (scripts/test runs it again as an unprivileged user)"
        );
        return false;
    }
    true
}

#[test]
fn the_host_really_has_no_user_namespaces() {
    if !can_remove_userns() {
        return;
    }
    // Control: the same probe, unwrapped, creates one (where this host allows it).
    if sandbox_works() {
        host_probe(&["unshare-user"]).assert_ok();
    }
}

#[test]
fn required_namespaces_refuse_and_name_the_fix() {
    // Without landlock the validate profile is refused for that first.
    if !can_remove_userns() || !need_landlock(1, "validate requires landlock") {
        return;
    }
    let (f, repo, tmp) = setup("degraded-required");
    for spec in [Spec::default(), Spec::extends("ci").repo("rw")] {
        let p = f.profile(&spec);
        let r = probe_here(&p, &repo, &tmp, &[], &["pid"]);
        r.run.assert_code(125);
        assert_eq!(r.outcome, Outcome::Missing, "nothing may run:\n{r}");
        let err = &r.run.stderr;
        assert!(
            err.contains("user namespaces are not available")
                && err.contains("max_user_namespaces"),
            "the refusal names the cause and the fix:\n{r}"
        );
        // one error line (a best-effort layer's `degraded:` warning may come before it)
        let errors = err
            .lines()
            .filter(|l| l.starts_with("sandbox-run:") && !l.starts_with("sandbox-run: degraded:"));
        assert_eq!(errors.count(), 1, "one line:\n{r}");
    }
    // A best-effort filesystem is needed too: the new root is built in the mount namespace.
    let p = f.profile(
        &Spec::extends("ci")
            .repo("rw")
            .layer("namespaces", "best-effort"),
    );
    let r = probe_here(&p, &repo, &tmp, &[], &["pid"]);
    r.run.assert_code(125);
    assert!(
        r.run.stderr.contains("filesystem layer"),
        "names the required filesystem layer:\n{r}"
    );
    assert_no_scratch(&tmp);
}

#[test]
fn as_root_best_effort_refuses() {
    if !is_root() {
        eprintln!("SKIP as_root_best_effort_refuses: runs only as root");
        return;
    }
    if !can_remove_userns() {
        return;
    }
    let (f, repo, tmp) = setup("degraded-root");
    let r = probe_here(&best_effort(&f), &repo, &tmp, &[], &["whoami"]);
    r.run.assert_code(125);
    assert_eq!(r.outcome, Outcome::Missing, "nothing may run:\n{r}");
    assert!(
        r.run.stderr.contains("would run as root on the host"),
        "says why:\n{r}"
    );
    assert_no_scratch(&tmp);
}

#[test]
fn best_effort_runs_degraded_and_says_so() {
    if !rootless("best_effort_runs_degraded_and_says_so") || !can_remove_userns() {
        return;
    }
    if !need_landlock(1, "a run without namespaces needs landlock") || !need_seccomp() {
        return;
    }
    let (f, repo, tmp) = setup("degraded-report");
    let report = f.path("report.json");
    let p = best_effort(&f);
    let r = probe_here(
        &p,
        &repo,
        &tmp,
        &["--report", report.to_str().unwrap()],
        &["getenv", "HOME"],
    );
    let home = r.assert_ok();
    assert!(
        r.run
            .stderr
            .contains("degraded: running without the namespaces layer"),
        "a one-line warning:\n{r}"
    );
    // $HOME is the private scratch dir under sandbox-run's $TMPDIR, and gone afterwards.
    assert!(
        Path::new(&home).starts_with(&tmp),
        "HOME={home} is not under {}",
        tmp.display()
    );
    assert!(
        !Path::new(&home).exists(),
        "the scratch dir {home} was left behind"
    );
    assert_no_scratch(&tmp);

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    schema::assert_valid_report(&v);
    let sb = &v["sandbox"];
    assert_eq!(sb["namespaces"], serde_json::json!([]), "{sb}");
    let degraded: Vec<&str> = sb["degraded"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    assert!(degraded.starts_with(&["namespaces", "filesystem"]), "{sb}");
    assert_eq!(sb["filesystem"]["landlock"], "fully_enforced", "{sb}");
    assert_eq!(sb["seccomp"]["mode"], "allowlist", "{sb}");
    assert_eq!(sb["no_new_privs"], true, "{sb}");

    // Still the same seccomp filter: a user namespace is refused by it, not only by ENOSPC.
    probe_here(&p, &repo, &tmp, &[], &["unshare-user"]).assert_errno(&[libc::EPERM]);
}

#[test]
fn best_effort_keeps_files_outside_and_protected_paths_out_of_reach() {
    if !rootless("best_effort_keeps_files_outside_and_protected_paths_out_of_reach")
        || !can_remove_userns()
        || !need_landlock(1, "a run without namespaces is confined by landlock")
    {
        return;
    }
    let (f, repo, tmp) = setup("degraded-files");
    let secret = f.write("outside/secret.txt", SECRET);
    let outside = f.path("outside/new.txt");
    let p = best_effort(&f);
    let run = |args: &[&str]| probe_here(&p, &repo, &tmp, &[], args);
    let s = |p: &Path| p.to_str().unwrap().to_string();

    // Controls: the repo's files are readable and writable, as with a rw repo in a sandbox.
    run(&["read", &s(&repo.join("inside.txt"))]).assert_ok();
    run(&["write", &s(&repo.join("src/lib.txt"))]).assert_ok();
    run(&["write", &s(&repo.join("src/new.txt"))]).assert_ok();
    // ...and the same files outside the repo are there for the probe on the host.
    host_probe(&["read", &s(&secret)]).assert_ok();

    // Outside the repo: nothing to read or write (the host's files are all there is).
    run(&["read", &s(&secret)]).assert_errno(&[libc::EACCES]);
    run(&["write", &s(&outside)]).assert_errno(&[libc::EACCES]);
    assert!(!outside.exists());
    // The protected paths stay read-only, and nothing new can appear in .git.
    for rel in [".git/hooks/post-checkout", ".git/config", ".git/commondir"] {
        run(&["write", &s(&repo.join(rel))]).assert_errno(&[libc::EACCES]);
    }
    assert!(!repo.join(".git/hooks/post-checkout").exists());
    assert!(!repo.join(".git/commondir").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/config")).unwrap(),
        GIT_CONFIG
    );
    // Read-only, still readable.
    run(&["read", &s(&repo.join(".git/config"))]).assert_ok();
}

#[test]
fn best_effort_leaves_no_process_behind() {
    if !rootless("best_effort_leaves_no_process_behind")
        || !can_remove_userns()
        || !need_landlock(1, "a run without namespaces needs landlock")
    {
        return;
    }
    let (f, repo, tmp) = setup("degraded-procs");
    let p = best_effort(&f);

    // Control: on the host, the double-forked daemon outlives its parent and writes.
    let host_marker = f.path("host-marker");
    host_probe(&["fork-daemon", "1", host_marker.to_str().unwrap()]).assert_ok();
    let until = Instant::now() + Duration::from_secs(10);
    while !host_marker.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(host_marker.exists(), "the daemon control never wrote");

    // In the sandbox it is killed when the workload ends: no pid namespace does it here, but
    // two child subreapers do, the reaper and, should it fail, the supervisor (checked: with
    // both kills removed this fails; with either one left it passes).
    let marker = repo.join("src/marker");
    let started = Instant::now();
    let bound = slack(3.0);
    let daemon_secs = (bound.as_secs() + 1).to_string();
    probe_here(
        &p,
        &repo,
        &tmp,
        &[],
        &["fork-daemon", &daemon_secs, marker.to_str().unwrap()],
    )
    .assert_ok();
    assert!(
        started.elapsed() < bound,
        "sandbox-run waited for the daemon ({:?}) instead of killing it",
        started.elapsed()
    );
    std::thread::sleep(
        (started + bound + Duration::from_secs(2)).saturating_duration_since(Instant::now()),
    );
    assert!(
        !marker.exists(),
        "the daemon outlived the run and wrote its marker"
    );

    // A timeout tears down a tree that ignores SIGTERM.
    let started = Instant::now();
    let r = probe_here(
        &p,
        &repo,
        &tmp,
        &["--timeout", "1s", "--kill-grace", "1s"],
        &["ignore-term-sleep", "30"],
    );
    r.run.assert_code(124);
    assert!(
        started.elapsed() < Duration::from_secs(2) + slack(3.0),
        "took {:?}",
        started.elapsed()
    );
    assert_no_scratch(&tmp);
}
