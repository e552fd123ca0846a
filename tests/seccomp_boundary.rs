//! The host boundary, as far as the seccomp layer keeps it. Each test attacks from inside a
//! real sandbox with the probe (`examples/probe.rs`) and stands beside a positive control: the
//! same attempt succeeding where nothing forbids it (inside with a harmless variant, or on the
//! host, unconfined).
//!
//! - No set-ID file and no file capability can be left in a writable repo: a host user would
//!   run it later from the host's own mount, where the sandbox's `nosuid` does not apply. As
//!   root the fixture repo is root-owned and the workload is uid 0: exactly the finding.
//! - Legacy AIO (`io_setup`) draws on the host-wide `fs.aio-max-nr`: `ENOSYS` inside.
//! - Network kinds that landlock's TCP rules do not see (MPTCP, TCP Fast Open, listen's
//!   autobind, raw, packet and vsock sockets) are refused by seccomp: the errno says so
//!   (`EAFNOSUPPORT` for a socket kind, `EPERM` for TFO and listen), not a missing feature.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every file below `dir` (not following symlinks) whose mode has S_ISUID or S_ISGID.
fn setid_files(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            if m.mode() & 0o6000 != 0 && !m.is_dir() {
                found.push((e.path(), m.mode()));
            }
        }
    }
    found
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// chmod, fchmod and fchmodat2 with a set-ID bit on a binary copied into the rw repo: EPERM.
/// Controls: the copy itself, and chmod to 0755 / 0700 / 1755 (sticky) succeed. Afterwards, on
/// the host, no file of the repo has a set-ID bit.
#[test]
fn chmod_cannot_make_a_set_id_binary_in_a_writable_repo() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("setid-chmod");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));
    let bin = repo.join("id");
    let id = PathBuf::from("/usr/bin/id");
    let from = if id.is_file() { id } else { probe() };
    run_probe(&p, &repo, &[], &["copy", s(&from), s(&bin)]).assert_ok();
    assert!(bin.is_file(), "the copy did not land in the repo");

    for mode in ["4755", "2755", "6755", "4000"] {
        for how in ["chmod", "fchmod", "fchmodat2"] {
            run_probe(&p, &repo, &[], &[how, s(&bin), mode]).assert_errno(&[libc::EPERM]);
        }
    }
    assert_eq!(setid_files(&repo), vec![], "a set-ID file in the repo");

    // controls: modes without set-ID bits
    for (how, mode) in [("chmod", "700"), ("fchmod", "1755"), ("fchmodat2", "755")] {
        let r = run_probe(&p, &repo, &[], &[how, s(&bin), mode]);
        if how == "fchmodat2" && r.code() == Some(1) {
            // fchmodat2 is new in 6.6: an older kernel says ENOSYS for the control.
            r.assert_errno(&[libc::ENOSYS]);
            continue;
        }
        r.assert_ok();
        let got = std::fs::metadata(&bin).unwrap().permissions().mode() & 0o7777;
        assert_eq!(format!("{got:o}"), mode, "{how} {mode}");
    }
    assert_eq!(setid_files(&repo), vec![], "a set-ID file in the repo");
}

/// Creating a file with a set-ID mode: creat, openat(O_CREAT), an O_TMPFILE linked in, mknod
/// (S_IFREG) refused with EPERM; openat2 (mode in memory) with ENOSYS, so that callers fall
/// back to openat. Controls: the same calls with 0644 create their files.
#[test]
fn creat_cannot_make_a_set_id_file_in_a_writable_repo() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("setid-creat");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));
    for mode in ["4755", "2755", "6777"] {
        let name = |what: &str| repo.join(format!("{what}-{mode}"));
        run_probe(&p, &repo, &[], &["creat", s(&name("creat")), mode]).assert_errno(&[libc::EPERM]);
        run_probe(&p, &repo, &[], &["open-creat", s(&name("open")), mode])
            .assert_errno(&[libc::EPERM]);
        let linked = name("tmpfile");
        let tmp = ["tmpfile-link", s(&repo), s(&linked), mode];
        run_probe(&p, &repo, &[], &tmp).assert_errno(&[libc::EPERM]);
        run_probe(&p, &repo, &[], &["mknod-reg", s(&name("mknod")), mode])
            .assert_errno(&[libc::EPERM]);
        run_probe(
            &p,
            &repo,
            &[],
            &["openat2-creat", s(&name("openat2")), mode],
        )
        .assert_errno(&[libc::ENOSYS]);
        for what in ["creat", "open", "tmpfile", "mknod", "openat2"] {
            assert!(!name(what).exists(), "{what} {mode} created a file");
        }
    }
    assert_eq!(setid_files(&repo), vec![], "a set-ID file in the repo");

    // controls: plain modes create the files
    let ok = |what: &str| repo.join(format!("{what}-ok"));
    run_probe(&p, &repo, &[], &["creat", s(&ok("creat")), "644"]).assert_ok();
    run_probe(&p, &repo, &[], &["open-creat", s(&ok("open")), "644"]).assert_ok();
    run_probe(&p, &repo, &[], &["mknod-reg", s(&ok("mknod")), "644"]).assert_ok();
    let linked = ok("tmpfile");
    let tmp = ["tmpfile-link", s(&repo), s(&linked), "600"];
    match run_probe(&p, &repo, &[], &tmp) {
        r if r.code() == Some(0) => assert!(ok("tmpfile").is_file()),
        r => {
            let e = r.assert_errno(&[libc::EOPNOTSUPP, libc::EISDIR]);
            skip_tool(&format!(
                "O_TMPFILE control: the repo's filesystem says {e}"
            ));
        }
    }
    for what in ["creat", "open", "mknod"] {
        assert!(ok(what).is_file(), "{what} control created no file");
    }
    assert_eq!(setid_files(&repo), vec![], "a set-ID file in the repo");
}

