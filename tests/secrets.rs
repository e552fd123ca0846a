//! `--secret`: the value stays outside the sandbox. Inside, the name holds a placeholder of
//! the same shape; the value is in no environment (`/proc/PID/environ`) and no memory
//! (`/proc/PID/mem`) of any process of the sandbox, stage 2 and pid 1 included (forks of the
//! supervisor that never exec, the pitfall this guards); the trust bundle inside holds the
//! system roots and the extra CAs; bad inputs are one line and exit 125.

mod common;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const PREFIX: &str = "sk-ant-api03-";

/// A value no other test (or earlier run) has: the prefix and 48 random characters.
fn fresh_value() -> String {
    let mut b = [0u8; 48];
    // SAFETY: getrandom into a buffer of its length.
    assert_eq!(
        unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) },
        48
    );
    const SET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let tail: String = b.iter().map(|x| SET[*x as usize % 62] as char).collect();
    format!("{PREFIX}{tail}")
}

/// The probe's `getenv NAME` in a sandbox with `--secret NAME=api.example.com`, the caller's
/// NAME set to `value`.
fn inside(p: &Path, repo: &Path, value: &str, opts: &[&str]) -> ProbeRun {
    let mut o = vec!["--secret", "TEST_API_KEY=api.example.com"];
    o.extend_from_slice(opts);
    run_probe_with(p, repo, &o, &["getenv", "TEST_API_KEY"], |c| {
        c.env("TEST_API_KEY", value);
    })
}

fn assert_shape(placeholder: &str, value: &str) {
    assert_eq!(placeholder.len(), value.len(), "{placeholder}");
    assert!(placeholder.starts_with(PREFIX), "{placeholder}");
    assert_ne!(placeholder, value);
    assert!(placeholder[PREFIX.len()..]
        .bytes()
        .all(|b| b.is_ascii_alphanumeric()));
}

#[test]
fn the_placeholder_has_the_shape_and_changes_per_run() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("secret-shape");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let value = fresh_value();
    let a = inside(&p, &repo, &value, &[]).assert_ok();
    let b = inside(&p, &repo, &value, &[]).assert_ok();
    assert_shape(&a, &value);
    assert_shape(&b, &value);
    assert_ne!(a, b, "the placeholder is random per run");
}

/// The report: the secret by name and hosts, the run's CA in the bundle, the host on the
/// allow-list, the mode filtered (implied); nowhere the value; valid against the schema.
#[test]
fn the_report_names_the_secret_never_its_value() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("secret-report");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let value = fresh_value();
    let report = f.path("report.json");
    let r = inside(&p, &repo, &value, &["--report", report.to_str().unwrap()]);
    r.assert_ok();
    assert!(!r.run.all().contains(&value), "{r}");
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(!text.contains(&value[PREFIX.len()..]), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    schema::assert_valid_report(&v);
    let s = &v["sandbox"];
    assert_eq!(
        s["secrets"],
        serde_json::json!([{"name": "TEST_API_KEY", "hosts": ["api.example.com"], "injections": 0}])
    );
    assert_eq!(s["network"]["mode"], "filtered");
    assert!(s["network"]["allow"]
        .as_array()
        .unwrap()
        .contains(&"api.example.com".into()));
    assert!(s["ca_certs"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!({"path": null, "from": "run"})));
}

/// Every process under `root` (its descendants, by /proc/PID/task/*/children).
fn descendants(root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for task in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let kids = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                if !out.contains(&k) {
                    out.push(k);
                    todo.push(k);
                }
            }
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> bool {
    let first = needle[0];
    let mut i = 0;
    while let Some(at) = hay[i..].iter().position(|b| *b == first) {
        let s = i + at;
        if hay[s..].starts_with(needle) {
            return true;
        }
        i = s + 1;
    }
    false
}

/// Which of `needles` occur in the readable memory of `pid` (from /proc/PID/maps and
/// /proc/PID/mem); `None` when its memory cannot be read at all.
fn in_memory(pid: i32, needles: &[&[u8]]) -> Option<Vec<bool>> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut found = vec![false; needles.len()];
    let mut read_any = false;
    for line in maps.lines() {
        let mut parts = line.split_whitespace();
        let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
            continue;
        };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut buf = vec![0u8; (b - a) as usize];
        if mem.seek(SeekFrom::Start(a)).is_err() {
            continue;
        }
        let mut got = 0;
        while got < buf.len() {
            match mem.read(&mut buf[got..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        read_any |= got > 0;
        for (i, n) in needles.iter().enumerate() {
            found[i] |= find(&buf[..got], n);
        }
    }
    read_any.then_some(found)
}

fn environ(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ")).ok()
}

/// The heart of it: while the command sleeps, the test reads, from outside, the environment
/// and the memory of every process of the sandbox (stage 2, pid 1, the workload): the value
/// is nowhere; the workload's environment holds the placeholder (the scan works). The
/// supervisor's own environment is scrubbed too (its vault is the one place the value is).
#[test]
fn the_value_is_in_no_environment_and_no_memory_of_the_sandbox() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("secret-memory");
    let value = fresh_value();
    scan_sandbox(&f, &[], Some(&value), &value);
}

