//! Refusals are named: under `--net none` and `--net filtered` a name service inside the
//! sandbox answers every lookup with NXDOMAIN and records the name; a command that fails after
//! such lookups ends with one line naming the host and how to allow it, and the report lists
//! the names. Real clients inside: npm (`npm ci` of a tiny project) and Node's resolver.

mod common;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

/// Looks up every name given; exit 1 if any failed (0 with `--ok`), after printing the
/// sandbox's /etc/resolv.conf with `--resolv`.
const LOOK: &str = r#"
const dns = require("dns");
const args = process.argv.slice(2);
const ok = args.includes("--ok");
if (args.includes("--resolv")) process.stdout.write(require("fs").readFileSync("/etc/resolv.conf", "utf8"));
const names = args.filter(a => !a.startsWith("--"));
let failed = 0, left = names.length;
for (const n of names) dns.lookup(n, (e) => {
  if (e) { failed++; console.log(n, e.code); }
  if (--left === 0) process.exit(failed && !ok ? 1 : 0);
});
"#;

/// The fixture, its repo, and `validate` as a test profile (the cgroup layer best-effort, so
/// that rootless runs on a host without delegated cgroups work; `PROFILE` in the lines below
/// is its path).
fn setup(name: &str) -> Option<(Fixture, PathBuf, String)> {
    if !sandbox_works() {
        return None;
    }
    if which("node").is_none() {
        skip_tool("node is not installed");
        return None;
    }
    let f = Fixture::new(name);
    let repo = f.repo("repo");
    std::fs::write(repo.join("look.js"), LOOK).unwrap();
    let p = f.profile(&Spec::extends("validate"));
    Some((f, repo, p.display().to_string()))
}

fn run_in(
    f: &Fixture,
    p: &str,
    repo: &Path,
    opts: &[&str],
    argv: &[&str],
) -> (Run, serde_json::Value) {
    let report = f.path("report.json");
    let _ = std::fs::remove_file(&report);
    let mut o = vec!["--report", report.to_str().unwrap()];
    o.extend_from_slice(opts);
    let r = run_command(sandbox_command(Path::new(p), repo, &o, argv), LIMIT);
    let json: serde_json::Value = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| panic!("no report:\n{r}"));
    schema::assert_valid_report(&json);
    (r, json)
}

fn refused(report: &serde_json::Value) -> Vec<(String, u64)> {
    report["sandbox"]["network"]["dns_refused"]
        .as_array()
        .unwrap_or_else(|| panic!("no dns_refused in {report:#}"))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn named_lines(r: &Run) -> Vec<&str> {
    r.stderr
        .lines()
        .filter(|l| l.starts_with("sandbox-run: network: the command looked up"))
        .collect()
}

/// The registry's host, from npm's own configuration on this host.
fn registry_host() -> Option<String> {
    let out = Command::new("npm")
        .args(["config", "get", "registry"])
        .output()
        .ok()?;
    let url = String::from_utf8(out.stdout).ok()?;
    let rest = url.trim().split_once("://")?.1;
    let host = rest.split(['/', ':']).next()?.to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

/// A project with one dependency and its lock. No `resolved` URL: npm takes the tarball from
/// its configured registry.
fn tiny_project(dir: &Path) {
    std::fs::write(
        dir.join("package.json"),
        r#"{"name":"t","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("package-lock.json"),
        r#"{"name":"t","version":"1.0.0","lockfileVersion":3,"requires":true,"packages":{
  "":{"name":"t","version":"1.0.0","dependencies":{"is-number":"7.0.0"}},
  "node_modules/is-number":{"version":"7.0.0","integrity":"sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng==","license":"MIT","engines":{"node":">=0.12.0"}}}}"#,
    )
    .unwrap();
}