/// A file capability (`security.capability`, what `setcap cap_setuid+ep` writes) needs
/// CAP_SETFCAP, which the workload lacks: EPERM, and the host sees no such xattr. Control: a
/// `user.*` xattr on the same file works, where the filesystem supports them.
#[test]
fn file_capabilities_cannot_be_set_in_a_writable_repo() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("filecap");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default().repo("rw"));
    let bin = repo.join("tool");
    run_probe(&p, &repo, &[], &["copy", s(&probe()), s(&bin)]).assert_ok();
    run_probe(&p, &repo, &[], &["file-cap", s(&bin)]).assert_errno(&[libc::EPERM]);
    assert!(
        xattr(&bin, "security.capability").is_none(),
        "a file capability on {}",
        bin.display()
    );
    match run_probe(&p, &repo, &[], &["setxattr", s(&bin), "user.sbx", "v"]) {
        r if r.code() == Some(0) => {
            assert_eq!(xattr(&bin, "user.sbx").as_deref(), Some(&b"v"[..]));
        }
        r => {
            let e = r.assert_errno(&[libc::EOPNOTSUPP]);
            skip_tool(&format!(
                "user.* xattr control: the repo's filesystem says {e}; the refusal above stands"
            ));
        }
    }
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let path = std::ffi::CString::new(s(p)).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    let mut buf = [0u8; 256];
    // SAFETY: valid C strings and a buffer of its length.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// Legacy AIO contexts come from the host-wide `fs.aio-max-nr` pool: `io_setup` is ENOSYS
/// inside (callers fall back to threads). Control: on the host, unconfined, it works.
#[test]
fn legacy_aio_is_refused() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("aio");
    let repo = f.repo("repo");
    host_probe(&["io-setup"]).assert_ok();
    let p = f.profile(&Spec::default());
    run_probe(&p, &repo, &[], &["io-setup"]).assert_errno(&[libc::ENOSYS]);
    let adapter_like = f.profile(&Spec::default().repo("rw").net("host"));
    run_probe(&adapter_like, &repo, &[], &["io-setup"]).assert_errno(&[libc::ENOSYS]);
}

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

