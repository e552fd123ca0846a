//! Refused system calls, named: the seccomp filter sends what it refuses to the supervisor
//! (user notification), which answers with the errno the policy gives and names the call in
//! the report (`results[].denials`, kind `syscall`) and, with `-v`, on stderr when first seen.
//! Each attack runs from inside a real sandbox with the probe (`examples/probe.rs`), root and
//! rootless (`SANDBOX_RUN_ROOTLESS_TESTS="refused_calls" scripts/test --test refused_calls`).
//!
//! - The command sees the errno the kernel's own answer gives (`EAFNOSUPPORT` for a socket
//!   family, `EPERM` for the rest): naming changes nothing of what it sees.
//! - Positive controls: allowed calls (a plain socket, chmod 0755) name nothing.
//! - The workload never holds the listener (it could answer its own calls).
//! - A flood of refused calls ends normally, within the timeout; the supervisor answers no
//!   more than its bound of them, and the count says it was cut.
//! - `--observe`: the paths the command looks up, hidden and relative ones included.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Runs the probe with a report and `-v`; the probe's outcome, the report, and sandbox-run's
/// stderr.
fn run_reported(
    f: &Fixture,
    profile: &Path,
    repo: &Path,
    opts: &[&str],
    args: &[&str],
) -> (ProbeRun, Value) {
    let report = f.path("report.json");
    let _ = std::fs::remove_file(&report);
    let mut o = vec!["-v", "--report", report.to_str().unwrap()];
    o.extend_from_slice(opts);
    let r = run_probe(profile, repo, &o, args);
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("no report ({e}):\n{r}"));
    (r, serde_json::from_str(&text).unwrap())
}