/// `npm ci` under `validate` (no network) fails within seconds, not minutes of retries, and
/// ends with the line naming the registry's host and the flags that allow it.
#[test]
fn npm_ci_without_network_names_the_registry() {
    let Some((f, repo, p)) = setup("names-npm") else {
        return;
    };
    if which("npm").is_none() {
        skip_tool("npm is not installed");
        return;
    }
    let Some(host) = registry_host() else {
        skip_tool("npm config get registry gave no URL");
        return;
    };
    tiny_project(&repo);
    let t = Instant::now();
    let (r, rep) = run_in(&f, &p, &repo, &[], &["npm", "ci"]);
    let took = t.elapsed();
    assert_ne!(r.code, Some(0), "{r}");
    assert!(r.stderr.contains("ENOTFOUND"), "{r}");
    let lines = named_lines(&r);
    assert_eq!(lines.len(), 1, "{r}");
    let line = lines[0];
    assert!(
        line.starts_with(&format!(
            "sandbox-run: network: the command looked up {host}"
        )),
        "{r}"
    );
    assert!(
        line.contains(&format!(
            ", but the network is off in profile {p}; to allow it: --net filtered --allow-host {host}:"
        )),
        "{r}"
    );
    // the last line of the run
    assert_eq!(r.stderr.trim_end().lines().last(), Some(line), "{r}");
    // seconds, not npm's minutes of retries (141 s before), stretched on emulated machines
    assert!(took < slack_secs(8), "npm took {took:?}:\n{r}");
    assert!(
        refused(&rep).iter().any(|(n, c)| n == &host && *c >= 1),
        "{rep:#}"
    );
    eprintln!("npm ci under validate failed in {took:?}");
}

/// Under `--net filtered`, a name on the allow-list gets the same answer (clients reach it
/// through the proxy) but is no refusal: no line, not in the report. The control: a name not
/// on the list, in the same kind of run, is named with the flag that allows it.
#[test]
fn an_allowed_name_is_not_a_refusal() {
    let Some((f, repo, p)) = setup("names-filtered") else {
        return;
    };
    let allow = ["--allow-host", "allowed.example:443"];
    let (r, rep) = run_in(
        &f,
        &p,
        &repo,
        &allow,
        &["node", "look.js", "allowed.example"],
    );
    r.assert_code(1);
    assert_eq!(r.stdout.trim(), "allowed.example ENOTFOUND", "{r}");
    assert!(named_lines(&r).is_empty(), "{r}");
    assert!(refused(&rep).is_empty(), "{rep:#}");

    let (r, rep) = run_in(
        &f,
        &p,
        &repo,
        &allow,
        &["node", "look.js", "allowed.example", "other.example"],
    );
    r.assert_code(1);
    assert_eq!(
        named_lines(&r),
        vec![format!("sandbox-run: network: the command looked up other.example, which is not on the allow-list of profile {p}; to allow it: --allow-host other.example")],
        "{r}"
    );
    let names: Vec<String> = refused(&rep).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["other.example".to_string()], "{rep:#}");
}

/// A command that succeeds after a refused lookup gets no line; the report still lists the
/// name. Inside, /etc/resolv.conf names the sandbox's own name service. The control: the
/// same lookups in a command that fails get the line, counting the other names.
#[test]
fn a_command_that_succeeds_prints_no_line() {
    let Some((f, repo, p)) = setup("names-ok") else {
        return;
    };
    let (r, rep) = run_in(
        &f,
        &p,
        &repo,
        &[],
        &[
            "node",
            "look.js",
            "--ok",
            "--resolv",
            "a.example",
            "b.example",
        ],
    );
    r.assert_code(0);
    assert!(r.stdout.contains("\nnameserver 127.0.0.1\n"), "{r}");
    assert!(r.stdout.contains("a.example ENOTFOUND"), "{r}");
    assert!(named_lines(&r).is_empty(), "{r}");
    let names: Vec<String> = refused(&rep).into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"a.example".to_string()), "{rep:#}");
    assert!(names.contains(&"b.example".to_string()), "{rep:#}");

    let (r, _) = run_in(
        &f,
        &p,
        &repo,
        &[],
        &["node", "look.js", "a.example", "b.example"],
    );
    r.assert_code(1);
    let lines = named_lines(&r);
    assert_eq!(lines.len(), 1, "{r}");
    let tail = format!(
        ".example (and 1 other name), but the network is off in profile {p}; to allow it: --net filtered --allow-host "
    );
    assert!(lines[0].contains(&tail), "{r}");
}

