//! Every refusal named: each kind the sandbox refuses, triggered from inside a real sandbox,
//! named on stderr at the end of the failed run (`sandbox-run: refused KIND SUB: ...`), by
//! `-v`, and in the report (`results[].denials`), beside a positive control: the same
//! command with the named fix applied passes and has no such refusal.
//!
//! The filesystem refusals come from the command's error texts (its stderr, which the
//! supervisor relays when it captures), judged after the run against the plan and the host.

mod common;
#[path = "support/refusals.rs"]
mod refusals;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use refusals::{head, Out};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A profile: `base` with `programs` added by name, `edit` applied to its TOML.
fn profile(f: &Fixture, name: &str, spec: Spec, edit: impl FnOnce(&mut toml::Table)) -> PathBuf {
    let mut t: toml::Table = toml::from_str(&spec.to_toml()).unwrap();
    edit(&mut t);
    let p = f.path(&format!("{name}.toml"));
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    p
}

/// `ci` (shells, repo read-write, no network) with the probe.
fn ci(f: &Fixture, name: &str, edit: impl FnOnce(&mut toml::Table)) -> PathBuf {
    profile(f, name, Spec::extends("ci"), edit)
}

fn limits(t: &mut toml::Table, key: &str, value: toml::Value) {
    t.entry("limits")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .unwrap()
        .insert(key.into(), value);
}

/// The same run with `-v`: its report has the refusal of `kind`/`sub`, and `-v` says it once.
fn says_v(profile: &Path, repo: &Path, opts: &[&str], argv: &[&str], kind: &str, sub: &str) {
    let mut o = vec!["-v"];
    o.extend_from_slice(opts);
    let v = run(profile, repo, &o, argv);
    let d = v.denial(kind, sub);
    v.says_v(&d);
}

/// Run `argv` in a sandbox of `profile` over `repo`, capturing (so the command's stderr
/// passes the supervisor), with a report.
fn run(profile: &Path, repo: &Path, opts: &[&str], argv: &[&str]) -> Out {
    let report = repo.parent().unwrap().join("denials-report.json");
    let _ = std::fs::remove_file(&report);
    let mut o = vec!["--report", report.to_str().unwrap(), "--capture"];
    o.extend_from_slice(opts);
    Out::of(sandbox_command(profile, repo, &o, argv), &report)
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A file on the host that the sandbox does not show: named `hidden` with the `extra_ro`
/// of that very file; the profile with it reads the file. A path that is on the host in
/// neither place is no refusal. `-v` names it on a run that succeeds too.
#[test]
fn a_hidden_file_is_named_with_its_extra_ro() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-hidden");
    let repo = f.repo("repo");
    let file = f.write("outside/conf.txt", "conf\n");
    let p = ci(&f, "ci", |_| {});
    let cat = ["cat", path_str(&file)];
    let o = run(&p, &repo, &[], &cat);
    assert_ne!(o.run.code, Some(0), "{o}");
    let d = o.denial("filesystem", "hidden");
    assert_eq!(d["what"], format!("{} (read)", file.display()));
    assert_eq!(
        d["patch"],
        serde_json::json!({"set": "extra_ro", "value": file.to_str().unwrap()})
    );
    assert_eq!(
        d["fix"],
        format!(
            "[filesystem] extra_ro = {{ add = [\"{}\"] }}",
            file.display()
        )
    );
    o.says(&d);
    // a plain run (no report, no capture, stderr not a terminal) names it too
    let plain = run_command(sandbox_command(&p, &repo, &[], &cat), LIMIT);
    assert_ne!(plain.code, Some(0), "{plain}");
    let line = format!(
        "sandbox-run: refused filesystem hidden: {} (read): not in the sandbox's view; ",
        file.display()
    );
    assert_eq!(
        plain
            .stderr
            .lines()
            .filter(|l| l.starts_with(&line))
            .count(),
        1,
        "{plain}"
    );
    assert!(
        plain.stderr.contains("No such file or directory"),
        "{plain}"
    );
    // -v: said on a run that succeeds as well (the command swallows its failure)
    let script = format!("cat {} || true", file.display());
    let v = run(&p, &repo, &["-v"], &strs(&sh(&script)));
    assert_eq!(v.run.code, Some(0), "{v}");
    let dv = v.denial("filesystem", "hidden");
    v.says(&dv);
    v.says_v(&dv);
    says_v(&p, &repo, &[], &cat, "filesystem", "hidden");
    // without -v a run that succeeds says nothing
    let quiet = run(&p, &repo, &[], &strs(&sh(&script)));
    assert_eq!(quiet.run.code, Some(0), "{quiet}");
    assert!(quiet.refused_lines().is_empty(), "{quiet}");
    // the fix applied: read, nothing refused
    let fixed = profile(&f, "fixed", Spec::extends("ci").extra_ro(&file), |_| {});
    let ok = run(&fixed, &repo, &[], &cat);
    assert_eq!(ok.run.code, Some(0), "{ok}");
    assert!(ok.run.stdout.contains("conf"), "{ok}");
    ok.none_of("filesystem");
    // not on the host either: the same failure outside, no refusal
    let gone = f.path("outside/gone.txt");
    let o = run(&p, &repo, &[], &["cat", path_str(&gone)]);
    assert_ne!(o.run.code, Some(0), "{o}");
    assert!(o.run.stderr.contains("No such file"), "{o}");
    o.none_of("filesystem");
    // a system file the profile leaves out: the same
    if Path::new("/etc/fstab").is_file() {
        let o = run(&p, &repo, &[], &["cat", "/etc/fstab"]);
        let d = o.denial("filesystem", "hidden");
        assert_eq!(d["patch"]["value"], "/etc/fstab", "{o}");
    }
}