/// The same with the value from `--secret-file` (read straight into the vault), the
/// caller's environment holding another value of the name (masked as well).
#[test]
fn a_secret_file_value_is_in_no_memory_of_the_sandbox() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("secret-file-memory");
    let value = fresh_value();
    let file = f.write("keys.env", &format!("TEST_API_KEY={value}\n"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let decoy = fresh_value();
    scan_sandbox(
        &f,
        &["--secret-file", file.to_str().unwrap()],
        Some(&decoy),
        &value,
    );
    scan_sandbox(&f, &["--secret-file", file.to_str().unwrap()], None, &value);
}

/// Run the probe sleeping with `--secret TEST_API_KEY=…` and `opts`, the caller's
/// TEST_API_KEY `env_value`, and scan every process of the sandbox for `value`.
fn scan_sandbox(f: &Fixture, opts: &[&str], env_value: Option<&str>, value: &str) {
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let mut o = vec!["--secret", "TEST_API_KEY=api.example.com"];
    o.extend_from_slice(opts);
    let mut c = sandbox_command(&p, &repo, &o, &[probe().to_str().unwrap(), "sleep", "30"]);
    c.env_remove("TEST_API_KEY");
    if let Some(v) = env_value {
        c.env("TEST_API_KEY", v);
    }
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = spawn_retrying(&mut c).unwrap();
    let sup = child.id() as i32;
    let probe_path = probe();
    // Wait for the workload: a descendant whose program is the probe.
    let until = Instant::now() + Duration::from_secs(20);
    let (procs, workload) = loop {
        let procs = descendants(sup);
        // (the workload once it has exec'd the probe; before, it is a fork of pid 1)
        let w = procs.iter().copied().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(probe_path.as_os_str().as_encoded_bytes()))
        });
        if let (Some(w), true) = (w, procs.len() >= 3) {
            break (procs, w);
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("the workload did not start: {procs:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let check = || -> Result<(), String> {
        let v = value.as_bytes();
        let wenv = environ(workload).ok_or("the workload's environ is unreadable")?;
        let entry = wenv
            .split(|b| *b == 0)
            .find_map(|e| e.strip_prefix(b"TEST_API_KEY="))
            .ok_or("the workload has no TEST_API_KEY")?;
        let placeholder = String::from_utf8_lossy(entry).into_owned();
        assert_shape(&placeholder, value);
        let mut read_mem = 0;
        for &pid in &procs {
            if let Some(e) = environ(pid) {
                if find(&e, v) {
                    return Err(format!("/proc/{pid}/environ holds the value"));
                }
            }
            // The value's last 24 bytes too: a freed copy has its first bytes overwritten
            // by the allocator's free list.
            let tail = &v[v.len() - 24..];
            match in_memory(pid, &[v, placeholder.as_bytes(), tail]) {
                Some(found) => {
                    read_mem += 1;
                    if found[0] || found[2] {
                        return Err(format!("the memory of process {pid} holds the value"));
                    }
                    if pid == workload && !found[1] {
                        return Err("the scan did not find the placeholder in the workload's memory (the positive control)".into());
                    }
                }
                None if is_root() => {
                    return Err(format!("as root, the memory of {pid} is unreadable"))
                }
                None => {}
            }
        }
        let env = environ(sup).ok_or("the supervisor's environ is unreadable")?;
        if find(&env, v) {
            return Err("the supervisor's /proc/PID/environ holds the value".into());
        }
        if !is_root() && read_mem == 0 {
            eprintln!("note: skipped: /proc/PID/mem of the sandbox's processes is not readable by this user here");
            return Ok(());
        }
        if is_root() && read_mem < 3 {
            return Err(format!("only {read_mem} processes scanned: {procs:?}"));
        }
        if read_mem < procs.len() {
            eprintln!(
                "note: {} of {} processes of the sandbox could not be read (/proc/PID/mem) as this user",
                procs.len() - read_mem,
                procs.len()
            );
        }
        Ok(())
    };
    let verdict = check();
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = verdict {
        panic!("{e} (processes {procs:?}, workload {workload})");
    }
}