/// The attack: a command floods the name service with invented names and with names holding
/// terminal escapes. The supervisor's record stays bounded (1024 names, the rest counted in
/// one entry), every query is still answered, and no escape byte reaches the report or the
/// caller's terminal.
#[test]
fn hostile_lookups_stay_bounded_and_inert() {
    let Some((f, repo, p)) = setup("names-flood") else {
        return;
    };
    std::fs::write(
        repo.join("flood.js"),
        r#"
const dgram = require("dgram");
const s = dgram.createSocket("udp4");
function query(id, labels) {
  const parts = [Buffer.from([id >> 8, id & 255, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0])];
  for (const l of labels) { const b = Buffer.from(l, "latin1"); parts.push(Buffer.from([b.length]), b); }
  parts.push(Buffer.from([0, 0, 1, 0, 1]));
  return Buffer.concat(parts);
}
const qs = [query(1, ["x\x1b]0;pwned\x07", "example"]), query(2, ["\x1b[31mred", "example"])];
for (let i = 0; i < 1100; i++) qs.push(query(3 + i, ["n" + i, "example"]));
let answered = 0, next = 0;
s.on("message", (m) => {
  if ((m[3] & 15) !== 3) { console.log("rcode", m[3] & 15); process.exit(2); }
  if (++answered === qs.length) { console.log("answered", answered); process.exit(1); }
  send();
});
// a few in flight at a time: the socket's buffers are not the test
function send() { if (next < qs.length) s.send(qs[next++], 53, "127.0.0.1"); }
for (let i = 0; i < 8; i++) send();
setTimeout(() => { console.log("answered only", answered); process.exit(3); }, 30000);
"#,
    )
    .unwrap();
    let (r, rep) = run_in(&f, &p, &repo, &[], &["node", "flood.js"]);
    r.assert_code(1);
    assert_eq!(r.stdout.trim(), "answered 1102", "{r}");
    let names = refused(&rep);
    assert_eq!(names.len(), 1025, "{r}");
    let overflow = names
        .iter()
        .find(|(n, _)| n == "(more names than the log keeps)")
        .unwrap_or_else(|| panic!("no overflow entry: {names:?}"));
    assert_eq!(overflow.1, 1100 - 1024);
    assert!(names.iter().all(|(n, _)| !n.contains('\x1b')), "{names:?}");
    assert!(!r.stderr.contains('\x1b'), "{r}");
    let lines = named_lines(&r);
    assert_eq!(lines.len(), 1, "{r}");
    assert!(lines[0].contains("(and more than 1023 other names)"), "{r}");
}

/// `npm ci` without network but with a kept npm cache (a CI runner's kept home) succeeds from
/// the cache at once: it used to "succeed" after two minutes of retries (141 s measured).
/// It looked the registry up (the report says so), and prints no line: it succeeded.
#[test]
fn npm_ci_from_a_kept_cache_is_quick() {
    let Some((f, repo, p)) = setup("names-cache") else {
        return;
    };
    if which("npm").is_none() {
        skip_tool("npm is not installed");
        return;
    }
    let Some(host) = registry_host() else {
        skip_tool("npm config get registry gave no URL");
        return;
    };
    tiny_project(&repo);
    // The cache, filled on the host from the registry (the test's own network).
    let warm = f.path("warm");
    std::fs::create_dir_all(&warm).unwrap();
    tiny_project(&warm);
    let seed = f.path("seed");
    let cache = seed.join(".npm");
    let filled = Command::new("npm")
        .args([
            "ci",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--cache",
        ])
        .arg(&cache)
        .current_dir(&warm)
        .output();
    if !filled.is_ok_and(|o| o.status.success()) {
        skip_tool("npm ci on the host could not fill a cache from the registry");
        return;
    }
    let state = f.path("state");
    let mut c = Command::new(BIN);
    c.arg("home")
        .arg(&p)
        .arg("--seed")
        .arg(&cache)
        .env("XDG_STATE_HOME", &state)
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e");
    run_command(c, LIMIT).assert_code(0);

    let report = f.path("report.json");
    let mut c = sandbox_command(
        Path::new(&p),
        &repo,
        &["--home", "persist", "--report", report.to_str().unwrap()],
        &["npm", "ci"],
    );
    c.env("XDG_STATE_HOME", &state);
    let t = Instant::now();
    let r = run_command(c, LIMIT);
    let took = t.elapsed();
    r.assert_code(0);
    assert!(r.stdout.contains("added 1 package"), "{r}");
    assert!(named_lines(&r).is_empty(), "{r}");
    // seconds, not npm's minutes of retries (141 s before), stretched on emulated machines
    assert!(took < slack_secs(8), "npm took {took:?}:\n{r}");
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    schema::assert_valid_report(&rep);
    assert!(refused(&rep).iter().any(|(n, _)| n == &host), "{rep:#}");
    eprintln!("npm ci from a kept cache without network took {took:?}");
}
