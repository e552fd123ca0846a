//! Stage 2 starts as a fork of sandbox-run (no re-exec, no plan through JSON), or,
//! when sandbox-run has another thread (or `SANDBOX_RUN_STAGE2=exec` says so), as a re-exec of
//! its binary with the plan on stdin. Both starts must give the same sandbox: every process
//! layer in force, the caller's leaked fd and its secret variables gone, `--stdin` delivered,
//! the workload's exit code passed through. Each check runs under both starts, and the
//! `--timings` line says which one ran (so neither half of the test can pass on the other
//! path). On a pure cgroup v2 host the fork is born in its leaf (`clone3` with
//! `CLONE_INTO_CGROUP`); the limits suites check that the leaf's caps hold for it.

#[path = "common/mod.rs"]
mod common;

use common::*;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

const STARTS: [(Option<&str>, &str); 2] = [(None, "(fork)"), (Some("exec"), "(re-exec)")];
const TOKEN: &str = "ghp_sbxE2eStage2Token0123456789";
const FD: i32 = 61;

#[test]
fn both_starts_give_the_same_sandbox() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("stage2-start");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let secret = std::fs::File::open(f.write("secret.txt", "a secret\n")).unwrap();
    let raw = secret.as_raw_fd();
    for (start, label) in STARTS {
        let adjust = |c: &mut Command| {
            c.env_remove("SANDBOX_RUN_STAGE2");
            if let Some(v) = start {
                c.env("SANDBOX_RUN_STAGE2", v);
            }
            c.env("GITHUB_TOKEN", TOKEN);
            // SAFETY: dup2 is async-signal-safe; the copy at FD has no O_CLOEXEC: leaked.
            unsafe {
                c.pre_exec(move || {
                    if libc::dup2(raw, FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        };

        let r = run_probe_with(&p, &repo, &["--timings"], &["status"], adjust);
        r.assert_ok();
        let all = r.run.all();
        let into = all.contains("stage 2 started (fork into the cgroup)");
        assert!(
            all.contains(&format!("stage 2 started {label}")) || (start.is_none() && into),
            "{label}: the timings do not name this start:\n{r}"
        );
        // As root on a pure cgroup v2 host, the fork is born in the leaf (clone3).
        if start.is_none() && is_root() && pure_v2() {
            assert!(into, "not born in the cgroup v2 leaf:\n{r}");
        }
        for k in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
            assert_eq!(
                status_field(&r.lines, k),
                Some("0000000000000000"),
                "{label} {k}:\n{r}"
            );
        }
        assert_eq!(
            status_field(&r.lines, "NoNewPrivs"),
            Some("1"),
            "{label}:\n{r}"
        );
        if need_seccomp() {
            assert_eq!(
                status_field(&r.lines, "Seccomp"),
                Some("2"),
                "{label}:\n{r}"
            );
        }

        // The caller's leaked fd and token stay outside.
        let fd = FD.to_string();
        run_probe_with(&p, &repo, &[], &["read-fd", &fd], adjust).assert_errno(&[libc::EBADF]);
        let r = run_probe_with(&p, &repo, &[], &["getenv", "GITHUB_TOKEN"], adjust);
        r.assert_nothing("unset");
        assert!(!r.run.all().contains(TOKEN), "{label}:\n{r}");

        // --stdin reaches the workload, byte for byte, after stage 2's own use of the pipe.
        let input = f.write("input.txt", "line one\nline two\n");
        let r = run_probe_with(
            &p,
            &repo,
            &["--stdin", input.to_str().unwrap()],
            &["stdin-hex"],
            adjust,
        );
        r.assert_ok();
        assert_eq!(
            r.lines.last().map(String::as_str),
            Some(hex(b"line one\nline two\n").as_str()),
            "{label}:\n{r}"
        );

        // The workload's exit code comes back (the probe exits 1 when refused).
        let r = run_probe_with(&p, &repo, &[], &["read", "/nonexistent-sbx"], adjust);
        assert_eq!(r.code(), Some(1), "{label}:\n{r}");
    }
    // Control: the host probe, started the same way, reads the leaked fd.
    let leak = |c: &mut Command| {
        // SAFETY: as above.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(raw, FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    host_probe_with(&["read-fd", &FD.to_string()], leak).assert_ok();
    drop(secret);
}

/// A pure cgroup v2 host: the controllers are listed at the root of /sys/fs/cgroup.
fn pure_v2() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").is_ok_and(|c| c.contains("memory"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