#[test]
fn a_missing_or_bad_value_is_one_line_and_125() {
    let f = Fixture::new("secret-bad");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let run = |opts: &[&str], env: &[(&str, &str)]| {
        let mut o = vec!["--secret", "TEST_API_KEY=api.example.com"];
        o.extend_from_slice(opts);
        run_probe_with(&p, &repo, &o, &["pid"], |c| {
            c.env_remove("TEST_API_KEY");
            for (k, v) in env {
                c.env(k, v);
            }
        })
    };
    let value = fresh_value();
    for (opts, env, words) in [
        (&[][..], &[][..], "not set in the caller's environment"),
        (&[], &[("TEST_API_KEY", "short")], "at least 8"),
        (
            &[],
            &[("TEST_API_KEY", "sk-with a-space-inside")],
            "printable ASCII",
        ),
        (
            &["--pass-env", "TEST_API_KEY"],
            &[("TEST_API_KEY", value.as_str())],
            "also given by --pass-env",
        ),
        (
            &["--env", "TEST_API_KEY=x"],
            &[("TEST_API_KEY", value.as_str())],
            "also given by --env",
        ),
        (
            &["--net", "none"],
            &[("TEST_API_KEY", value.as_str())],
            "--secret: the network mode is none",
        ),
        (
            &["--net", "host"],
            &[("TEST_API_KEY", value.as_str())],
            "--secret: the network mode is host",
        ),
        (
            &["--secret", "OTHER=*.example.com"],
            &[("TEST_API_KEY", value.as_str())],
            "wildcard",
        ),
        (
            &["--secret", "LD_PRELOAD=a.example.com"],
            &[("TEST_API_KEY", value.as_str())],
            "never enters the sandbox",
        ),
    ] {
        let r = run(opts, env);
        assert_eq!(r.code(), Some(125), "{opts:?}: {r}");
        assert!(
            r.run.stderr.contains(words),
            "{opts:?}: want {words:?}: {r}"
        );
        assert_eq!(r.run.stderr.trim_end().lines().count(), 1, "{r}");
        assert!(!r.run.all().contains(&value), "{r}");
    }
}

/// `--secret-file`: the value comes from the file (the caller's environment need not have
/// it), under `--env-file`'s rules: the caller's own, unreadable by others.
#[test]
fn secret_file_gives_the_value_under_the_env_file_rules() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("secret-file");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let value = format!("ghp_{}", &fresh_value()[PREFIX.len()..]);
    let file = f.write(
        "keys.env",
        &format!("# keys\n\nTEST_API_KEY={value}\nOTHER=x\n"),
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let opts = [
        "--secret",
        "TEST_API_KEY=api.example.com",
        "--secret-file",
        file.to_str().unwrap(),
    ];
    let r = run_probe_with(&p, &repo, &opts, &["getenv", "TEST_API_KEY"], |c| {
        c.env_remove("TEST_API_KEY");
    });
    let got = r.assert_ok();
    assert_eq!(got.len(), value.len(), "{r}");
    assert!(got.starts_with("ghp_") && got != value, "{r}");
    for mode in [0o640, 0o604, 0o660] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let r = run_probe_with(&p, &repo, &opts, &["pid"], |c| {
            c.env_remove("TEST_API_KEY");
        });
        assert_eq!(r.code(), Some(125), "{mode:o}: {r}");
        assert!(r.run.stderr.contains("chmod 600"), "{r}");
        assert!(!r.run.all().contains(&value), "{r}");
    }
}

/// A real CA certificate (the proxy reads `--ca-certs` for its upstream checks and refuses a
/// file without a usable one).
static TEST_CA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sandbox-run secrets test CA");
    params.self_signed(&key).unwrap().pem()
});

/// The PEM certificate blocks of a text, whitespace removed.
fn certs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(len) = rest[at..].find("-----END CERTIFICATE-----") else {
            break;
        };
        out.push(rest[at..at + len].split_whitespace().collect());
        rest = &rest[at + len..];
    }
    out
}

fn read_inside(p: &Path, repo: &Path, opts: &[&str], file: &str, env: &[(&str, &str)]) -> String {
    let r = run_probe_with(p, repo, opts, &["read-hex", file], |c| {
        for (k, v) in env {
            c.env(k, v);
        }
    });
    r.assert_ok();
    let hex = r.lines.first().cloned().unwrap_or_default();
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    String::from_utf8(bytes).unwrap()
}

