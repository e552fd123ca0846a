//! The host user's side of the boundary: what a sandbox-run
//! started by root leaves within reach of an unprivileged host user, and what a hostile run
//! can take from the host user's own programs.
//!
//! - When root runs a repo owned by another user, that user (who wrote the repo) must not be
//!   able to ptrace stage 2, pid 1 or the workload, nor read their fds through /proc; stage 2
//!   and pid 1 must hold no controlling terminal and no fd the caller leaked.
//! - The per-user counts (inotify instances, queued signals) are charged to the workload's
//!   uid on the host, the same uid as the host user's own programs: a run that takes all it
//!   can get must leave the host user enough. Checked from the host as that uid while the
//!   sandbox holds everything it got; the control is the same exhaustion unconfined.

mod common;

use common::*;
use std::ffi::{CString, OsStr};
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The unprivileged user that owns the repo when root runs (exists here and in CI).
const OWNER: u32 = 1001;

fn owner_exists() -> bool {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(':').nth(2) == Some(&OWNER.to_string()))
}

/// Run `f` in a forked child, as `uid` (and the same gid, no supplementary groups) when
/// given; its return value is the child's exit code. `f` runs between fork and _exit of a
/// multi-threaded process: raw system calls on prepared data only.
fn as_user(uid: Option<u32>, f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child makes raw system calls only and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            if let Some(u) = uid {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(u, u, u) != 0
                    || libc::setresuid(u, u, u) != 0
                {
                    libc::_exit(255);
                }
            }
            libc::_exit(f())
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    libc::WEXITSTATUS(status)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// PTRACE_SEIZE `pid` as `uid`: 0 when attached (then detached by the child's exit), else
/// the errno.
fn seize_as(uid: u32, pid: i32) -> i32 {
    as_user(Some(uid), || {
        // SAFETY: ptrace with integer arguments.
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) } == 0 {
            0
        } else {
            errno()
        }
    })
}

/// readlink(PATH) as `uid`: 0 or the errno. On /proc/PID/fd/N it needs ptrace access.
fn readlink_as(uid: u32, path: &Path) -> i32 {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    as_user(Some(uid), || {
        let mut buf = [0u8; 256];
        // SAFETY: a NUL-terminated path and a buffer of the given length.
        if unsafe { libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) } >= 0 {
            0
        } else {
            errno()
        }
    })
}

/// Can `uid` open `path` (read) / execute it? For the fixtures the repo owner must reach.
fn reachable_by(uid: u32, path: &Path, mode: i32) -> bool {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: access on a NUL-terminated path.
    as_user(Some(uid), || unsafe { libc::access(c.as_ptr(), mode) }) == 0
}

/// A root test's repo owned by [`OWNER`]; `None` (after a skip) when it cannot be set up.
fn owned_repo(f: &Fixture) -> Option<std::path::PathBuf> {
    if !owner_exists() {
        skip("sbxtest", &format!("no user with uid {OWNER} on this host"));
        return None;
    }
    let repo = f.repo("repo");
    chown_tree(&repo, OWNER);
    if !reachable_by(OWNER, &repo, libc::R_OK | libc::X_OK)
        || !reachable_by(OWNER, &probe(), libc::X_OK)
    {
        skip(
            "sbxtest",
            &format!(
                "uid {OWNER} cannot reach the fixture or the probe under {} (a checkout under \
                 /root or a home directory)",
                test_base().display()
            ),
        );
        return None;
    }
    Some(repo)
}

fn chown_tree(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

/// Field `n` (1-based, as in proc(5)) of /proc/PID/stat.
fn stat_field(pid: i32, n: usize) -> i64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(n - 3).unwrap().parse().unwrap()
}

/// Every open fd of `pid` and what it points to.
fn fds(pid: i32) -> Vec<(i32, String)> {
    let mut v: Vec<(i32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse().ok()?;
            let t = std::fs::read_link(e.path()).ok()?;
            Some((n, t.display().to_string()))
        })
        .collect();
    v.sort();
    v
}

