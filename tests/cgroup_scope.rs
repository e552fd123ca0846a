//! Rootless on a systemd host (pure cgroup v2, nothing delegated to the caller): sandbox-run
//! asks `systemd --user` for a delegated scope itself, runs with its caps, and leaves no scope
//! behind; without a manager to ask, the refusal is today's. Runs only where that is the
//! situation (the VM matrix's systemd variant, as the logged-in user); skipped elsewhere, a
//! failure when `SANDBOX_RUN_TEST_REQUIRE` names `systemd-scope`. The caps themselves are
//! attacked by tests/limits.rs, which runs there too.

#[path = "support/mod.rs"]
mod support;

use sandbox_run::layers::cgroup::{self, Remedy};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{probe, schema, slack, BIN};

/// Is this the situation? Otherwise why not.
fn applies() -> Result<(), String> {
    if nix::unistd::geteuid().is_root() {
        return Err("root needs no delegation".into());
    }
    match cgroup::Host::detect() {
        Ok(h) => return Err(format!("a cgroup is already ours: {}", h.describe())),
        Err(e) if e.remedy() != Remedy::DelegateV2 => {
            return Err(format!("not a cgroup v2 host without delegation: {e}"))
        }
        Err(_) => {}
    }
    cgroup::user_manager_answers()
        .map(drop)
        .map_err(|e| format!("no systemd --user to ask: {e}"))
}

fn skip_unless_applies() -> bool {
    match applies() {
        Ok(()) => false,
        Err(why) => {
            let required = std::env::var("SANDBOX_RUN_TEST_REQUIRE").unwrap_or_default();
            assert!(
                !required.split(',').any(|r| r.trim() == "systemd-scope"),
                "systemd-scope required but: {why}"
            );
            eprintln!("skip: {why}");
            true
        }
    }
}

fn run(base: &Path, env: &[(&str, &Path)]) -> (Output, Option<serde_json::Value>) {
    let report = base.join("r.json");
    let _ = std::fs::remove_file(&report);
    let mut c = Command::new(BIN);
    c.arg("-v")
        .arg("--report")
        .arg(&report)
        .arg("--profile")
        .arg(base.join("p.toml"))
        .arg("--repo")
        .arg(base.join("repo"))
        .arg("--")
        .arg(probe())
        .arg("whoami");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let r = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    (o, r)
}

/// Every `sandbox-run-<pid>-*.scope` cgroup on the host (under /sys/fs/cgroup, four levels
/// deep at most below user.slice: user-UID.slice/user@UID.service/app.slice/x.scope).
fn scopes_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("sandbox-run-{pid}-");
    let mut out = Vec::new();
    let mut dirs = vec![(PathBuf::from("/sys/fs/cgroup/user.slice"), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if name.starts_with(&prefix) && name.ends_with(".scope") {
                out.push(e.path());
            } else if depth < 4 {
                dirs.push((e.path(), depth + 1));
            }
        }
    }
    out
}

#[test]
fn a_user_without_a_delegated_cgroup_gets_one_from_systemd_and_leaves_none() {
    if skip_unless_applies() {
        return;
    }
    let base = support::scratch("cgroup-scope");
    support::probe_profile(&base, "validate", "", "");
    let (o, r) = run(&base, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("systemd --user moved sandbox-run into the delegated scope sandbox-run-"),
        "{stderr}"
    );
    let r = r.expect("a report");
    schema::assert_valid_report(&r);
    let cg = &r["sandbox"]["cgroup"];
    assert_eq!(cg["version"], 2, "{r:#}");
    assert!(cg["memory_max"].as_u64().is_some_and(|m| m > 0), "{r:#}");
    assert!(cg["pids_max"].as_u64().is_some_and(|m| m > 0), "{r:#}");
    assert!(cg["cpu_max"].is_string(), "{r:#}");
    let degraded = r["sandbox"]["degraded"]
        .as_array()
        .expect("sandbox.degraded");
    assert!(!degraded.iter().any(|d| d == "cgroup"), "{r:#}");
    // The scope named on stderr is collected once sandbox-run has exited.
    let unit = stderr
        .split("delegated scope ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_string();
    let pid: u32 = unit
        .trim_start_matches("sandbox-run-")
        .split('-')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{unit}"));
    let t0 = std::time::Instant::now();
    while !scopes_of(pid).is_empty() && t0.elapsed() < slack(10.0) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        scopes_of(pid),
        Vec::<PathBuf>::new(),
        "scope {unit} left behind"
    );
}

#[test]
fn without_a_manager_to_ask_the_refusal_is_unchanged() {
    if skip_unless_applies() {
        return;
    }
    let base = support::scratch("cgroup-scope-none");
    support::probe_profile(&base, "validate", "", "");
    // A bus address and a runtime dir where nothing answers.
    let empty = base.join("runtime");
    std::fs::create_dir_all(&empty).unwrap();
    let nowhere = base.join("runtime/none");
    let address = PathBuf::from(format!("unix:path={}", nowhere.display()));
    let (o, _) = run(
        &base,
        &[
            ("DBUS_SESSION_BUS_ADDRESS", address.as_path()),
            ("XDG_RUNTIME_DIR", empty.as_path()),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("no delegated scope from systemd --user over D-Bus:"),
        "{stderr}"
    );
    // the refusal's two short lines: what is missing, then the quickest fixes and doctor
    assert!(
        stderr.contains("cannot have one here (cgroup v2 delegates no subtree to it)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "add --without cgroup (no memory, CPU or process caps); every fix: sandbox-run doctor"
        ),
        "{stderr}"
    );
}
