//! End-to-end attacks: each test runs the probe (`examples/probe.rs`) INSIDE a real sandbox
//! and asserts that the forbidden thing fails, next to a positive control showing that the
//! same probe succeeds where the layer allows it (inside the sandbox when a profile can allow
//! it, else on the host, unconfined). A refusal only counts when the probe itself reports the
//! kernel's `denied errno=N` and exits 1: a gate denial (126), a setup failure (125) or a
//! probe error (2) would make a broken test pass.
//!
//! Which layer stops what is said at each test; where two layers stop the same attack, the
//! test tries to take one away (a profile that allows the port, the path, ...) to show the
//! other one works on its own.

mod common;

use common::*;
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `pid=N ppid=M` from the `pid` probe.
fn workload_pid(profile: &Path, repo: &Path) -> i32 {
    let d = run_probe(profile, repo, &[], &["pid"]).assert_ok();
    d.split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {d:?}"))
}

fn read_to_string(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

// ---------------------------------------------------------------------------------------------
// Filesystem: mount namespace + new root (what is not bound does not exist) and landlock
// (what is bound is only readable/writable per the rules).

/// A secret file next to the repo: not bound into the new root (ENOENT), and landlock would
/// deny it anyway. Control: the same file, bound with `extra_ro`, reads fine.
#[test]
fn reading_a_secret_next_to_the_repo_is_denied() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("secret-next");
    let repo = f.repo("repo");
    let secret = f.write("secret.txt", SECRET);
    let p = f.profile(&Spec::default());

    // control: a file inside the repo reads fine
    let d = run_probe(
        &p,
        &repo,
        &[],
        &["read", repo.join("inside.txt").to_str().unwrap()],
    )
    .assert_ok();
    assert_eq!(d, format!("bytes={}", INSIDE.len()));
    // attack: by absolute path, and relative to the repo (the cwd)
    run_probe(&p, &repo, &[], &["read", secret.to_str().unwrap()])
        .assert_errno(&[libc::ENOENT, libc::EACCES]);
    run_probe(&p, &repo, &[], &["read", "../secret.txt"])
        .assert_errno(&[libc::ENOENT, libc::EACCES]);
    // the repo's parent shows no host entries besides the repo's own mount point
    let l = run_probe(&p, &repo, &[], &["list", f.dir.to_str().unwrap()]);
    if l.code() == Some(0) {
        assert!(
            l.lines.iter().all(|n| n == "repo"),
            "the repo's parent lists host files: {:?}\n{l}",
            l.lines
        );
    } else {
        l.assert_refused();
    }
    // control: the probe does read that file when the filesystem layer exposes it
    let allowed = f.profile(&Spec::default().extra_ro(&secret));
    let d = run_probe(&allowed, &repo, &[], &["read", secret.to_str().unwrap()]).assert_ok();
    assert_eq!(d, format!("bytes={}", SECRET.len()));
}

/// The caller's `$HOME` is a private empty tmpfs at the same path. Secrets in it, and
/// `/root/.bashrc`, are not visible. Control: the probe lists/reads them on the host.
#[test]
fn caller_home_is_private_and_empty() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("home");
    let repo = f.repo("repo");
    let home = f.path("home");
    f.write("home/.bashrc", "export SECRET=1\n");
    let key = f.write("home/.ssh/id_ed25519", SECRET);
    let p = f.profile(&Spec::default());
    let with_home = |c: &mut Command| {
        c.env("HOME", &home);
    };

    // control: on the host the probe sees both entries and reads the key
    let h = host_probe(&["list", home.to_str().unwrap()]);
    h.assert_ok();
    assert!(h.lines.contains(&".ssh".to_string()) && h.lines.contains(&".bashrc".to_string()));
    host_probe(&["read", key.to_str().unwrap()]).assert_ok();

    // inside: HOME is the same path...
    let r = run_probe_with(&p, &repo, &[], &["getenv", "HOME"], with_home);
    assert_eq!(r.assert_ok(), home.display().to_string(), "{r}");
    // ... and empty
    let r = run_probe_with(&p, &repo, &[], &["list", home.to_str().unwrap()], with_home);
    assert_eq!(
        r.assert_ok(),
        "entries=0",
        "HOME is not empty: {:?}\n{r}",
        r.lines
    );
    run_probe_with(&p, &repo, &[], &["read", key.to_str().unwrap()], with_home)
        .assert_errno(&[libc::ENOENT, libc::EACCES]);
    run_probe_with(
        &p,
        &repo,
        &[],
        &["read", &format!("{}/.bashrc", home.display())],
        with_home,
    )
    .assert_errno(&[libc::ENOENT, libc::EACCES]);

    // The caller's real HOME (root's /root, or the test user's): empty inside except for the
    // mount points of what the sandbox binds under it (the probe's or the fixtures' dirs), and
    // the `.gitconfig` sandbox-run makes from the caller's git identity (tests/home.rs).
    if let Some(real) = std::env::var_os("HOME").map(PathBuf::from) {
        let mut allowed: Vec<String> = [probe_dir(), repo.clone()]
            .iter()
            .filter_map(|p| p.strip_prefix(&real).ok())
            .filter_map(|rel| rel.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        allowed.push(".gitconfig".into());
        let r = run_probe(&p, &repo, &[], &["list", real.to_str().unwrap()]);
        r.assert_ok();
        assert!(
            r.lines.iter().all(|n| allowed.contains(n)),
            "the caller's HOME {} shows host entries inside: {:?}\n{r}",
            real.display(),
            r.lines
        );
        let bashrc = real.join(".bashrc");
        if std::fs::read(&bashrc).is_ok() {
            host_probe(&["read", bashrc.to_str().unwrap()]).assert_ok();
        }
        run_probe(&p, &repo, &[], &["read", bashrc.to_str().unwrap()])
            .assert_errno(&[libc::ENOENT, libc::EACCES]);
    }
    // root's dotfiles, whoever runs the test
    if Path::new("/root/.bashrc").exists() && is_root() {
        host_probe(&["read", "/root/.bashrc"]).assert_ok();
    }
    run_probe(&p, &repo, &[], &["read", "/root/.bashrc"])
        .assert_errno(&[libc::ENOENT, libc::EACCES]);
}

/// Writes outside the repo fail (the new root is read-only, system binds are read-only,
/// landlock gives write only to the repo, /tmp and $HOME). Controls: a write in a `rw` repo
/// persists on the host, and a directory the profile binds with `extra_rw` is writable.
#[test]
fn writing_outside_the_repo_is_denied() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("write-out");
    let repo = f.repo("repo");
    let shared = f.path("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let p = f.profile(&Spec::default().repo("rw"));

    // control: a write inside the rw repo works and persists
    run_probe(
        &p,
        &repo,
        &[],
        &["write", repo.join("new.txt").to_str().unwrap()],
    )
    .assert_ok();
    assert_eq!(
        read_to_string(&repo.join("new.txt")).as_deref(),
        Some("sandbox-run probe\n")
    );

    let outside = f.path("outside.txt");
    run_probe(&p, &repo, &[], &["write", outside.to_str().unwrap()]).assert_errno(&[
        libc::EROFS,
        libc::EACCES,
        libc::ENOENT,
    ]);
    assert!(!outside.exists(), "a file appeared outside the repo");
    run_probe(
        &p,
        &repo,
        &[],
        &["write", shared.join("x.txt").to_str().unwrap()],
    )
    .assert_errno(&[libc::EROFS, libc::EACCES, libc::ENOENT]);
    run_probe(
        &p,
        &repo,
        &[],
        &["mkdir", f.path("newdir").to_str().unwrap()],
    )
    .assert_errno(&[libc::EROFS, libc::EACCES, libc::ENOENT]);
    assert!(!f.path("newdir").exists());
    // read-only binds: the probe's own directory, system files
    let in_probe_dir = probe_dir().join(format!("sbx-e2e-{}", std::process::id()));
    run_probe(&p, &repo, &[], &["write", in_probe_dir.to_str().unwrap()])
        .assert_errno(&[libc::EROFS, libc::EACCES]);
    assert!(!in_probe_dir.exists());
    for target in [
        "/etc/passwd",
        "/usr/bin/sbx-e2e-planted",
        "/sbx-e2e-planted",
    ] {
        run_probe(&p, &repo, &[], &["write", target]).assert_errno(&[libc::EROFS, libc::EACCES]);
    }
    run_probe(&p, &repo, &[], &["truncate", probe().to_str().unwrap()]).assert_errno(&[
        libc::EROFS,
        libc::EACCES,
        libc::ETXTBSY,
    ]);

    // control: the probe does write outside the repo where the profile binds a dir rw
    let rw = f.profile(&Spec::default().repo("rw").extra_rw(&shared));
    run_probe(
        &rw,
        &repo,
        &[],
        &["write", shared.join("x.txt").to_str().unwrap()],
    )
    .assert_ok();
    assert!(shared.join("x.txt").exists());
}