/// With the host's network and a TCP connect rule for another port, MPTCP and TCP Fast Open
/// (both of which pass beside landlock's connect hook) do not reach a host listener on an
/// unlisted port: the socket is refused (EAFNOSUPPORT), the fast-open send and option are
/// refused (EPERM). Controls: on the host the same probes connect (MPTCP is enabled here, so
/// the refusal inside is seccomp's, not a missing feature), and inside a plain TCP connect to
/// the listed port works.
#[test]
fn mptcp_and_tcp_fast_open_do_not_reach_an_unlisted_port() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("mptcp-tfo");
    let repo = f.repo("repo");
    let unlisted = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let to = |l: &std::net::TcpListener| format!("127.0.0.1:{}", l.local_addr().unwrap().port());
    let (target, allowed) = (to(&unlisted), to(&listed));

    // controls on the host: each attack does connect when nothing stops it
    for attack in ["mptcp-connect", "tcp-fastopen", "tcp-fastopen-connect"] {
        let r = host_probe(&[attack, &target]);
        if attack == "mptcp-connect" && r.code() != Some(0) {
            let e = r.assert_errno(&[libc::ENOPROTOOPT, libc::EPROTONOSUPPORT]);
            skip_tool(&format!(
                "MPTCP is off on this host ({e}): its control is missing"
            ));
            continue;
        }
        r.assert_ok();
        assert_eq!(
            accepted_within(&unlisted, Duration::from_secs(2)),
            1,
            "{attack}: the host control did not connect"
        );
    }

    let port = listed.local_addr().unwrap().port();
    let p = f.profile(&Spec::default().tcp_connect(&[port]));
    let host = ["--net", "host"];
    run_probe(&p, &repo, &host, &["mptcp-connect", &target]).assert_errno(&[libc::EAFNOSUPPORT]);
    run_probe(&p, &repo, &host, &["tcp-fastopen", &target]).assert_errno(&[libc::EPERM]);
    run_probe(&p, &repo, &host, &["tcp-fastopen-connect", &target]).assert_errno(&[libc::EPERM]);
    assert_eq!(
        accepted_within(&unlisted, Duration::from_millis(500)),
        0,
        "the unlisted port saw a connection from the sandbox"
    );
    // the same refusals against the listed port: the socket kind is refused, not the port
    run_probe(&p, &repo, &host, &["mptcp-connect", &allowed]).assert_errno(&[libc::EAFNOSUPPORT]);
    run_probe(&p, &repo, &host, &["tcp-fastopen", &allowed]).assert_errno(&[libc::EPERM]);

    // control: plain TCP to the listed port connects (landlock's rule, ABI 4)
    if !need_landlock(4, "TCP connect rules") {
        return;
    }
    run_probe(&p, &repo, &host, &["tcp-connect", &allowed]).assert_ok();
    assert_eq!(accepted_within(&listed, Duration::from_secs(2)), 1);
}

/// `listen` on an unbound socket autobinds an ephemeral port on 0.0.0.0 without landlock's
/// bind hook: with the host's network and `tcp_bind = []`, seccomp refuses `listen` (EPERM).
/// Control: under `--net none` (the sandbox's own loopback) the same probe listens.
#[test]
fn listen_autobind_is_refused_with_the_host_network() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("listen");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    run_probe(&p, &repo, &["--net", "host"], &["listen-autobind"]).assert_errno(&[libc::EPERM]);
    let d = run_probe(&p, &repo, &["--net", "none"], &["listen-autobind"]).assert_ok();
    assert!(d.starts_with("port="), "{d}");
    // the profile's own network mode (none in validate): listening works
    run_probe(&p, &repo, &[], &["listen-autobind"]).assert_ok();
}

/// Socket kinds outside the allow-list, under `--net none`: vsock (not per network namespace:
/// it would bind the host's port space), raw and packet sockets, MPTCP. All EAFNOSUPPORT from
/// seccomp; without it the kernel would say EPERM (no CAP_NET_RAW) or succeed (vsock).
/// Controls: vsock binds on the host; plain TCP, UDP and unix sockets work inside.
#[test]
fn socket_kinds_outside_the_allow_list_are_refused() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("sockets");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let none = ["--net", "none"];
    match host_probe(&["vsock-bind"]) {
        r if r.code() == Some(0) => {}
        r => {
            let e = r.assert_errno(&[libc::EAFNOSUPPORT, libc::ENODEV, libc::EADDRNOTAVAIL]);
            skip_tool(&format!(
                "vsock control: the host itself cannot bind vsock ({e}); the refusal inside \
                 is still checked"
            ));
        }
    }
    for attack in ["vsock-bind", "raw-socket", "packet-socket"] {
        run_probe(&p, &repo, &none, &[attack]).assert_errno(&[libc::EAFNOSUPPORT]);
    }
    run_probe(&p, &repo, &none, &["mptcp-connect", "127.0.0.1:9"])
        .assert_errno(&[libc::EAFNOSUPPORT]);

    // controls inside: the allowed kinds get as far as the (empty) loopback
    run_probe(&p, &repo, &none, &["tcp-connect", "127.0.0.1:9"])
        .assert_errno(&[libc::ECONNREFUSED, libc::EACCES]);
    run_probe(&p, &repo, &none, &["udp-send", "127.0.0.1:9"]).assert_ok();
    let sock = repo.join("s.sock");
    let _l = bind_unix(&sock);
    // (bound as it is: a copy-on-write repo's socket files lead nowhere)
    let rw = f.profile(&Spec::default().repo("rw").disk("off"));
    run_probe(&rw, &repo, &none, &["unix-connect", s(&sock)]).assert_ok();
}