/// The bundle inside: the full one (SSL_CERT_FILE and friends) holds every system root, the
/// `--ca-certs` CA and the run's CA; Node's holds the extra CAs only.
#[test]
fn the_bundle_inside_holds_the_system_roots_and_the_extra_cas() {
    if !sandbox_works() {
        return;
    }
    let Some(system) = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
    ]
    .iter()
    .find(|p| Path::new(p).is_file()) else {
        return skip_tool("no system CA bundle on this host");
    };
    let system = certs(&std::fs::read_to_string(system).unwrap());
    let f = Fixture::new("secret-bundle");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let ca = f.write("extra-ca.pem", &TEST_CA);
    std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
    let value = fresh_value();
    let opts = [
        "--secret",
        "TEST_API_KEY=api.example.com",
        "--ca-certs",
        ca.to_str().unwrap(),
    ];
    let env = [("TEST_API_KEY", value.as_str())];
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
    ] {
        let r = run_probe_with(&p, &repo, &opts, &["getenv", var], |c| {
            c.env("TEST_API_KEY", &value);
        });
        let path = r.assert_ok();
        let want = if var == "NODE_EXTRA_CA_CERTS" {
            "/run/sandbox-run/ca-extra.pem"
        } else {
            "/run/sandbox-run/ca-certs.pem"
        };
        assert_eq!(path, want, "{var}: {r}");
    }
    let full = certs(&read_inside(
        &p,
        &repo,
        &opts,
        "/run/sandbox-run/ca-certs.pem",
        &env,
    ));
    let extra = certs(&read_inside(
        &p,
        &repo,
        &opts,
        "/run/sandbox-run/ca-extra.pem",
        &env,
    ));
    for c in &system {
        assert!(full.contains(c), "a system root is missing from the bundle");
        assert!(!extra.contains(c), "Node's file repeats a system root");
    }
    let test_ca = &certs(&TEST_CA)[0];
    assert!(full.contains(test_ca) && extra.contains(test_ca));
    // and one more: the run's CA
    assert_eq!(full.len(), system.len() + 2, "{extra:?}");
    assert_eq!(extra.len(), 2, "{extra:?}");
    // (each run has its own CA: the two files were read in two runs)
    // Read-only inside.
    let r = run_probe_with(
        &p,
        &repo,
        &opts,
        &["open-write", "/run/sandbox-run/ca-certs.pem"],
        |c| {
            c.env("TEST_API_KEY", &value);
        },
    );
    assert!(matches!(r.outcome, Outcome::Denied(_)), "writable: {r}");
}

/// The profile's `[secrets]` table, and `validate --gene` (each command its own sandbox, the
/// same secrets): the name holds a placeholder in every command.
#[test]
fn profile_table_and_validate_gene() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("secret-profile");
    let repo = f.repo("repo");
    let mut text = Spec::default().to_toml();
    text.push_str("\n[secrets]\nTEST_API_KEY = [\"api.example.com\", \"127.0.0.1:8443\"]\n");
    let p = f.write("with-secrets.toml", &text);
    let value = fresh_value();
    let r = run_probe_with(&p, &repo, &[], &["getenv", "TEST_API_KEY"], |c| {
        c.env("TEST_API_KEY", &value);
    });
    assert_shape(&r.assert_ok(), &value);
    // A bad table is the profile's error, one line.
    let bad = f.write(
        "bad-secrets.toml",
        &format!(
            "{}\n[secrets]\nTEST_API_KEY = [\"*.example.com\"]\n",
            Spec::default().to_toml()
        ),
    );
    let r = run_probe_with(&bad, &repo, &[], &["pid"], |c| {
        c.env("TEST_API_KEY", &value);
    });
    assert_eq!(r.code(), Some(125), "{r}");
    assert!(r.run.stderr.contains("wildcard"), "{r}");

    let probe = probe();
    let cmd = format!("{} getenv TEST_API_KEY", probe.display());
    let gene = f.write(
        "gene.json",
        &serde_json::json!({"type": "Gene", "id": "g1", "validation": [cmd.clone(), cmd]})
            .to_string(),
    );
    let report = f.path("gene-report.json");
    let mut c = std::process::Command::new(BIN);
    c.args(["validate", "--profile"])
        .arg(&p)
        .arg("--gene")
        .arg(&gene)
        .arg("--repo")
        .arg(&repo)
        .arg("--report")
        .arg(&report)
        .args(["--secret", "OTHER_API_KEY=api.example.net"])
        .env("TEST_API_KEY", &value)
        .env("OTHER_API_KEY", fresh_value())
        .current_dir(&repo);
    let r = run_command(c, Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(!r.all().contains(&value), "{}", r.all());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    schema::assert_valid_report(&v);
    let outs: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["out"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(outs.len(), 2, "{v:#}");
    for o in &outs {
        let got = o.trim().strip_prefix("getenv: ok ").unwrap_or(o.trim());
        assert_shape(got, &value);
    }
    let names: Vec<&str> = v["sandbox"]["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["OTHER_API_KEY", "TEST_API_KEY"]);
}
