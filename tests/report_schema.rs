//! Reports of every status validate against `schemas/report.schema.json`, and carry the
//! status, exit code and signal the contract gives.

#[path = "support/mod.rs"]
mod support;

use support::schema;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::BIN;

fn fixture(name: &str) -> PathBuf {
    let base = support::scratch(&format!("report-{name}"));
    let scripts = [
        ("ok.js", "console.log('fine');"),
        ("fail.js", "process.exit(4);"),
        ("hang.js", "setInterval(() => {}, 1000);"),
        ("selfkill.js", "process.kill(process.pid, 'SIGKILL');"),
    ];
    for (name, text) in scripts {
        std::fs::write(base.join("repo").join(name), text).unwrap();
    }
    std::fs::write(
        base.join("p.toml"),
        "extends = \"validate\"\n[gate]\nprograms = [\"node\", \"npm\", \"npx\", \"no-such-program-xyz\"]\n[layers]\ncgroup = \"best-effort\"\n",
    )
    .unwrap();
    base
}

fn run(base: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let report = base.join("r.json");
    let _ = std::fs::remove_file(&report);
    let o = Command::new(BIN)
        .arg("--profile")
        .arg(base.join("p.toml"))
        .arg("--repo")
        .arg(base.join("repo"))
        .arg("--report")
        .arg(&report)
        .args(args)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&report).unwrap_or_else(|_| {
        panic!(
            "no report for {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    schema::assert_valid_report(&v);
    (o.status.code(), v)
}

#[test]
fn every_status_validates_against_the_schema() {
    if !support::sandbox_works() {
        return;
    }
    if !Path::new("/usr/bin/node").exists() {
        eprintln!("skip: node not installed");
        return;
    }
    let base = fixture("statuses");
    let cases: [(&[&str], i32, &str, Option<i64>); 6] = [
        (&["--", "node", "ok.js"], 0, "ok", None),
        (&["--", "node", "fail.js"], 4, "failed", None),
        (
            &[
                "--timeout",
                "1s",
                "--kill-grace",
                "1s",
                "--",
                "node",
                "hang.js",
            ],
            124,
            "timeout",
            Some(15), // the workload died of the SIGTERM the timeout sent
        ),
        (&["--", "node", "selfkill.js"], 137, "signaled", Some(9)),
        (&["--command", "node ok.js; id"], 126, "denied", None),
        (&["--", "no-such-program-xyz"], 127, "not_found", None),
    ];
    for (args, code, status, signal) in cases {
        let (c, r) = run(&base, args);
        let res = &r["results"][0];
        assert_eq!(c, Some(code), "{args:?}: {r:#}");
        assert_eq!(res["status"], status, "{args:?}");
        assert_eq!(res["exit_code"], code, "{args:?}");
        assert_eq!(res["signal"].as_i64(), signal, "{args:?}");
        assert_eq!(r["ok"], status == "ok");
        if status == "denied" || status == "not_found" {
            assert!(r["sandbox"].is_null());
        } else {
            assert_eq!(r["sandbox"]["filesystem"]["repo"], "overlay");
            assert_eq!(r["sandbox"]["seccomp"]["mode"], "allowlist");
            assert_eq!(r["sandbox"]["no_new_privs"], true);
        }
    }
    // The capture of validate-like profiles: out holds what the command printed.
    let (_, r) = run(&base, &["--", "node", "ok.js"]);
    assert_eq!(r["results"][0]["out"], "fine\n");
}

#[test]
fn the_schema_rejects_a_broken_report() {
    if !support::sandbox_works() {
        return;
    }
    // Negative control: if the validator accepted anything, the test above would prove nothing.
    let base = fixture("broken");
    if !Path::new("/usr/bin/node").exists() {
        eprintln!("skip: node not installed");
        return;
    }
    let (_, mut r) = run(&base, &["--", "node", "ok.js"]);
    r["results"][0]["status"] = "fine".into();
    let broken = std::panic::catch_unwind(|| schema::assert_valid_report(&r));
    assert!(broken.is_err(), "an unknown status passed the schema");
    r["results"][0]["status"] = "ok".into();
    r.as_object_mut().unwrap().remove("env_fingerprint");
    assert!(
        std::panic::catch_unwind(|| schema::assert_valid_report(&r)).is_err(),
        "a missing seed field passed"
    );
}

/// The report names the caller's variables that did not pass (names only, with why) and the
/// network the command had, with the port rules in force.
#[test]
fn the_report_lists_dropped_env_and_the_network() {
    if !support::sandbox_works() {
        return;
    }
    let base = support::scratch("report-facts");
    support::probe_profile(
        &base,
        "validate",
        "",
        "[layers]\ncgroup = \"best-effort\"\n",
    );
    let report = base.join("r.json");
    let run = |net: &str| {
        let _ = std::fs::remove_file(&report);
        let o = Command::new(BIN)
            .arg("--profile")
            .arg(base.join("p.toml"))
            .arg("--repo")
            .arg(base.join("repo"))
            .arg("--report")
            .arg(&report)
            .args(["--net", net, "--"])
            .arg(support::probe())
            .arg("whoami")
            .env("HTTPS_PROXY", "http://proxy-value-sbx:3128")
            .env("SBX_PLANTED_SECRET", "secret-value-sbx")
            .env("LD_PRELOAD", "/nonexistent/x.so")
            .env("LANG", "C.UTF-8")
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = std::fs::read_to_string(&report).unwrap();
        assert!(!text.contains("proxy-value-sbx") && !text.contains("secret-value-sbx"));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        schema::assert_valid_report(&v);
        v
    };
    let v = run("none");
    let sb = &v["sandbox"];
    let why = |name: &str| {
        sb["env_dropped"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == name)
            .map(|d| d["why"].as_str().unwrap().to_string())
    };
    assert_eq!(why("HTTPS_PROXY").as_deref(), Some("not_kept"), "{sb:#}");
    assert_eq!(why("SBX_PLANTED_SECRET").as_deref(), Some("secret"));
    assert_eq!(why("LD_PRELOAD").as_deref(), Some("loads_code"));
    assert_eq!(why("LANG"), None, "kept: not dropped");
    assert_eq!(why("PATH"), None, "replaced: not dropped");
    // env_removed keeps its meaning: the secret-looking and code-loading names only
    let removed = sb["env_removed"].as_array().unwrap();
    assert!(removed.contains(&"SBX_PLANTED_SECRET".into()));
    assert!(!removed.contains(&"HTTPS_PROXY".into()));
    let tcp = support::common::landlock_abi() >= 4;
    let net = &sb["network"];
    assert_eq!(net["mode"], "none", "{net}");
    let no_port = if tcp {
        serde_json::json!([])
    } else {
        serde_json::Value::Null
    };
    // (its own loopback: what the port rules say there is the network layer's business)
    assert_eq!(net["listen"], true, "{net}");
    // the host's network: no connect rule in the profile, no port to bind, so no listen
    let v = run("host");
    let net = &v["sandbox"]["network"];
    assert_eq!(net["mode"], "host", "{net}");
    assert_eq!(net["tcp_connect"], serde_json::Value::Null, "{net}");
    assert_eq!(net["tcp_bind"], no_port, "{net}");
    assert_eq!(net["listen"], false, "{net}");
}