fn denials(report: &Value) -> Vec<Value> {
    report["results"][0]["denials"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn syscall_denials(report: &Value) -> Vec<(String, String)> {
    denials(report)
        .iter()
        .filter(|d| d["kind"] == "syscall")
        .map(|d| {
            (
                d["sub"].as_str().unwrap_or("").to_string(),
                d["what"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// How many of sandbox-run's stderr lines are the refusal line `head` (`sandbox-run: refused
/// KIND SUB: WHAT`, then its count or its rule).
fn said(r: &ProbeRun, head: &str) -> usize {
    r.run
        .stderr
        .lines()
        .filter(|l| {
            l.strip_prefix(head)
                .is_some_and(|r| r.starts_with(": ") || r.starts_with(" ("))
        })
        .count()
}

fn named(report: &Value) -> bool {
    report["sandbox"]["seccomp"]["refusals_named"] == true
}

/// Every refused call the brief lists: the errno is the policy's own, the report names the
/// call and the argument that decided, `-v` says it live, once.
#[test]
fn each_refused_call_is_named_and_answered_as_before() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("refused-calls");
    let repo = f.repo("repo");
    std::fs::write(repo.join("file"), "x").unwrap();
    let p = f.profile(&Spec::default());
    let rw = f.profile(&Spec::default().repo("rw").disk("off"));
    let mnt = repo.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let file = repo.join("file");
    // (profile, sandbox-run options, probe arguments, errno, sub, what)
    type Case<'a> = (&'a Path, Vec<&'a str>, Vec<&'a str>, i32, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (
            &p,
            vec!["--net", "none"],
            vec!["packet-socket"],
            libc::EAFNOSUPPORT,
            "socket",
            "socket(AF_PACKET)",
        ),
        (
            &p,
            vec![],
            vec!["unshare-user"],
            libc::EPERM,
            "unshare",
            "unshare(CLONE_NEWUSER)",
        ),
        (
            &p,
            vec![],
            vec!["clone-newuser"],
            libc::EPERM,
            "clone",
            "clone(CLONE_NEWUSER)",
        ),
        (
            &p,
            vec![],
            vec!["tiocsti", "1"],
            libc::EPERM,
            "ioctl",
            "ioctl(TIOCSTI)",
        ),
        (
            &p,
            vec![],
            vec!["tiocsti", "1", "high"],
            libc::EPERM,
            "ioctl",
            "ioctl(TIOCSTI)",
        ),
        (
            &rw,
            vec![],
            vec!["chmod", file.to_str().unwrap(), "4755"],
            libc::EPERM,
            "fchmodat",
            "fchmodat(mode 0o4755)",
        ),
        (
            &p,
            vec![],
            vec!["mount-tmpfs", mnt.to_str().unwrap()],
            libc::EPERM,
            "mount",
            "mount",
        ),
        (
            &p,
            vec!["--net", "host"],
            vec!["listen-autobind"],
            libc::EPERM,
            "listen",
            "listen",
        ),
    ];
    for (profile, opts, args, errno, sub, what) in cases {
        let (r, rep) = run_reported(&f, profile, &repo, &opts, &args);
        r.assert_errno(&[errno]);
        assert!(named(&rep), "refusals not named: {}\n{r}", rep["sandbox"]);
        let got = syscall_denials(&rep);
        assert!(
            got.contains(&(sub.to_string(), what.to_string())),
            "{args:?}: no denial {sub}/{what} in {got:?}\n{r}"
        );
        let d = denials(&rep)
            .into_iter()
            .find(|d| d["what"] == what)
            .unwrap();
        assert!(d["rule"].as_str().is_some_and(|s| !s.is_empty()), "{d}");
        assert!(d["fix"].as_str().is_some_and(|s| !s.is_empty()), "{d}");
        let line = format!("sandbox-run: refused syscall {sub}: {what}");
        assert_eq!(said(&r, &line), 1, "-v did not say it once ({line}):\n{r}");
    }
}

/// Controls: calls the policy allows name nothing (a plain TCP socket, chmod 0755), and
/// refusals are named while the run is otherwise untouched.
#[test]
fn allowed_calls_name_nothing() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("allowed-calls");
    let repo = f.repo("repo");
    let file = repo.join("file");
    std::fs::write(&file, "x").unwrap();
    let rw = f.profile(&Spec::default().repo("rw").disk("off"));
    let (r, rep) = run_reported(
        &f,
        &rw,
        &repo,
        &[],
        &["chmod", file.to_str().unwrap(), "755"],
    );
    r.assert_ok();
    assert!(named(&rep));
    assert_eq!(syscall_denials(&rep), Vec::<(String, String)>::new(), "{r}");
    let (r, rep) = run_reported(
        &f,
        &rw,
        &repo,
        &["--net", "none"],
        &["udp-send", "127.0.0.1:9"],
    );
    r.assert_ok();
    assert_eq!(syscall_denials(&rep), Vec::<(String, String)>::new(), "{r}");
    assert!(!r.run.stderr.contains("refused syscall"), "{r}");
    // ENOSYS stays the kernel's answer, unnamed (libc's clone3 fallback takes it every time),
    // and so does the kill of a foreign system call ABI (x32)
    let p = f.profile(&Spec::default());
    let (r, rep) = run_reported(&f, &p, &repo, &[], &["clone3"]);
    r.assert_errno(&[libc::ENOSYS]);
    assert_eq!(syscall_denials(&rep), Vec::<(String, String)>::new(), "{r}");
    let (r, rep) = run_reported(&f, &p, &repo, &[], &["x32-getpid"]);
    r.assert_killed(libc::SIGSYS);
    assert_eq!(syscall_denials(&rep), Vec::<(String, String)>::new(), "{r}");
}

/// The workload never holds the listener: its only fds above 2 are none (the listener was
/// sent to the supervisor and closed before execve). Control: the report says the refusals
/// are named, so the listener existed.
#[test]
fn the_workload_does_not_hold_the_listener() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("listener-fds");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let (r, rep) = run_reported(&f, &p, &repo, &[], &["fds"]);
    assert!(named(&rep), "{r}");
    let detail = r.assert_ok();
    assert!(
        !r.lines.iter().any(|l| l.contains("seccomp")),
        "the workload holds the listener:\n{r}"
    );
    assert_eq!(detail, "count=0", "{r}");
}

/// A hostile command floods refused calls: the run ends normally, every call is still refused
/// (EPERM while named, ENOSYS from the kernel once the supervisor stops at its bound), the
/// count says it was cut (the supervisor answers no more than the bound: its CPU is printed).
/// Also the timeout still ends a flood that would go on.
#[test]
fn a_flood_of_refused_calls_is_bounded() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("flood");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let before = own_children_cpu();
    let started = Instant::now();
    let (r, rep) = run_reported(&f, &p, &repo, &[], &["refuse-flood", "300000"]);
    let wall = started.elapsed();
    let cpu = own_children_cpu() - before;
    let detail = r.assert_ok();
    let count = |k: &str| -> u64 {
        detail
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    assert_eq!(count("other="), 0, "a refused call succeeded: {detail}");
    assert_eq!(count("eperm=") + count("enosys="), 300_000);
    assert!(count("eperm=") >= 100_000, "{detail}");
    assert!(
        count("enosys=") > 0,
        "the listener was not closed at the bound: {detail}"
    );
    assert_eq!(rep["sandbox"]["seccomp"]["refusals_cut"], true);
    let d: Vec<Value> = denials(&rep)
        .into_iter()
        .filter(|d| d["sub"] == "ptrace")
        .collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["count"], 100_000);
    let live = said(&r, "sandbox-run: refused syscall ptrace: ptrace");
    assert_eq!(
        live,
        1,
        "-v repeated itself:\n{}",
        &r.run.stderr[..r.run.stderr.len().min(2000)]
    );
    // The sandbox's own CPU (its cgroup, where there is one); the rest is sandbox-run's.
    let ms = |k: &str| rep["results"][0][k].as_u64();
    let inside = match (ms("cpu_user_ms"), ms("cpu_system_ms")) {
        (Some(u), Some(s)) => Some(Duration::from_millis(u + s)),
        _ => None,
    };
    eprintln!(
        "flood: 300000 refused calls in {:.2}s wall; CPU: {:.2}s in all, {} in the sandbox ({detail})",
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        inside.map_or("?".into(), |d| format!("{:.2}s", d.as_secs_f64())),
    );
    // The supervisor answered 100000 calls, then none: the bound is the count above, which
    // the kernel keeps (ENOSYS past it); the CPU it cost is printed, not asserted (a figure of
    // the machine: about 10 us a call here, far more under emulation).

    // The timeout still ends a flood that would go on for long.
    let started = Instant::now();
    let r = run_probe(
        &p,
        &repo,
        &["--timeout", "2s", "--kill-grace", "1s"],
        &["refuse-flood", "100000000000"],
    );
    assert_eq!(
        r.code(),
        Some(124),
        "the timeout did not end the flood:\n{r}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// The CPU time of this test process's waited-for children (sandbox-run and what it ran).
fn own_children_cpu() -> Duration {
    // SAFETY: getrusage writes into the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

/// `--observe`: the run's path lookups reach the supervisor, which notes them; a hidden path
/// (not in the sandbox's view) and a relative one (resolved against the cwd) are both seen,
/// as the sandbox sees them; `-v` names nothing for an allowed lookup. Control: without
/// `--observe` the same run goes as before.
#[test]
fn observe_sees_hidden_and_relative_paths() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("observe");
    let repo = f.repo("repo");
    std::fs::write(repo.join("rel.txt"), "hello").unwrap();
    let p = f.profile(&Spec::default());
    let hidden = "/root/.sandbox-run-observe-hidden";
    let r = run_probe(&p, &repo, &["--observe", "-v"], &["read", hidden]);
    r.assert_errno(&[libc::ENOENT, libc::EACCES]);
    let seen = |r: &ProbeRun, path: &str| {
        r.run
            .stderr
            .lines()
            .any(|l| l.starts_with("sandbox-run: observed read: ") && l.ends_with(path))
    };
    assert!(seen(&r, hidden), "the hidden path was not observed:\n{r}");
    let r = run_probe(&p, &repo, &["--observe", "-v"], &["read", "rel.txt"]);
    r.assert_ok();
    // resolved against the cwd, as the sandbox sees it (the repo is mounted where it is)
    let rel = format!("{}/rel.txt", repo.display());
    assert!(
        seen(&r, &rel),
        "the relative path was not observed as {rel}:\n{r}"
    );
    assert!(!r.run.stderr.contains("refused syscall"), "{r}");
    // each once: a second lookup of the same path is counted, not said again
    let once = r.run.stderr.lines().filter(|l| l.ends_with(&rel)).count();
    assert_eq!(once, 1, "{r}");
    // control: without --observe nothing is observed, the run is the same
    let r = run_probe(&p, &repo, &["-v"], &["read", "rel.txt"]);
    r.assert_ok();
    assert!(!r.run.stderr.contains("sandbox-run: observed"), "{r}");
}

/// `--observe -v`: a lookup of a file the host has and the sandbox does not show is a
/// refusal, named by `-v` (when the lookup happens), once, as the
/// report names it. Control: a lookup of a path the host does not have either is no refusal.
#[test]
fn observe_names_a_hidden_file_when_looked_up() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("observe-live");
    let repo = f.repo("repo");
    // A host file the sandbox does not show, and not beside the repo (a lookup there may be a
    // tool's probe for its config, not judged): one of the host's own in /etc.
    let Some(file) = ["/etc/fstab", "/etc/issue", "/etc/debian_version"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
    else {
        skip(
            "observe-live",
            "the host has none of /etc/fstab, /etc/issue",
        );
        return;
    };
    let p = f.profile(&Spec::default());
    let (r, rep) = run_reported(&f, &p, &repo, &["--observe"], &["read", path(file)]);
    r.assert_errno(&[libc::ENOENT]);
    let d = denials(&rep)
        .into_iter()
        .find(|d| d["kind"] == "filesystem" && d["sub"] == "hidden")
        .unwrap_or_else(|| panic!("no hidden denial:\n{r}"));
    let what = format!("{} (read)", file.display());
    assert_eq!(d["what"], what.as_str(), "{r}");
    let head = format!("sandbox-run: refused filesystem hidden: {what}");
    assert_eq!(said(&r, &head), 1, "-v did not say it once:\n{r}");
    let gone = Path::new("/etc/sandbox-run-no-such-file");
    let (r, rep) = run_reported(&f, &p, &repo, &["--observe"], &["read", path(gone)]);
    r.assert_errno(&[libc::ENOENT]);
    assert!(
        denials(&rep).iter().all(|d| d["kind"] != "filesystem"),
        "{r}"
    );
    assert!(!r.run.stderr.contains("refused filesystem"), "{r}");
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A hostile command names a path with a terminal escape sequence (a clipboard write, a screen
/// clear): `--observe -v` reports the lookup on the caller's stderr with the control
/// characters written out, never raw. Control: the line is there.
#[test]
fn an_observed_path_cannot_write_escape_sequences_to_the_callers_stderr() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("observe-escape");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let evil = "/tmp/x\u{1b}]52;c;aGk=\u{7}\u{1b}[2J";
    let hex: String = evil.bytes().map(|b| format!("{b:02x}")).collect();
    let r = run_probe(&p, &repo, &["--observe", "-v"], &["read-unhex", &hex]);
    r.assert_errno(&[libc::ENOENT]);
    assert!(
        r.run
            .stderr
            .lines()
            .any(|l| l.starts_with("sandbox-run: observed read: /tmp/x\\u{1b}]52")),
        "the lookup was not reported:\n{r}"
    );
    assert!(
        !r.run.stderr.contains('\u{1b}') && !r.run.stderr.contains('\u{7}'),
        "a control character reached the caller's stderr:\n{r}"
    );
}

/// Where the kernel gives the filter no listener (here: sandbox-run runs under a filter that
/// already has one, as a sandbox within a sandbox would; the kernel allows one per chain:
/// EBUSY), the run still goes, with the same policy answered by the kernel: the refused call
/// gets the same errno, the report says `refusals_named: false` and names nothing. Control:
/// the same run without the outer listener names it.
#[test]
fn without_a_listener_the_policy_still_refuses_and_the_report_says_unnamed() {
    use std::os::unix::process::CommandExt;
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("no-listener");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let report = f.path("report.json");
    let opts = ["--report", report.to_str().unwrap(), "-v"];
    let outer_listener = |c: &mut std::process::Command| {
        // SAFETY: prctl, seccomp and fcntl on prepared data, between fork and exec.
        unsafe {
            c.pre_exec(|| {
                let allow = [libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: libc::SECCOMP_RET_ALLOW,
                }];
                let prog = libc::sock_fprog {
                    len: 1,
                    filter: allow.as_ptr() as *mut libc::sock_filter,
                };
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let fd = libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                    &prog as *const libc::sock_fprog,
                );
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // held open across exec: a closed listener frees the chain's slot
                libc::fcntl(fd as i32, libc::F_SETFD, 0);
                Ok(())
            });
        }
    };
    let r = run_probe_with(&p, &repo, &opts, &["unshare-user"], outer_listener);
    r.assert_errno(&[libc::EPERM]);
    let rep: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(rep["sandbox"]["seccomp"]["mode"], "allowlist", "{r}");
    assert_eq!(rep["sandbox"]["seccomp"]["refusals_named"], false, "{r}");
    assert_eq!(syscall_denials(&rep), Vec::<(String, String)>::new(), "{r}");

    // control: no outer listener, the same refusal is named
    let (r, rep) = run_reported(&f, &p, &repo, &[], &["unshare-user"]);
    r.assert_errno(&[libc::EPERM]);
    assert!(named(&rep), "{r}");
    assert_eq!(syscall_denials(&rep).len(), 1, "{r}");
}

/// TIOCSTI on a real terminal: sandbox-run's stdout is a pty, so the command gets a pty of
/// sandbox-run's as its fd 1 and tries to push a byte into its input. Refused with EPERM (what
/// the probe printed through the pty) and named by `-v`; nothing was injected into the
/// caller's pty.
#[test]
fn tiocsti_on_a_pty_is_named() {
    use nix::pty::{openpty, OpenptyResult};
    use std::os::fd::AsRawFd;
    use std::process::Stdio;
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("tiocsti-pty");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let OpenptyResult { master, slave } = openpty(None, None).expect("openpty");
    let pr = probe();
    let mut c = sandbox_command(
        &p,
        &repo,
        &["-v"],
        &[pr.as_os_str(), "tiocsti".as_ref(), "1".as_ref()],
    );
    c.stdout(Stdio::from(std::fs::File::from(slave)))
        .stderr(Stdio::piped());
    let out = c.output().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    loop {
        // SAFETY: reading into a valid buffer from the master we own.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        got.extend_from_slice(&buf[..n as usize]);
    }
    let text = String::from_utf8_lossy(&got);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("tiocsti: denied errno=1"),
        "the probe did not see EPERM:\n{text}\n{stderr}"
    );
    assert!(!text.contains('#'), "a byte was injected:\n{text}");
    // (no report here: a report captures the output, and the command then gets pipes)
    assert!(
        stderr.contains(
            "sandbox-run: refused syscall ioctl: ioctl(TIOCSTI): terminal input injection"
        ),
        "-v did not name it:\n{stderr}"
    );
}

/// `--observe` names the unix socket paths the command connects to (read from its
/// `sockaddr_un`), and lets the connect go on; a TCP connect is let through unnamed.
#[test]
fn observe_sees_unix_socket_paths() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("observe-unix");
    let repo = f.repo("repo");
    let sock = repo.join("s.sock");
    let _l = bind_unix(&sock);
    let rw = f.profile(&Spec::default().repo("rw").disk("off"));
    let opts = ["--observe", "-v", "--net", "none"];
    let r = run_probe(&rw, &repo, &opts, &["unix-connect", sock.to_str().unwrap()]);
    r.assert_ok();
    let line = format!("sandbox-run: observed unix socket: {}", sock.display());
    assert!(r.run.stderr.lines().any(|l| l == line), "no `{line}`:\n{r}");
    let r = run_probe(&rw, &repo, &opts, &["tcp-connect", "127.0.0.1:9"]);
    r.assert_errno(&[libc::ECONNREFUSED, libc::EACCES]);
    assert!(!r.run.stderr.contains("observed unix socket"), "{r}");
}