/// Overlay mode (validate): writes, appends and deletes work inside and are gone afterwards.
#[test]
fn overlay_repo_writes_vanish() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("overlay");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("overlay"));
    let new = repo.join("new.txt");

    run_probe(&p, &repo, &[], &["write", new.to_str().unwrap()]).assert_ok();
    run_probe(
        &p,
        &repo,
        &[],
        &["write", repo.join("inside.txt").to_str().unwrap()],
    )
    .assert_ok();
    run_probe(
        &p,
        &repo,
        &[],
        &["unlink", repo.join("src/lib.txt").to_str().unwrap()],
    )
    .assert_ok();
    run_probe(
        &p,
        &repo,
        &[],
        &["mkdir", repo.join("made").to_str().unwrap()],
    )
    .assert_ok();

    assert!(!new.exists(), "an overlay write reached the host");
    assert_eq!(
        read_to_string(&repo.join("inside.txt")).as_deref(),
        Some(INSIDE)
    );
    assert!(
        repo.join("src/lib.txt").exists(),
        "an overlay delete reached the host"
    );
    assert!(!repo.join("made").exists());
    // and the next sandbox starts from the host's state again
    run_probe(&p, &repo, &[], &["stat", new.to_str().unwrap()]).assert_errno(&[libc::ENOENT]);
    run_probe(
        &p,
        &repo,
        &[],
        &["stat", repo.join("src/lib.txt").to_str().unwrap()],
    )
    .assert_ok();
}

/// rw mode: `.git/hooks` and `.git/config` are read-only binds (EROFS), while a normal file,
/// and a file in `.git` itself, are writable and persist (so the denial is the protect rule's).
#[test]
fn git_hooks_and_config_are_read_only_in_rw_mode() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("git-protect");
    let repo = f.git_repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));
    let git = repo.join(".git");
    let s = |p: PathBuf| p.display().to_string();

    // controls
    run_probe(&p, &repo, &[], &["write", &s(repo.join("src/lib.txt"))]).assert_ok();
    assert_eq!(
        read_to_string(&repo.join("src/lib.txt")).as_deref(),
        Some("source\nsandbox-run probe\n")
    );
    // what git records work in stays writable: refs, and the files git replaces by rename
    // (brought back through the way back after the run)
    run_probe(&p, &repo, &[], &["write", &s(git.join("refs/heads/x"))]).assert_ok();
    assert!(read_to_string(&git.join("refs/heads/x"))
        .unwrap()
        .contains("sandbox-run probe"));
    run_probe(&p, &repo, &[], &["write", &s(git.join("COMMIT_EDITMSG"))]).assert_ok();
    assert!(read_to_string(&git.join("COMMIT_EDITMSG"))
        .unwrap()
        .contains("sandbox-run probe"));
    // but a HEAD that names no ref git would write is written inside and refused on the way
    // back (tests/way_back.rs attacks it further)
    let head = read_to_string(&git.join("HEAD"));
    run_probe(&p, &repo, &[], &["write", &s(git.join("HEAD"))]).assert_ok();
    assert_eq!(read_to_string(&git.join("HEAD")), head);
    // everything else is read-only, by allow-list
    run_probe(&p, &repo, &[], &["write", &s(git.join("description"))]).assert_errno(&[libc::EROFS]);

    // attacks
    run_probe(&p, &repo, &[], &["write", &s(git.join("hooks/pre-commit"))])
        .assert_errno(&[libc::EROFS]);
    assert!(!git.join("hooks/pre-commit").exists(), "a hook was planted");
    run_probe(&p, &repo, &[], &["write", &s(git.join("config"))]).assert_errno(&[libc::EROFS]);
    run_probe(&p, &repo, &[], &["truncate", &s(git.join("config"))]).assert_errno(&[libc::EROFS]);
    assert_eq!(
        read_to_string(&git.join("config")).as_deref(),
        Some(GIT_CONFIG)
    );
    run_probe(
        &p,
        &repo,
        &[],
        &["unlink", &s(git.join("hooks/pre-commit.sample"))],
    )
    .assert_errno(&[libc::EROFS, libc::EBUSY]);
    assert!(git.join("hooks/pre-commit.sample").exists());
}

/// rw mode: `.git` is a mount point, so it cannot be renamed away (and replaced by a `.git`
/// with hooks of the command's choosing). Uses `mv` through the probe's `exec`. Control: the
/// same `mv` renames an ordinary directory of the repo.
#[test]
fn dot_git_cannot_be_renamed_away() {
    if !sandbox_works() {
        return;
    }
    let mv = Path::new("/usr/bin/mv");
    if !mv.exists() {
        skip_tool("/usr/bin/mv is missing");
        return;
    }
    let f = Fixture::new("git-rename");
    let repo = f.git_repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));
    let s = |rel: &str| repo.join(rel).display().to_string();

    // control
    let d = run_probe(
        &p,
        &repo,
        &[],
        &["exec", "/usr/bin/mv", &s("src"), &s("src-moved")],
    )
    .assert_ok();
    assert_eq!(d, "exit=0", "mv of a plain directory failed");
    assert!(repo.join("src-moved/lib.txt").exists() && !repo.join("src").exists());

    // attack: .git is a mount point (EBUSY), not even mv's copy fallback applies
    let r = run_probe(
        &p,
        &repo,
        &[],
        &["exec", "/usr/bin/mv", &s(".git"), &s(".git-away")],
    );
    assert_ne!(r.assert_ok(), "exit=0", "mv .git .git-away succeeded:\n{r}");
    assert!(
        repo.join(".git/hooks/pre-commit.sample").exists(),
        ".git is gone:\n{r}"
    );
    assert!(!repo.join(".git-away").exists(), ".git-away appeared:\n{r}");
    // .git/hooks is a read-only mount point: mv can at most copy it (EXDEV fallback), the
    // original stays in place and intact
    let r = run_probe(
        &p,
        &repo,
        &[],
        &["exec", "/usr/bin/mv", &s(".git/hooks"), &s("hooks-away")],
    );
    assert_ne!(r.assert_ok(), "exit=0", "mv .git/hooks succeeded:\n{r}");
    assert_eq!(
        read_to_string(&repo.join(".git/hooks/pre-commit.sample")).as_deref(),
        Some("#!/bin/sh\nexit 0\n"),
        "{r}"
    );
}