/// A write into a read-only bind: `read_only`, with the `extra_rw` of the directory the
/// file goes in; the profile with it writes. A system directory: never.
#[test]
fn a_write_to_a_read_only_bind_is_named() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-ro");
    let repo = f.repo("repo");
    let dir = f.path("outside/d");
    std::fs::create_dir_all(&dir).unwrap();
    let p = profile(&f, "ro", Spec::extends("ci").extra_ro(&dir), |_| {});
    let script = format!("echo x > {}/new", dir.display());
    let o = run(&p, &repo, &[], &strs(&sh(&script)));
    assert_ne!(o.run.code, Some(0), "{o}");
    let d = o.denial("filesystem", "read_only");
    assert_eq!(
        d["patch"],
        serde_json::json!({"set": "extra_rw", "value": dir.to_str().unwrap()}),
        "{o}"
    );
    o.says(&d);
    says_v(
        &p,
        &repo,
        &[],
        &strs(&sh(&script)),
        "filesystem",
        "read_only",
    );
    let fixed = profile(&f, "rw", Spec::extends("ci").extra_rw(&dir), |_| {});
    let ok = run(&fixed, &repo, &[], &strs(&sh(&script)));
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("filesystem");
    // a system directory: named, and no setting allows it
    let o = run(&p, &repo, &[], &strs(&sh("echo x > /usr/x")));
    let d = o.denial("filesystem", "read_only");
    assert!(d["fix"].as_str().unwrap().starts_with("never: "), "{o}");
    assert_eq!(d["patch"], Value::Null);
    o.says(&d);
    says_v(
        &p,
        &repo,
        &[],
        &strs(&sh("echo x > /usr/x")),
        "filesystem",
        "read_only",
    );
}