/// Wait (at most 30 s) until `find` returns something.
fn wait_for<T>(what: &str, mut find: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = find() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid of `pid` in its innermost pid namespace (the last field of `NSpid:`).
fn ns_pid(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// A token in the caller's environment (see the ptrace test).
const HOST_SECRET: &str = "ghp_sbxE2eHostSecret0123456789";

/// SIGTERM, then (after 10 s) SIGKILL, and reap.
fn stop(mut child: Child) {
    // SAFETY: our own unreaped child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Finding 5. Root runs, in a terminal that is its controlling terminal and with two fds it
/// leaked (a secret file and the terminal again, without close-on-exec), a repo owned by
/// uid 1001. As uid 1001: PTRACE_SEIZE of stage 2, pid 1 and the workload is refused, and so
/// is reading stage 2's and pid 1's fds through /proc. Stage 2 and pid 1 have no controlling
/// terminal and hold only stdin (/dev/null), stdout and stderr (the command's output: the
/// terminal here) and pipes (the record channel, the liveness pipe). Controls: the same
/// attach works on an ordinary process of uid 1001; sandbox-run itself has the terminal as
/// controlling terminal and holds the leaked fds. Stage 2 and pid 1 (forks of sandbox-run)
/// do not hold the caller's environment (a token in it), which sandbox-run itself has.
#[test]
fn the_repo_owner_cannot_ptrace_a_root_run_nor_reach_its_terminal_or_fds() {
    if !is_root() {
        skip("root", "root runs a repo owned by another user: needs root");
        return;
    }
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("host-ptrace");
    let Some(repo) = owned_repo(&f) else { return };
    let p = f.profile(&Spec::default());

    // Control: uid 1001 can attach to an ordinary process of its own.
    let mut plain = Command::new("sleep");
    plain.arg("60").uid(OWNER).gid(OWNER);
    let plain = plain.spawn().unwrap();
    let control = seize_as(OWNER, plain.id() as i32);
    stop(plain);
    assert_eq!(
        control, 0,
        "control: uid {OWNER} cannot attach to its own sleep"
    );

    let secret = std::fs::File::open(f.write("secret", "root's secret\n")).unwrap();
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let master: OwnedFd = pty.master;
    let slave: OwnedFd = pty.slave;
    let pr = probe();
    let argv: Vec<&OsStr> = vec![pr.as_os_str(), OsStr::new("sleep"), OsStr::new("60")];
    let mut c = sandbox_command(&p, &repo, &[], &argv);
    // A secret in the caller's environment: the workload never gets it (the scrub), and the
    // forked stage 2 and pid 1, which start as copies of sandbox-run, must not keep it either.
    c.env("GITHUB_TOKEN", HOST_SECRET);
    c.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    let (secret_fd, slave_fd) = (secret.as_raw_fd(), slave.as_raw_fd());
    // SAFETY: setsid, ioctl and dup2 are async-signal-safe and touch only the child.
    unsafe {
        c.pre_exec(move || {
            // The terminal becomes the controlling terminal, as in root's shell; dup2 leaves
            // the copies without close-on-exec: leaked.
            if libc::setsid() < 0
                || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0
                || libc::dup2(secret_fd, 20) < 0
                || libc::dup2(slave_fd, 21) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = spawn_retrying(&mut c).unwrap();
    let sr = child.id() as i32;
    // Stage 2 is the supervisor's only child (a fork, or a re-exec named by its argv).
    let stage2 = wait_for("stage 2", || children(sr).into_iter().next());
    // Not the short-lived helper that stage 2 forks to write its id maps: the child that is
    // pid 1 in the sandbox's pid namespace.
    let pid1 = wait_for("pid 1", || {
        children(stage2).into_iter().find(|&k| ns_pid(k) == Some(1))
    });
    let probe_exe = pr.display().to_string();
    let workload = wait_for("the workload", || {
        children(pid1).into_iter().find(|&k| {
            std::fs::read_link(format!("/proc/{k}/exe"))
                .is_ok_and(|e| e.display().to_string() == probe_exe)
        })
    });

    let tty = stat_field(sr, 7);
    let sr_fds = fds(sr);
    let mut found = Vec::new();
    let mut wrong = Vec::new();
    for (name, pid) in [("stage 2", stage2), ("pid 1", pid1)] {
        let tty_nr = stat_field(pid, 7);
        let held = fds(pid);
        // Stage 2 keeps one directory: the run's own layer (a tmpfs of the sandbox's, detached
        // from every tree, so its link reads "/"), which it watches and hands over; never a
        // directory of the host's.
        let own_layer = |n: i32, t: &str| {
            name == "stage 2" && t == "/" && is_private_tmpfs(&format!("/proc/{pid}/fd/{n}"))
        };
        // fd 3 is the channel to the supervisor: a socket pair when the sandbox has its own
        // network namespace (the name service's and the proxy's sockets travel on it).
        let channel = |n: i32, t: &str| n == 3 && t.starts_with("socket:");
        let extra: Vec<&(i32, String)> = held
            .iter()
            .filter(|(n, t)| {
                *n > 2 && !t.starts_with("pipe:") && !own_layer(*n, t) && !channel(*n, t)
            })
            .collect();
        let leaked: Vec<&(i32, String)> = held.iter().filter(|(n, _)| *n >= 20).collect();
        let fd_read = readlink_as(OWNER, Path::new(&format!("/proc/{pid}/fd/1")));
        found.push(format!("{name} (pid {pid}): tty_nr {tty_nr}, fds {held:?}"));
        if tty_nr != 0 {
            wrong.push(format!(
                "{name} has a controlling terminal (tty_nr {tty_nr})"
            ));
        }
        if !extra.is_empty() || !leaked.is_empty() {
            wrong.push(format!(
                "{name} holds fds beyond stdio that are not pipes {extra:?}, or leaked fds \
                 {leaked:?}"
            ));
        }
        if fd_read == 0 {
            wrong.push(format!(
                "uid {OWNER} read the link /proc/{pid}/fd/1 of {name}"
            ));
        }
        // (read as root, from the host: what a way past the ptrace checks would find)
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if String::from_utf8_lossy(&environ).contains(HOST_SECRET) {
            wrong.push(format!(
                "{name} holds the caller's GITHUB_TOKEN in its environment"
            ));
        }
    }
    // Control: sandbox-run itself, which needs its caller's environment, has it.
    let own = std::fs::read(format!("/proc/{sr}/environ")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&own).contains(HOST_SECRET),
        "control: sandbox-run's own environment lacks the secret"
    );
    for (name, pid) in [
        ("stage 2", stage2),
        ("pid 1", pid1),
        ("the workload", workload),
    ] {
        let e = seize_as(OWNER, pid);
        found.push(format!(
            "uid {OWNER} attaching to {name}: {}",
            errno_name(e)
        ));
        if e != libc::EPERM {
            wrong.push(format!(
                "uid {OWNER} attached to {name} (pid {pid}) of a root run: {}",
                errno_name(e)
            ));
        }
    }
    stop(child);
    drop(master);
    eprintln!("{}", found.join("\n"));
    // Controls: the caller had the terminal as controlling terminal and the leaked fds.
    assert_ne!(tty, 0, "control: sandbox-run has no controlling terminal");
    assert!(
        sr_fds
            .iter()
            .any(|(n, t)| *n == 20 && t.ends_with("/secret"))
            && sr_fds
                .iter()
                .any(|(n, t)| *n == 21 && t.starts_with("/dev/pts/")),
        "control: sandbox-run does not hold the leaked fds: {sr_fds:?}"
    );
    assert!(
        wrong.is_empty(),
        "{}\n\nwhat was found:\n{}",
        wrong.join("\n"),
        found.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Finding 8: per-user counts

/// A process holding what an `*-exhaust` probe took: started, and read until its
/// `exhausted count=N errno=E` line.
struct Holder {
    child: Child,
    count: usize,
    line: String,
}

impl Holder {
    fn start(mut c: Command, what: &str) -> Holder {
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let cmd = render(&c);
        let mut child = spawn_retrying(&mut c).unwrap_or_else(|e| panic!("{cmd}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if l.starts_with("exhausted ") {
                    let _ = tx.send(l);
                }
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let o = child.wait_with_output().unwrap();
                panic!(
                    "{what}: no `exhausted` line from {cmd}: {:?}\n{}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        };
        let count = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("count="))
            .and_then(|n| n.parse().ok())
            .unwrap();
        Holder { child, count, line }
    }

    /// End it (SIGTERM: sandbox-run tears the sandbox down) and wait: the counts are freed.
    fn release(self) {
        stop(self.child);
    }
}

/// From the host, as `uid` (None: as we are): 0 when the call works, else its errno.
fn host_check(attack: &str, uid: Option<u32>) -> i32 {
    match attack {
        "inotify-exhaust" => as_user(uid, || {
            // SAFETY: plain flags; the fd dies with the child.
            if unsafe { libc::inotify_init1(libc::IN_CLOEXEC) } >= 0 {
                0
            } else {
                errno()
            }
        }),
        "sigqueue-exhaust" => {
            let sig = libc::SIGRTMIN() + 1;
            as_user(uid, move || {
                // SAFETY: plain data; the signal is blocked, so it stays queued until _exit.
                unsafe {
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, sig);
                    libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    info.si_signo = sig;
                    info.si_code = -1; // SI_QUEUE
                    let me = libc::getpid();
                    if libc::syscall(libc::SYS_rt_sigqueueinfo, me, sig, &info) == 0 {
                        0
                    } else {
                        errno()
                    }
                }
            })
        }
        _ => unreachable!(),
    }
}

/// Finding 8. For inotify instances, then queued signals. The counts are charged to the
/// workload's uid in the sandbox's user namespace and, on the host, to the namespace's owner:
/// the test user itself rootless; root (not the repo's owner, uid 1001) when root runs. Each
/// uid that could be starved is checked: rootless, the test user; as root, uid 1001 and root.
///
/// Control, for each such uid: an unconfined process of that uid takes every unit, and that
/// uid's own `inotify_init1` / `rt_sigqueueinfo` then fails (so this test can see the
/// starvation); released, it works again. Then the same exhaustion runs inside a sandbox and
/// holds what it got: each uid's call still works, and the sandbox got less than the
/// control. One function, in sequence: the steps share the uids' counters.
#[test]
fn a_hostile_run_leaves_the_host_user_inotify_instances_and_queued_signals() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("host-counts");
    // (uid to switch to, or None: as we are; its name in messages)
    let (repo, uids): (_, Vec<(Option<u32>, String)>) = if is_root() {
        match owned_repo(&f) {
            Some(r) => (
                r,
                vec![
                    (Some(OWNER), format!("the repo owner (uid {OWNER})")),
                    (None, "root, the namespace's owner".to_string()),
                ],
            ),
            None => return,
        }
    } else {
        (f.repo("repo"), vec![(None, "the test user".to_string())])
    };
    let p = f.profile(&Spec::default());
    let pr = probe();
    for (attack, what) in [
        ("inotify-exhaust", "inotify_init1"),
        ("sigqueue-exhaust", "rt_sigqueueinfo"),
    ] {
        let mut control_count = 0;
        for (uid, who) in &uids {
            assert_eq!(
                host_check(attack, *uid),
                0,
                "{who}: {what} fails before any run"
            );
            let mut host = Command::new(&pr);
            host.args([attack, "60"]).stdin(Stdio::null());
            if let Some(u) = uid {
                host.uid(*u).gid(*u);
            }
            let held = Holder::start(host, attack);
            let starved = host_check(attack, *uid);
            let control = held.line.clone();
            control_count = control_count.max(held.count);
            held.release();
            eprintln!(
                "{attack}: {who}, unconfined {control}: {what} {}",
                errno_name(starved)
            );
            assert_ne!(
                starved, 0,
                "control: {who}'s {what} still works while an unconfined process of the same \
                 uid holds everything ({control}): this test could not see the problem"
            );
            assert_eq!(
                host_check(attack, *uid),
                0,
                "{who}: {what} fails after the control released its hold"
            );
        }

        let argv: Vec<&OsStr> = vec![pr.as_os_str(), OsStr::new(attack), OsStr::new("60")];
        let held = Holder::start(sandbox_command(&p, &repo, &[], &argv), attack);
        let during: Vec<(String, i32)> = uids
            .iter()
            .map(|(uid, who)| (who.clone(), host_check(attack, *uid)))
            .collect();
        let inside = held.line.clone();
        let inside_count = held.count;
        held.release();
        eprintln!("{attack}: in a sandbox {inside}: {what} {during:?}");
        for (who, e) in during {
            assert_eq!(
                e,
                0,
                "{who}'s {what} failed ({}) while a sandbox held what it could take ({inside})",
                errno_name(e)
            );
        }
        assert!(
            inside_count > 0 && inside_count < control_count,
            "{attack}: inside {inside}, unconfined at most {control_count}"
        );
    }
}

/// Is `path` (followed) the root of a tmpfs other than any the host has mounted at `/`?
fn is_private_tmpfs(path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(m), Ok(root)) = (std::fs::metadata(path), std::fs::metadata("/")) else {
        return false;
    };
    let c = std::ffi::CString::new(path).unwrap();
    // SAFETY: statfs into a zeroed struct, with a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0;
    ok && st.f_type == libc::TMPFS_MAGIC && m.dev() != root.dev()
}