/// Symlinks in the repo that point at host secrets resolve inside the sandbox's root, where
/// the target does not exist. Control: a link to a repo file works, and the same link to the
/// secret reads fine once the profile binds the secret.
#[test]
fn symlink_in_repo_to_host_secret_does_not_leak() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("symlink");
    let repo = f.repo("repo");
    let secret = f.write("secret.txt", SECRET);
    std::os::unix::fs::symlink(&secret, repo.join("link-abs")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", repo.join("link-rel")).unwrap();
    std::os::unix::fs::symlink("inside.txt", repo.join("link-in")).unwrap();
    std::os::unix::fs::symlink("/root/.bashrc", repo.join("link-root")).unwrap();

    for mode in ["overlay", "rw", "ro"] {
        let p = f.profile(&Spec::default().repo(mode));
        let link = |n: &str| repo.join(n).display().to_string();
        let d = run_probe(&p, &repo, &[], &["symlink-read", &link("link-in")]).assert_ok();
        assert!(d.starts_with(&format!("bytes={}", INSIDE.len())), "{d}");
        for l in ["link-abs", "link-rel", "link-root"] {
            run_probe(&p, &repo, &[], &["symlink-read", &link(l)])
                .assert_errno(&[libc::ENOENT, libc::EACCES]);
        }
    }
    // control: with the secret bound, the very same link reads it
    let p = f.profile(&Spec::default().extra_ro(&secret));
    let d = run_probe(
        &p,
        &repo,
        &[],
        &["symlink-read", repo.join("link-abs").to_str().unwrap()],
    )
    .assert_ok();
    assert!(d.starts_with(&format!("bytes={}", SECRET.len())), "{d}");
}

/// A repo under /tmp (which the sandbox replaces with a private tmpfs) is still mounted at
/// its own path and writable in rw mode; the rest of the host's /tmp is not visible.
#[test]
fn repo_under_tmp_works_and_host_tmp_stays_hidden() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new_in(Path::new("/tmp"), "tmp-repo");
    let other = Fixture::new_in(Path::new("/tmp"), "tmp-other");
    other.write("host-tmp-secret.txt", SECRET);
    let repo = f.repo("repo");
    let secret = f.write("secret.txt", SECRET);
    // the profile and the probe live elsewhere; only the repo is under /tmp
    let pf = Fixture::new("tmp-repo-profile");
    let p = pf.profile(&Spec::default().repo("rw"));

    let d = run_probe(
        &p,
        &repo,
        &[],
        &["read", repo.join("inside.txt").to_str().unwrap()],
    )
    .assert_ok();
    assert_eq!(d, format!("bytes={}", INSIDE.len()));
    run_probe(
        &p,
        &repo,
        &[],
        &["write", repo.join("w.txt").to_str().unwrap()],
    )
    .assert_ok();
    assert!(
        repo.join("w.txt").exists(),
        "a write in a /tmp repo did not persist"
    );

    run_probe(&p, &repo, &[], &["read", secret.to_str().unwrap()])
        .assert_errno(&[libc::ENOENT, libc::EACCES]);
    let secret2 = other.path("host-tmp-secret.txt");
    run_probe(&p, &repo, &[], &["read", secret2.to_str().unwrap()])
        .assert_errno(&[libc::ENOENT, libc::EACCES]);
    // control: the host's /tmp has that entry; the sandbox's /tmp only the repo's path
    let name = |f: &Fixture| f.dir.file_name().unwrap().to_string_lossy().into_owned();
    let h = host_probe(&["list", "/tmp"]);
    h.assert_ok();
    assert!(h.lines.contains(&name(&other)));
    let r = run_probe(&p, &repo, &[], &["list", "/tmp"]);
    r.assert_ok();
    assert_eq!(
        r.lines,
        vec![name(&f)],
        "the sandbox's /tmp shows host entries:\n{r}"
    );
}

// ---------------------------------------------------------------------------------------------
// Network: network namespace (none: only lo) and landlock TCP rules (ABI 4), abstract unix
// socket scoping (ABI 6).

fn accepted_within(l: &std::net::TcpListener, d: Duration) -> usize {
    l.set_nonblocking(true).unwrap();
    let end = Instant::now() + d;
    let mut n = 0;
    while Instant::now() < end {
        match l.accept() {
            Ok(_) => n += 1,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    n
}

/// Without network (the default), a listener on the host's 127.0.0.1 is unreachable, even
/// when landlock allows its port (so the network namespace alone stops it: ECONNREFUSED from
/// the sandbox's own lo). With `--net host` and the port allowed: the control connects.
#[test]
fn tcp_connect_to_a_host_loopback_listener() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("tcp");
    let repo = f.repo("repo");
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");

    // default: no network, no ports
    let p = f.profile(&Spec::default());
    run_probe(&p, &repo, &[], &["tcp-connect", &addr]).assert_errno(&[
        libc::EACCES,
        libc::ECONNREFUSED,
        libc::ENETUNREACH,
    ]);
    // landlock allows the port: the namespace still keeps the host's loopback out
    let p_port = f.profile(&Spec::default().tcp_connect(&[port]));
    run_probe(&p_port, &repo, &[], &["tcp-connect", &addr]).assert_errno(&[libc::ECONNREFUSED]);
    assert_eq!(accepted_within(&l, Duration::from_millis(200)), 0);

    // control: host network and the port allowed
    let d = run_probe(&p_port, &repo, &["--net", "host"], &["tcp-connect", &addr]).assert_ok();
    assert!(d.contains(&addr), "{d}");
    assert_eq!(
        accepted_within(&l, Duration::from_secs(2)),
        1,
        "the host listener saw no connection"
    );
}

/// With `--net host` but the port not in `tcp_connect`, landlock (ABI 4) denies the connect.
#[test]
fn tcp_connect_to_an_unlisted_port_is_denied_by_landlock() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("tcp-port");
    let repo = f.repo("repo");
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let other = if port == 65535 { port - 1 } else { port + 1 };
    let addr = format!("127.0.0.1:{port}");

    let denied = f.profile(&Spec::default().tcp_connect(&[other]));
    if !need_landlock(4, "TCP connect rules") {
        // Older kernels cannot filter TCP: the report says so instead of claiming it.
        assert_landlock_reports_missing(&f, &denied, &repo, &["--net", "host"], "tcp");
        return;
    }
    run_probe(&denied, &repo, &["--net", "host"], &["tcp-connect", &addr])
        .assert_errno(&[libc::EACCES]);
    assert_eq!(accepted_within(&l, Duration::from_millis(300)), 0);
    // control: the same profile shape with this port connects
    let allowed = f.profile(&Spec::default().tcp_connect(&[port]));
    run_probe(&allowed, &repo, &["--net", "host"], &["tcp-connect", &addr]).assert_ok();
    assert_eq!(accepted_within(&l, Duration::from_secs(2)), 1);
}

fn abstract_listener(name: &str) -> std::os::unix::net::UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    std::os::unix::net::UnixListener::bind_addr(&a).unwrap()
}

/// An abstract unix socket of the host: unreachable without network (abstract names belong
/// to the network namespace), and with `--net host` landlock's scoping (ABI 6) still denies
/// it (EPERM). Control: the probe on the host connects.
#[test]
fn abstract_unix_socket_of_the_host_is_unreachable() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("abstract");
    let repo = f.repo("repo");
    let name = format!("sbx-e2e-abstract-{}", std::process::id());
    let _l = abstract_listener(&name);
    let p = f.profile(&Spec::default());

    host_probe(&["abstract-connect", &name]).assert_ok();
    run_probe(&p, &repo, &[], &["abstract-connect", &name])
        .assert_errno(&[libc::ECONNREFUSED, libc::EPERM]);
    if need_landlock(6, "abstract unix socket scoping") {
        run_probe(&p, &repo, &["--net", "host"], &["abstract-connect", &name])
            .assert_errno(&[libc::EPERM]);
    } else {
        let what = "signal and abstract unix socket scoping";
        assert_landlock_reports_missing(&f, &p, &repo, &["--net", "host"], what);
    }
}