/// A write the mounts allow and landlock does not (the sandbox's own /proc, read-only to
/// landlock): `landlock`, never. The control: a write where landlock allows (/tmp).
#[test]
fn a_write_outside_landlock_is_named() {
    if !sandbox_works() || !need_landlock(1, "landlock") {
        return;
    }
    let f = Fixture::new("den-landlock");
    let repo = f.repo("repo");
    let p = ci(&f, "ci", |_| {});
    let o = run(&p, &repo, &[], &strs(&sh("echo x > /proc/self/comm")));
    assert_ne!(o.run.code, Some(0), "{o}");
    let d = o.denial("filesystem", "landlock");
    assert!(d["fix"].as_str().unwrap().starts_with("never: "), "{o}");
    o.says(&d);
    let comm = sh("echo x > /proc/self/comm");
    says_v(&p, &repo, &[], &strs(&comm), "filesystem", "landlock");
    let ok = run(&p, &repo, &[], &strs(&sh("echo x > /tmp/x && cat /tmp/x")));
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("filesystem");
}

/// The caller's credentials and the host's private files: named, and never allowed, while
/// a plain file of the same home is offered by `extra_ro`.
#[test]
fn credentials_are_named_never() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-creds");
    let repo = f.repo("repo");
    let home = f.path("home");
    let key = f.write("home/.ssh/id_test", "key\n");
    let plain = f.write("home/notes.txt", "notes\n");
    std::os::unix::fs::symlink(home.join(".ssh"), home.join("keys")).unwrap();
    std::fs::create_dir_all(home.join("sub")).unwrap();
    let p = ci(&f, "ci", |_| {});
    let with_home_v = |v: bool, argv: &[&str]| {
        let report = f.path("creds-report.json");
        let _ = std::fs::remove_file(&report);
        let mut o = vec!["--report", path_str(&report), "--capture"];
        if v {
            o.push("-v");
        }
        let mut c = sandbox_command(&p, &repo, &o, argv);
        c.env("HOME", &home);
        let r = run_command(c, LIMIT);
        let report = std::fs::read_to_string(&report)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| panic!("no report:\n{r}"));
        schema::assert_valid_report(&report);
        Out { run: r, report }
    };
    let with_home = |argv: &[&str]| with_home_v(false, argv);
    let o = with_home(&["cat", path_str(&key)]);
    assert_ne!(o.run.code, Some(0), "{o}");
    let d = o.denial("filesystem", "hidden");
    assert!(
        d["fix"].as_str().unwrap().starts_with("never: ")
            && d["fix"].as_str().unwrap().contains("credentials"),
        "{o}"
    );
    assert_eq!(d["patch"], Value::Null);
    o.says(&d);
    let v = with_home_v(true, &["cat", path_str(&key)]);
    v.says_v(&v.denial("filesystem", "hidden"));
    // the positive control: the same home's plain file is offered
    let o = with_home(&["cat", path_str(&plain)]);
    let d = o.denial("filesystem", "hidden");
    assert_eq!(d["patch"]["set"], "extra_ro", "{o}");
    // never means never: a profile that binds the credentials anyway is refused before
    // anything runs, one line; the plain file's extra_ro reads
    let via = |rel: &str| home.join(rel).join("id_test");
    for (name, spec, read) in [
        (
            "ssh-ro",
            Spec::extends("ci").extra_ro(&home.join(".ssh")),
            key.clone(),
        ),
        ("key-rw", Spec::extends("ci").extra_rw(&key), key.clone()),
        ("home-ro", Spec::extends("ci").extra_ro(&home), key.clone()),
        // variants: a link to the keys, a `..` that climbs back into them
        (
            "link-ro",
            Spec::extends("ci").extra_ro(&home.join("keys")),
            via("keys"),
        ),
        (
            "dotdot-ro",
            Spec::extends("ci").extra_ro(&home.join("sub/../.ssh")),
            via("sub/../.ssh"),
        ),
    ] {
        let bad = profile(&f, name, spec, |_| {});
        let mut c = sandbox_command(&bad, &repo, &[], &["cat", path_str(&read)]);
        c.env("HOME", &home);
        let r = run_command(c, LIMIT);
        assert_ne!(r.code, Some(0), "{name}: {r}");
        assert!(!r.stdout.contains("key"), "{name}: {r}");
        assert!(
            r.stderr.contains("is never bound into a sandbox"),
            "{name}: {r}"
        );
    }
    let good = profile(&f, "plain-ro", Spec::extends("ci").extra_ro(&plain), |_| {});
    let mut c = sandbox_command(&good, &repo, &[], &["cat", path_str(&plain)]);
    c.env("HOME", &home);
    let r = run_command(c, LIMIT);
    assert_eq!(r.code, Some(0), "{r}");
    assert!(r.stdout.contains("notes"), "{r}");
    // the host's private file
    if Path::new("/etc/shadow").exists() {
        let o = run(&p, &repo, &[], &["cat", "/etc/shadow"]);
        let d = o.denial("filesystem", "hidden");
        assert!(d["fix"].as_str().unwrap().starts_with("never: "), "{o}");
    }
}

