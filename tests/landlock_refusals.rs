//! Every access landlock refuses, named: read, write, exec, truncate, ioctl on a device, bind
//! of a unix socket and connect to an abstract one outside the sandbox. Each is triggered from
//! inside a real sandbox, as a user gets it (a real program's error text, or `--observe`
//! where the text names no path), and checked three ways: the report entry (`filesystem
//! landlock`, the access in `what`, the rule, the fix, the patch), the one line on stderr at
//! the end of the failed run, and the line of a `-v` run. Beside each, a positive control: the
//! same operation where landlock allows it succeeds and names nothing.
//!
//! With a new root the mounts hide what landlock would refuse to read, run or bind, so those
//! are triggered where landlock is the deciding layer: a run without namespaces (namespaces
//! best-effort on a host where no user namespace can be made, made for real as in
//! `tests/degraded.rs`). That run is refused as root (the command would be the host's root),
//! so those tests run rootless (`scripts/test` runs this file again as an unprivileged user).
//! Write, truncate, ioctl and the abstract socket are triggered in the full sandbox, root and
//! rootless.

mod common;
#[path = "support/refusals.rs"]
mod refusals;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use refusals::Out;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How a run is made: in the full sandbox, or where no user namespace can be created (then
/// sandbox-run's `$TMPDIR` is `tmp`, where its scratch dir goes).
#[derive(Clone, Copy)]
enum Host<'a> {
    Full,
    NoUserns { tmp: &'a Path },
}

/// `argv` in a sandbox of `profile` over `repo`, capturing (so the command's stderr passes
/// the supervisor), with a report.
fn run(host: Host, profile: &Path, repo: &Path, opts: &[&str], argv: &[&str]) -> Out {
    let report = repo.parent().unwrap().join("landlock-report.json");
    let _ = std::fs::remove_file(&report);
    let mut o = vec!["--report", report.to_str().unwrap(), "--capture"];
    o.extend_from_slice(opts);
    let mut c = sandbox_command(profile, repo, &o, argv);
    if let Host::NoUserns { tmp } = host {
        c.env("TMPDIR", tmp);
        c = under_zero_sysctl(c, "user/max_user_namespaces");
    }
    Out::of(c, &report)
}

/// The refused run, then the same with `-v`: the denial (checked by `check`) is in the
/// report, said once at the end, and said by `-v`.
fn refused(
    host: Host,
    profile: &Path,
    repo: &Path,
    opts: &[&str],
    argv: &[&str],
    what: &str,
    check: impl Fn(&Value),
) {
    let o = run(host, profile, repo, opts, argv);
    assert_ne!(o.run.code, Some(0), "the command fails:\n{o}");
    let d = o.one("filesystem", "landlock", Some(what));
    assert_eq!(d["count"], 1, "{o}");
    check(&d);
    o.says(&d);
    let mut v = opts.to_vec();
    v.push("-v");
    let ov = run(host, profile, repo, &v, argv);
    assert_ne!(ov.run.code, Some(0), "the command fails:\n{ov}");
    ov.says_v(&ov.one("filesystem", "landlock", Some(what)));
}

/// The fix names the profile setting for `path`, and the patch is that setting.
fn fix_is(d: &Value, set: &str, path: &Path) {
    let p = path.to_str().unwrap();
    assert_eq!(
        d["fix"],
        format!("[filesystem] {set} = {{ add = [\"{p}\"] }}"),
        "{d:#}"
    );
    assert_eq!(d["patch"]["set"], set, "{d:#}");
    assert_eq!(d["patch"]["value"], p, "{d:#}");
}

/// No profile setting may allow it: `never: WHY`, no patch.
fn never(d: &Value, why: &str) {
    let fix = d["fix"].as_str().unwrap();
    assert!(
        fix.starts_with("never: ") && fix.contains(why),
        "never: ...{why}...: {d:#}"
    );
    assert!(d["patch"].is_null(), "{d:#}");
}

fn sh(script: &str) -> [&str; 3] {
    ["sh", "-c", script]
}

/// A profile like `ci` with `edit` applied to its spec.
fn ci(f: &Fixture, edit: impl FnOnce(Spec) -> Spec) -> PathBuf {
    f.profile(&edit(Spec::extends("ci")))
}

/// Runs without namespaces, for the accesses only landlock decides there: rootless, on a
/// host with landlock and user namespaces to take away. Returns the scratch `$TMPDIR`.
fn no_userns_host(f: &Fixture) -> Option<PathBuf> {
    if is_root() {
        skip_tool("runs only rootless: without namespaces the command would be the host's root, which sandbox-run refuses (scripts/test runs it again as an unprivileged user)");
        return None;
    }
    if !sandbox_works() || !need_landlock(1, "a run without namespaces") {
        return None;
    }
    let mut c = Command::new(probe());
    c.arg("unshare-user");
    let r = ProbeRun::parse(
        "unshare-user",
        run_command(under_zero_sysctl(c, "user/max_user_namespaces"), LIMIT),
    );
    if r.outcome != Outcome::Denied(libc::ENOSPC) {
        skip(
            "userns",
            &format!("cannot take user namespaces away here:\n{r}"),
        );
        return None;
    }
    let tmp = f.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    Some(tmp)
}

/// `ci` with namespaces (and the new root) best-effort, as on a host without them.
fn degraded(s: Spec) -> Spec {
    s.layer("namespaces", "best-effort")
        .layer("filesystem", "best-effort")
}

/// Read: a host file outside every rule is named with the `extra_ro` of that very file;
/// with it the file is read.
#[test]
fn a_read_outside_landlock_names_its_extra_ro() {
    let f = Fixture::new("ll-read");
    let Some(tmp) = no_userns_host(&f) else {
        return;
    };
    let host = Host::NoUserns { tmp: &tmp };
    let repo = f.git_repo("repo");
    let file = f.write("data/notes.txt", "host notes\n");
    let script = format!("cat {}", file.display());
    let p = ci(&f, degraded);
    let what = format!("{} (read)", file.display());
    refused(host, &p, &repo, &[], &sh(&script), &what, |d| {
        assert_eq!(d["rule"], "outside landlock's read rules");
        fix_is(d, "extra_ro", &file);
    });
    let ok = run(
        host,
        &ci(&f, |s| degraded(s).extra_ro(&file)),
        &repo,
        &[],
        &sh(&script),
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert!(ok.run.stdout.contains("host notes"), "{ok}");
    ok.none_of("filesystem");
}

/// Write: an existing host file overwritten (`sh: cannot create`) is named a write of that
/// file, with its `extra_rw`; with it the file is written.
#[test]
fn a_write_outside_landlock_names_its_extra_rw() {
    let f = Fixture::new("ll-write");
    let Some(tmp) = no_userns_host(&f) else {
        return;
    };
    let host = Host::NoUserns { tmp: &tmp };
    let repo = f.git_repo("repo");
    let file = f.write("data/out.txt", "before\n");
    let script = format!("echo after > {}", file.display());
    let p = ci(&f, |s| degraded(s).extra_ro(&file));
    let what = format!("{} (write)", file.display());
    refused(host, &p, &repo, &[], &sh(&script), &what, |d| {
        assert_eq!(d["rule"], "outside landlock's write rules");
        fix_is(d, "extra_rw", &file);
    });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "before\n");
    let ok = run(
        host,
        &ci(&f, |s| degraded(s).extra_rw(&file)),
        &repo,
        &[],
        &sh(&script),
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "after\n");
    ok.none_of("filesystem");
}

/// Write in the full sandbox: its own /proc is read-only to the command, whatever the
/// profile says (root and rootless); /tmp is written.
#[test]
fn a_write_to_the_sandboxs_own_proc_is_never() {
    if !sandbox_works() || !need_landlock(1, "landlock") {
        return;
    }
    let f = Fixture::new("ll-proc");
    let repo = f.git_repo("repo");
    let p = ci(&f, |s| s);
    refused(
        Host::Full,
        &p,
        &repo,
        &[],
        &sh("echo x > /proc/self/comm"),
        "/proc/self/comm (write)",
        |d| {
            assert_eq!(d["rule"], "outside landlock's write rules");
            never(d, "the sandbox's own /proc is read-only");
        },
    );
    let ok = run(
        Host::Full,
        &p,
        &repo,
        &[],
        &sh("echo x > /tmp/x && cat /tmp/x"),
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("filesystem");
}

/// Exec: a host program outside every rule (dash: `sh: 1: PATH: Permission denied`) is
/// named an exec, with the `extra_ro` that gives read and execute; with it the program runs.
#[test]
fn an_exec_outside_landlock_names_its_extra_ro() {
    let f = Fixture::new("ll-exec");
    let Some(tmp) = no_userns_host(&f) else {
        return;
    };
    let host = Host::NoUserns { tmp: &tmp };
    let repo = f.git_repo("repo");
    let tool = f.write("data/tool.sh", "#!/bin/sh\necho tool ran\n");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = tool.to_str().unwrap().to_string();
    let p = ci(&f, degraded);
    let what = format!("{} (exec)", tool.display());
    refused(host, &p, &repo, &[], &sh(&script), &what, |d| {
        assert_eq!(d["rule"], "outside landlock's exec rules");
        fix_is(d, "extra_ro", &tool);
    });
    let ok = run(
        host,
        &ci(&f, |s| degraded(s).extra_ro(&tool)),
        &repo,
        &[],
        &sh(&script),
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert!(ok.run.stdout.contains("tool ran"), "{ok}");
    ok.none_of("filesystem");
}

/// Truncate (landlock ABI 3): `truncate(2)` of a file landlock gives read-only, seen by
/// `--observe` (perl's error text names no path), root and rootless; a file in /tmp is
/// truncated.
#[test]
fn a_truncate_outside_landlock_is_named_under_observe() {
    if !sandbox_works() || !need_landlock(3, "the truncate right") {
        return;
    }
    let f = Fixture::new("ll-trunc");
    let repo = f.git_repo("repo");
    let p = ci(&f, |s| s);
    let perl = |file: &str| {
        format!("perl -e 'truncate(q({file}), 0) or die qq(truncate failed: $!\\n); print qq(truncated\\n)'")
    };
    refused(
        Host::Full,
        &p,
        &repo,
        &["--observe"],
        &sh(&perl("/proc/self/comm")),
        "/proc/self/comm (truncate)",
        |d| {
            assert_eq!(d["rule"], "outside landlock's truncate rules");
            never(d, "the sandbox's own /proc is read-only");
        },
    );
    let script = format!("echo data > /tmp/t && {}", perl("/tmp/t"));
    let ok = run(Host::Full, &p, &repo, &["--observe"], &sh(&script));
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert!(ok.run.stdout.contains("truncated"), "{ok}");
    assert!(
        ok.denials()
            .iter()
            .all(|d| d["sub"] != "landlock" || !d["what"].as_str().unwrap().contains("(truncate)")),
        "{ok}"
    );
}

/// Ioctl on a device (landlock ABI 5): the sandbox's /dev/null may be read and written but
/// takes no ioctl (`stty -F /dev/null` gets EACCES inside, ENOTTY outside): named, never
/// (ioctl is given on the sandbox's terminals only); the same device read works.
#[test]
fn an_ioctl_on_a_device_is_named_never() {
    if !sandbox_works() || !need_landlock(5, "ioctl on devices") {
        return;
    }
    // Outside, the same call fails otherwise: the device is no terminal.
    let outside = run_command(
        {
            let mut c = Command::new("stty");
            c.args(["-F", "/dev/null"]);
            c
        },
        LIMIT,
    );
    assert!(
        outside.stderr.contains("Inappropriate ioctl"),
        "outside: ENOTTY:\n{outside}"
    );
    let f = Fixture::new("ll-ioctl");
    let repo = f.git_repo("repo");
    let p = ci(&f, |s| s);
    refused(
        Host::Full,
        &p,
        &repo,
        &[],
        &sh("stty -F /dev/null"),
        "/dev/null (ioctl)",
        |d| {
            assert_eq!(d["rule"], "outside landlock's ioctl rules");
            never(d, "ioctl only on the sandbox's terminals");
        },
    );
    let ok = run(
        Host::Full,
        &p,
        &repo,
        &[],
        &sh("cat /dev/null && echo x > /dev/null && echo device ok"),
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert!(ok.run.stdout.contains("device ok"), "{ok}");
    ok.none_of("filesystem");
}

/// A perl one-liner that binds a unix socket at `path` (its error text names no path).
fn perl_bind(path: &Path) -> String {
    format!(
        "perl -MSocket -e 'socket(S, AF_UNIX, SOCK_STREAM, 0) or die; bind(S, pack_sockaddr_un(q({}))) or die qq(bind failed: $!\\n); print qq(bound\\n)'",
        path.display()
    )
}

/// Bind of a unix socket (MAKE_SOCK): in a host directory outside every rule, seen by
/// `--observe`, named with the `extra_rw` of the directory it goes in; with it, bound.
#[test]
fn a_unix_socket_bind_outside_landlock_names_its_directory() {
    let f = Fixture::new("ll-bind");
    let Some(tmp) = no_userns_host(&f) else {
        return;
    };
    let host = Host::NoUserns { tmp: &tmp };
    let repo = f.git_repo("repo");
    let dir = f.path("s");
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("a.sock");
    if sock.as_os_str().len() >= 100 {
        skip_tool(&format!("{} is too long for a unix socket", sock.display()));
        return;
    }
    let script = perl_bind(&sock);
    let p = ci(&f, |s| degraded(s).extra_ro(&dir));
    let what = format!("{} (unix socket bind)", sock.display());
    refused(host, &p, &repo, &["--observe"], &sh(&script), &what, |d| {
        assert_eq!(d["rule"], "outside landlock's unix socket bind rules");
        fix_is(d, "extra_rw", &dir);
    });
    assert!(!sock.exists());
    let ok = run(
        host,
        &ci(&f, |s| degraded(s).extra_rw(&dir)),
        &repo,
        &["--observe"],
        &sh(&script),
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert!(ok.run.stdout.contains("bound"), "{ok}");
    ok.none_of("filesystem");
}

/// Connect to an abstract unix socket of a process outside the sandbox (landlock scope, ABI
/// 6): with `--net host` the host's names are in reach and the scope is what refuses it
/// (EPERM); seen by `--observe`, named `@NAME`, never. The sandbox's own abstract socket is
/// connected to.
#[test]
fn an_abstract_socket_outside_the_sandbox_is_named_never() {
    use std::os::linux::net::SocketAddrExt;
    if !sandbox_works() || !need_landlock(6, "abstract unix socket scoping") {
        return;
    }
    let name = format!("sandbox-run-ll-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    // Datagram sockets: no `listen` (which seccomp refuses with the host's network).
    let listener = std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap();
    // The attack is real: from outside, the socket is connected to.
    std::os::unix::net::UnixDatagram::unbound()
        .unwrap()
        .connect_addr(&addr)
        .expect("host connect");
    let f = Fixture::new("ll-abstract");
    let repo = f.git_repo("repo");
    let p = ci(&f, |s| s);
    let connect = |n: &str| {
        format!(
            "socket(S, AF_UNIX, SOCK_DGRAM, 0) or die; connect(S, pack_sockaddr_un(qq(\\0{n}))) or die qq(connect failed: $!\\n); print qq(connected\\n);"
        )
    };
    let script = format!("perl -MSocket -e '{}'", connect(&name));
    refused(
        Host::Full,
        &p,
        &repo,
        &["--net", "host", "--observe"],
        &sh(&script),
        &format!("@{name} (unix socket)"),
        |d| {
            assert!(
                d["rule"]
                    .as_str()
                    .unwrap()
                    .contains("outside landlock's scope"),
                "{d:#}"
            );
            never(d, "abstract unix sockets are scoped to the sandbox");
        },
    );
    let own = format!("{name}-own");
    let script = format!(
        "perl -MSocket -e 'socket(L, AF_UNIX, SOCK_DGRAM, 0) or die; bind(L, pack_sockaddr_un(qq(\\0{own}))) or die; {}'",
        connect(&own)
    );
    let ok = run(
        Host::Full,
        &p,
        &repo,
        &["--net", "host", "--observe"],
        &sh(&script),
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert!(ok.run.stdout.contains("connected"), "{ok}");
    ok.none_of("filesystem");
    drop(listener);
}