/// A pathname unix socket of the host (outside the repo) does not exist inside, also with
/// `--net host`. Controls: the probe connects to it on the host, and inside the sandbox to a
/// host socket placed in the repo bound as it is (a read-write repo with a disk cap is a
/// copy-on-write layer, whose socket files lead nowhere). Both paths are longer than
/// `sun_path` (108 bytes), as in a deep checkout, wherever this one is: they are bound and
/// reached through their directories.
#[test]
fn pathname_unix_socket_of_the_host_is_not_visible() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("unix");
    let repo = f.repo("repo");
    let deep = "a-directory-name-long-enough-to-push-any-socket-path-in-it-past-108-bytes";
    std::fs::create_dir_all(f.path("sock").join(deep)).unwrap();
    std::fs::create_dir_all(repo.join(deep)).unwrap();
    let host_sock = f.path("sock").join(deep).join("host.sock");
    let _l = bind_unix(&host_sock);
    let repo_sock = repo.join(deep).join("ctl.sock");
    let _l2 = bind_unix(&repo_sock);
    assert!(host_sock.as_os_str().len() > 108 && repo_sock.as_os_str().len() > 108);
    let p = f.profile(&Spec::default().repo("rw").disk("off"));

    host_probe(&["unix-connect", host_sock.to_str().unwrap()]).assert_ok();
    run_probe(
        &p,
        &repo,
        &[],
        &["unix-connect", repo_sock.to_str().unwrap()],
    )
    .assert_ok();
    for opts in [&[][..], &["--net", "host"][..]] {
        run_probe(
            &p,
            &repo,
            opts,
            &["unix-connect", host_sock.to_str().unwrap()],
        )
        .assert_errno(&[libc::ENOENT, libc::EACCES]);
    }
}

// ---------------------------------------------------------------------------------------------
// Processes: pid namespace, landlock signal scoping, seccomp (ptrace).

struct Sleeper(std::process::Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(
            Command::new("sleep")
                .arg("60")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep"),
        )
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Host processes (a sleeping child of the test, the test itself) cannot be signalled.
/// Controls: the probe signals the sleeper from the host, and inside signals itself.
#[test]
fn host_processes_cannot_be_signalled() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("kill");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let mut sleeper = Sleeper::start();
    let me = std::process::id().to_string();

    host_probe(&["kill", &sleeper.pid(), "0"]).assert_ok();
    let own = workload_pid(&p, &repo).to_string();
    run_probe(&p, &repo, &[], &["kill", &own, "0"]).assert_ok();

    for pid in [sleeper.pid(), me] {
        run_probe(&p, &repo, &[], &["kill", &pid, "0"]).assert_errno(&[libc::ESRCH, libc::EPERM]);
    }
    run_probe(&p, &repo, &[], &["kill", &sleeper.pid(), "9"])
        .assert_errno(&[libc::ESRCH, libc::EPERM]);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        sleeper.alive(),
        "the host process was killed from the sandbox"
    );
}

/// ptrace is denied by seccomp (TRACEME, and attaching to pid 1 or a host pid). Control: the
/// probe's PTRACE_TRACEME works on the host.
#[test]
fn ptrace_is_denied() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("ptrace");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let sleeper = Sleeper::start();

    host_probe(&["ptrace-traceme"]).assert_ok();
    run_probe(&p, &repo, &[], &["ptrace-traceme"]).assert_errno(&[libc::EPERM]);
    run_probe(&p, &repo, &[], &["ptrace-attach", "1"]).assert_errno(&[libc::EPERM]);
    run_probe(&p, &repo, &[], &["ptrace-attach", &sleeper.pid()])
        .assert_errno(&[libc::EPERM, libc::ESRCH]);
}

// ---------------------------------------------------------------------------------------------
// Kernel attack surface: seccomp.

/// The attack is refused inside with `errno`; on the host it works (the control) unless the
/// host itself forbids it to this user, which is then said on stderr.
fn syscall_denied(name: &str, attack: &[&str], errnos: &[i32]) {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new(name);
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let h = host_probe(attack);
    match h.outcome {
        Outcome::Ok(_) => {}
        _ => eprintln!(
            "note {name}: the host itself refuses `{}` to this user, so the control cannot show \
             that the probe can do it:\n{h}",
            attack.join(" ")
        ),
    }
    run_probe(&p, &repo, &[], attack).assert_errno(errnos);
}

#[test]
fn nested_user_namespace_via_unshare_is_denied() {
    syscall_denied("unshare", &["unshare-user"], &[libc::EPERM]);
}

#[test]
fn nested_user_namespace_via_raw_clone_is_denied() {
    syscall_denied("clone-newuser", &["clone-newuser"], &[libc::EPERM]);
}

/// clone3 cannot be filtered on its flags (they are in memory): ENOSYS, so libc falls back.
#[test]
fn clone3_gets_enosys() {
    syscall_denied("clone3", &["clone3"], &[libc::ENOSYS]);
}

#[test]
fn io_uring_is_denied() {
    syscall_denied("io-uring", &["io-uring"], &[libc::EPERM]);
}

#[test]
fn keyctl_is_denied() {
    syscall_denied("keyctl", &["keyctl"], &[libc::EPERM]);
}

#[test]
fn bpf_is_denied() {
    syscall_denied("bpf", &["bpf"], &[libc::EPERM]);
}

#[test]
fn userfaultfd_is_denied() {
    syscall_denied("userfaultfd", &["userfaultfd"], &[libc::EPERM]);
}

#[test]
fn perf_event_open_is_denied() {
    syscall_denied("perf", &["perf-event-open"], &[libc::EPERM]);
}

#[test]
fn personality_change_is_denied() {
    syscall_denied("personality", &["personality-norandom"], &[libc::EPERM]);
}

/// mount is denied by seccomp (and the workload has no capabilities). Control: the probe
/// mounts a tmpfs in a plain user+mount namespace on the host (`unshare -Urm`).
#[test]
fn mount_is_denied() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("mount");
    let repo = f.repo("repo");
    let target = f.path("mnt");
    std::fs::create_dir_all(&target).unwrap();
    let p = f.profile(&Spec::default());
    if Path::new("/usr/bin/unshare").exists() {
        let r = run_command(
            {
                let mut c = Command::new("/usr/bin/unshare");
                c.args(["-Urm"])
                    .arg(probe())
                    .args(["mount-tmpfs", target.to_str().unwrap()]);
                c
            },
            LIMIT,
        );
        ProbeRun::parse("mount-tmpfs", r).assert_ok();
    } else {
        eprintln!("note: no /usr/bin/unshare, mount control skipped");
    }
    for dir in ["/tmp", repo.to_str().unwrap()] {
        run_probe(&p, &repo, &[], &["mount-tmpfs", dir]).assert_errno(&[libc::EPERM]);
    }
}

/// i386 system calls through `int 0x80` kill the process (foreign architecture). Control: on
/// the host (i386 emulation on) the same call returns our pid.
#[test]
fn i386_int80_syscalls_are_killed() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("int80");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let h = host_probe(&["int80-getpid"]);
    if h.outcome != Outcome::Ok("returned our pid".into()) {
        eprintln!("note: the host has no i386 emulation, the control cannot run:\n{h}");
    }
    run_probe(&p, &repo, &[], &["int80-getpid"]).assert_killed(libc::SIGSYS);
}

/// x32 system call numbers are killed too (on this host x32 is off: ENOSYS outside).
#[test]
fn x32_syscalls_are_killed() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("x32");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let h = host_probe(&["x32-getpid"]);
    eprintln!("host x32-getpid: {:?}", h.outcome);
    run_probe(&p, &repo, &[], &["x32-getpid"]).assert_killed(libc::SIGSYS);
}