/// `--net filtered`: a host not on the list, refused by the proxy, is named with its
/// `--allow-host`; with it the request goes through and nothing is refused.
#[test]
fn a_refused_host_is_named_with_its_allow_host() {
    if !sandbox_works() {
        return;
    }
    let Some(_) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("curl"))
            .find(|f| f.is_file())
    }) else {
        skip_tool("curl is not installed");
        return;
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
            );
        }
    });
    let f = Fixture::new("den-net");
    let repo = f.repo("repo");
    let p = profile(
        &f,
        "filtered",
        Spec::extends("validate")
            .net("filtered")
            .programs(&["curl"]),
        |_| {},
    );
    let url = format!("http://127.0.0.1:{port}/");
    let curl = ["curl", "-fsS", "--noproxy", "", url.as_str()];
    let o = run(&p, &repo, &[], &curl);
    assert_ne!(o.run.code, Some(0), "{o}");
    let d = o.denial("network", "host");
    let lit = format!("127.0.0.1:{port}");
    assert_eq!(d["what"], lit, "{o}");
    assert_eq!(
        d["patch"],
        serde_json::json!({"set": "host", "value": lit.as_str()})
    );
    assert!(
        d["fix"]
            .as_str()
            .unwrap()
            .starts_with(&format!("--allow-host {lit}")),
        "{o}"
    );
    o.says(&d);
    says_v(&p, &repo, &[], &curl, "network", "host");
    // -v says it when the proxy refuses it: before what the command writes next
    let sh_curl = profile(
        &f,
        "sh-curl",
        Spec::extends("validate")
            .net("filtered")
            .programs(&["sh", "curl"]),
        |_| {},
    );
    let marker = "den-net-marker";
    let script = format!("curl -fsS --noproxy '' {url}; echo {marker} >&2; exit 1");
    let v = run(&sh_curl, &repo, &["-v"], &strs(&sh(&script)));
    let said = v.said_at(&head(&v.denial("network", "host")));
    let at = v.run.stderr.lines().position(|l| l == marker);
    assert_eq!(said.len(), 1, "{v}");
    assert!(
        at.is_some_and(|m| said[0] < m),
        "said before the marker:\n{v}"
    );
    let ok = run(&p, &repo, &["--allow-host", &lit], &curl);
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("network");
}

