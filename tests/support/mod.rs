//! Helpers shared by the end-to-end test files (`#[path = "support/mod.rs"] mod support;`).
#![allow(dead_code)]

pub mod schema;

#[path = "../common/mod.rs"]
pub mod common;

/// Can a sandbox run on this host at all? False, after a skip line, where the host lacks user
/// namespaces or landlock (the `nouserns` and `nolandlock` variants of scripts/vm-test); a
/// failure instead where `SANDBOX_RUN_TEST_REQUIRE` names the missing feature, and for any
/// other launcher failure. (The shared check of `tests/common`.)
pub fn sandbox_works() -> bool {
    common::sandbox_works()
}

use std::path::{Path, PathBuf};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandbox-run");

/// The attack probe, built by `cargo test` as an example next to the binary.
pub fn probe() -> PathBuf {
    let p = Path::new(BIN).parent().unwrap().join("examples/probe");
    assert!(
        p.exists(),
        "{} is missing: run `cargo test`, which builds the examples",
        p.display()
    );
    p
}

/// A fresh directory for one test's fixtures: under $SANDBOX_RUN_TEST_TMP (set for rootless
/// and VM runs) or the target dir. Not /tmp: the gate denies world-writable locations.
pub fn scratch(name: &str) -> PathBuf {
    let base = std::env::var_os("SANDBOX_RUN_TEST_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("repo")).unwrap();
    base
}

/// A profile extending `base` that also allows the probe (by exact path) and mounts its
/// directory; `extra` is appended verbatim (more TOML).
pub fn probe_profile(dir: &Path, base: &str, gate_extra: &str, extra: &str) -> PathBuf {
    let p = probe();
    let text = format!(
        "extends = \"{base}\"\n[gate]\npaths = [\"{}\"]\n{gate_extra}\n[filesystem]\nextra_ro = [\"{}\"]\n{extra}",
        p.display(),
        p.parent().unwrap().display()
    );
    let path = dir.join("p.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `secs` seconds, stretched by the factor in `SANDBOX_RUN_TEST_SLOWDOWN` (default 1;
/// scripts/vm-test sets it under TCG emulation, where a sandbox takes about 1 s to start
/// instead of 30 ms). Only for the slack of an upper bound on how long something may take,
/// never for what a test asserts happened.
pub fn slack(secs: f64) -> std::time::Duration {
    let factor = std::env::var("SANDBOX_RUN_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f >= 1.0)
        .unwrap_or(1.0);
    std::time::Duration::from_secs_f64(secs * factor)
}

/// Can this host give a test run a cgroup (root, or the VM's delegated subtree)? If not, skip
/// with the reason (rootless on a host whose cgroups are not delegated), or fail when
/// `SANDBOX_RUN_TEST_REQUIRE` names the cgroup.
pub fn cgroup_available() -> bool {
    if !sandbox_works() {
        return false;
    }
    use sandbox_run::layers::cgroup;
    match cgroup::Host::detect() {
        Ok(_)
            if nix::unistd::geteuid().is_root()
                || std::env::var_os("SANDBOX_RUN_VM_VARIANT").is_some() =>
        {
            true
        }
        // Nothing delegated, but sandbox-run asks systemd --user for a delegated scope.
        Err(e)
            if e.remedy() == cgroup::Remedy::DelegateV2
                && cgroup::user_manager_answers().is_ok() =>
        {
            true
        }
        other => {
            let why = match other {
                Err(e) => e.to_string(),
                Ok(_) => "not root and no delegated subtree known to be ours".into(),
            };
            let required = std::env::var("SANDBOX_RUN_TEST_REQUIRE").unwrap_or_default();
            assert!(
                !required.split(',').any(|r| r.starts_with("cgroup")),
                "cgroup required but unavailable: {why}"
            );
            eprintln!("skip: no cgroup here: {why}");
            false
        }
    }
}