/// Run `c` with a fresh pty's slave as stdout; returns the run and what the master received.
/// `ctty`: make the pty the controlling terminal of the child (host control: TIOCSTI needs it).
fn on_pty(mut c: Command, attack: &str, ctty: bool) -> (ProbeRun, String) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let master: OwnedFd = pty.master;
    let slave: OwnedFd = pty.slave;
    // SAFETY: fcntl on the master fd we own.
    unsafe {
        let fl = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    c.stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    if ctty {
        // SAFETY: setsid and ioctl are async-signal-safe and touch only the child.
        unsafe {
            c.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(1, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let cmd = render(&c);
    let child = c.spawn().unwrap();
    let out = child.wait_with_output().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into a valid buffer from the master we own.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        got.extend_from_slice(&buf[..n as usize]);
    }
    drop(slave);
    let text = String::from_utf8_lossy(&got).replace('\r', "");
    let mut run = Run::from_output(cmd, out);
    // an injected `#` is echoed before the probe's result line: parse without it
    run.stdout = text
        .lines()
        .map(|l| l.trim_start_matches('#'))
        .collect::<Vec<_>>()
        .join("\n");
    (ProbeRun::parse(attack, run), text)
}

/// TIOCSTI on an inherited terminal (the pty given as stdout) cannot push input into it, also
/// with the high 32 bits of the request set (the kernel ignores them; the filter must too).
/// The workload has no controlling terminal (setsid) and seccomp denies the ioctl. Control:
/// on the host, with the pty as controlling terminal, both requests inject a `#`.
#[test]
fn tiocsti_on_an_inherited_terminal_is_denied() {
    if !sandbox_works() || !need_seccomp() {
        return;
    }
    let f = Fixture::new("tiocsti");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let legacy_tiocsti = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|v| v.trim() == "1")
        .unwrap_or(true);
    for extra in [&[][..], &["high"][..]] {
        let mut args = vec!["tiocsti", "1"];
        args.extend_from_slice(extra);

        let mut host = Command::new(probe());
        host.args(&args);
        let (h, echoed) = on_pty(host, "tiocsti", true);
        if legacy_tiocsti {
            h.assert_ok();
            assert!(
                echoed.contains('#'),
                "control: injected input not echoed:\n{h}"
            );
        } else {
            eprintln!("note: dev.tty.legacy_tiocsti=0, the host control cannot inject:\n{h}");
        }

        let pr = probe();
        let mut argv: Vec<&OsStr> = vec![pr.as_os_str()];
        argv.extend(args.iter().map(OsStr::new));
        let c = sandbox_command(&p, &repo, &[], &argv);
        let (r, echoed) = on_pty(c, "tiocsti", false);
        r.assert_errno(&[libc::EPERM, libc::EIO]);
        assert!(
            !echoed.contains('#'),
            "input was injected into the terminal:\n{r}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Process state: capabilities, no_new_privs, seccomp mode, fds, stdin, environment.

/// Signal dispositions the caller ignored (`nohup`, a shell's background job) do not reach the
/// workload: an ignored disposition survives exec, so the sandbox resets every signal, the last
/// real-time one (SIGRTMAX) included. Control: the host probe, started the same way, still
/// ignores them.
#[test]
fn signals_the_caller_ignored_are_reset() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("sigign");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let sigs = [libc::SIGHUP, libc::SIGUSR1, libc::SIGRTMAX()];
    let ignore = |c: &mut Command| {
        // SAFETY: signal() only, between fork and exec.
        unsafe {
            c.pre_exec(move || {
                for s in sigs {
                    libc::signal(s, libc::SIG_IGN);
                }
                Ok(())
            });
        }
    };
    let ignored = |lines: &[String]| -> Vec<i32> {
        let mask = status_field(lines, "SigIgn").expect("SigIgn");
        let mask = u64::from_str_radix(mask, 16).expect("hex");
        sigs.into_iter()
            .filter(|s| mask & (1u64 << (s - 1)) != 0)
            .collect()
    };
    let h = host_probe_with(&["status"], ignore);
    h.assert_ok();
    assert_eq!(
        ignored(&h.lines),
        sigs,
        "control: the host probe ignores them\n{h}"
    );
    let r = run_probe_with(&p, &repo, &[], &["status"], ignore);
    r.assert_ok();
    assert_eq!(ignored(&r.lines), Vec::<i32>::new(), "{r}");
    assert_eq!(
        status_field(&r.lines, "SigBlk"),
        Some("0000000000000000"),
        "{r}"
    );
}

/// Inside: every capability set empty, NoNewPrivs 1, Seccomp 2 (filter). Control: the host's
/// probe shows a bounding set to clear, no NoNewPrivs, no filter.
#[test]
fn no_capabilities_no_new_privs_and_a_seccomp_filter() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("status");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());

    let h = host_probe(&["status"]);
    h.assert_ok();
    assert_ne!(
        status_field(&h.lines, "CapBnd"),
        Some("0000000000000000"),
        "{h}"
    );
    assert_eq!(status_field(&h.lines, "Seccomp"), Some("0"), "{h}");
    if is_root() {
        assert_ne!(
            status_field(&h.lines, "CapEff"),
            Some("0000000000000000"),
            "{h}"
        );
    }

    let r = run_probe(&p, &repo, &[], &["status"]);
    r.assert_ok();
    for k in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        assert_eq!(
            status_field(&r.lines, k),
            Some("0000000000000000"),
            "{k}:\n{r}"
        );
    }
    assert_eq!(status_field(&r.lines, "NoNewPrivs"), Some("1"), "{r}");
    if need_seccomp() {
        assert_eq!(status_field(&r.lines, "Seccomp"), Some("2"), "{r}");
    }
}

/// An fd the caller leaked (a secret open without O_CLOEXEC, at fd 57) does not reach the
/// workload. Control: the host probe started the same way reads it.
#[test]
fn an_inherited_fd_on_a_secret_is_closed() {
    if !sandbox_works() {
        return;
    }
    const FD: i32 = 57;
    let f = Fixture::new("fd");
    let repo = f.repo("repo");
    let secret = f.write("secret.txt", SECRET);
    let p = f.profile(&Spec::default());
    let file = std::fs::File::open(&secret).unwrap();
    let raw = file.as_raw_fd();
    let leak = move |c: &mut Command| {
        // SAFETY: dup2 is async-signal-safe; the copy at FD has no O_CLOEXEC.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(raw, FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    let fd = FD.to_string();

    let d = host_probe_with(&["read-fd", &fd], leak).assert_ok();
    assert_eq!(d, format!("bytes={}", SECRET.len()));

    run_probe_with(&p, &repo, &[], &["read-fd", &fd], leak).assert_errno(&[libc::EBADF]);
    let r = run_probe_with(&p, &repo, &[], &["fds"], leak);
    assert_eq!(
        r.assert_ok(),
        "count=0",
        "fds above 2 reach the workload: {:?}\n{r}",
        r.lines
    );
    drop(file);
}

/// The caller's stdin never reaches the workload (it reads /dev/null). Control: the host
/// probe reads the same piped data.
#[test]
fn the_callers_stdin_does_not_reach_the_workload() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("stdin");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let data = b"secret typed on stdin\n";

    let run_with_stdin = |mut c: Command| {
        let cmd = render(&c);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(data);
        drop(stdin);
        ProbeRun::parse(
            "stdin",
            Run::from_output(cmd, child.wait_with_output().unwrap()),
        )
    };

    let mut host = Command::new(probe());
    host.arg("stdin");
    let d = run_with_stdin(host).assert_ok();
    assert_eq!(d, format!("bytes={}", data.len()));

    let c = sandbox_command(&p, &repo, &[], &[probe().as_os_str(), OsStr::new("stdin")]);
    run_with_stdin(c).assert_nothing("eof");
}