/// Memory, pids and the timeout: each limit hit is named with a value that would do; the
/// same probe under it passes.
#[test]
fn cgroup_limits_and_the_timeout_are_named() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-limits");
    let repo = f.repo("repo");
    let p = profile(&f, "v", Spec::default(), |_| {});
    let probe = probe();
    let probe = path_str(&probe);
    // the timeout
    let o = run(&p, &repo, &["--timeout", "1s"], &[probe, "sleep", "30"]);
    assert_eq!(o.run.code, Some(124), "{o}");
    let d = o.denial("resource", "timeout");
    assert_eq!(
        d["patch"],
        serde_json::json!({"set": "limit", "value": {"key": "timeout", "value": "2s"}})
    );
    o.says(&d);
    let sleep = [probe, "sleep", "30"];
    says_v(
        &p,
        &repo,
        &["--timeout", "1s"],
        &sleep,
        "resource",
        "timeout",
    );
    let ok = run(&p, &repo, &["--timeout", "30s"], &[probe, "sleep", "1"]);
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("resource");
    if !cgroup_layer_works(&ok) {
        skip(
            "cgroup",
            "no cgroup for this user: memory and pids are not capped",
        );
        return;
    }
    // memory
    let o = run(&p, &repo, &["--memory", "64M"], &[probe, "alloc", "512"]);
    let d = o.denial("resource", "memory");
    assert_eq!(d["patch"]["value"]["value"], "128M", "{o}");
    assert!(
        d["fix"].as_str().unwrap().starts_with("--memory 128M"),
        "{o}"
    );
    o.says(&d);
    let alloc = [probe, "alloc", "512"];
    says_v(
        &p,
        &repo,
        &["--memory", "64M"],
        &alloc,
        "resource",
        "memory",
    );
    let ok = run(&p, &repo, &["--memory", "64M"], &[probe, "alloc", "16"]);
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("resource");
    // pids
    let o = run(&p, &repo, &["--pids", "16"], &[probe, "fork-bomb", "100"]);
    let d = o.denial("resource", "pids");
    assert_eq!(d["patch"]["value"]["value"], "32", "{o}");
    if o.run.code != Some(0) {
        o.says(&d);
    }
    let bomb = [probe, "fork-bomb", "100"];
    says_v(&p, &repo, &["--pids", "16"], &bomb, "resource", "pids");
    let ok = run(&p, &repo, &["--pids", "64"], &[probe, "fork-bomb", "8"]);
    ok.none_of("resource");
}

/// The cgroup layer was in force for a run (rootless without delegation it is not).
fn cgroup_layer_works(o: &Out) -> bool {
    !o.report["sandbox"]["cgroup"].is_null()
}

/// The output cap and the file size limit: named, with the profile line that would do.
#[test]
fn output_and_file_size_limits_are_named() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-output");
    let repo = f.repo("repo");
    let p = profile(&f, "v", Spec::default(), |t| {
        limits(t, "output", "64K".into());
        limits(t, "fsize", "1M".into());
    });
    let probe = probe();
    let probe = path_str(&probe);
    // past the output cap (the command itself succeeds: -v names it)
    let o = run(&p, &repo, &["-v"], &[probe, "write-bytes", "200000"]);
    let d = o.denial("resource", "output");
    assert_eq!(d["patch"]["value"]["value"], "128K", "{o}");
    o.says(&d);
    o.says_v(&d);
    let ok = run(&p, &repo, &["-v"], &[probe, "write-bytes", "1000"]);
    ok.none_of("resource");
    // a file past RLIMIT_FSIZE: the writer dies of SIGXFSZ
    let big = f.write("big.bin", &"x".repeat(3 << 20));
    let small = f.write("small.bin", "x");
    let p2 = profile(
        &f,
        "v2",
        Spec::default().extra_ro(big.parent().unwrap()),
        |t| limits(t, "fsize", "1M".into()),
    );
    let o = run(
        &p2,
        &repo,
        &[],
        &[probe, "copy", path_str(&big), "/tmp/big"],
    );
    assert_ne!(o.run.code, Some(0), "{o}");
    let d = o.denial("resource", "fsize");
    assert_eq!(d["patch"]["value"]["value"], "2M", "{o}");
    o.says(&d);
    let copy = [probe, "copy", path_str(&big), "/tmp/big"];
    says_v(&p2, &repo, &[], &copy, "resource", "fsize");
    let ok = run(
        &p2,
        &repo,
        &[],
        &[probe, "copy", path_str(&small), "/tmp/small"],
    );
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("resource");
}