const INJECTED: &[(&str, &str)] = &[
    ("NODE_OPTIONS", "--require /tmp/sbx-e2e-evil.js"),
    ("LD_PRELOAD", "/nonexistent/sbx-e2e-evil.so"),
    ("LD_LIBRARY_PATH", "/nonexistent/sbx-e2e-lib"),
    ("LD_AUDIT", "/nonexistent/sbx-e2e-audit.so"),
    ("PYTHONPATH", "/nonexistent/sbx-e2e-py"),
    ("BASH_ENV", "/nonexistent/sbx-e2e-bashenv"),
    ("GITHUB_TOKEN", "ghp_sbxE2eSecretToken0123456789"),
    ("AWS_SECRET_ACCESS_KEY", "sbxE2eAwsSecretKey/0123456789"),
    ("NPM_TOKEN", "npm_sbxE2eSecret0123456789"),
];

/// Code-loading variables (NODE_OPTIONS, LD_*...) and secret-named ones in the caller's
/// environment never reach the workload, even when the profile's keep list names them.
/// Control: a variable on the keep list passes, and the host probe sees them all.
#[test]
fn injection_and_secret_variables_are_scrubbed() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("env");
    let repo = f.repo("repo");
    let mut keep = vec!["PATH", "SBX_E2E_KEEP"];
    keep.extend(INJECTED.iter().map(|(k, _)| *k));
    let p = f.profile(&Spec::default().env_keep(&keep));
    let set_env = |c: &mut Command| {
        c.env("SBX_E2E_KEEP", "kept-value");
        for (k, v) in INJECTED {
            c.env(k, v);
        }
    };

    // controls
    assert_eq!(
        host_probe_with(&["getenv", "GITHUB_TOKEN"], set_env).assert_ok(),
        "ghp_sbxE2eSecretToken0123456789"
    );
    let r = run_probe_with(&p, &repo, &[], &["getenv", "SBX_E2E_KEEP"], set_env);
    assert_eq!(r.assert_ok(), "kept-value", "{r}");

    for (k, v) in INJECTED {
        let r = run_probe_with(&p, &repo, &[], &["getenv", k], set_env);
        r.assert_nothing("unset");
        if !k.starts_with("LD_") {
            // (a dynamically linked sandbox-run's own loader may name the LD_ paths)
            assert!(
                !r.run.all().contains(v),
                "the value of {k} was printed:\n{r}"
            );
        }
    }
    let r = run_probe_with(&p, &repo, &[], &["env"], set_env);
    r.assert_ok();
    for (k, _) in INJECTED {
        assert!(!r.lines.iter().any(|l| l == k), "{k} passed:\n{r}");
    }
}

/// A real node process started by the sandbox does not see NODE_OPTIONS (here a harmless
/// `--title`, which would also rename the process) nor a token; the keep list still works.
/// Control: the same script on the host, with the same environment, sees them.
#[test]
fn node_does_not_see_node_options_or_tokens() {
    if !sandbox_works() {
        return;
    }
    let Some(node) = which("node") else {
        skip_tool("node is not installed");
        return;
    };
    let f = Fixture::new("node-env");
    let repo = f.repo("repo");
    std::fs::write(
        repo.join("env.js"),
        "console.log(JSON.stringify({o: process.env.NODE_OPTIONS ?? null, \
         t: process.env.GITHUB_TOKEN ?? null, k: process.env.SBX_E2E_KEEP ?? null, \
         title: process.title}));\n",
    )
    .unwrap();
    let p = f.profile(&Spec::default().env_keep(&["PATH", "SBX_E2E_KEEP"]));
    let set_env = |c: &mut Command| {
        c.env("NODE_OPTIONS", "--title=sbx-e2e-leaked")
            .env("GITHUB_TOKEN", "ghp_sbxE2eNodeToken")
            .env("SBX_E2E_KEEP", "kept");
    };

    let mut host = Command::new(&node);
    host.arg("env.js").current_dir(&repo);
    set_env(&mut host);
    let h = run_command(host, LIMIT);
    h.assert_code(0);
    assert!(
        h.stdout.contains("\"o\":\"--title=sbx-e2e-leaked\"")
            && h.stdout.contains("\"title\":\"sbx-e2e-leaked\""),
        "control: node on the host does not apply NODE_OPTIONS:\n{h}"
    );

    let mut c = sandbox_command(&p, &repo, &[], &["node", "env.js"]);
    set_env(&mut c);
    let r = run_command(c, LIMIT);
    r.assert_code(0);
    assert!(
        r.stdout.contains("\"o\":null") && r.stdout.contains("\"t\":null"),
        "NODE_OPTIONS or the token reached node:\n{r}"
    );
    assert!(
        r.stdout.contains("\"k\":\"kept\""),
        "the keep list did not pass:\n{r}"
    );
    assert!(!r.stdout.contains("sbx-e2e-leaked"), "{r}");
}

/// Build `pre.so`: its constructor appends "PID EXE" to `marker`.
fn build_preload(dir: &Path, marker: &Path) -> Option<PathBuf> {
    let gcc = which("gcc").or_else(|| which("cc"))?;
    let src = dir.join("pre.c");
    std::fs::write(
        &src,
        r#"#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void sbx_e2e_mark(void) {
    char exe[512] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = 0;
    char line[700];
    int len = snprintf(line, sizeof line, "%d %s\n", (int)getpid(), exe);
    int fd = open(MARKER, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd >= 0) { if (write(fd, line, len) < 0) {} close(fd); }
}
"#,
    )
    .unwrap();
    let so = dir.join("pre.so");
    let out = Command::new(gcc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(format!("-DMARKER=\"{}\"", marker.display()))
        .arg(&src)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "gcc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(so)
}