/// A command that runs out of file descriptors (`[limits] nofile`): bash says `Too many open
/// files`, and the refusal names the limit with one that would do. Control: under a limit
/// high enough, the same loop passes and names nothing.
#[test]
fn the_open_files_limit_is_named() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-nofile");
    let repo = f.repo("repo");
    let opens = "for i in {1..40}; do exec {fd}</dev/null || exit 3; done";
    let low = ci(&f, "low", |t| limits(t, "nofile", 16.into()));
    let o = run(&low, &repo, &[], &["bash", "-c", opens]);
    assert_eq!(o.run.code, Some(3), "{o}");
    let d = o.denial("resource", "nofile");
    assert_eq!(d["patch"]["set"], "limit", "{o}");
    assert_eq!(d["patch"]["value"]["key"], "nofile", "{o}");
    o.says(&d);
    says_v(
        &low,
        &repo,
        &[],
        &["bash", "-c", opens],
        "resource",
        "nofile",
    );
    let high = ci(&f, "high", |t| limits(t, "nofile", 1024.into()));
    let ok = run(&high, &repo, &[], &["bash", "-c", opens]);
    assert_eq!(ok.run.code, Some(0), "{ok}");
    ok.none_of("resource");
}

/// A failed run names at most ten refusals, then how many more the report has.
#[test]
fn ten_refusals_then_the_count() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-ten");
    let repo = f.repo("repo");
    let mut files = Vec::new();
    for i in 0..13 {
        files.push(f.write(&format!("outside/f{i}"), "x\n"));
    }
    let p = ci(&f, "ci", |_| {});
    let mut argv = vec!["cat".to_string()];
    argv.extend(files.iter().map(|p| p.display().to_string()));
    let o = run(&p, &repo, &[], &strs(&argv));
    assert_ne!(o.run.code, Some(0), "{o}");
    assert_eq!(o.denials().len(), 13, "{o}");
    assert_eq!(o.refused_lines().len(), 10, "{o}");
    assert!(
        o.run
            .stderr
            .contains("sandbox-run: ... and 3 more refusals (see the report)"),
        "{o}"
    );
    // -v: every one, each once (said as they came)
    let v = run(&p, &repo, &["-v"], &strs(&argv));
    assert_eq!(v.refused_lines().len(), 13, "{v}");
    for d in v.denials() {
        v.says_v(&d);
    }
    assert!(!v.run.stderr.contains("more refusals"), "{v}");
}

/// `--net none`: a name the sandbox's name service refused is named with the flags that
/// would let it through; under `filtered` with the name listed it is not refused (a name
/// that does not resolve on the host either fails the same way outside: no refusal).
#[test]
fn a_refused_name_is_named() {
    if !sandbox_works() {
        return;
    }
    if std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).all(|d| !d.join("curl").is_file()))
        .unwrap_or(true)
    {
        skip_tool("curl is not installed");
        return;
    }
    let f = Fixture::new("den-dns");
    let repo = f.repo("repo");
    let name = "den-test.invalid";
    let url = format!("http://{name}/");
    let curl = ["curl", "-fsS", url.as_str()];
    let none = profile(
        &f,
        "none",
        Spec::extends("validate").net("none").programs(&["curl"]),
        |_| {},
    );
    let o = run(&none, &repo, &[], &curl);
    assert_ne!(o.run.code, Some(0), "{o}");
    let d = o.denial("network", "dns");
    assert_eq!(d["what"], name, "{o}");
    assert!(
        d["fix"]
            .as_str()
            .unwrap()
            .starts_with(&format!("--net filtered --allow-host {name}")),
        "{o}"
    );
    assert_eq!(
        d["patch"],
        serde_json::json!({"set": "host", "value": name})
    );
    // said once on stderr: in the name service's own line (it names the profile), not again
    // as a refusal line
    let said: Vec<&str> = o
        .run
        .stderr
        .lines()
        .filter(|l| l.starts_with("sandbox-run: ") && l.contains(name))
        .collect();
    assert_eq!(said.len(), 1, "{o}");
    assert!(
        said[0].starts_with(&format!(
            "sandbox-run: network: the command looked up {name}"
        )),
        "{o}"
    );
    says_v(&none, &repo, &[], &curl, "network", "dns");
    let filtered = profile(
        &f,
        "filtered",
        Spec::extends("validate")
            .net("filtered")
            .programs(&["curl"]),
        |_| {},
    );
    let o = run(&filtered, &repo, &["--allow-host", name], &curl);
    assert_ne!(o.run.code, Some(0), "nothing answers for {name}: {o}");
    o.none_of("network");
}

/// `-v` says a refusal when it happens, not at the end: the command is refused, then writes a
/// marker to stderr and fails; the refusal's line comes before the marker, once (not again at
/// the end). Sources: the command's error text, the lookup `--observe` saw, the name the name
/// service refused, the timeout. Control: without `-v` the line comes at the end, after the
/// marker.
#[test]
fn v_says_a_refusal_as_it_happens() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("den-live");
    let repo = f.repo("repo");
    let file = f.write("outside/live.txt", "x\n");
    let marker = "den-live-marker";
    let at = |o: &Out| {
        let i = o.run.stderr.lines().position(|l| l == marker);
        i.unwrap_or_else(|| panic!("no marker:\n{o}"))
    };
    // (profile, options, script, kind, sub)
    let p = ci(&f, "ci", |_| {});
    let cat = format!("cat {}; echo {marker} >&2; exit 1", file.display());
    let mut cases = vec![
        (p.clone(), vec!["-v"], cat.clone(), "hidden"),
        (p.clone(), vec!["-v", "--observe"], cat.clone(), "hidden"),
    ];
    let curl = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("curl").is_file()));
    let dns = profile(
        &f,
        "none",
        Spec::extends("ci").net("none").programs(&["sh", "curl"]),
        |_| {},
    );
    let lookup = format!("curl -fsS http://den-live.invalid/; echo {marker} >&2; exit 1");
    if curl {
        cases.push((dns.clone(), vec!["-v"], lookup.clone(), "dns"));
    } else {
        skip_tool("curl is not installed: the name service's case is not run");
    }
    for (profile, opts, script, sub) in &cases {
        let o = run(profile, &repo, opts, &strs(&sh(script)));
        let kind = if *sub == "dns" {
            "network"
        } else {
            "filesystem"
        };
        let d = o.denial(kind, sub);
        let said = o.said_at(&head(&d));
        assert_eq!(said.len(), 1, "{opts:?} {sub}: said once:\n{o}");
        assert!(
            said[0] < at(&o),
            "{opts:?} {sub}: said before the marker:\n{o}"
        );
    }
    // variants: the error line in two writes, the same refusal three times: said once, right
    // after the whole line, before the marker; the report counts 3 (the end says it no more)
    let parts = format!(
        "printf 'x: {f}: No such' >&2; sleep 0.2; printf ' file or directory\\n' >&2; cat {f}; cat {f}; echo {marker} >&2; exit 1",
        f = file.display()
    );
    let o = run(&p, &repo, &["-v"], &strs(&sh(&parts)));
    let d = o.denial("filesystem", "hidden");
    assert_eq!(d["count"], 3, "{o}");
    let said = o.said_at(&head(&d));
    assert_eq!(said.len(), 1, "said once:\n{o}");
    assert!(said[0] < at(&o), "said before the marker:\n{o}");
    let before = o.run.stderr.lines().nth(said[0] - 1).unwrap_or("");
    assert_eq!(
        before,
        format!("x: {}: No such file or directory", file.display()),
        "said right after the line that named it:\n{o}"
    );
    // a limit known during the run: the timeout is said when it is reached, before the
    // command hears of it (it writes the marker on SIGTERM)
    let trap = format!("trap 'echo {marker} >&2; exit 1' TERM; sleep 30 & wait");
    let o = run(&p, &repo, &["-v", "--timeout", "1s"], &strs(&sh(&trap)));
    let said = o.said_at(&head(&o.denial("resource", "timeout")));
    assert_eq!(said.len(), 1, "said once:\n{o}");
    assert!(said[0] < at(&o), "said before the marker:\n{o}");
    // control: without -v, the line comes at the end of the failed run
    let o = run(&p, &repo, &[], &strs(&sh(&cat)));
    let said = o.said_at(&head(&o.denial("filesystem", "hidden")));
    assert_eq!(said.len(), 1, "{o}");
    assert!(said[0] > at(&o), "without -v, at the end:\n{o}");
}