/// A dynamically linked program (the probe is linked statically, like sandbox-run, so it
/// would ignore LD_PRELOAD and prove nothing).
fn dynamic_program() -> Option<PathBuf> {
    ["/usr/bin/true", "/bin/true"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// LD_PRELOAD naming a real library, placed (with its marker file) inside a rw repo where a
/// dynamically linked workload could load it and write the marker: it does not load. Control:
/// the same program on the host, with the same environment, loads it.
#[test]
fn ld_preload_does_not_reach_the_workload() {
    if !sandbox_works() {
        return;
    }
    let Some(prog) = dynamic_program() else {
        skip_tool("no dynamically linked /usr/bin/true");
        return;
    };
    let f = Fixture::new("preload-workload");
    let repo = f.repo("repo");
    let marker = repo.join("marker.txt");
    let Some(so) = build_preload(&repo, &marker) else {
        skip_tool("no C compiler (gcc/cc) to build the LD_PRELOAD library");
        return;
    };
    let p = f.profile(&Spec::default().repo("rw").path(&prog));

    let mut host = Command::new(&prog);
    host.env("LD_PRELOAD", &so);
    run_command(host, LIMIT).assert_code(0);
    let lines = read_to_string(&marker).unwrap_or_default();
    assert!(
        lines.contains(prog.to_str().unwrap()),
        "control: the library did not load into {} on the host: {lines:?}",
        prog.display()
    );
    std::fs::remove_file(&marker).unwrap();

    for var in ["LD_PRELOAD", "LD_AUDIT"] {
        let mut c = sandbox_command(&p, &repo, &[], &[&prog]);
        c.env(var, &so);
        let r = run_command(c, LIMIT);
        r.assert_code(0);
        let lines = read_to_string(&marker).unwrap_or_default();
        assert!(
            !lines.contains(prog.to_str().unwrap()),
            "{var} loaded the library into the workload: {lines:?}\n{r}"
        );
        run_probe_with(&p, &repo, &[], &["getenv", var], |c| {
            c.env(var, &so);
        })
        .assert_nothing("unset");
    }
}

/// The same library must not load into sandbox-run itself either (a caller's
/// LD_PRELOAD/LD_AUDIT/LD_LIBRARY_PATH must not get code into the launcher, which is linked
/// statically for that). The marker lies outside the sandbox: only sandbox-run could write it.
/// Control: the library loads into a dynamic host program.
#[test]
fn ld_preload_does_not_load_into_sandbox_run() {
    if !sandbox_works() {
        return;
    }
    let Some(prog) = dynamic_program() else {
        skip_tool("no dynamically linked /usr/bin/true");
        return;
    };
    let f = Fixture::new("preload-launcher");
    let repo = f.repo("repo");
    let marker = f.path("marker.txt");
    let Some(so) = build_preload(&f.dir, &marker) else {
        skip_tool("no C compiler (gcc/cc) to build the LD_PRELOAD library");
        return;
    };
    let p = f.profile(&Spec::default());

    let mut host = Command::new(&prog);
    host.env("LD_PRELOAD", &so);
    run_command(host, LIMIT).assert_code(0);
    assert!(
        read_to_string(&marker).is_some(),
        "control: the library did not load on the host"
    );
    std::fs::remove_file(&marker).unwrap();

    let libdir = so.parent().unwrap().to_path_buf();
    for (var, value) in [
        ("LD_PRELOAD", so.clone()),
        ("LD_AUDIT", so.clone()),
        ("LD_LIBRARY_PATH", libdir),
    ] {
        let r = run_probe_with(&p, &repo, &[], &["pid"], |c| {
            c.env(var, &value);
        });
        r.assert_ok();
        let lines = read_to_string(&marker).unwrap_or_default();
        assert!(
            lines.is_empty(),
            "{var} loaded a library into sandbox-run itself: {lines:?}\n{r}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// /proc

/// /proc/1/exe is sandbox-run's own binary (pid 1 is its init): it must not be writable from
/// inside (the runc CVE-2019-5736 shape), nor /proc/self/exe. Control: open-write on a repo
/// file works. The host binary stays unchanged.
#[test]
fn proc_1_exe_cannot_be_opened_for_writing() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("proc-exe");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));
    let before = std::fs::read(BIN).unwrap();

    run_probe(
        &p,
        &repo,
        &[],
        &["open-write", repo.join("inside.txt").to_str().unwrap()],
    )
    .assert_ok();
    for target in ["/proc/1/exe", "/proc/self/exe", "/proc/2/exe"] {
        run_probe(&p, &repo, &[], &["open-write", target]).assert_errno(&[
            libc::EACCES,
            libc::ETXTBSY,
            libc::EPERM,
            libc::EROFS,
        ]);
    }
    assert!(
        std::fs::read(BIN).unwrap() == before,
        "sandbox-run's binary changed"
    );
}

/// /proc/sys cannot be written (the hostname sysctl of the sandbox's own uts namespace, and
/// /proc/sysrq-trigger cannot even be opened). Control: the same write call works on a repo
/// file.
#[test]
fn proc_sys_cannot_be_written() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("proc-sys");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));

    run_probe(
        &p,
        &repo,
        &[],
        &[
            "write-proc-sys",
            repo.join("inside.txt").to_str().unwrap(),
            "x",
        ],
    )
    .assert_ok();
    run_probe(
        &p,
        &repo,
        &[],
        &[
            "write-proc-sys",
            "/proc/sys/kernel/hostname",
            "sbx-e2e-evil",
        ],
    )
    .assert_errno(&[libc::EACCES, libc::EPERM, libc::EROFS]);
    // (kernels without CONFIG_MAGIC_SYSRQ have no such file: ENOENT is then the answer)
    let mut sysrq = vec![libc::EACCES, libc::EPERM, libc::EROFS];
    if !Path::new("/proc/sysrq-trigger").exists() {
        sysrq.push(libc::ENOENT);
    }
    run_probe(&p, &repo, &[], &["open-write", "/proc/sysrq-trigger"]).assert_errno(&sysrq);
    run_probe(
        &p,
        &repo,
        &[],
        &["open-write", "/proc/sys/kernel/core_pattern"],
    )
    .assert_errno(&[libc::EACCES, libc::EPERM, libc::EROFS]);
    let d = run_probe(&p, &repo, &[], &["hostname"]).assert_ok();
    assert_eq!(d, "sandbox");
}

/// Defence in depth for the test above: as root, with a repo owned by root, the workload is
/// host uid 0 (without capabilities), and for uid 0 the kernel checks only file modes on
/// /proc/sys and /proc/sysrq-trigger. Only landlock then stands between the workload and
/// `kernel.core_pattern` or sysrq, and landlock is best-effort in the `ci` and `adapter`
/// profiles. Like bubblewrap and container runtimes, the new /proc must cover `sys`,
/// `sysrq-trigger` (and `irq`, `bus`) with read-only binds. Read from the sandbox's own
/// /proc/self/mountinfo with `cat` under the ci profile.
#[test]
fn proc_sys_and_sysrq_trigger_are_read_only_mounts() {
    if !sandbox_works() {
        return;
    }
    let Some(cat) = ["/usr/bin/cat", "/bin/cat"]
        .iter()
        .find(|p| Path::new(p).exists())
    else {
        skip_tool("no cat");
        return;
    };
    let f = Fixture::new("proc-ro");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::extends("ci").path(Path::new(cat)).no_probe());
    let r = run_command(
        sandbox_command(&p, &repo, &[], &[*cat, "/proc/self/mountinfo"]),
        LIMIT,
    );
    r.assert_code(0);
    for m in ["/proc/sys", "/proc/sysrq-trigger"] {
        if !Path::new(m).exists() {
            continue;
        }
        let ro = r.stdout.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 5 && f[4] == m && f[5].split(',').any(|o| o == "ro")
        });
        assert!(
            ro,
            "{m} is not covered by a read-only mount inside the sandbox:\n{r}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Identity and lifetime

/// The hostname is "sandbox" (the host's is not), and the workload is not pid 1 (a tiny
/// init is, which reaps and relays).
#[test]
fn hostname_is_sandbox_and_the_workload_is_not_pid_1() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("ident");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let host = host_probe(&["hostname"]).assert_ok();
    assert_ne!(
        host, "sandbox",
        "the host is called sandbox: this test proves nothing here"
    );
    assert_eq!(
        run_probe(&p, &repo, &[], &["hostname"]).assert_ok(),
        "sandbox"
    );
    let d = run_probe(&p, &repo, &[], &["pid"]).assert_ok();
    assert!(!d.starts_with("pid=1 "), "the workload is pid 1: {d}");
    assert!(
        d.ends_with("ppid=1"),
        "the workload's parent is not the sandbox init: {d}"
    );
}

/// As root, the workload runs as the repo's owner (an unprivileged host uid), not as root.
#[test]
fn as_root_the_workload_runs_as_the_repo_owner() {
    if !is_root() {
        skip_tool("needs root (only root can hand a repo to another user)");
        return;
    }
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("owner");
    let repo = f.repo("repo");
    let nobody = 65534;
    for e in walk(&repo) {
        std::os::unix::fs::lchown(&e, Some(nobody), Some(nobody)).unwrap();
    }
    let p = f.profile(&Spec::default().repo("rw"));
    let d = run_probe(&p, &repo, &[], &["whoami"]).assert_ok();
    assert_eq!(
        d,
        format!("uid={nobody} gid={nobody} euid={nobody} egid={nobody}")
    );
    run_probe(
        &p,
        &repo,
        &[],
        &["write", repo.join("w.txt").to_str().unwrap()],
    )
    .assert_ok();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(repo.join("w.txt")).unwrap().uid(), nobody);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn processes_named(comm: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .map(|c| c.trim() == comm)
                .unwrap_or(false)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A double-forked daemon (new session, stdio dropped) does not outlive the run: after
/// sandbox-run exits and 3 s pass, the file it would write is absent and no process of that
/// name is left. Control: started on the host, the same daemon survives and writes.
#[test]
fn a_double_forked_daemon_does_not_survive_the_run() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("daemon");
    let repo = f.repo("repo");
    // a copy of the probe with a unique name, to find its processes by name
    let name = format!("sbxd{}", std::process::id() % 10_000_000);
    let bin = f.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let daemon = bin.join(&name);
    std::fs::copy(probe(), &daemon).unwrap();
    let p = f.profile(&Spec::default().repo("rw").path(&daemon).extra_ro(&bin));

    // control
    let host_file = f.path("host-alive.txt");
    let r = run_command(
        {
            let mut c = Command::new(&daemon);
            c.args(["fork-daemon", "1", host_file.to_str().unwrap()]);
            c
        },
        LIMIT,
    );
    ProbeRun::parse("fork-daemon", r).assert_ok();

    let file = repo.join("alive.txt");
    let r = run_command(
        sandbox_command(
            &p,
            &repo,
            &[],
            &[
                daemon.to_str().unwrap(),
                "fork-daemon",
                "2",
                file.to_str().unwrap(),
            ],
        ),
        LIMIT,
    );
    ProbeRun::parse("fork-daemon", r).assert_ok();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        host_file.exists(),
        "control: the daemon started on the host did not write its file"
    );
    assert!(
        !file.exists(),
        "the sandboxed daemon outlived the run and wrote {}",
        file.display()
    );
    let left = processes_named(&name);
    assert!(left.is_empty(), "processes named {name} are left: {left:?}");
}

/// Processes named `comm` that could still run code: not zombies, no SIGKILL pending.
fn able_processes_named(comm: &str) -> Vec<String> {
    processes_named(comm)
        .into_iter()
        .filter_map(|pid| {
            let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |k: &str| {
                st.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let state = field("State:");
            let kill_pending = ["SigPnd:", "ShdPnd:"]
                .iter()
                .any(|k| u64::from_str_radix(&field(k), 16).unwrap_or(0) & (1 << 8) != 0);
            (!state.starts_with('Z') && !state.starts_with('X') && !kill_pending)
                .then(|| format!("{pid} {state}"))
        })
        .collect()
}

/// A workload that ignores SIGTERM is torn down at the timeout, and when sandbox-run returns
/// (124) no process of the sandbox may still be able to run (write to the repo, ...): each
/// is gone, a zombie, or has SIGKILL pending. Repeated, since the failure is a race.
/// Control: the same run without the timeout's teardown (on the host) keeps running.
#[test]
fn nothing_of_the_sandbox_can_act_after_a_timeout_returns() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("timeout-race");
    let repo = f.repo("repo");
    let name = format!("sbxt{}", std::process::id() % 10_000_000);
    let bin = f.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let prog = bin.join(&name);
    std::fs::copy(probe(), &prog).unwrap();
    let p = f.profile(&Spec::default().repo("rw").path(&prog).extra_ro(&bin));

    // control: unconfined, the process outlives a SIGTERM
    let mut host = Command::new(&prog);
    host.args(["ignore-term-sleep", "30"]).stdout(Stdio::null());
    let mut child = spawn_retrying(&mut host).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        child.try_wait().unwrap().is_none(),
        "control: SIGTERM was not ignored"
    );
    let _ = child.kill();
    let _ = child.wait();

    // stdout and stderr go to files: with pipes, reading them to EOF would wait for the last
    // sandboxed holder to die and hide the race
    for i in 0..20 {
        let out = f.path("out.txt");
        let mut c = sandbox_command(
            &p,
            &repo,
            &["--timeout", "300ms", "--kill-grace", "100ms"],
            &[prog.to_str().unwrap(), "ignore-term-sleep", "30"],
        );
        c.stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&out).unwrap());
        let cmd = render(&c);
        let st = spawn_retrying(&mut c).unwrap().wait().unwrap();
        let able = able_processes_named(&name);
        let log = read_to_string(&out).unwrap_or_default();
        assert_eq!(st.code(), Some(124), "{cmd}\n{log}");
        assert!(
            able.is_empty(),
            "run {i}: sandbox-run returned while sandboxed processes could still run \
             (not dead, no SIGKILL pending): {able:?}\n{cmd}\n{log}"
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(processes_named(&name).is_empty());
}

/// Exit codes pass through: the probe's 0, 1, 2 and death by a signal (128+N); a program
/// that is not found is 127, also when the gate allows a path the sandbox does not mount.
#[test]
fn exit_codes_pass_through() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("exit");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());

    run_probe(&p, &repo, &[], &["hostname"]).run.assert_code(0);
    run_probe(&p, &repo, &[], &["read", "/nonexistent-sbx-e2e"])
        .run
        .assert_code(1);
    run_probe(&p, &repo, &[], &["no-such-attack"])
        .run
        .assert_code(2);
    let r = run_probe(&p, &repo, &[], &["exec", "/nonexistent-sbx-e2e"]);
    r.assert_errno(&[libc::ENOENT]);
    let own = workload_pid(&p, &repo).to_string();
    run_probe(&p, &repo, &[], &["kill", &own, "9"])
        .run
        .assert_code(128 + 9);
    run_probe(&p, &repo, &[], &["kill", &own, "15"])
        .run
        .assert_code(128 + 15);

    // not found by the gate
    let missing = "sbx-e2e-no-such-program";
    let pm = f.profile(&Spec::default().programs(&[missing]).no_probe());
    run_command(sandbox_command(&pm, &repo, &[], &[missing]), LIMIT).assert_code(127);
    // an exact path that does not exist anywhere
    let gone = Path::new("/nonexistent-sbx-e2e/prog");
    let pg = f.profile(&Spec::default().path(gone));
    run_command(sandbox_command(&pg, &repo, &[], &[gone]), LIMIT).assert_code(127);
    // allowed by exact path, but its directory is not mounted inside
    let hidden = f.path("hidden");
    std::fs::create_dir_all(&hidden).unwrap();
    let copy = hidden.join("probe-hidden");
    std::fs::copy(probe(), &copy).unwrap();
    let ph = f.profile(&Spec::default().path(&copy));
    let r = run_command(
        sandbox_command(&ph, &repo, &[], &[copy.to_str().unwrap(), "hostname"]),
        LIMIT,
    );
    r.assert_code(127);
    assert!(!r.stdout.contains("hostname: ok"), "{r}");
}

/// Root-only /proc files that describe the whole kernel (page flags, slab and vmalloc maps,
/// keys, timers, the kernel config) are masked: as root on a root-owned repo the workload is
/// uid 0 inside and would pass their permission checks. Control: the host reads them (as
/// root); inside they read as empty (or are refused, rootless).
#[test]
fn root_only_proc_files_are_masked() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("proc-masked");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    for file in [
        "kpageflags",
        "slabinfo",
        "vmallocinfo",
        "keys",
        "timer_list",
    ] {
        let path = format!("/proc/{file}");
        if !Path::new(&path).exists() {
            continue;
        }
        if is_root() {
            let host = host_probe(&["read", &path]);
            assert_ne!(
                host.assert_ok(),
                "bytes=0",
                "control: {path} is empty on the host"
            );
        }
        let r = run_probe(&p, &repo, &[], &["read", &path]);
        if r.run.code == Some(0) {
            assert_eq!(r.assert_ok(), "bytes=0", "{path} readable inside:\n{r}");
        } else {
            r.assert_errno(&[libc::EACCES, libc::EPERM]);
        }
    }
}
